// The Acquire stream: one contender per stream, its events written in
// order (server/rpc/lock_service.h).

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
#include "server/rpc/acquire_proto.h"

namespace turnstile {

using namespace lock_service_internal;  // NOLINT(build/namespaces): the adapter's own helpers

namespace {

// Durations beyond ~31 years are clamped (they fail range checks anyway).
v1::AcquireEvent ToProto(const LockEvent& e) {
  v1::AcquireEvent out;
  switch (e.type) {
    case LockEvent::Type::kQueued:
      out.set_type(v1::AcquireEvent::QUEUED);
      out.mutable_queued()->set_position(e.position);
      out.mutable_queued()->set_ahead(e.ahead);
      break;
    case LockEvent::Type::kAcquired: {
      out.set_type(v1::AcquireEvent::ACQUIRED);
      auto* a = out.mutable_acquired();
      a->set_lease_id(e.lease_id);
      a->set_fencing_token(e.fencing_token);
      // Unset without a ttl (the proto: the hold lasts while the stream is
      // open); a 0 s duration would tell a client to stop at once.
      if (e.valid_for > Millis(0)) SetDuration(e.valid_for, a->mutable_valid_for());
      SetDuration(e.session_timeout, a->mutable_session_timeout());
      SetDuration(e.safe_for, a->mutable_safe_for());
      SetDuration(e.refresh_within, a->mutable_refresh_within());
      break;
    }
    case LockEvent::Type::kStillHeld: {
      out.set_type(v1::AcquireEvent::STILL_HELD);
      auto* h = out.mutable_still_held();
      SetDuration(e.safe_for, h->mutable_safe_for());
      SetDuration(e.refresh_within, h->mutable_refresh_within());
      break;
    }
    case LockEvent::Type::kSuspended:
      out.set_type(v1::AcquireEvent::SUSPENDED);
      SetDuration(e.safe_for, out.mutable_suspended()->mutable_safe_for());
      break;
    case LockEvent::Type::kResumed:
      out.set_type(v1::AcquireEvent::RESUMED);
      if (e.refresh_within > Millis(0)) {
        SetDuration(e.safe_for, out.mutable_still_held()->mutable_safe_for());
        SetDuration(e.refresh_within, out.mutable_still_held()->mutable_refresh_within());
      }
      break;
    case LockEvent::Type::kLost: {
      out.set_type(v1::AcquireEvent::LOST);
      auto* l = out.mutable_lost();
      switch (e.reason) {
        case LostReason::kSessionExpired: l->set_reason(v1::Lost::SESSION_EXPIRED); break;
        case LostReason::kLeaseExpired: l->set_reason(v1::Lost::LEASE_EXPIRED); break;
        case LostReason::kDeleted: l->set_reason(v1::Lost::DELETED); break;
        case LostReason::kShutdown: l->set_reason(v1::Lost::SHUTDOWN); break;
      }
      l->set_message(e.message);
      break;
    }
    case LockEvent::Type::kReleased:
      out.set_type(v1::AcquireEvent::RELEASED);
      break;
    case LockEvent::Type::kReleasing:
      out.set_type(v1::AcquireEvent::RELEASING);
      break;
    case LockEvent::Type::kRevokeRequested:
      out.set_type(v1::AcquireEvent::REVOKE_REQUESTED);
      out.mutable_revoke_requested()->set_requester(e.requester);
      out.mutable_revoke_requested()->set_reason(e.revoke_reason);
      break;
  }
  return out;
}

// Writes queued messages one at a time and finishes after the last one.

class AcquireReactor final
    : public StreamReactor<v1::AcquireRequest, v1::AcquireEvent> {
 public:
  // Waits for the next Acquire call (and, when it comes, arms another).
  static void Await(LockServiceImpl* svc, v1::LockService::AsyncService* async,
                    grpc::ServerCompletionQueue* cq) {
    auto r = std::shared_ptr<AcquireReactor>(new AcquireReactor(svc));
    r->weak_self_ = r;
    r->BidiCall::Await(r, [async](grpc::ServerContext* ctx, Stream* stream,
                                  grpc::ServerCompletionQueue* cq, void* tag) {
      async->RequestAcquire(ctx, stream, cq, cq, tag);
    }, cq);
  }

  void OnArrival() override { svc_->AwaitAcquire(); }
  void OnStart() override {
    identity_ = svc_->Authenticate(context(), "Acquire");
    Begin();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // A half-close releases the lock (or abandons the wait). A cancelled
      // or broken stream also ends here, often before OnCancel runs (gRPC
      // may run the two on different threads), so it cannot be told from a
      // half-close yet: the engine checks with a write when that matters
      // (a hold with a lock-delay, see LockEngine::HalfClose).
      if (uint64_t id = id_.load()) {
        if (ended_.load()) return;  // the engine is done with it (RELEASED, LOST)
        if (context()->IsCancelled()) {
          svc_->engine()->Abandon(id);
        } else {
          svc_->engine()->HalfClose(id);
        }
      } else {
        FinishAfterWrites(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                       "stream closed before an open message"));
      }
      return;
    }
    if (id_.load() == 0) {
      if (!req_.has_open()) {
        FinishAfterWrites(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                       "the first message must be open"));
        return;
      }
      // Bad input is INVALID_ARGUMENT whoever asks: checked before the
      // caller's identity, the policy and the quota.
      absl::StatusOr<AcquireParams> p = AcquireParamsFromProto(req_.open());
      if (p.ok()) {
        if (absl::Status valid =
                LockEngine::ValidateParams(*p, svc_->engine()->options().limits);
            !valid.ok()) {
          p = valid;
        }
      }
      if (p.ok() && !identity_.ok()) p = identity_.status();
      if (p.ok()) {
        absl::Status allowed = svc_->Authorize(*identity_, AuthzAction::kAcquire, p->name);
        if (allowed.ok() && p->revoke_holders) {
          allowed = svc_->Authorize(*identity_, AuthzAction::kRevoke, p->name);
        }
        if (!allowed.ok()) p = allowed;
      }
      if (p.ok()) {
        // A contender of its identity's quota, decided before ZooKeeper
        // is touched.
        if (absl::Status q = quota_.OpenContender(p->name); !q.ok()) {
          FinishRefused(svc_, ToGrpc(q));
          return;
        }
      }
      if (p.ok()) p->identity = *identity_;
      absl::StatusOr<uint64_t> id =
          p.ok() ? svc_->engine()->Open(*p, std::make_shared<Sink>(weak_self_))
                 : absl::StatusOr<uint64_t>(p.status());
      if (!id.ok()) {
        FinishAfterWrites(ToGrpc(id.status()));
        return;
      }
      id_ = *id;
      req_.Clear();  // the engine copied the open: do not keep it for the stream's life
    } else if (req_.has_open()) {
      // Protocol error on an open stream: end the contender and say so.
      svc_->engine()->Abandon(id_.load());
      FinishAfterWrites(grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          "open sent twice on one stream; the contender was released"));
      return;
    } else {
      svc_->engine()->Release(id_.load());
    }
    StartRead(&req_);
  }

  // The client went away (or the server is shutting down): the lock is
  // released at once. gRPC still needs Finish to reach OnDone.
  void OnCancel() override {
    CancelPause();
    if (uint64_t id = id_.load(); id != 0 && !ended_.load()) svc_->engine()->Abandon(id);
    FinishAfterWrites(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    MarkDone();
    // Abandon is a no-op for a contender the engine ended; skipping it
    // spares every released stream a trip to its shard's loop.
    if (uint64_t id = id_.load(); id != 0 && !ended_.load()) svc_->engine()->Abandon(id);
    if (counted_) {
      svc_->CloseStream();
      svc_->NoteStreams("acquire", -1);
    }
    quota_.Close();
    BidiCall::OnDone();  // may destroy *this
  }

 private:
  class Sink final : public ContenderSink {
   public:
    explicit Sink(std::weak_ptr<AcquireReactor> r) : r_(std::move(r)) {}
    void OnEvent(const LockEvent& e) override {
      // RELEASED and LOST are a contender's last events: OnFinish follows.
      const bool last = e.type == LockEvent::Type::kReleased || e.type == LockEvent::Type::kLost;
      auto r = r_.lock();
      if (!r) return;
      if (e.type == LockEvent::Type::kReleasing) {
        r->SendProbe(ToProto(e));
      } else if (e.type == LockEvent::Type::kStillHeld) {
        if (r->SendReplacing(ToProto(e), [](const v1::AcquireEvent& m) {
              return m.type() == v1::AcquireEvent::STILL_HELD;
            })) {
          r->svc_->NoteStillHeldDropped();
        }
      } else {
        r->Send(ToProto(e), last);
      }
    }
    void OnFinish(const absl::Status& s) override {
      if (auto r = r_.lock()) {
        r->ended_ = true;  // the engine calls nothing more on this contender
        r->FinishAfterWrites(ToGrpc(s));
      }
    }

   private:
    std::weak_ptr<AcquireReactor> r_;
  };

  explicit AcquireReactor(LockServiceImpl* svc) : svc_(svc) {}
  void OnFinishing(const grpc::Status& s) override {
    svc_->NoteRequest("Acquire", s.error_code());
  }
  // RELEASING reached the transport: the half-close was a release.
  void OnProbeWritten() override {
    if (uint64_t id = id_.load()) svc_->engine()->Release(id);
  }
  void Begin() {
    if (absl::Status q = quota_.OpenStream(svc_, context(), identity_, "Acquire"); !q.ok()) {
      FinishRefused(svc_, ToGrpc(q));
      return;
    }
    counted_ = svc_->TryOpenStream();
    if (!counted_) {
      quota_.Close();
      FinishAfterWrites(svc_->StreamLimitStatus());
      return;
    }
    svc_->NoteStreams("acquire", +1);
    StartRead(&req_);
  }

  LockServiceImpl* const svc_;
  std::weak_ptr<AcquireReactor> weak_self_;  // for the engine's sink
  absl::StatusOr<std::string> identity_;
  bool counted_ = false;
  QuotaSlot quota_;  // on the stream's calls (start, reads, done), which gRPC serializes
  // Touched only by reads, which gRPC serializes.
  v1::AcquireRequest req_;
  // 0 until opened; read by OnCancel/OnDone on other threads.
  std::atomic<uint64_t> id_{0};
  // The engine finished the contender (OnFinish): no Release, HalfClose or
  // Abandon is needed any more.
  std::atomic<bool> ended_{false};
};

}  // namespace

void LockServiceImpl::AwaitAcquire() { AcquireReactor::Await(this, &async_, cq_); }

}  // namespace turnstile
