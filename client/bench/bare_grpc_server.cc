// turnstile-bare-server: what an idle Acquire stream costs gRPC alone, as a
// baseline for the bench's W5 (issue 20, must-show 4). It serves
// turnstile.v1.LockService's Acquire with no engine and no ZooKeeper: each
// stream's first message is read, one QUEUED event is sent (what W5 waits
// for before counting a stream as waiting), and the stream then sits idle
// with one pending Read until the client half-closes or goes away; then it
// is finished. The other methods are not served.
//
// With --grant it is instead W1's and W3's gRPC baseline: each stream's open
// request is answered at once with ACQUIRED (a fencing token counted per
// server), a `release` message with RELEASED, and the stream is then
// finished with OK: an acquire+release cycle as the bench's clients run it,
// with no lock behind it. What it costs per cycle is gRPC's part of what
// turnstiled costs.
//
//   turnstile-bare-server [--listen 127.0.0.1:0] [--grant]
//
// Prints "listening on PORT" on stdout once it serves. SIGTERM or SIGINT
// stops it: open streams are cancelled (after at most 1 s), exit status 0.
//
// The asynchronous completion-queue API, one queue and one thread calling
// Next: the least gRPC a server can run per call, so that turnstiled's RSS
// over this one's is what turnstile adds to gRPC's own cost per stream.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "turnstile/v1/lock.grpc.pb.h"

namespace {

using turnstile::v1::AcquireEvent;
using turnstile::v1::AcquireRequest;
using turnstile::v1::LockService;

// The queue and the server's state, shared by the calls. Ops are started
// only on the queue's thread, under `mu`, and never after the queue is shut
// down (the main thread shuts it down under `mu`).
struct Shared {
  LockService::AsyncService service;
  std::unique_ptr<grpc::ServerCompletionQueue> cq;
  std::mutex mu;
  bool cq_shut_down = false;  // GUARDED_BY(mu)
  AcquireEvent queued;        // the one event every stream gets (idle mode)
  bool grant = false;         // --grant: ACQUIRED at once, RELEASED on release
  uint64_t next_token = 1;    // GUARDED_BY(mu)
};

// One Acquire stream, from its accept to its end; deletes itself once no op
// of it is pending. Runs only on the queue's thread.
class AcquireStream {
 public:
  // Requests the next incoming Acquire call.
  static void Accept(Shared* shared) {
    auto* s = new AcquireStream(shared);
    std::lock_guard<std::mutex> l(shared->mu);
    if (shared->cq_shut_down) {
      delete s;
      return;
    }
    s->pending_ = 1;
    shared->service.RequestAcquire(&s->ctx_, &s->stream_, shared->cq.get(), shared->cq.get(),
                                   &s->accept_);
  }

  // The completion queue's tag: which op of which stream completed.
  struct Tag {
    enum Op { kAccept, kRead, kWrite, kFinish };
    AcquireStream* stream;
    Op op;
  };

  void OnDone(Tag::Op op, bool ok) {
    --pending_;
    switch (op) {
      case Tag::kAccept:
        if (!ok) break;  // the server is shutting down
        Accept(shared_);  // the next call
        Start([this] { stream_.Read(&request_, &read_); });
        break;
      case Tag::kRead:
        if (!ok) {  // half-closed, cancelled or broken: end the stream
          read_ended_ = true;
          if (!writing_ && !release_pending_ && !finished_) {
            finished_ = true;
            FinishStream();
          }
          break;
        }
        if (!answered_) {  // the open request: one QUEUED (or ACQUIRED) event
          answered_ = true;
          if (shared_->grant) {
            event_.set_type(AcquireEvent::ACQUIRED);
            event_.mutable_acquired()->set_lease_id("bare");
            {
              std::lock_guard<std::mutex> l(shared_->mu);
              event_.mutable_acquired()->set_fencing_token(shared_->next_token++);
            }
            writing_ = Start([this] { stream_.Write(event_, &write_); });
          } else {
            writing_ = Start([this] { stream_.Write(shared_->queued, &write_); });
          }
        } else if (shared_->grant && request_.has_release() && !released_) {
          released_ = true;
          release_pending_ = true;  // RELEASED once the ACQUIRED write is done
          if (!writing_) WriteReleased();
        }
        Start([this] { stream_.Read(&request_, &read_); });
        break;
      case Tag::kWrite:
        writing_ = false;
        if (release_pending_) {
          WriteReleased();
        } else if (read_ended_ && !finished_) {  // the client half-closed after its release
          finished_ = true;
          FinishStream();
        }
        break;
      case Tag::kFinish:
        break;
    }
    if (pending_ == 0) delete this;
  }

