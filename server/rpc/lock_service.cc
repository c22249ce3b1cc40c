#include "server/rpc/lock_service.h"

#include "server/rpc/acquire_proto.h"

#include <atomic>
#include <list>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace turnstile {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

void SetDuration(Millis d, google::protobuf::Duration* out) {
  out->set_seconds(d.count() / 1000);
  out->set_nanos(static_cast<int32_t>((d.count() % 1000) * 1000000));
}

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
// The last message and the status go out together (StartWriteAndFinish:
// one write, no OnWriteDone hop), so a stream's final event and its end
// reach the client at once. Shared by both streaming reactors. The reactor keeps itself alive through
// `self_` until OnDone; engine callbacks reach it through weak_ptrs, so a
// late event after OnDone finds nothing (muduo's tie idiom).
template <typename Req, typename Resp>
class StreamReactor : public rpc::BidiCall<Req, Resp> {
 public:
  // `last`: the caller's FinishAfterWrites follows at once (the engine
  // finishes a contender right after RELEASED or LOST), so the message is
  // held until then and written together with the status.
  void Send(Resp msg, bool last = false) { Enqueue(std::move(msg), last, false); }
  // Like Send, but at most one such message waits at a time: a pending
  // one not yet handed to gRPC is dropped for the newer (a client that
  // stops reading must not grow the replica's memory with refreshes).
  // Returns whether one was dropped.
  bool SendReplacing(Resp msg, bool (*same_kind)(const Resp&)) ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    if (done_ || finish_) {
      mu_.Unlock();
      return false;
    }
    bool dropped = false;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (!it->probe && same_kind(it->msg)) {
        it = queue_.erase(it);
        dropped = true;
      } else {
        ++it;
      }
    }
    queue_.push_back(Queued{std::move(msg), false});
    PumpAndUnlock();
    return dropped;
  }
  // Messages waiting to be handed to gRPC (tests).
  size_t pending() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return queue_.size();
  }
  // Like Send; once this message has gone to the transport (the stream
  // was still open then), OnProbeWritten runs. A cancelled or broken
  // stream fails the write instead.
  void SendProbe(Resp msg) { Enqueue(std::move(msg), false, true); }
  void FinishAfterWrites(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    if (done_ || finish_) {
      mu_.Unlock();
      return;
    }
    finish_ = std::move(status);
    PumpAndUnlock();
  }

  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) override {
    mu_.Lock();
    writing_ = false;
    const bool probe = current_is_probe_;
    current_is_probe_ = false;
    current_.Clear();  // a waiter may keep its stream for hours: drop the sent payload
    if (!ok) queue_.clear();  // the stream broke; OnDone follows
    PumpAndUnlock();
    if (probe && ok) OnProbeWritten();
  }

 protected:
  void Enqueue(Resp msg, bool last, bool probe) ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    if (done_ || finish_) {
      mu_.Unlock();
      return;
    }
    queue_.push_back(Queued{std::move(msg), probe});
    if (last) hold_last_ = true;
    PumpAndUnlock();
  }
  // Hands the next message (or the status) to gRPC unless a write is in
  // flight, and releases mu_ first (gRPC may call back inline).
  void PumpAndUnlock() ABSL_UNLOCK_FUNCTION(mu_) {
    if (writing_ || finished_ || done_) {
      mu_.Unlock();
      return;
    }
    if (queue_.size() == 1 && finish_) {
      finished_ = true;
      current_ = std::move(queue_.front().msg);
      queue_.pop_front();
      grpc::Status s = *finish_;
      mu_.Unlock();
      OnFinishing(s);
      // current_ is not touched again: finished_ ends the queue.
      this->StartWriteAndFinish(&current_, grpc::WriteOptions(), s);
      return;
    }
    if (queue_.size() == 1 && hold_last_) {  // FinishAfterWrites follows
      mu_.Unlock();
      return;
    }
    if (!queue_.empty()) {
      writing_ = true;
      current_ = std::move(queue_.front().msg);
      current_is_probe_ = queue_.front().probe;
      queue_.pop_front();
      mu_.Unlock();
      // gRPC reads current_ until OnWriteDone; nothing writes it while writing_.
      this->StartWrite(&current_);
      return;
    }
    if (finish_) {
      finished_ = true;
      grpc::Status s = *finish_;
      mu_.Unlock();
      OnFinishing(s);
      this->Finish(s);
      return;
    }
    mu_.Unlock();
  }
  // Called once, just before Finish (metrics).
  virtual void OnFinishing(const grpc::Status&) {}
  // A SendProbe message was written (called without mu_ held).
  virtual void OnProbeWritten() {}
  void MarkDone() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    done_ = true;
  }

  // A leaf: nothing else is taken while it is held, and gRPC is called
  // only after it is released.
  absl::Mutex mu_;
  // A list, not a deque: an empty std::deque still holds a ~0.5 KB block,
  // and a waiting stream's queue is almost always empty.
  struct Queued {
    Resp msg;
    bool probe;
  };
  std::list<Queued> queue_ ABSL_GUARDED_BY(mu_);
  // The message gRPC is writing: set under mu_, then read by gRPC (by
  // address, after mu_ is released) until OnWriteDone.
  Resp current_ ABSL_GUARDED_BY(mu_);
  bool current_is_probe_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_last_ ABSL_GUARDED_BY(mu_) = false;  // see Send
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

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
      if (!identity_.ok()) {
        FinishAfterWrites(ToGrpc(identity_.status()));
        return;
      }
      absl::StatusOr<AcquireParams> p = AcquireParamsFromProto(req_.open());
      if (p.ok()) {
        absl::Status allowed = svc_->Authorize(*identity_, AuthzAction::kAcquire, p->name);
        if (allowed.ok() && p->revoke_holders) {
          allowed = svc_->Authorize(*identity_, AuthzAction::kRevoke, p->name);
        }
        if (!allowed.ok()) p = allowed;
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
    if (uint64_t id = id_.load(); id != 0 && !ended_.load()) svc_->engine()->Abandon(id);
    FinishAfterWrites(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    MarkDone();
    // Abandon is a no-op for a contender the engine ended; skipping it
    // spares every released stream a trip through the engine's lock.
    if (uint64_t id = id_.load(); id != 0 && !ended_.load()) svc_->engine()->Abandon(id);
    if (counted_) {
      svc_->CloseStream();
      svc_->NoteStreams("acquire", -1);
    }
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
    counted_ = svc_->TryOpenStream();
    if (!counted_) {
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
  // Touched only by reads, which gRPC serializes.
  v1::AcquireRequest req_;
  // 0 until opened; read by OnCancel/OnDone on other threads.
  std::atomic<uint64_t> id_{0};
  // The engine finished the contender (OnFinish): no Release, HalfClose or
  // Abandon is needed any more.
  std::atomic<bool> ended_{false};
};

class KeepAliveReactor final
    : public StreamReactor<v1::KeepAliveRequest, v1::KeepAliveResponse> {
 public:
  static void Await(LockServiceImpl* svc, v1::LockService::AsyncService* async,
                    grpc::ServerCompletionQueue* cq) {
    auto r = std::shared_ptr<KeepAliveReactor>(new KeepAliveReactor(svc));
    r->weak_self_ = r;
    r->BidiCall::Await(r, [async](grpc::ServerContext* ctx, Stream* stream,
                                  grpc::ServerCompletionQueue* cq, void* tag) {
      async->RequestKeepAlive(ctx, stream, cq, cq, tag);
    }, cq);
  }

  void OnArrival() override { svc_->AwaitKeepAlive(); }
  void OnStart() override {
    identity_ = svc_->Authenticate(context(), "KeepAlive");
    Begin();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      FinishAfterWrites(grpc::Status::OK);
      return;
    }
    if (!identity_.ok()) {
      FinishAfterWrites(ToGrpc(identity_.status()));
      return;
    }
    size_t n = static_cast<size_t>(req_.lease_ids_size());
    size_t limit = svc_->engine()->options().limits.max_keepalive_leases;
    if (n == 0 || n > limit) {
      FinishAfterWrites(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("lease_ids has ", n, " entries; it must have 1..", limit)));
      return;
    }
    // One request at a time: answers stay in request order.
    struct Gather {
      explicit Gather(const v1::KeepAliveRequest& req) : left(req.lease_ids_size()) {
        for (const auto& lease : req.lease_ids()) resp.add_leases()->set_lease_id(lease);
      }
      absl::Mutex mu;
      size_t left ABSL_GUARDED_BY(mu);
      v1::KeepAliveResponse resp ABSL_GUARDED_BY(mu);
    };
    auto g = std::make_shared<Gather>(req_);
    std::weak_ptr<KeepAliveReactor> weak = weak_self_;
    for (size_t i = 0; i < n; ++i) {
      auto answer = [g, i, weak](absl::StatusOr<Millis> valid) {
            absl::ReleasableMutexLock l(&g->mu);
            auto* st = g->resp.mutable_leases(static_cast<int>(i));
            st->set_code(static_cast<int32_t>(valid.status().code()));
            if (valid.ok()) {
              SetDuration(*valid, st->mutable_valid_for());
            } else {
              st->set_message(std::string(valid.status().message()));
            }
            if (--g->left > 0) return;
            v1::KeepAliveResponse resp = std::move(g->resp);
            l.Release();
            if (auto r = weak.lock()) {
              r->Send(std::move(resp));
              r->StartRead(&r->req_);
            }
          };
      const std::string& lease = req_.lease_ids(static_cast<int>(i));
      // A lease the caller may not keep alive gets PERMISSION_DENIED in its
      // own entry; the others in the request are served.
      if (absl::Status allowed = svc_->AuthorizeLease(*identity_, AuthzAction::kKeepAlive, lease);
          !allowed.ok()) {
        answer(allowed);
        continue;
      }
      svc_->engine()->KeepAlive(lease, answer);
    }
  }

  void OnCancel() override { FinishAfterWrites(grpc::Status::CANCELLED); }

  void OnDone() override {
    MarkDone();
    if (counted_) {
      svc_->CloseStream();
      svc_->NoteStreams("keepalive", -1);
    }
    BidiCall::OnDone();  // may destroy *this
  }

 private:
  explicit KeepAliveReactor(LockServiceImpl* svc) : svc_(svc) {}
  void OnFinishing(const grpc::Status& s) override {
    svc_->NoteRequest("KeepAlive", s.error_code());
  }
  void Begin() {
    counted_ = svc_->TryOpenStream();
    if (!counted_) {
      FinishAfterWrites(svc_->StreamLimitStatus());
      return;
    }
    svc_->NoteStreams("keepalive", +1);
    StartRead(&req_);
  }

  LockServiceImpl* const svc_;
  std::weak_ptr<KeepAliveReactor> weak_self_;
  absl::StatusOr<std::string> identity_;
  bool counted_ = false;
  v1::KeepAliveRequest req_;
};

