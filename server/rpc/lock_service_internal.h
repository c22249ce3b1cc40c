// Internal to the gRPC adapter's translation units (lock_service.cc and
// the reactors: acquire_reactor.cc, keepalive_reactor.cc,
// observe_reactor.cc): status and proto conversions and the streaming
// reactors' common base. Not part of the service's interface.
#ifndef TURNSTILE_SERVER_RPC_LOCK_SERVICE_INTERNAL_H_
#define TURNSTILE_SERVER_RPC_LOCK_SERVICE_INTERNAL_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/lock_engine.h"
#include "server/rpc/async_rpc.h"
#include "server/rpc/lock_service.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile {
namespace lock_service_internal {

inline grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

inline void SetDuration(Millis d, google::protobuf::Duration* out) {
  out->set_seconds(d.count() / 1000);
  out->set_nanos(static_cast<int32_t>((d.count() % 1000) * 1000000));
}

// A holder or waiter as Describe and Observe show it.
void ToProto(const ContenderView& v, v1::Contender* out);

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
    finish_ = std::make_unique<grpc::Status>(std::move(status));
    PumpAndUnlock();
  }

  // A stream refused by a quota: answered after the replica's refusal
  // delay (LockServiceImpl::SetQuotaRefusalDelay says why), or at once.
  // On the queue's thread (the reactors refuse in OnStart and OnReadDone);
  // OnCancel must call CancelPause.
  void FinishRefused(LockServiceImpl* svc, grpc::Status status) {
    gpr_timespec deadline;
    if (svc->TakeRefusalPause(&deadline)) {
      // The stream's own lifetime covers the pause (StartPause counts it
      // as an op in flight).
      if (this->StartPause(svc->cq(), deadline, [this, svc, status](bool) {
            svc->EndRefusalPause();
            FinishAfterWrites(status);  // a no-op once cancelled
          })) {
        return;
      }
      svc->EndRefusalPause();
    }
    FinishAfterWrites(std::move(status));
  }

  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) override {
    mu_.Lock();
    writing_ = false;
    const bool probe = current_is_probe_;
    current_is_probe_ = false;
    current_.reset();  // a waiter may keep its stream for hours: drop the sent payload
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
      current_ = std::make_unique<Resp>(std::move(queue_.front().msg));
      Resp* last = current_.get();
      queue_.pop_front();
      grpc::Status s = *finish_;
      mu_.Unlock();
      OnFinishing(s);
      // current_ is not touched again: finished_ ends the queue.
      this->StartWriteAndFinish(last, grpc::WriteOptions(), s);
      return;
    }
    if (queue_.size() == 1 && hold_last_) {  // FinishAfterWrites follows
      mu_.Unlock();
      return;
    }
    if (!queue_.empty()) {
      writing_ = true;
      current_ = std::make_unique<Resp>(std::move(queue_.front().msg));
      Resp* next = current_.get();
      current_is_probe_ = queue_.front().probe;
      queue_.pop_front();
      mu_.Unlock();
      // gRPC reads *current_ until OnWriteDone; nothing replaces it while writing_.
      this->StartWrite(next);
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
  // address, after mu_ is released) until OnWriteDone. On the heap, as the
  // status below: a waiting stream (W5 keeps 20,000) has neither.
  std::unique_ptr<Resp> current_ ABSL_GUARDED_BY(mu_);
  bool current_is_probe_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_last_ ABSL_GUARDED_BY(mu_) = false;  // see Send
  std::unique_ptr<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace lock_service_internal
}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RPC_LOCK_SERVICE_INTERNAL_H_
