// The C++ client's rules that depend only on the clock, kept pure so that
// they are tested with an injected one (tests/client_unit_test.cc): the
// careful-client watchdog of lock.proto, the backoff of an Acquire told
// UNAVAILABLE, and the options checked before any RPC. Not part of the
// public API (client.h).
#ifndef TURNSTILE_CLIENT_LIB_CAREFUL_H_
#define TURNSTILE_CLIENT_LIB_CAREFUL_H_

#include <algorithm>
#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/common/duration_text.h"
#include "client/lib/client.h"

namespace turnstile::client::careful {

using TimePoint = std::chrono::steady_clock::time_point;

enum class Watch { kHeld, kSuspended, kLost, kEnded };

struct WatchdogStep {
  Watch state = Watch::kEnded;
  bool silent = false;             // suspended by the watchdog, not by the server
  TimePoint suspend_deadline{};    // while suspended: lost at this point
  const char* lost_reason = "";    // when state became kLost
  bool wake = false;               // whether to look again
  TimePoint wake_at{};
};

// What a hold in `state` becomes at `now`. A held hold whose refresh
// (STILL_HELD) is overdue (`refresh_due`) is SUSPENDED, certainly valid
// until `valid_until` (the latest refresh's safe_for); a suspended hold
// (by the watchdog, or by the server's SUSPENDED with its safe time in
// `suspend_deadline`) is LOST once that passes: REFRESH_OVERDUE when the
// replica fell silent, SESSION_EXPIRED when it said it lost ZooKeeper.
inline WatchdogStep Step(Watch state, TimePoint now, TimePoint refresh_due,
                         TimePoint valid_until, TimePoint suspend_deadline, bool silent) {
  WatchdogStep s;
  s.state = state;
  s.silent = silent;
  s.suspend_deadline = suspend_deadline;
  if (state == Watch::kHeld) {
    if (now >= refresh_due) {
      s.state = Watch::kSuspended;
      s.silent = true;
      s.suspend_deadline = valid_until;
      s.wake = true;
      s.wake_at = now;
    } else {
      s.wake = true;
      s.wake_at = refresh_due;
    }
  } else if (state == Watch::kSuspended) {
    if (now >= suspend_deadline) {
      s.state = Watch::kLost;
      s.lost_reason = silent ? "REFRESH_OVERDUE" : "SESSION_EXPIRED";
    } else {
      s.wake = true;
      s.wake_at = suspend_deadline;
    }
  }
  return s;
}

// The waits between attempts of an Acquire told UNAVAILABLE (or CANCELLED
// by a replica shutting down): 50 ms, doubling, at most 1 s each.
class Backoff {
 public:
  Millis Next() {
    const Millis d = next_;
    next_ = std::min(next_ * 2, Millis(1000));
    return d;
  }

 private:
  Millis next_{50};
};

// Whether a failed attempt is tried again after `delay`: only UNAVAILABLE
// and CANCELLED, only with retries enabled, never for a try-once, and only
// if the delay ends before the wait's deadline.
inline bool MayRetry(const absl::Status& st, bool enabled, Millis wait_timeout, TimePoint now,
                     Millis delay, TimePoint deadline) {
  const bool retryable = absl::IsUnavailable(st) || absl::IsCancelled(st);
  return retryable && enabled && wait_timeout > Millis(0) && now + delay < deadline;
}

// INVALID_ARGUMENT (the server's code for the same) for what the client can
// tell is wrong before asking; the server checks the ranges that depend on
// its flags.
inline absl::Status ValidateAcquireOptions(const std::string& name, const AcquireOptions& o) {
  if (name.empty()) return absl::InvalidArgumentError("name: must not be empty");
  if (o.wait_timeout < Millis(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("wait_timeout is ", FormatDuration(o.wait_timeout), "; it must be >= 0"));
  }
  if (o.ttl < Millis(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ttl is ", FormatDuration(o.ttl), "; it must be >= 0"));
  }
  if (o.lock_delay < Millis(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("lock_delay is ", FormatDuration(o.lock_delay), "; it must be >= 0"));
  }
  if (o.max_holders < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_holders is ", o.max_holders, "; it must be 0 (not a semaphore) or more"));
  }
  if (o.max_holders > 0 && o.shared) {
    return absl::InvalidArgumentError(
        "max_holders is only for semaphores; a shared hold cannot have it");
  }
  return absl::OkStatus();
}

}  // namespace turnstile::client::careful

#endif  // TURNSTILE_CLIENT_LIB_CAREFUL_H_
