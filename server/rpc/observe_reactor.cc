// The Observe stream: the observers' hub's states (server/engine/lock_observers.h)
// written to one client, the latest only while a write is in flight.

#include <atomic>
#include <list>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/rpc/lock_service.h"
#include "server/rpc/lock_service_internal.h"

namespace turnstile {

using namespace lock_service_internal;  // NOLINT(build/namespaces): the adapter's own helpers

namespace {

// One Observe stream: the hub's states, the latest only while a write is in
// flight (an observer that reads slowly skips states; `sequence` shows it).
class ObserveReactor final : public rpc::ServerStreamCall<v1::ObserveRequest, v1::ObserveEvent>,
                             public ObserveSink {
 public:
  static void Await(LockServiceImpl* svc, v1::LockService::AsyncService* async,
                    grpc::ServerCompletionQueue* cq) {
    auto r = std::shared_ptr<ObserveReactor>(new ObserveReactor(svc));
    r->weak_self_ = r;
    r->ServerStreamCall::Await(r, [async](grpc::ServerContext* ctx, v1::ObserveRequest* req,
                                          Writer* w, grpc::ServerCompletionQueue* cq, void* tag) {
      async->RequestObserve(ctx, req, w, cq, cq, tag);
    }, cq);
  }

  void OnArrival() override { svc_->AwaitObserve(); }
  void OnStart() override {
    // Bad input is INVALID_ARGUMENT whoever asks: checked before the policy.
    if (absl::Status valid = ValidateLockName(request().name()); !valid.ok()) {
      return End(ToGrpc(valid));
    }
    absl::StatusOr<std::string> who = svc_->Authenticate(context(), "Observe");
    absl::Status allowed =
        who.ok() ? svc_->Authorize(*who, AuthzAction::kDescribe, request().name()) : who.status();
    if (!allowed.ok()) return End(ToGrpc(allowed));
    if (svc_->observers() == nullptr) {
      return End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "Observe is not served here"));
    }
    if (absl::Status q = quota_.OpenStream(svc_, context(), who, "Observe"); !q.ok()) {
      // Answered after the replica's refusal delay (see FinishRefused).
      gpr_timespec deadline;
      if (svc_->TakeRefusalPause(&deadline)) {
        if (StartPause(svc_->cq(), deadline, [this, refusal = ToGrpc(q)](bool) {
              svc_->EndRefusalPause();
              End(refusal);  // a no-op once cancelled
            })) {
          return;
        }
        svc_->EndRefusalPause();
      }
      return End(ToGrpc(q));
    }
    counted_ = svc_->TryOpenStream();
    if (!counted_) {
      quota_.Close();
      return End(svc_->StreamLimitStatus());
    }
    svc_->NoteStreams("observe", +1);
    auto self = weak_self_.lock();
    absl::StatusOr<uint64_t> id = svc_->observers()->Start(
        request().name(), std::shared_ptr<ObserveSink>(self, static_cast<ObserveSink*>(this)));
    if (!id.ok()) return End(ToGrpc(id.status()));
    absl::MutexLock l(&mu_);
    id_ = *id;
    if (ended_) svc_->observers()->Stop(id_);
  }

  void OnState(std::shared_ptr<const LockSnapshot> state) ABSL_LOCKS_EXCLUDED(mu_) override {
    mu_.Lock();
    if (ended_ || state->version <= queued_version_) {
      mu_.Unlock();
      return;
    }
    queued_version_ = state->version;
    pending_ = std::move(state);
    PumpAndUnlock();
  }
  void OnDrain() override {
    End(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                     "the replica is draining (shutting down); observe through another"));
  }
  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) override {
    mu_.Lock();
    writing_ = false;
    if (!ok) {
      pending_.reset();
      mu_.Unlock();
      End(grpc::Status::CANCELLED);
      return;
    }
    PumpAndUnlock();
  }
  void OnCancel() override {
    CancelPause();
    End(grpc::Status::CANCELLED);
  }
  void OnDone() ABSL_LOCKS_EXCLUDED(mu_) override {
    uint64_t id;
    {
      absl::MutexLock l(&mu_);
      ended_ = true;
      finish_.reset();
      pending_.reset();
      id = id_;
    }
    if (id != 0) svc_->observers()->Stop(id);
    if (counted_) {
      svc_->CloseStream();
      svc_->NoteStreams("observe", -1);
    }
    quota_.Close();
    ServerStreamCall::OnDone();  // may destroy *this
  }

 private:
  explicit ObserveReactor(LockServiceImpl* svc) : svc_(svc) {}

  // Ends the stream with `status` once the write in flight (if any) is done.
  void End(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    if (ended_) {
      mu_.Unlock();
      return;
    }
    ended_ = true;
    pending_.reset();
    finish_ = std::move(status);
    const uint64_t id = id_;
    PumpAndUnlock();
    if (id != 0) svc_->observers()->Stop(id);
  }
  // Writes the pending state (or finishes) unless a write is in flight,
  // and releases mu_ first (gRPC may call back inline).
  void PumpAndUnlock() ABSL_UNLOCK_FUNCTION(mu_) {
    if (writing_) {
      mu_.Unlock();
      return;
    }
    if (finish_) {
      grpc::Status s = *finish_;
      finish_.reset();
      mu_.Unlock();
      svc_->NoteRequest("Observe", s.error_code());
      Finish(s);
      return;
    }
    if (!pending_) {
      mu_.Unlock();
      return;
    }
    std::shared_ptr<const LockSnapshot> state = std::move(pending_);
    current_.Clear();
    current_.set_state(state->known ? v1::ObserveEvent::CURRENT : v1::ObserveEvent::UNKNOWN);
    current_.set_name(state->name);
    current_.set_sequence(++sequence_);
    current_.set_max_holders(state->max_holders);
    current_.set_waiters(state->waiters);
    current_.set_message(state->message);
    for (const auto& h : state->holders) ToProto(h, current_.add_holders());
    writing_ = true;
    mu_.Unlock();
    StartWrite(&current_);  // gRPC reads it until OnWriteDone
  }

  LockServiceImpl* const svc_;
  std::weak_ptr<ObserveReactor> weak_self_;
  bool counted_ = false;
  QuotaSlot quota_;  // on the stream's start and done, which gRPC serializes
  // Before LockObservers' lock (OnStart may Stop with it held); no other
  // lock is taken with it, and gRPC is called only after it is released.
  absl::Mutex mu_;
  uint64_t id_ ABSL_GUARDED_BY(mu_) = 0;  // set by OnStart
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const LockSnapshot> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_version_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  // Written under mu_ while !writing_; read by gRPC until OnWriteDone.
  v1::ObserveEvent current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void LockServiceImpl::AwaitObserve() { ObserveReactor::Await(this, &async_, cq_); }

}  // namespace turnstile
