// HoldCore, the callers' side: the wait for the grant (Start), reentrant
// handles, Release, the status; and the process's waits (AbandonWaits).
// The EventLoop's side (stream events, watchdog, delivery) is
// hold_events.cc.
//
// Release (the last handle of a hold):
//   - held / suspended: sends `release` and half-closes, waits (at most 10 s)
//     for the stream to end (RELEASED first) and for the notifications to be
//     delivered. OK if RELEASED (or LOST) arrived; the stream's status if it
//     broke instead; DEADLINE_EXCEEDED after 10 s, when the stream is
//     cancelled (a cancel releases too).
//   - already lost (or ended): OK without contacting the server; a stream
//     still open (lease found gone by KeepAlive) is cancelled.
//   - called on the EventLoop thread (from inside on_change or on_revoke):
//     sends the release and returns OK without waiting (what it would wait
//     for runs on this very thread); the stream is still cancelled if it has
//     not ended 10 s later.
//   Non-last reentrant handles: Release only counts down (OK, no server call)
//   and that handle's on_change gets kReleased.
#include "client/lib/hold_core.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "client/common/duration_text.h"
#include "client/lib/coordination.h"  // AbandonWaits, WaitsAbandoned
#include "client/lib/keepalive.h"
#include "client/lib/proto_convert.h"
#include "client/lib/reentrancy.h"
#include "client/lib/steady_wait.h"

