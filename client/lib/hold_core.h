// HoldCore: one Acquire stream = one server-side contender, and the state
// of the hold it represents. An AsyncStream (completion-queue API) that
// keeps itself alive from Start until OnDone, whoever else holds it; timers
// reach it through weak_ptrs, so a finished, released hold is not kept by
// its watchdog. Reentrant handles of one hold (Lock::Hold, lock_hold.h)
// share one HoldCore. Internal to the client library.
//
// Threads: Start (the wait for the grant, and on_queued) runs on the thread
// calling Client::Acquire; ReleaseHandle, AwaitSettled, Status and the
// accessors on whichever thread uses the Lock; the stream's events, the
// careful-client watchdog and the delivery of on_change / on_revoke on the
// EventLoop's thread (event_loop.h). Stream events only update state and
// queue work, never wait and never run user code; user callbacks run on
// the EventLoop, in the order queued, without mu_.
//
// Lock order (the whole library; clang's -Wthread-safety checks every
// ABSL_GUARDED_BY and ABSL_EXCLUSIVE_LOCKS_REQUIRED, tests/
// thread_safety_check.sh):
//   the process's waits (hold_core.cc, AbandonWaits) -> HoldCore::mu_
//     -> the EventLoop's lock (timers, posted deliveries);
//   KeepAliver::mu_ -> its stream counter (keepalive.h) and its stream's
//     AsyncStream lock -> the EventLoop's lock;
//   an AsyncStream's lock -> the EventLoop's lock (async_stream.h).
// HoldCore::mu_ is never held while calling into the KeepAliver, the
// reentrancy Registry or the stream's writes (AsyncStream::Write), nor
// while a user callback runs. Lock::Hold's lock and the Registry's are
// leaves. KeepAliveStream's send times are no lock's: the EventLoop's
// thread alone touches them (keepalive.h).
#ifndef TURNSTILE_CLIENT_LIB_HOLD_CORE_H_
#define TURNSTILE_CLIENT_LIB_HOLD_CORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/lib/async_stream.h"
#include "client/lib/client.h"
#include "client/lib/event_loop.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile::client::internal {

using Clock = EventLoop::Clock;
using Callback = std::function<void(const LockStatus&)>;
using RevokeCallback = std::function<void(const std::string&, const std::string&)>;

class KeepAliver;
class Registry;

