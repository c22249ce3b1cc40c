// A wait on an absl::CondVar bounded by a point of the steady clock (as
// std::condition_variable::wait_until(steady_clock) is): absl's timed
// waits take a duration, so the time left is computed afresh before each
// wait. Internal to the client library.
#ifndef TURNSTILE_CLIENT_LIB_STEADY_WAIT_H_
#define TURNSTILE_CLIENT_LIB_STEADY_WAIT_H_

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace turnstile::client::internal {

// Waits (releasing `mu`) until `cv` is signalled or `deadline` passes;
// false, without waiting, once it has passed. The caller re-checks its
// condition in a loop:
//   while (!ready) if (!WaitBefore(cv, mu, deadline)) break;
inline bool WaitBefore(absl::CondVar& cv, absl::Mutex& mu,
                       std::chrono::steady_clock::time_point deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline) return false;
  cv.WaitWithTimeout(&mu, absl::FromChrono(deadline - now));
  return true;
}

}  // namespace turnstile::client::internal

#endif  // TURNSTILE_CLIENT_LIB_STEADY_WAIT_H_