void ToProto(const ContenderView& v, v1::Contender* out);

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
    absl::StatusOr<std::string> who = svc_->Authenticate(context(), "Observe");
    absl::Status allowed =
        who.ok() ? svc_->Authorize(*who, AuthzAction::kDescribe, request().name()) : who.status();
    if (!allowed.ok()) return End(ToGrpc(allowed));
    if (svc_->observers() == nullptr) {
      return End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "Observe is not served here"));
    }
    counted_ = svc_->TryOpenStream();
    if (!counted_) return End(svc_->StreamLimitStatus());
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
  void OnCancel() override { End(grpc::Status::CANCELLED); }
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

void ToProto(const ContenderView& v, v1::Contender* out) {
  out->set_owner(v.info.owner);
  out->mutable_metadata()->insert(v.info.metadata.begin(), v.info.metadata.end());
  out->mutable_since()->set_seconds(v.since_unix_ms / 1000);
  out->mutable_since()->set_nanos(static_cast<int32_t>((v.since_unix_ms % 1000) * 1000000));
  out->set_fencing_token(v.fencing_token);
  out->set_replica_id(v.info.replica_id);
  out->set_position(v.position);
  switch (v.kind) {
    case ContenderKind::kShared: out->set_kind(v1::LOCK_KIND_SHARED); break;
    case ContenderKind::kSemaphore: out->set_kind(v1::LOCK_KIND_SEMAPHORE); break;
    case ContenderKind::kExclusive: out->set_kind(v1::LOCK_KIND_EXCLUSIVE); break;
  }
  out->set_max_holders(v.max_holders);
  if (v.info.granted_unix_ms > 0) {
    out->mutable_granted()->set_seconds(v.info.granted_unix_ms / 1000);
    out->mutable_granted()->set_nanos(static_cast<int32_t>((v.info.granted_unix_ms % 1000) * 1000000));
  }
  out->set_revoke_requests(v.info.revoke_id);
  out->set_revoke_requester(v.info.revoke_by);
  out->set_revoke_reason(v.info.revoke_reason);
  out->set_identity(v.info.identity);
}

}  // namespace

