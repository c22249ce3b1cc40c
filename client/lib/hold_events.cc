// HoldCore, the EventLoop's side: the Acquire stream's events, the
// careful-client watchdog, and the queued delivery of on_change and
// on_revoke. Everything here runs on the EventLoop's thread, never waits
// and never runs user code under mu_. The callers' side is hold_core.cc.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "client/common/duration_text.h"
#include "client/lib/careful.h"
#include "client/lib/hold_core.h"
#include "client/lib/keepalive.h"
#include "client/lib/proto_convert.h"

namespace turnstile::client::internal {

// ---- The stream's events ----

void HoldCore::OnEvent(const v1::AcquireEvent& ev) {
  absl::MutexLock l(&mu_);
  const Clock::time_point now = Clock::now();
  const bool held = HeldLocked();
  switch (ev.type()) {
    case v1::AcquireEvent::QUEUED:
      if (phase_ != Phase::kWaiting) return;
      queued_.push_back(ev.queued().position());
      cv_.SignalAll();
      return;
    case v1::AcquireEvent::ACQUIRED: {
      if (phase_ != Phase::kWaiting) return;
      lease_id_ = ev.acquired().lease_id();
      token_ = ev.acquired().fencing_token();
      if (ttl_ > Millis(0)) {
        Millis valid = ev.acquired().has_valid_for() ? FromDuration(ev.acquired().valid_for()) : ttl_;
        if (valid <= Millis(0)) valid = ttl_;
        lease_valid_until_ = now + valid;
      }
      phase_ = Phase::kHeld;
      if (ev.acquired().has_refresh_within() &&
          FromDuration(ev.acquired().refresh_within()) > Millis(0)) {
        // The server refreshes the hold (STILL_HELD): watch for silence.
        refresh_within_ = FromDuration(ev.acquired().refresh_within());
        refresh_due_ = now + refresh_within_;
        valid_until_ = now + std::max(Millis(0), FromDuration(ev.acquired().safe_for()));
        ArmWatchdogLocked();
      }
      cv_.SignalAll();
      return;
    }
    case v1::AcquireEvent::STILL_HELD:
      if (!held || refresh_within_ == Millis(0)) return;
      refresh_within_ = std::max(Millis(1), FromDuration(ev.still_held().refresh_within()));
      refresh_due_ = now + refresh_within_;
      valid_until_ = now + std::max(Millis(0), FromDuration(ev.still_held().safe_for()));
      if (phase_ == Phase::kSuspended && silent_) {
        phase_ = Phase::kHeld;
        silent_ = false;
        message_ = "the replica's refresh arrived again";
        NotifyLocked();
      }
      ArmWatchdogLocked();
      return;
    case v1::AcquireEvent::SUSPENDED:
      if (!held) return;
      phase_ = Phase::kSuspended;
      silent_ = false;
      suspend_deadline_ = now + std::max(Millis(0), FromDuration(ev.suspended().safe_for()));
      message_ = "the replica lost its ZooKeeper connection";
      NotifyLocked();
      ArmWatchdogLocked();
      return;
    case v1::AcquireEvent::RESUMED:
      if (phase_ != Phase::kSuspended) return;
      phase_ = Phase::kHeld;
      silent_ = false;
      if (refresh_within_ > Millis(0) && ev.has_still_held()) {
        refresh_within_ = std::max(Millis(1), FromDuration(ev.still_held().refresh_within()));
        valid_until_ = now + std::max(Millis(0), FromDuration(ev.still_held().safe_for()));
      }
      refresh_due_ = now + refresh_within_;
      message_ = "the replica's ZooKeeper connection is back";
      NotifyLocked();
      ArmWatchdogLocked();
      return;
    case v1::AcquireEvent::LOST:
      if (!held) return;
      phase_ = Phase::kLost;
      lost_reason_ = v1::Lost::Reason_Name(ev.lost().reason());
      message_ = ev.lost().message();
      NotifyLocked();
      return;
    case v1::AcquireEvent::REVOKE_REQUESTED: {
      if (!held || !on_revoke_) return;
      QueueLocked([cb = on_revoke_, requester = ev.revoke_requested().requester(),
                   reason = ev.revoke_requested().reason()] { cb(requester, reason); });
      return;
    }
    case v1::AcquireEvent::RELEASED:
      if (!held) return;
      phase_ = Phase::kReleased;
      saw_released_ = true;
      message_ = "released";
      NotifyLocked();
      return;
    default:
      // RELEASING (the server confirms a half-close; this client releases
      // with a message) and types newer than this client.
      return;
  }
}

void HoldCore::OnEnd(const grpc::Status& st) {
  bool has_lease = false;
  {
    absl::MutexLock l(&mu_);
    ended_ = true;
    end_status_ = st;
    bool lease_done = false;
    switch (phase_) {
      case Phase::kWaiting:
        phase_ = Phase::kFailed;
        cv_.SignalAll();
        return;
      case Phase::kHeld:
      case Phase::kSuspended:
        if (releasing_) {
          phase_ = Phase::kReleased;
          message_ = "the stream ended during release: " +
                     std::string(st.ok() ? "OK" : st.error_message());
        } else {
          phase_ = Phase::kLost;
          lost_reason_ = "CONNECTION";
          message_ = st.ok() ? "the Acquire stream ended without RELEASED or LOST"
                             : "the Acquire stream broke: " + st.error_message();
        }
        lease_done = true;
        NotifyLocked();
        break;
      default:
        lease_done = true;
        cv_.SignalAll();
        break;
    }
    has_lease = lease_done && ttl_ > Millis(0) && !lease_id_.empty();
  }
  if (has_lease) ka_->Remove(lease_id_);
}

// ---- The careful-client watchdog ----
//
// A frozen replica or a stalled stream sends nothing, not even LOST: when
// no refresh comes within refresh_within the hold is SUSPENDED here, with
// the validity the last refresh gave; when that runs out (or a server
// SUSPENDED's safe time does) it is LOST here and the stream is cancelled
// (a live replica then deletes the node). Armed from the grant until the
// hold ends. A STILL_HELD only moves the deadline later, so the steady
// state costs one timer per refresh_within, not one per refresh.

void HoldCore::ArmWatchdogLocked() {
  if (refresh_within_ == Millis(0) || !HeldLocked() || ended_ || releasing_) return;
  const Clock::time_point due = phase_ == Phase::kHeld ? refresh_due_ : suspend_deadline_;
  const uint64_t generation = watchdog_.Arm(due);
  if (generation == 0) return;
  loop()->RunAt(due, [weak = weak_from_this(), generation] {
    if (auto self = weak.lock()) self->OnWatchdog(generation);
  });
}

void HoldCore::OnWatchdog(uint64_t generation) {
  absl::ReleasableMutexLock l(&mu_);
  if (!watchdog_.Fire(generation)) return;
  if (!HeldLocked() || ended_ || releasing_) return;
  const Clock::time_point now = Clock::now();
  const careful::WatchdogStep step = careful::Step(
      phase_ == Phase::kHeld ? careful::Watch::kHeld : careful::Watch::kSuspended, now,
      refresh_due_, valid_until_, suspend_deadline_, silent_);
  if (step.state == careful::Watch::kSuspended && phase_ == Phase::kHeld) {
    phase_ = Phase::kSuspended;
    silent_ = step.silent;
    suspend_deadline_ = step.suspend_deadline;
    message_ = "no refresh from the replica within " + FormatDuration(refresh_within_) +
               ": the replica or the stream may have failed";
    NotifyLocked();
  } else if (step.state == careful::Watch::kLost) {
    phase_ = Phase::kLost;
    lost_reason_ = step.lost_reason;
    message_ = silent_ ? "no refresh from the replica before the hold's validity ran out"
                       : "the replica's safe time ran out before its ZooKeeper "
                         "connection came back";
    NotifyLocked();
    l.Release();
    Cancel();  // a live replica deletes the node
    return;
  }
  ArmWatchdogLocked();
}

// ---- State and notifications ----

LockStatus HoldCore::StatusLocked(Clock::time_point now) const {
  LockStatus s;
  switch (phase_) {
    case Phase::kWaiting:
    case Phase::kHeld: s.state = LockState::kHeld; break;
    case Phase::kSuspended: s.state = LockState::kSuspended; break;
    case Phase::kLost: s.state = LockState::kLost; break;
    case Phase::kReleased:
    case Phase::kFailed: s.state = LockState::kReleased; break;
  }
  s.message = message_;
  if (s.state == LockState::kLost) s.lost_reason = lost_reason_;
  if (s.state == LockState::kLost || s.state == LockState::kReleased) {
    s.valid_for = Millis(0);
    return s;
  }
  std::optional<Clock::time_point> deadline;
  if (ttl_ > Millis(0)) deadline = lease_valid_until_;
  auto bound = [&deadline](Clock::time_point t) { deadline = deadline ? std::min(*deadline, t) : t; };
  if (refresh_within_ > Millis(0)) bound(valid_until_);  // the latest refresh's validity
  if (s.state == LockState::kSuspended) bound(suspend_deadline_);
  s.valid_for = deadline ? Left(*deadline, now) : Millis::max();
  return s;
}

void HoldCore::NotifyLocked() {
  cv_.SignalAll();
  if (subscribers_.empty()) return;
  std::vector<Callback> targets;
  for (const auto& [id, cb] : subscribers_) targets.push_back(cb);
  QueueLocked([status = StatusLocked(Clock::now()), targets = std::move(targets)] {
    for (const auto& cb : targets) cb(status);
  });
}

void HoldCore::QueueLocked(std::function<void()> note) {
  notes_.push_back(std::move(note));
  if (delivery_posted_) return;
  delivery_posted_ = true;
  loop()->Post([self = shared_from_this()] { self->Deliver(); });
}

void HoldCore::Deliver() {
  mu_.Lock();
  delivering_ = true;
  while (!notes_.empty()) {
    std::function<void()> note = std::move(notes_.front());
    notes_.pop_front();
    mu_.Unlock();
    note();
    note = nullptr;  // drops callback copies outside the lock
    mu_.Lock();
  }
  delivering_ = false;
  delivery_posted_ = false;
  cv_.SignalAll();
  mu_.Unlock();
}

}  // namespace turnstile::client::internal
