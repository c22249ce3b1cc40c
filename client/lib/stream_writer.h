// StreamWriter: writes to a gRPC client bidi stream (callback API) from any
// thread, one message at a time as gRPC requires, in the order queued.
//
// Writes started outside the stream's reactions need a hold on the stream
// (gRPC's AddHold) so OnDone cannot come between the check that the stream is
// open and the write. The writer holds the stream from Begin until it is
// closed (a last message, or Close) and everything queued has started; the
// write in flight then keeps the stream by itself.
//
// gRPC never runs a reaction inside a call made by the application (its
// callback tags are not inlinable, and a hold removed from outside a reaction
// schedules OnDone elsewhere), so writes are started under the writer's lock.
//
// Thread-safe. REQUIRES: a caller outside the stream's reactions keeps the
// reactor alive for the duration of the call.
//
// Internal to client/lib; not part of the public API.
#ifndef TURNSTILE_CLIENT_LIB_STREAM_WRITER_H_
#define TURNSTILE_CLIENT_LIB_STREAM_WRITER_H_

#include <deque>
#include <mutex>
#include <utility>

#include <grpcpp/support/client_callback.h>

namespace turnstile::client {

template <typename Request, typename Response>
class StreamWriter {
 public:
  explicit StreamWriter(grpc::ClientBidiReactor<Request, Response>* stream) : stream_(stream) {}
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  // REQUIRES: after the stub bound the reactor, before StartCall.
  void Begin() {
    std::lock_guard<std::mutex> l(mu_);
    stream_->AddHold();
    held_ = true;
  }

  // Queues `message`; `last` half-closes the stream after it and closes the
  // writer. False (nothing queued) once the writer is closed.
  bool Write(Request message, bool last) {
    bool release;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (closed_) return false;
      queue_.emplace_back(std::move(message), last);
      if (last) closed_ = true;
      PumpLocked();
      release = ReleaseHoldLocked();
    }
    if (release) stream_->RemoveHold();
    return true;
  }

  // From the stream's OnWriteDone.
  void OnWriteDone(bool ok) {
    bool release;
    {
      std::lock_guard<std::mutex> l(mu_);
      in_flight_ = false;
      current_ = Request();  // a hold may stay open for hours: drop the sent payload
      if (!ok) queue_.clear();  // the stream broke; its reads end too
      PumpLocked();
      release = ReleaseHoldLocked();
    }
    if (release) stream_->RemoveHold();
  }

  // No more writes (the reads ended, or the stream is abandoned): drops what
  // has not started and lets OnDone come. Idempotent.
  void Close() {
    bool release;
    {
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
      queue_.clear();
      release = ReleaseHoldLocked();
    }
    if (release) stream_->RemoveHold();
  }

 private:
  void PumpLocked() {
    if (in_flight_ || queue_.empty()) return;
    in_flight_ = true;
    current_ = std::move(queue_.front().first);
    const bool last = queue_.front().second;
    queue_.pop_front();
    if (last) {
      stream_->StartWriteLast(&current_, grpc::WriteOptions());
    } else {
      stream_->StartWrite(&current_);
    }
  }
  bool ReleaseHoldLocked() {
    if (!held_ || !closed_ || !queue_.empty()) return false;
    held_ = false;
    return true;
  }

  grpc::ClientBidiReactor<Request, Response>* const stream_;
  std::mutex mu_;
  std::deque<std::pair<Request, bool>> queue_;  // GUARDED_BY(mu_) message, last
  Request current_;                             // GUARDED_BY(mu_) in flight
  bool in_flight_ = false;                      // GUARDED_BY(mu_)
  bool closed_ = false;                         // GUARDED_BY(mu_)
  bool held_ = false;                           // GUARDED_BY(mu_)
};

}  // namespace turnstile::client

#endif  // TURNSTILE_CLIENT_LIB_STREAM_WRITER_H_