absl::StatusOr<std::string> LockServiceImpl::Authenticate(grpc::ServerContext* ctx,
                                                         const char* method) const {
  if (verifier_ == nullptr) return std::string();
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  absl::StatusOr<std::string> who =
      auth ? verifier_->Identify(*auth)
           : absl::StatusOr<std::string>(absl::UnauthenticatedError("no TLS connection"));
  if (!who.ok()) {
    AuditLog("unauthenticated", "", method, "",
             absl::StrCat(ctx->peer(), ": ", who.status().message()));
  }
  return who;
}

absl::Status LockServiceImpl::Authorize(const std::string& identity, AuthzAction action,
                                        absl::string_view lock) const {
  std::shared_ptr<const AuthzPolicy> p = policy();
  if (p == nullptr) return absl::OkStatus();
  AuthzPolicy::Decision d = p->Check(identity, action, lock);
  if (d.allowed) return absl::OkStatus();
  AuditLog("denied", identity, AuthzActionName(action), lock, d.why);
  return absl::PermissionDeniedError(absl::StrCat("identity \"", identity, "\" may not ",
                                                  AuthzActionName(action), " lock \"", lock,
                                                  "\" (", d.why, ")"));
}

absl::Status LockServiceImpl::AuthorizeLease(const std::string& identity, AuthzAction action,
                                             const std::string& lease_id) const {
  if (policy() == nullptr) return absl::OkStatus();
  absl::StatusOr<LeaseId> lease = ParseLeaseId(lease_id);
  if (!lease.ok()) return lease.status();  // INVALID_ARGUMENT, before any check
  return Authorize(identity, action, lease->lock_name);
}

