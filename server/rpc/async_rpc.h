// The gRPC server's calls on ONE completion queue polled by ONE thread.
//
// Why not gRPC's callback API (what the service used before issue 20):
// Debian's gRPC 1.51 runs callback reactors on two "nexting" threads that
// share one epoll poller, and every event hands the poller from one to the
// other (a futex wake and a context switch) before its callback runs; a
// reactor's OnDone hops once more, to gRPC's executor. Measured on W1 (one
// client, one lock): 25 context switches per acquire/release cycle in
// turnstiled, 2/3 of them in that hand-off, and 68 % of its futex calls.
// With the completion-queue API one thread polls and runs every read,
// write and end of every call itself: an incoming message costs one
// wake-up. (Any callback service in the process, gRPC's default health
// service included, would bring the two threads back: grpc.health.v1 is
// served here too, see HealthService.)
//
// The classes mirror the callback reactors' shape (StartRead/StartWrite/
// Finish; OnReadDone/OnWriteDone/OnCancel/OnDone), so the service reads the
// same. Threading: every On* runs on the queue's thread, one at a time.
// StartWrite, StartWriteAndFinish, Finish and StartRead may be called from
// any thread (the engine's session threads write events), at most one read
// and one write in flight, as gRPC requires; nothing may be started after
// Finish but the read that OnReadDone may still start.
#ifndef TURNSTILE_SERVER_RPC_ASYNC_RPC_H_
#define TURNSTILE_SERVER_RPC_ASYNC_RPC_H_

#include <pthread.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace turnstile {
namespace rpc {

// A completion-queue tag: a function and its object (no allocation per op).
struct Tag {
  void (*run)(void* self, bool ok) = nullptr;
  void* self = nullptr;
};
template <typename T, void (T::*F)(bool)>
Tag MakeTag(T* t) {
  return Tag{[](void* self, bool ok) { (static_cast<T*>(self)->*F)(ok); }, t};
}

// True on a queue's thread once CqThread::Stop's last tag ran there: the
// queue is shut down and gRPC aborts on any op started on it, so calls
// start none (Begin and BeginFinish refuse). Ops are started on other
// threads too (the engine writes events), but by then none is: the server
// has stopped and the engine is quiesced (Replica::Stop).
inline bool& QueueClosedOnThisThread() {
  thread_local bool closed = false;
  return closed;
}

// The thread that polls the server's completion queue and completes tags.
class CqThread {
 public:
  explicit CqThread(std::unique_ptr<grpc::ServerCompletionQueue> cq) : cq_(std::move(cq)) {}
  ~CqThread() { Stop(); }
  grpc::ServerCompletionQueue* cq() { return cq_.get(); }
  void Start() {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "ts-grpc-cq");
      void* tag = nullptr;
      bool ok = false;
      while (cq_->Next(&tag, &ok)) {
        Tag* t = static_cast<Tag*>(tag);
        t->run(t->self, ok);
      }
    });
  }
  // After the server's Shutdown: drains what is left and joins. The queue
  // is shut down by a tag run on its own thread, so a call's tag handled
  // before it may still start ops and none handled after it does (a read
  // that completed with data during the drain would otherwise start the
  // next read on a shut-down queue). Idempotent.
  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    if (thread_.joinable()) {
      grpc::Alarm alarm;  // outlives its tag: joined below
      Tag close{[](void* self, bool) {
                  QueueClosedOnThisThread() = true;
                  static_cast<CqThread*>(self)->cq_->Shutdown();
                },
                this};
      alarm.Set(cq_.get(), gpr_now(GPR_CLOCK_MONOTONIC), &close);
      thread_.join();
    } else {
      QueueClosedOnThisThread() = true;
      cq_->Shutdown();
      void* tag = nullptr;
      bool ok = false;
      while (cq_->Next(&tag, &ok)) {
        Tag* t = static_cast<Tag*>(tag);
        t->run(t->self, ok);
      }
      QueueClosedOnThisThread() = false;  // this thread goes on (another queue)
    }
  }

 private:
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::thread thread_;
  bool stopped_ = false;
};

// Counts a call's operations in flight and tells when the call is over:
// gRPC said it is done (AsyncNotifyWhenDone), the status was sent (or
// failed to go), and no read or write is pending. Then nothing more starts.
class OpCount {
 public:
  // Before starting an op; false once the call is over (do not start it).
  bool Begin() ABSL_LOCKS_EXCLUDED(mu_) {
    if (QueueClosedOnThisThread()) return false;
    absl::MutexLock l(&mu_);
    if (over_) return false;
    ++pending_;
    return true;
  }
  // Before the finish; false once the queue is closed (do not start it).
  bool BeginFinish() ABSL_LOCKS_EXCLUDED(mu_) {
    if (QueueClosedOnThisThread()) return false;
    absl::MutexLock l(&mu_);
    ++pending_;
    finish_started_ = true;
    return true;
  }
  // After an op's tag came back (or failed to start); true when the call
  // is now over (call OnDone once).
  bool End(bool done_seen = false) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    --pending_;
    if (done_seen) done_ = true;
    if (!over_ && done_ && finish_started_ && pending_ == 0) {
      over_ = true;
      return true;
    }
    return false;
  }

 private:
  absl::Mutex mu_;  // a leaf
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_started_ ABSL_GUARDED_BY(mu_) = false;
  bool over_ ABSL_GUARDED_BY(mu_) = false;
};