 private:
  explicit AcquireStream(Shared* shared) : shared_(shared), stream_(&ctx_) {}

  // Starts one op unless the queue is shut down; whether it started.
  template <typename F>
  bool Start(F&& op) {
    std::lock_guard<std::mutex> l(shared_->mu);
    if (shared_->cq_shut_down) return false;
    ++pending_;
    op();
    return true;
  }

  void WriteReleased() {
    release_pending_ = false;
    event_.Clear();
    event_.set_type(AcquireEvent::RELEASED);
    writing_ = Start([this] { stream_.Write(event_, &write_); });
  }

  void FinishStream() {
    Start([this] { stream_.Finish(grpc::Status::OK, &finish_); });
  }

  Shared* const shared_;
  grpc::ServerContext ctx_;
  grpc::ServerAsyncReaderWriter<AcquireEvent, AcquireRequest> stream_;
  AcquireRequest request_;
  AcquireEvent event_;  // --grant: the event being written
  int pending_ = 0;  // ops started and not completed
  bool answered_ = false;
  bool writing_ = false;
  bool read_ended_ = false;
  bool released_ = false;         // --grant: the release message came
  bool release_pending_ = false;  // --grant: RELEASED still to be written
  bool finished_ = false;         // Finish started
  Tag accept_{this, Tag::kAccept};
  Tag read_{this, Tag::kRead};
  Tag write_{this, Tag::kWrite};
  Tag finish_{this, Tag::kFinish};
};

int Usage() {
  std::fprintf(stderr,
               "usage: turnstile-bare-server [--listen HOST:PORT] [--grant]  (default "
               "127.0.0.1:0)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0";
  bool grant = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--listen" && i + 1 < argc) {
      listen = argv[++i];
    } else if (arg.rfind("--listen=", 0) == 0) {
      listen = arg.substr(9);
    } else if (arg == "--grant") {
      grant = true;
    } else {
      return Usage();
    }
  }

  // Every thread (gRPC's included, started below) inherits the mask: only
  // sigwait sees these signals.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  Shared shared;
  shared.grant = grant;
  shared.queued.set_type(AcquireEvent::QUEUED);
  shared.queued.mutable_queued()->set_position(1);
  shared.queued.mutable_queued()->set_ahead(1);
  grpc::ServerBuilder builder;
  int port = 0;
  // As turnstiled: a second server on the same port fails instead of sharing it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&shared.service);
  shared.cq = builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "turnstile-bare-server: cannot listen on %s\n", listen.c_str());
    return 1;
  }

  AcquireStream::Accept(&shared);
  std::thread loop([&shared] {
    void* tag = nullptr;
    bool ok = false;
    while (shared.cq->Next(&tag, &ok)) {
      auto* t = static_cast<AcquireStream::Tag*>(tag);
      t->stream->OnDone(t->op, ok);
    }
  });
  std::printf("listening on %d\n", port);
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop, &sig);
  // Streams still open get 1 s, then are cancelled; the queue's thread
  // finishes what is left and exits once the queue is drained.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  {
    std::lock_guard<std::mutex> l(shared.mu);
    shared.cq_shut_down = true;
    shared.cq->Shutdown();
  }
  loop.join();
  return 0;
}