grpc::Status LockServiceImpl::StreamLimitStatus() const {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("too many open streams on this replica: the limit "
                                   "(--max-streams) is ",
                                   max_streams_));
}

bool LockServiceImpl::TryOpenStream() {
  size_t n = open_streams_.fetch_add(1);
  if (n >= max_streams_) {
    open_streams_.fetch_sub(1);
    return false;
  }
  return true;
}

void LockServiceImpl::Start(grpc::ServerCompletionQueue* cq) {
  cq_ = cq;
  AwaitAcquire();
  AwaitKeepAlive();
  auto* async = &async_;
  ReleaseCall::Await(
      [async](grpc::ServerContext* ctx, v1::ReleaseRequest* req, ReleaseCall::Responder* r,
              grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestRelease(ctx, req, r, cq, cq, tag);
      },
      cq, [this](ReleaseCall* call) { Release(call); });
  RevokeCall::Await(
      [async](grpc::ServerContext* ctx, v1::RevokeRequest* req, RevokeCall::Responder* r,
              grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestRevoke(ctx, req, r, cq, cq, tag);
      },
      cq, [this](RevokeCall* call) { Revoke(call); });
  DescribeCall::Await(
      [async](grpc::ServerContext* ctx, v1::DescribeRequest* req, DescribeCall::Responder* r,
              grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestDescribe(ctx, req, r, cq, cq, tag);
      },
      cq, [this](DescribeCall* call) { Describe(call); });
  ListCall::Await(
      [async](grpc::ServerContext* ctx, v1::ListRequest* req, ListCall::Responder* r,
              grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestList(ctx, req, r, cq, cq, tag);
      },
      cq, [this](ListCall* call) { List(call); });
  ProclaimCall::Await(
      [async](grpc::ServerContext* ctx, v1::ProclaimRequest* req, ProclaimCall::Responder* r,
              grpc::ServerCompletionQueue* cq, void* tag) {
        async->RequestProclaim(ctx, req, r, cq, cq, tag);
      },
      cq, [this](ProclaimCall* call) { Proclaim(call); });
  AwaitObserve();
}