class HoldCore final : public AsyncStream<v1::AcquireRequest, v1::AcquireEvent>,
                       public std::enable_shared_from_this<HoldCore> {
 public:
  HoldCore(std::shared_ptr<v1::LockService::Stub> stub, std::shared_ptr<EventLoop> loop,
           std::shared_ptr<KeepAliver> ka, std::shared_ptr<Registry> registry, std::string name,
           std::string registry_key, Millis ttl, Callback first_on_change,
           RevokeCallback on_revoke = nullptr);

  // Opens the stream and waits for the grant. OK = granted (the state may
  // already have moved on, e.g. to kLost).
  absl::Status Start(const v1::AcquireOpen& open, Millis wait_timeout,
                     const std::function<void(int64_t)>& on_queued) ABSL_LOCKS_EXCLUDED(mu_);

  // AbandonWaits: a stream still waiting for its grant is cancelled (a live
  // replica deletes the waiting node at once); Start then returns
  // CANCELLED. A hold already granted is left alone.
  void AbandonIfWaiting() ABSL_LOCKS_EXCLUDED(mu_);

  // Another handle for a reentrant acquire; -1 if this hold cannot be shared
  // any more (released, releasing or lost).
  int TryAddHandle(Callback on_change) ABSL_LOCKS_EXCLUDED(mu_);

  // Releases handle `id`; the hold itself when it is the last. `*final`
  // receives the status the handle reports from now on.
  absl::Status ReleaseHandle(int id, LockStatus* final) ABSL_LOCKS_EXCLUDED(mu_);

  // Off the EventLoop thread: once the last handle's release has begun,
  // waits (bounded) for the stream's end; then for every queued
  // notification to be delivered.
  void AwaitSettled() ABSL_LOCKS_EXCLUDED(mu_);

  LockStatus Status() const ABSL_LOCKS_EXCLUDED(mu_);
  int live_handles() const ABSL_LOCKS_EXCLUDED(mu_);

  // Set once, before Acquire returns; read-only afterwards.
  const std::string& lease_id() const { return lease_id_; }
  uint64_t fencing_token() const { return token_; }
  const std::string& name() const { return name_; }

  // From the KeepAliver.
  void OnRenewed(Clock::time_point valid_until) ABSL_LOCKS_EXCLUDED(mu_);
  void OnLeaseGone(const std::string& message) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class Phase { kWaiting, kHeld, kSuspended, kLost, kReleased, kFailed };

  // ---- The stream's events (on the EventLoop: no waiting, no user code) ----
  void OnRead(const v1::AcquireEvent& ev) override { OnEvent(ev); }
  void OnDone(const grpc::Status& st) override { OnEnd(st); }
  void OnEvent(const v1::AcquireEvent& ev) ABSL_LOCKS_EXCLUDED(mu_);
  void OnEnd(const grpc::Status& st) ABSL_LOCKS_EXCLUDED(mu_);

  // ---- The careful-client watchdog (on the EventLoop; hold_events.cc) ----
  void ArmWatchdogLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnWatchdog(uint64_t generation) ABSL_LOCKS_EXCLUDED(mu_);

  // ---- State and notifications ----
  bool HeldLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return phase_ == Phase::kHeld || phase_ == Phase::kSuspended;
  }
  LockStatus StatusLocked(Clock::time_point now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What Start returns once the wait is over (not timed out).
  absl::Status StartResultLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the current status for every subscriber.
  void NotifyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // User callbacks run on the EventLoop, in the order queued, without mu_.
  void QueueLocked(std::function<void()> note) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Deliver() ABSL_LOCKS_EXCLUDED(mu_);
  // REQUIRES: not on the EventLoop thread.
  void AwaitDeliveredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<v1::LockService::Stub> stub_;
  const std::shared_ptr<KeepAliver> ka_;
  const std::shared_ptr<Registry> registry_;
  const std::string name_;
  const std::string registry_key_;  // empty unless reentrant
  const Millis ttl_;
  const RevokeCallback on_revoke_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // on every change of phase_, queued_, ended_ and delivery
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kWaiting;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;  // by AbandonWaits, while waiting
  std::deque<int64_t> queued_ ABSL_GUARDED_BY(mu_);  // positions for on_queued
  // Written once under mu_ (on the EventLoop) before Start sees the grant;
  // read without it afterwards, by Start's caller and whoever it hands the
  // Lock to (the grant's wait orders the write before those reads).
  std::string lease_id_;
  uint64_t token_ = 0;
  Clock::time_point lease_valid_until_ ABSL_GUARDED_BY(mu_);  // ttl > 0 only
  Clock::time_point suspend_deadline_ ABSL_GUARDED_BY(mu_);   // kSuspended only
  // From ACQUIRED / STILL_HELD (servers that refresh; 0 = an older server):
  Millis refresh_within_ ABSL_GUARDED_BY(mu_){0};
  Clock::time_point refresh_due_ ABSL_GUARDED_BY(mu_);  // next refresh expected by
  Clock::time_point valid_until_ ABSL_GUARDED_BY(mu_);  // the latest refresh's validity
  bool silent_ ABSL_GUARDED_BY(mu_) = false;            // kSuspended by the watchdog
  TimerSlot watchdog_ ABSL_GUARDED_BY(mu_);
  std::string lost_reason_ ABSL_GUARDED_BY(mu_);
  std::string message_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_status_ ABSL_GUARDED_BY(mu_);
  bool saw_released_ ABSL_GUARDED_BY(mu_) = false;
  bool releasing_ ABSL_GUARDED_BY(mu_) = false;
  int live_handles_ ABSL_GUARDED_BY(mu_) = 0;
  int next_handle_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, Callback> subscribers_ ABSL_GUARDED_BY(mu_);  // handle id -> on_change
  std::deque<std::function<void()>> notes_ ABSL_GUARDED_BY(mu_);  // callbacks to deliver
  bool delivery_posted_ ABSL_GUARDED_BY(mu_) = false;
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace turnstile::client::internal

#endif  // TURNSTILE_CLIENT_LIB_HOLD_CORE_H_