// What every streaming call shares: its context, its operations in flight,
// the ownership of itself (`self_` from Await until OnDone returns, or the
// server shuts down before a call arrives), and the start/finish/done tags.
class StreamCallCore {
 public:
  virtual ~StreamCallCore() = default;
  grpc::ServerContext* context() { return &ctx_; }

 protected:
  StreamCallCore() = default;
  // A call arrived (on the queue's thread): first OnArrival, which arms
  // the next object for this method, then OnStart for this call.
  virtual void OnArrival() = 0;
  virtual void OnStart() = 0;
  // The client cancelled or the connection broke (before OnDone).
  virtual void OnCancel() {}
  // Last; nothing more is called. The default releases the object.
  virtual void OnDone() { self_.reset(); }

  // Before the call is requested; `self` owns this object.
  void Own(std::shared_ptr<StreamCallCore> self) {
    self_ = std::move(self);
    ctx_.AsyncNotifyWhenDone(&done_tag_);
  }
  // A pause on `cq` (an alarm, no thread): `over(true)` runs on the queue's
  // thread once `deadline` passed, `over(false)` soon after CancelPause.
  // One at a time, on the queue's thread. False when the call is over
  // (nothing started, `over` will not run). Its state is allocated only
  // here: almost no call ever pauses, and a call that never does carries
  // one pointer for it (W5 keeps 20,000 streams open).
  bool StartPause(grpc::ServerCompletionQueue* cq, gpr_timespec deadline,
                  std::function<void(bool fired)> over) {
    if (!ops_.Begin()) return false;
    if (pause_ == nullptr) pause_ = std::make_unique<Pause>(this);
    pause_->over = std::move(over);
    pause_->alarm.Set(cq, deadline, &pause_->tag);
    return true;
  }
  // A pause that already ended is left alone.
  void CancelPause() {
    if (pause_ != nullptr) pause_->alarm.Cancel();
  }
  void* start_tag() { return &start_tag_; }
  void* finish_tag() { return &finish_tag_; }
  // After an op's tag came back.
  void Ended() {
    if (ops_.End()) Over();
  }

  grpc::ServerContext ctx_;
  OpCount ops_;

 private:
  void Started(bool ok) {
    if (!ok) {  // the server is shutting down: no call came (nor will a done tag)
      self_.reset();
      return;
    }
    // A call that came as the queue closed: no op may start (not even
    // the next call's request); its done tag still comes, so it stays.
    if (QueueClosedOnThisThread()) return;
    OnArrival();
    ops_.Begin();  // the done tag
    OnStart();
  }
  void Finished(bool) { Ended(); }
  void PauseOver(bool fired) {
    std::function<void(bool)> over = std::move(pause_->over);
    if (over) over(fired);
    Ended();
  }
  void Done(bool) {
    if (ctx_.IsCancelled()) OnCancel();
    if (ops_.End(true)) Over();
  }
  void Over() {
    std::shared_ptr<StreamCallCore> keep = self_;  // OnDone may reset self_
    OnDone();
  }

  struct Pause {
    explicit Pause(StreamCallCore* call)
        : tag(MakeTag<StreamCallCore, &StreamCallCore::PauseOver>(call)) {}
    grpc::Alarm alarm;
    Tag tag;
    std::function<void(bool fired)> over;
  };

  std::shared_ptr<StreamCallCore> self_;
  std::unique_ptr<Pause> pause_;  // made by the first StartPause (most calls never pause)
  Tag start_tag_ = MakeTag<StreamCallCore, &StreamCallCore::Started>(this);
  Tag finish_tag_ = MakeTag<StreamCallCore, &StreamCallCore::Finished>(this);
  Tag done_tag_ = MakeTag<StreamCallCore, &StreamCallCore::Done>(this);
};

// A bidirectional stream. Derive, implement OnStart (the call arrived) and
// the rest.
template <typename Req, typename Resp>
class BidiCall : public StreamCallCore {
 public:
  using Stream = grpc::ServerAsyncReaderWriter<Resp, Req>;
  // `request` asks the service for the next call of this method, e.g.
  // service->RequestAcquire(ctx, stream, cq, cq, tag).
  using Request = std::function<void(grpc::ServerContext*, Stream*,
                                     grpc::ServerCompletionQueue*, void* tag)>;

  // Waits for the next call of this method. `self` owns this object.
  void Await(std::shared_ptr<BidiCall> self, const Request& request,
             grpc::ServerCompletionQueue* cq) {
    Own(std::move(self));
    request(&ctx_, &stream_, cq, start_tag());
  }