void LockServiceImpl::AwaitObserve() { ObserveReactor::Await(this, &async_, cq_); }

void LockServiceImpl::Proclaim(ProclaimCall* call) {
  ProclaimCall* reactor = call;
  const v1::ProclaimRequest* req = &call->request();
  absl::StatusOr<std::string> who = Authenticate(call->context(), "Proclaim");
  absl::Status allowed =
      who.ok() ? AuthorizeLease(*who, AuthzAction::kProclaim, req->lease_id()) : who.status();
  if (Refused(reactor, "Proclaim", allowed)) return;
  std::map<std::string, std::string> metadata(req->metadata().begin(), req->metadata().end());
  engine_->Proclaim(req->lease_id(), req->fencing_token(), metadata,
                    [this, reactor](absl::Status s) {
                      grpc::Status g = ToGrpc(s);
                      NoteRequest("Proclaim", g.error_code());
                      reactor->Finish(g);
                    });
}

void LockServiceImpl::AwaitAcquire() { AcquireReactor::Await(this, &async_, cq_); }
void LockServiceImpl::AwaitKeepAlive() { KeepAliveReactor::Await(this, &async_, cq_); }

void LockServiceImpl::Release(ReleaseCall* call) {
  ReleaseCall* reactor = call;
  const v1::ReleaseRequest* req = &call->request();
  absl::StatusOr<std::string> who = Authenticate(call->context(), "Release");
  absl::Status allowed =
      who.ok() ? AuthorizeLease(*who, AuthzAction::kRelease, req->lease_id()) : who.status();
  if (Refused(reactor, "Release", allowed)) return;
  engine_->ReleaseLease(req->lease_id(), [this, reactor, who = *who, lease = req->lease_id()](
                                             absl::Status s, const std::string& holder) {
    // A hold ended by someone else than its holder: audited.
    if (s.ok() && verifier_ != nullptr && holder != who) {
      AuditLog("release_by_other", who, "release", lease, absl::StrCat("holder ", holder));
    }
    grpc::Status g = ToGrpc(s);
    NoteRequest("Release", g.error_code());
    reactor->Finish(g);
  });
}

