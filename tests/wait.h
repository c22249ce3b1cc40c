// WaitFor() polls a condition until it holds or a deadline passes. Tests use
// it instead of sleeping for a fixed time: a fixed sleep is either too short
// on a slow CI machine (flaky) or too long everywhere else (slow).
//
// Thread safety: WaitFor() is reentrant; `pred` runs on the calling thread.

#ifndef TURNSTILE_TESTS_WAIT_H_
#define TURNSTILE_TESTS_WAIT_H_

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

namespace turnstile::testing {

// Polls `pred` every `poll` until it returns true or `timeout` passes.
// Returns whether it became true. `pred` is always evaluated at least once,
// and once more at the deadline, so a zero timeout means "check now".
inline bool WaitFor(
    const std::function<bool()>& pred, std::chrono::milliseconds timeout,
    std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  if (poll <= std::chrono::milliseconds::zero()) {
    poll = std::chrono::milliseconds(1);
  }
  for (;;) {
    if (pred()) return true;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    // Never sleep past the deadline: the last evaluation happens at it.
    std::this_thread::sleep_for(
        std::min<Clock::duration>(poll, deadline - now));
  }
}

}  // namespace turnstile::testing

#endif  // TURNSTILE_TESTS_WAIT_H_
