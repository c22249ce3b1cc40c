// AsyncStream: a gRPC client bidirectional stream on an EventLoop's
// completion queue (gRPC's completion-queue API, not its callback API: see
// event_loop.h for why).
//
// Derive, implement OnRead and OnDone, and Start the call with its first
// message. From then on the stream reads until it ends, one read at a time;
// writes are queued from any thread and go out one at a time, as gRPC
// requires, in the order queued. The call's status is asked for at the
// start (as gRPC's callback API does): OnDone comes once the status is in,
// the reads have ended, no write is in flight and no hold is left, and
// nothing is started after it.
//
// Threading: OnRead and OnDone run on the loop's thread, one at a time.
// Start, Write, Close, AddHold, RemoveHold and Cancel may be called from any
// thread by whoever keeps the object alive meanwhile: the owner's reference
// (Start's `keep`, released once OnDone returned) or, for an object that
// owns itself another way, a hold (AddHold before Start; OnDone waits for
// RemoveHold). gRPC never completes a tag inside a call made by the
// application, so operations are started under the stream's lock.
//
// Lock order: the owner's lock (if it holds one while calling in) -> mu_ ->
// the EventLoop's lock (cq()). OnRead and OnDone run without mu_.
//
// Internal to turnstile (the client library and the bench); not part of the
// public API.
#ifndef TURNSTILE_CLIENT_LIB_ASYNC_STREAM_H_
#define TURNSTILE_CLIENT_LIB_ASYNC_STREAM_H_

#include <deque>
#include <memory>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/lib/event_loop.h"

namespace turnstile::client {

template <typename Request, typename Response>
class AsyncStream {
 public:
  using Stream = grpc::ClientAsyncReaderWriter<Request, Response>;

  explicit AsyncStream(std::shared_ptr<EventLoop> loop) : loop_(std::move(loop)) {}
  virtual ~AsyncStream() = default;
  AsyncStream(const AsyncStream&) = delete;
  AsyncStream& operator=(const AsyncStream&) = delete;

  // Before Start: the call's context (deadline, metadata).
  grpc::ClientContext* context() { return &ctx_; }
  const std::shared_ptr<EventLoop>& loop() const { return loop_; }

  // Starts the call: `prepare(context(), cq)` returns it, unstarted (a
  // stub's PrepareAsync<Method>). `first` is its first message; the call's
  // headers go out with it (one packet, not two). `keep`, if any, is held
  // until OnDone returned. Once only.
  template <typename Prepare>
  void Start(Prepare&& prepare, Request first, std::shared_ptr<void> keep = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_) {
    keep_ = std::move(keep);
    ctx_.set_initial_metadata_corked(true);
    absl::MutexLock l(&mu_);
    stream_ = prepare(&ctx_, loop_->cq());
    stream_->StartCall(nullptr);  // corked: no tag comes back for it
    queue_.emplace_back(std::move(first), false);
    PumpLocked();
    // The first Read asks for the server's headers; Finish (after it, on
    // this thread) does not ask again.
    read_pending_ = true;
    stream_->Read(&response_, &read_tag_);
    finish_pending_ = true;
    stream_->Finish(&status_, &finish_tag_);
  }

  // Queues `message`; `last` half-closes the stream after it and closes the
  // writes. False (nothing queued) once the writes are closed: by `last`,
  // Close, a failed write, or the end of the reads.
  bool Write(Request message, bool last) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (closed_) return false;
    queue_.emplace_back(std::move(message), last);
    if (last) closed_ = true;
    PumpLocked();
    return true;
  }

  // No more writes (without a half-close): drops what has not started.
  // Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    closed_ = true;
    queue_.clear();
  }

  // OnDone waits until every hold is removed. AddHold before Start.
  void AddHold() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    ++holds_;
  }
  // The last one, on another thread than the loop's, posts OnDone to the
  // loop if it is due; on the loop's thread it runs it.
  void RemoveHold() ABSL_LOCKS_EXCLUDED(mu_) {
    bool over;
    {
      absl::MutexLock l(&mu_);
      --holds_;
      over = OverLocked();
    }
    if (!over) return;
    if (loop_->InLoopThread()) {
      Over();
    } else {
      loop_->Post([this] { Over(); });  // alive: nothing else ends it now
    }
  }

  void Cancel() { ctx_.TryCancel(); }

 protected:
  // A message arrived; the next read starts when this returns.
  virtual void OnRead(const Response& message) = 0;
  // Last, with the call's status; nothing more is called.
  virtual void OnDone(const grpc::Status& status) = 0;

 private:
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (in_flight_ || queue_.empty()) return;
    in_flight_ = true;
    // Serialized by the call: the queue keeps no payload (a hold may stay
    // open for hours).
    Request message = std::move(queue_.front().first);
    const bool last = queue_.front().second;
    queue_.pop_front();
    if (last) {
      stream_->WriteLast(message, grpc::WriteOptions(), &write_tag_);
    } else {
      stream_->Write(message, &write_tag_);
    }
  }
  // True once, when everything is over.
  bool OverLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (over_ || read_pending_ || in_flight_ || finish_pending_ || holds_ > 0) return false;
    over_ = true;
    return true;
  }

  void ReadDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    if (ok) {
      OnRead(response_);
      stream_->Read(&response_, &read_tag_);  // only this thread starts reads
      return;
    }
    bool over;
    {
      absl::MutexLock l(&mu_);
      read_pending_ = false;
      closed_ = true;  // the stream ended: its status is on its way
      queue_.clear();
      over = OverLocked();
    }
    if (over) Over();
  }
  void WriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    bool over;
    {
      absl::MutexLock l(&mu_);
      in_flight_ = false;
      if (!ok) {  // the stream broke; its reads end too
        closed_ = true;
        queue_.clear();
      }
      PumpLocked();
      over = OverLocked();
    }
    if (over) Over();
  }
  void FinishDone(bool) ABSL_LOCKS_EXCLUDED(mu_) {
    bool over;
    {
      absl::MutexLock l(&mu_);
      finish_pending_ = false;
      over = OverLocked();
    }
    if (over) Over();
  }
  void Over() {
    std::shared_ptr<void> keep = std::move(keep_);  // may be the last reference
    OnDone(status_);
  }

  const std::shared_ptr<EventLoop> loop_;  // first: outlives the call
  grpc::ClientContext ctx_;
  // Set by Start under mu_; the loop's thread then starts reads on it
  // without the lock (one at a time: only ReadDone starts the next).
  std::unique_ptr<Stream> stream_;
  Response response_;      // the read in flight (the loop's thread)
  grpc::Status status_;    // Finish's
  std::shared_ptr<void> keep_;
  Tag read_tag_ = MakeTag<AsyncStream, &AsyncStream::ReadDone>(this);
  Tag write_tag_ = MakeTag<AsyncStream, &AsyncStream::WriteDone>(this);
  Tag finish_tag_ = MakeTag<AsyncStream, &AsyncStream::FinishDone>(this);

  absl::Mutex mu_;
  std::deque<std::pair<Request, bool>> queue_ ABSL_GUARDED_BY(mu_);  // message, last
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;  // a write
  bool read_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // no more writes
  int holds_ ABSL_GUARDED_BY(mu_) = 0;
  bool over_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace turnstile::client

#endif  // TURNSTILE_CLIENT_LIB_ASYNC_STREAM_H_
