// The C++ client's own logic with no server (issue 22 must-show 3): the
// careful-client watchdog against an injected clock, the retry backoff of
// an Acquire told UNAVAILABLE, and the options checked before any RPC
// (client/lib/careful.h, used by client.cc).
#include "client/lib/careful.h"

#include <gtest/gtest.h>

#include <vector>

namespace turnstile::client::careful {
namespace {

using std::chrono::milliseconds;

TimePoint At(int64_t ms) { return TimePoint() + milliseconds(ms); }

// Steps the watchdog as its timer would, jumping the clock to each wake-up,
// and returns (time, state, reason) of every change.
struct Change {
  int64_t at_ms;
  Watch state;
  std::string reason;
  bool operator==(const Change& o) const {
    return at_ms == o.at_ms && state == o.state && reason == o.reason;
  }
};
std::vector<Change> RunWatchdog(Watch state, int64_t now_ms, int64_t refresh_due_ms,
                        int64_t valid_until_ms, int64_t suspend_deadline_ms, bool silent) {
  std::vector<Change> seen;
  TimePoint now = At(now_ms), suspend_deadline = At(suspend_deadline_ms);
  for (int i = 0; i < 10; ++i) {
    WatchdogStep s =
        Step(state, now, At(refresh_due_ms), At(valid_until_ms), suspend_deadline, silent);
    if (s.state != state) {
      seen.push_back({std::chrono::duration_cast<milliseconds>(now - TimePoint()).count(),
                      s.state, s.lost_reason});
    }
    state = s.state;
    silent = s.silent;
    suspend_deadline = s.suspend_deadline;
    if (!s.wake) break;
    now = std::max(now, s.wake_at);
  }
  return seen;
}

TEST(CarefulWatchdog, SilencePastRefreshWithinSuspendsThenLosesAsRefreshOverdue) {
  // Acquired at 0: refresh within 2 s, safe for 8 s; nothing more comes.
  EXPECT_EQ(RunWatchdog(Watch::kHeld, 1000, 2000, 8000, 0, false),
            (std::vector<Change>{{2000, Watch::kSuspended, ""},
                                 {8000, Watch::kLost, "REFRESH_OVERDUE"}}));
}

TEST(CarefulWatchdog, ARefreshInTimeKeepsItHeld) {
  WatchdogStep s = Step(Watch::kHeld, At(1999), At(2000), At(8000), At(0), false);
  EXPECT_EQ(s.state, Watch::kHeld);
  EXPECT_TRUE(s.wake);
  EXPECT_EQ(s.wake_at, At(2000));
}

TEST(CarefulWatchdog, ServerSuspendedLosesAsSessionExpiredAtItsSafeTime) {
  EXPECT_EQ(RunWatchdog(Watch::kSuspended, 3000, 2000, 8000, 5000, false),
            (std::vector<Change>{{5000, Watch::kLost, "SESSION_EXPIRED"}}));
}

TEST(CarefulWatchdog, EndedHoldsAreNotWatched) {
  for (Watch w : {Watch::kLost, Watch::kEnded}) {
    EXPECT_FALSE(Step(w, At(0), At(0), At(0), At(0), false).wake);
  }
}

TEST(CarefulBackoff, DoublesFrom50msUpTo1s) {
  Backoff b;
  std::vector<int64_t> got;
  for (int i = 0; i < 8; ++i) got.push_back(b.Next().count());
  EXPECT_EQ(got, (std::vector<int64_t>{50, 100, 200, 400, 800, 1000, 1000, 1000}));
}

TEST(CarefulBackoff, RetriesUnavailableUntilTheWaitTimeoutOnly) {
  // A 3 s wait told UNAVAILABLE at every attempt: the delays it sleeps,
  // with the clock moved by each, stop before the deadline.
  const TimePoint deadline = At(3000);
  TimePoint now = At(0);
  Backoff b;
  std::vector<int64_t> slept;
  for (;;) {
    const Millis delay = b.Next();
    if (!MayRetry(absl::UnavailableError("draining"), true, Millis(3000), now, delay, deadline)) {
      break;
    }
    slept.push_back(delay.count());
    now += delay;
  }
  EXPECT_EQ(slept, (std::vector<int64_t>{50, 100, 200, 400, 800, 1000}));
  EXPECT_TRUE(MayRetry(absl::CancelledError("shutting down"), true, Millis(3000), At(0),
                       Millis(50), deadline));
  // Not retried: other codes, retries off, try-once.
  EXPECT_FALSE(MayRetry(absl::FailedPreconditionError("held"), true, Millis(3000), At(0),
                        Millis(50), deadline));
  EXPECT_FALSE(MayRetry(absl::UnavailableError("x"), false, Millis(3000), At(0), Millis(50),
                        deadline));
  EXPECT_FALSE(MayRetry(absl::UnavailableError("x"), true, Millis(0), At(0), Millis(50), At(0)));
}

TEST(CarefulOptions, BadOptionsAreInvalidArgumentBeforeAnyRpc) {
  struct Case {
    std::string name;
    AcquireOptions o;
    std::string says;
  };
  std::vector<Case> cases(6);
  cases[0] = {"", {}, "name"};
  cases[1] = {"x", {}, "wait_timeout"};
  cases[1].o.wait_timeout = Millis(-1);
  cases[2] = {"x", {}, "ttl"};
  cases[2].o.ttl = Millis(-5);
  cases[3] = {"x", {}, "lock_delay"};
  cases[3].o.lock_delay = Millis(-5);
  cases[4] = {"x", {}, "max_holders"};
  cases[4].o.max_holders = -1;
  cases[5] = {"x", {}, "shared"};
  cases[5].o.max_holders = 2;
  cases[5].o.shared = true;
  for (const Case& c : cases) {
    absl::Status s = ValidateAcquireOptions(c.name, c.o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s;
  }
  AcquireOptions fine;
  fine.max_holders = 3;
  fine.ttl = Millis(1000);
  EXPECT_TRUE(ValidateAcquireOptions("x", fine).ok());
}

}  // namespace
}  // namespace turnstile::client::careful
