// The C++ client's own logic with no server (issue 22 must-show 3): the
// careful-client watchdog against an injected clock, the retry backoff of
// an Acquire told UNAVAILABLE, and the options checked before any RPC
// (client/lib/careful.h, used by client.cc).
#include "client/lib/careful.h"
#include "client/lib/coordination.h"

#include <gtest/gtest.h>

#include <algorithm>
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
  // Durations as flags write them (client/common/duration_text.h).
  cases[1] = {"x", {}, "wait_timeout is -1ms; it must be >= 0"};
  cases[1].o.wait_timeout = Millis(-1);
  cases[2] = {"x", {}, "ttl is -1s500ms; it must be >= 0"};
  cases[2].o.ttl = Millis(-1500);
  cases[3] = {"x", {}, "lock_delay is -1m; it must be >= 0"};
  cases[3].o.lock_delay = Millis(-60000);
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

// Issue 23: the multi-lock's canonical order and the campaign's reading of
// a replica's wait cap.
namespace turnstile::client {
namespace {

TEST(MultiLockOrder, ByteOrderAndDuplicatesRefused) {
  auto o = CanonicalLockOrder({"orders", "Zeta", "accounts", "\xc3\xa9t\xc3\xa9", "b"});
  ASSERT_TRUE(o.ok()) << o.status();
  // Bytes, not locale: 'Z' (0x5A) < 'a'; UTF-8 lead bytes (0xC3) sort last.
  EXPECT_EQ(*o, (std::vector<std::string>{"Zeta", "accounts", "b", "orders", "\xc3\xa9t\xc3\xa9"}));
  EXPECT_EQ(CanonicalLockOrder({"a", "b", "a"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CanonicalLockOrder({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CanonicalLockOrder({"a", ""}).status().code(), absl::StatusCode::kInvalidArgument);
  // Any permutation gives the same order (two multi-locks agree).
  std::vector<std::string> names = {"d", "a", "c", "b"};
  std::sort(names.begin(), names.end());
  const auto first = *CanonicalLockOrder(names);
  while (std::next_permutation(names.begin(), names.end())) {
    EXPECT_EQ(*CanonicalLockOrder(names), first);
  }
}

TEST(ElectionCampaign, ReadsTheReplicasWaitCapFromItsError) {
  auto cap = MaxWaitFromError(absl::InvalidArgumentError(
      "wait_timeout is 7200000ms; it must be 0..3600000ms"));
  ASSERT_TRUE(cap);
  EXPECT_EQ(*cap, Millis(3600000));
  // Today's replicas: the limit for people, then in milliseconds.
  cap = MaxWaitFromError(absl::InvalidArgumentError(
      "wait_timeout is 2h; it must be 0..1h30s (--max-wait-timeout) "
      "[wait_timeout is 7200000ms; it must be 0..3630000ms]"));
  ASSERT_TRUE(cap);
  EXPECT_EQ(*cap, Millis(3630000));
  EXPECT_FALSE(MaxWaitFromError(absl::InvalidArgumentError("ttl is 5ms; it must be 0 or 500..")));
  EXPECT_FALSE(MaxWaitFromError(absl::DeadlineExceededError(
      "wait_timeout is 7200000ms; it must be 0..3600000ms")));
  EXPECT_FALSE(MaxWaitFromError(absl::InvalidArgumentError("wait_timeout is 1ms; it must be 0..xms")));
}

}  // namespace
}  // namespace turnstile::client