void LockServiceImpl::Revoke(RevokeCall* call) {
  RevokeCall* reactor = call;
  const v1::RevokeRequest* req = &call->request();
  absl::StatusOr<std::string> who = Authenticate(call->context(), "Revoke");
  absl::Status allowed =
      who.ok() ? AuthorizeLease(*who, AuthzAction::kRevoke, req->lease_id()) : who.status();
  if (Refused(reactor, "Revoke", allowed)) return;
  engine_->Revoke(req->lease_id(), req->requester(), req->reason(),
                  [this, reactor, who = *who, lease = req->lease_id()](
                      absl::Status s, const std::string& holder) {
                    if (s.ok() && verifier_ != nullptr && holder != who) {
                      AuditLog("revoke_by_other", who, "revoke", lease,
                               absl::StrCat("holder ", holder));
                    }
                    grpc::Status g = ToGrpc(s);
                    NoteRequest("Revoke", g.error_code());
                    reactor->Finish(g);
                  },
                  *who);
}

void LockServiceImpl::Describe(DescribeCall* call) {
  DescribeCall* reactor = call;
  const v1::DescribeRequest* req = &call->request();
  v1::DescribeResponse* resp = call->response();
  absl::StatusOr<std::string> who = Authenticate(call->context(), "Describe");
  absl::Status allowed =
      who.ok() ? Authorize(*who, AuthzAction::kDescribe, req->name()) : who.status();
  if (Refused(reactor, "Describe", allowed)) return;
  engine_->Describe(req->name(), [this, reactor, resp](absl::StatusOr<LockDescription> d) {
    if (!d.ok()) {
      grpc::Status g = ToGrpc(d.status());
      NoteRequest("Describe", g.error_code());
      return reactor->Finish(g);
    }
    resp->set_name(d->name);
    resp->set_max_holders(d->max_holders);
    if (d->delayed_until_unix_ms > 0) {
      resp->mutable_delayed_until()->set_seconds(d->delayed_until_unix_ms / 1000);
      resp->mutable_delayed_until()->set_nanos(
          static_cast<int32_t>((d->delayed_until_unix_ms % 1000) * 1000000));
    }
    for (const auto& h : d->holders) ToProto(h, resp->add_holders());
    for (const auto& w : d->waiters) ToProto(w, resp->add_waiters());
    NoteRequest("Describe", grpc::StatusCode::OK);
    reactor->Finish(grpc::Status::OK);
  });
}

void LockServiceImpl::List(ListCall* call) {
  ListCall* reactor = call;
  const v1::ListRequest* req = &call->request();
  v1::ListResponse* resp = call->response();
  absl::StatusOr<std::string> who = Authenticate(call->context(), "List");
  std::shared_ptr<const AuthzPolicy> policy = this->policy();
  absl::Status allowed = who.status();
  if (who.ok() && policy != nullptr) {
    // Decided for the prefix by the rule that wins there, like every other
    // action: a deny rule refuses (audited) however many names would be
    // visible; a prefix no rule allows is refused unless a more specific
    // rule allows part of it (then the names are filtered one by one).
    AuthzPolicy::Decision d = policy->Check(*who, AuthzAction::kList, req->prefix());
    if (d.by_deny_rule ||
        (!d.allowed && !policy->MayAllowUnder(*who, AuthzAction::kList, req->prefix()))) {
      allowed = Authorize(*who, AuthzAction::kList, req->prefix());
    }
  }
  if (Refused(reactor, "List", allowed)) return;
  // Only the names the caller may list, filtered before the limit applies
  // (not audited one by one: a filtered name is not a refused call).
  std::function<bool(const std::string&)> visible;
  if (policy != nullptr) {
    visible = [policy, who = *who](const std::string& n) {
      return policy->Check(who, AuthzAction::kList, n).allowed;
    };
  }
  engine_->List(req->prefix(), req->limit(), [this, reactor, resp](absl::StatusOr<LockList> l) {
    if (!l.ok()) {
      grpc::Status g = ToGrpc(l.status());
      NoteRequest("List", g.error_code());
      return reactor->Finish(g);
    }
    for (auto& n : l->names) resp->add_names(n);
    resp->set_truncated(l->truncated);
    NoteRequest("List", grpc::StatusCode::OK);
    reactor->Finish(grpc::Status::OK);
  }, std::move(visible));
}

}  // namespace turnstile
