// Acquire streams for the bench's turnstile side: one completion-queue call
// per stream, all polled by one thread (BenchLoop), every event timestamped
// on one monotonic clock in this process, and a tracker that owns and
// cancels them. Not a public API.
#ifndef TURNSTILE_CLIENT_BENCH_ACQUIRE_CALL_H_
#define TURNSTILE_CLIENT_BENCH_ACQUIRE_CALL_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "client/bench/bench_internal.h"
#include "client/lib/async_stream.h"
#include "client/lib/event_loop.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile::bench {

using v1::AcquireEvent;
using v1::AcquireOpen;
using v1::AcquireRequest;

inline std::chrono::system_clock::time_point ToSystem(Clock::time_point t) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(t - Clock::now());
}

// A separate connection per channel (a subchannel pool of its own), so that
// "N clients" are N connections, as N client processes would be.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, int index);  // plaintext
std::shared_ptr<grpc::Channel> MakeChannel(const Endpoint& endpoint, int index);

// Waits (up to 10 s in all) until every channel is connected.
bool ConnectAll(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                const std::string& target, std::string* error);

class AcquireCall;

// Owns finished calls until the main thread reaps them; cancels live ones.
// Add/Finished may be called from any thread; Reap, CancelAll and WaitIdle
// only from the one thread that runs the workload (the only deleter), so a
// pointer taken from `live_` stays valid while that thread uses it.
class CallTracker {
 public:
  ~CallTracker() { Reap(); }
  void Add(AcquireCall* c) {
    std::lock_guard<std::mutex> l(mu_);
    live_.insert(c);
  }
  void Finished(AcquireCall* c) {
    std::lock_guard<std::mutex> l(mu_);
    live_.erase(c);
    finished_.push_back(c);
    cv_.notify_all();
  }
  void Reap();
  void CancelAll();
  // Waits until no call is live (reaping meanwhile); false at `deadline`.
  bool WaitIdle(Clock::time_point deadline) {
    for (;;) {
      Reap();
      std::unique_lock<std::mutex> l(mu_);
      if (live_.empty()) return true;
      if (Clock::now() >= deadline) return false;
      cv_.wait_for(l, Millis(50));
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_set<AcquireCall*> live_;
  std::vector<AcquireCall*> finished_;
};

// The one thread of this process that polls the completion queue of every
// turnstile Acquire stream of the bench and runs their hooks (the client
// library's SharedEventLoop). Kept to the end: a stuck slice leaks its
// calls, which stay on its queue.
const std::shared_ptr<client::EventLoop>& BenchLoop();

// One Acquire stream on BenchLoop() (gRPC's completion-queue API: its
// callback API would put two more threads and a context switch per event
// into this process, which the bench measures). Hooks run on BenchLoop's
// thread, one at a time.
class AcquireCall final : public client::AsyncStream<AcquireRequest, AcquireEvent> {
 public:
  using EventFn = std::function<void(AcquireCall*, const AcquireEvent&, Clock::time_point)>;
  using DoneFn = std::function<void(AcquireCall*, const grpc::Status&, Clock::time_point)>;

  AcquireCall(CallTracker* tracker, EventFn on_event, DoneFn on_done)
      : AsyncStream(BenchLoop()),
        tracker_(tracker),
        on_event_(std::move(on_event)),
        on_done_(std::move(on_done)) {}

  // Sends `open` and reads events until the stream ends or `deadline`. With
  // `hold`, the stream stays alive (OnDone waits) until Release() is called,
  // so Release() may be called from any thread.
  void Start(v1::LockService::Stub* stub, const AcquireOpen& open,
             Clock::time_point deadline, bool hold) {
    AcquireRequest req;
    *req.mutable_open() = open;
    context()->set_deadline(ToSystem(deadline));
    started = Clock::now();
    tracker_->Add(this);
    if (hold) {
      hold_ = true;
      AddHold();
    }
    AsyncStream::Start(
        [stub](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) {
          return stub->PrepareAsyncAcquire(ctx, cq);
        },
        std::move(req));
  }

  // Sends `release` and half-closes (after `open`). Call from this call's
  // own hooks, or (with `hold`) from anywhere, exactly once.
  void Release() {
    release_requested_at = Clock::now();
    AcquireRequest req;
    req.mutable_release();
    Write(std::move(req), /*last=*/true);
    if (hold_) {
      hold_ = false;
      RemoveHold();
    }
  }

  // Written by this call's hooks (serialized), read in on_done.
  int client = 0;
  Clock::time_point started{};
  Clock::time_point acquired_at{};
  Clock::time_point released_at{};
  Clock::time_point release_requested_at{};  // set by Release()
  bool acquired = false;
  int acquired_events = 0;  // more than one is a double grant
  bool released = false;
  bool lost = false;
  uint64_t token = 0;
  uint64_t queued_events = 0;

 private:
  void OnRead(const AcquireEvent& event) override {
    const Clock::time_point t = Clock::now();
    switch (event.type()) {
      case AcquireEvent::QUEUED:
        ++queued_events;
        break;
      case AcquireEvent::ACQUIRED:
        acquired = true;
        ++acquired_events;
        acquired_at = t;
        token = event.acquired().fencing_token();
        break;
      case AcquireEvent::RELEASED:
        released = true;
        released_at = t;
        break;
      case AcquireEvent::LOST:
        lost = true;
        break;
      default:
        break;
    }
    on_event_(this, event, t);
  }

  void OnDone(const grpc::Status& s) override {
    on_done_(this, s, Clock::now());
    tracker_->Finished(this);  // last: the tracker's thread may delete us
  }

  CallTracker* const tracker_;
  const EventFn on_event_;
  const DoneFn on_done_;
  bool hold_ = false;  // the thread that calls Release
};

// Why a stream on `lock` ended without a clean grant and release.
std::string DescribeFailure(const std::string& lock, const AcquireCall& c,
                            const grpc::Status& s);

}  // namespace turnstile::bench

#endif  // TURNSTILE_CLIENT_BENCH_ACQUIRE_CALL_H_