  void StartRead(Req* req) {
    if (!ops_.Begin()) return;
    stream_.Read(req, &read_tag_);
  }
  void StartWrite(const Resp* msg) {
    if (!ops_.Begin()) return;
    stream_.Write(*msg, &write_tag_);
  }
  void StartWriteAndFinish(const Resp* msg, grpc::WriteOptions options, const grpc::Status& s) {
    if (!ops_.BeginFinish()) return;
    stream_.WriteAndFinish(*msg, options, s, finish_tag());
  }
  void Finish(const grpc::Status& s) {
    if (!ops_.BeginFinish()) return;
    stream_.Finish(s, finish_tag());
  }

 protected:
  BidiCall() = default;
  virtual void OnReadDone(bool ok) = 0;
  virtual void OnWriteDone(bool ok) = 0;

 private:
  void ReadDone(bool ok) {
    OnReadDone(ok);
    Ended();
  }
  void WriteDone(bool ok) {
    OnWriteDone(ok);
    Ended();
  }

  Stream stream_{&ctx_};
  Tag read_tag_ = MakeTag<BidiCall, &BidiCall::ReadDone>(this);
  Tag write_tag_ = MakeTag<BidiCall, &BidiCall::WriteDone>(this);
};

// A server-streaming call: the request is read before OnStart; then writes
// (one in flight) and Finish.
template <typename Req, typename Resp>
class ServerStreamCall : public StreamCallCore {
 public:
  using Writer = grpc::ServerAsyncWriter<Resp>;
  // e.g. service->RequestObserve(ctx, req, writer, cq, cq, tag).
  using Request = std::function<void(grpc::ServerContext*, Req*, Writer*,
                                     grpc::ServerCompletionQueue*, void* tag)>;

  void Await(std::shared_ptr<ServerStreamCall> self, const Request& request,
             grpc::ServerCompletionQueue* cq) {
    Own(std::move(self));
    request(&ctx_, &req_, &writer_, cq, start_tag());
  }
  void StartWrite(const Resp* msg) {
    if (!ops_.Begin()) return;
    writer_.Write(*msg, &write_tag_);
  }
  void Finish(const grpc::Status& s) {
    if (!ops_.BeginFinish()) return;
    writer_.Finish(s, finish_tag());
  }
  const Req& request() const { return req_; }

 protected:
  ServerStreamCall() = default;
  virtual void OnWriteDone(bool ok) = 0;

 private:
  void WriteDone(bool ok) {
    OnWriteDone(ok);
    Ended();
  }

  Req req_;
  Writer writer_{&ctx_};
  Tag write_tag_ = MakeTag<ServerStreamCall, &ServerStreamCall::WriteDone>(this);
};

// A unary call: the request is read before the handler runs; Finish (from
// any thread) sends the response and status. The object goes once the
// finish tag came back AND Finish has returned: the tag may be completed on
// the queue's thread while another thread is still inside Finish.
template <typename Req, typename Resp>
class UnaryCall {
 public:
  using Responder = grpc::ServerAsyncResponseWriter<Resp>;
  using Request = std::function<void(grpc::ServerContext*, Req*, Responder*,
                                     grpc::ServerCompletionQueue*, void* tag)>;
  // Runs on the queue's thread once the request arrived; must end with
  // Finish, now or later.
  using Handler = std::function<void(UnaryCall*)>;

  static void Await(const Request& request, grpc::ServerCompletionQueue* cq, Handler handler) {
    auto* c = new UnaryCall(request, cq, std::move(handler));
    request(&c->ctx_, &c->req_, &c->responder_, cq, &c->start_tag_);
  }

  grpc::ServerContext* context() { return &ctx_; }
  const Req& request() const { return req_; }
  Resp* response() { return &resp_; }
  void Finish(const grpc::Status& s) {
    if (QueueClosedOnThisThread()) {  // no finish tag will come
      Unref();
      Unref();
      return;
    }
    if (s.ok()) {
      responder_.Finish(resp_, s, &finish_tag_);
    } else {
      responder_.FinishWithError(s, &finish_tag_);
    }
    Unref();
  }

 private:
  UnaryCall(Request request, grpc::ServerCompletionQueue* cq, Handler handler)
      : request_(std::move(request)), cq_(cq), handler_(std::move(handler)) {}
  void Started(bool ok) {
    if (!ok || QueueClosedOnThisThread()) {
      delete this;
      return;
    }
    Await(request_, cq_, handler_);  // the next call of this method
    handler_(this);
  }
  void Finished(bool) { Unref(); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  const Request request_;
  grpc::ServerCompletionQueue* const cq_;
  const Handler handler_;
  grpc::ServerContext ctx_;
  Req req_;
  Resp resp_;
  Responder responder_{&ctx_};
  std::atomic<int> refs_{2};  // Finish returned; its tag came back
  Tag start_tag_ = MakeTag<UnaryCall, &UnaryCall::Started>(this);
  Tag finish_tag_ = MakeTag<UnaryCall, &UnaryCall::Finished>(this);
};

}  // namespace rpc
}  // namespace turnstile

#endif  // TURNSTILE_SERVER_RPC_ASYNC_RPC_H_