namespace turnstile::client {
namespace internal {
namespace {

// How long Release waits for RELEASED and the end of the stream.
constexpr Millis kReleaseTimeout{10000};
// Acquire gives the server this long beyond wait_timeout to answer before
// it cancels the stream itself.
constexpr Millis kAcquireSlack{30000};
// Longest wait_timeout used for the client-side deadline (the server's
// maximum is far below).
constexpr Millis kMaxWaitForDeadline{100LL * 24 * 3600 * 1000};

// AbandonWaits: the process's waits for a grant (HoldCore::Start calls in
// progress), so that they can all be abandoned at once, and whether they
// were. Lock order: mu before a HoldCore's mu_.
struct Waits {
  absl::Mutex mu;
  bool abandoned ABSL_GUARDED_BY(mu) = false;          // for good
  std::vector<HoldCore*> waiting ABSL_GUARDED_BY(mu);  // each alive while listed
};
Waits& ProcessWaits() {
  static Waits* waits = new Waits;  // never destroyed: used until the process ends
  return *waits;
}

}  // namespace

HoldCore::HoldCore(std::shared_ptr<v1::LockService::Stub> stub, std::shared_ptr<EventLoop> loop,
                   std::shared_ptr<KeepAliver> ka, std::shared_ptr<Registry> registry,
                   std::string name, std::string registry_key, Millis ttl,
                   Callback first_on_change, RevokeCallback on_revoke)
    : AsyncStream(std::move(loop)),
      stub_(std::move(stub)),
      ka_(std::move(ka)),
      registry_(std::move(registry)),
      name_(std::move(name)),
      registry_key_(std::move(registry_key)),
      ttl_(ttl),
      on_revoke_(std::move(on_revoke)) {
  live_handles_ = 1;  // handle 0, returned by Acquire
  next_handle_id_ = 1;
  if (first_on_change) subscribers_[0] = std::move(first_on_change);
}

absl::Status HoldCore::Start(const v1::AcquireOpen& open, Millis wait_timeout,
                             const std::function<void(int64_t)>& on_queued) {
  v1::AcquireRequest req;
  *req.mutable_open() = open;
  AsyncStream::Start(
      [this](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) {
        return stub_->PrepareAsyncAcquire(ctx, cq);
      },
      std::move(req), shared_from_this());
  // Listed while waiting, for AbandonWaits (already called: abandoned now).
  bool abandon_now = false;
  {
    Waits& w = ProcessWaits();
    absl::MutexLock wl(&w.mu);
    abandon_now = w.abandoned;
    if (!abandon_now) w.waiting.push_back(this);
  }
  if (abandon_now) AbandonIfWaiting();
  // Unlisted when Start returns, after mu_ is released (the waits' lock
  // comes first).
  struct Unlist {
    HoldCore* core;
    ~Unlist() {
      Waits& w = ProcessWaits();
      absl::MutexLock wl(&w.mu);
      w.waiting.erase(std::remove(w.waiting.begin(), w.waiting.end(), core), w.waiting.end());
    }
  } unlist{this};

  Millis wait = std::max(Millis(0), std::min(wait_timeout, kMaxWaitForDeadline));
  const Clock::time_point deadline = Clock::now() + wait + kAcquireSlack;
  bool timed_out = false;
  mu_.Lock();
  for (;;) {
    while (!queued_.empty()) {
      int64_t position = queued_.front();
      queued_.pop_front();
      if (on_queued) {
        mu_.Unlock();
        on_queued(position);
        mu_.Lock();
      }
    }
    if (phase_ != Phase::kWaiting) break;
    while (phase_ == Phase::kWaiting && queued_.empty()) {
      if (!WaitBefore(cv_, mu_, deadline)) break;
    }
    if (phase_ == Phase::kWaiting && queued_.empty()) {
      timed_out = true;
      break;
    }
  }
  if (timed_out) {
    mu_.Unlock();
    Cancel();
    return absl::DeadlineExceededError(
        "turnstile client: no answer from the server within wait_timeout + " +
        FormatDuration(kAcquireSlack) + "; the wait was cancelled");
  }
  absl::Status result = StartResultLocked();
  mu_.Unlock();
  return result;
}

absl::Status HoldCore::StartResultLocked() const {
  if (phase_ != Phase::kFailed) return absl::OkStatus();
  if (abandoned_) {
    return absl::CancelledError(
        "the wait was abandoned (AbandonWaits); the replica deletes the waiting node");
  }
  if (end_status_.ok()) {
    return absl::UnknownError("the Acquire stream ended without ACQUIRED and without an error");
  }
  return FromGrpc(end_status_);
}

void HoldCore::AbandonIfWaiting() {
  {
    absl::MutexLock l(&mu_);
    if (phase_ != Phase::kWaiting) return;
    abandoned_ = true;
  }
  Cancel();
}

int HoldCore::TryAddHandle(Callback on_change) {
  absl::MutexLock l(&mu_);
  if (releasing_ || live_handles_ == 0 || !HeldLocked()) return -1;
  int id = next_handle_id_++;
  ++live_handles_;
  if (on_change) subscribers_[id] = std::move(on_change);
  return id;
}

absl::Status HoldCore::ReleaseHandle(int id, LockStatus* final) {
  // On the EventLoop thread nothing may wait: what Release waits for (the
  // delivery of RELEASED, the timers) runs on that very thread.
  const bool may_wait = !loop()->InLoopThread();
  mu_.Lock();
  --live_handles_;
  if (live_handles_ > 0) {
    // Not the last handle: count down only.
    auto it = subscribers_.find(id);
    LockStatus st;
    st.state = LockState::kReleased;
    st.valid_for = Millis(0);
    st.message = "this handle was released; " + std::to_string(live_handles_) +
                 " other handle(s) still hold the lock";
    if (phase_ == Phase::kLost) st = StatusLocked(Clock::now());
    *final = st;
    if (it != subscribers_.end()) {
      Callback cb = std::move(it->second);
      subscribers_.erase(it);
      QueueLocked([st, cb = std::move(cb)] { cb(st); });
      if (may_wait) AwaitDeliveredLocked();
    }
    mu_.Unlock();
    return absl::OkStatus();
  }

  releasing_ = true;
  absl::Status result = absl::OkStatus();
  bool cancel = false;
  if (!HeldLocked() || ended_) {
    // Lost (or the stream is gone): nothing to tell the server. A stream
    // still open (KeepAlive found the lease gone first) is cancelled.
    cancel = !ended_;
  } else {
    mu_.Unlock();
    v1::AcquireRequest req;
    req.mutable_release();
    // Refused only once the reads ended: the end is then on its way.
    Write(std::move(req), /*last=*/true);
    mu_.Lock();
    if (may_wait) {
      const Clock::time_point deadline = Clock::now() + kReleaseTimeout;
      while (!ended_) {
        if (!WaitBefore(cv_, mu_, deadline)) break;
      }
      if (!ended_) {
        cancel = true;
        result = absl::DeadlineExceededError(
            "no RELEASED from the server within " + FormatDuration(kReleaseTimeout) +
            "; the stream was cancelled (which releases the lock on a live server)");
      } else if (!saw_released_ && phase_ != Phase::kLost && !end_status_.ok()) {
        result = FromGrpc(end_status_);
      }
    } else {
      // Not waited for, still bounded.
      loop()->RunAt(Clock::now() + kReleaseTimeout, [weak = weak_from_this()] {
        if (auto self = weak.lock()) self->Cancel();
      });
    }
  }
  mu_.Unlock();
  if (cancel) Cancel();
  mu_.Lock();
  if (may_wait) AwaitDeliveredLocked();
  if (phase_ == Phase::kLost) {
    *final = StatusLocked(Clock::now());
  } else {
    final->state = LockState::kReleased;
    final->valid_for = Millis(0);
    final->lost_reason.clear();
    final->message = message_.empty() ? "released" : message_;
  }
  mu_.Unlock();
  if (ttl_ > Millis(0) && !lease_id_.empty()) ka_->Remove(lease_id_);
  if (!registry_key_.empty()) registry_->Forget(registry_key_, this);
  return result;
}

void HoldCore::AwaitSettled() {
  if (loop()->InLoopThread()) return;
  absl::MutexLock l(&mu_);
  if (releasing_) {
    const Clock::time_point deadline = Clock::now() + kReleaseTimeout;
    while (!ended_) {
      if (!WaitBefore(cv_, mu_, deadline)) break;
    }
  }
  AwaitDeliveredLocked();
}

void HoldCore::AwaitDeliveredLocked() {
  const Clock::time_point deadline = Clock::now() + kReleaseTimeout;
  while (!notes_.empty() || delivering_) {
    if (!WaitBefore(cv_, mu_, deadline)) break;
  }
}

LockStatus HoldCore::Status() const {
  absl::MutexLock l(&mu_);
  return StatusLocked(Clock::now());
}

int HoldCore::live_handles() const {
  absl::MutexLock l(&mu_);
  return live_handles_;
}

void HoldCore::OnRenewed(Clock::time_point valid_until) {
  absl::MutexLock l(&mu_);
  if (valid_until > lease_valid_until_) lease_valid_until_ = valid_until;
}

void HoldCore::OnLeaseGone(const std::string& message) {
  absl::MutexLock l(&mu_);
  if (!HeldLocked()) return;
  // Our own Release deleted the node before RELEASED reached us: a
  // renewal in flight then finds the lease gone. Not a loss.
  if (releasing_) return;
  phase_ = Phase::kLost;
  lost_reason_ = "LEASE_EXPIRED";
  message_ = message.empty() ? "KeepAlive: the lease is gone" : "KeepAlive: " + message;
  NotifyLocked();
}

}  // namespace internal

// ---- AbandonWaits (coordination.h) ----

void AbandonWaits() {
  internal::Waits& w = internal::ProcessWaits();
  absl::MutexLock wl(&w.mu);
  w.abandoned = true;
  // Each listed core is alive: Start unlists it (under w.mu) before it
  // returns, and its caller keeps it until then.
  for (internal::HoldCore* core : w.waiting) core->AbandonIfWaiting();
}

bool WaitsAbandoned() {
  internal::Waits& w = internal::ProcessWaits();
  absl::MutexLock wl(&w.mu);
  return w.abandoned;
}

}  // namespace turnstile::client
