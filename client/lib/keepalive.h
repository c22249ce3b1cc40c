// KeepAlive: the renewal of a Client's TTL leases. Internal to the client
// library.
//
// KeepAliver renews TTL leases over one KeepAlive stream per Client: each
// lease id is sent every ttl/3, on the Client's EventLoop; the stream's
// answers (renewed until, or NOT_FOUND = the lease is gone) are applied from
// its reactions. A broken stream is replaced at the next renewal, a stuck
// one (an answer overdue by a whole TTL) at once.
//
// KeepAliveStream is one KeepAlive stream. It keeps itself alive from Start
// until OnDone; its KeepAliver is reached through a weak_ptr, so a Client
// gone meanwhile is simply not told.
//
// Threads and locks: Add, Remove and Shutdown come from any thread (a
// Client's Acquire, a Lock's Release, the Client's destructor); Renew,
// OnResponse and OnStreamDone run on the EventLoop's thread. Lock order:
// KeepAliver::mu_ -> Streams::mu and the stream's AsyncStream lock -> the
// EventLoop's lock (hold_core.h has the library's whole order). mu_ is not
// held while a HoldCore is told of a renewal or a loss.
// KeepAliveStream's send times have no lock: only the EventLoop's thread
// touches them (Start and Send are called from Renew, a loop timer; the
// answers are read there too).
#ifndef TURNSTILE_CLIENT_LIB_KEEPALIVE_H_
#define TURNSTILE_CLIENT_LIB_KEEPALIVE_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/lib/async_stream.h"
#include "client/lib/client.h"
#include "client/lib/event_loop.h"
#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile::client::internal {

class HoldCore;
class KeepAliveStream;

class KeepAliver : public std::enable_shared_from_this<KeepAliver> {
 public:
  using Clock = EventLoop::Clock;

  KeepAliver(std::shared_ptr<v1::LockService::Stub> stub, std::shared_ptr<EventLoop> loop)
      : stub_(std::move(stub)), loop_(std::move(loop)) {}

  void Add(const std::string& lease_id, Millis ttl, std::weak_ptr<HoldCore> core)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(const std::string& lease_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops renewing and cancels the stream. Off the loop's thread, waits
  // (at most 5 s) until every stream it started has ended and let go of
  // the loop, so that the loop's last user (the Client being destroyed,
  // when it is) joins the loop's thread rather than leaving it to end on
  // its own. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // From a KeepAliveStream's events (on the loop). `sent`: when the
  // answered request went out.
  void OnResponse(const v1::KeepAliveResponse& resp, Clock::time_point sent)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnStreamDone(const KeepAliveStream* stream) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    Millis interval;
    Millis ttl;
    Clock::time_point next_due;
    std::weak_ptr<HoldCore> core;
  };

  // Streams started and not yet ended. Not part of the KeepAliver, which
  // the last of them must not keep (nor, through it, the loop).
  struct Streams {
    absl::Mutex mu;
    absl::CondVar cv;  // on every change of live
    int live ABSL_GUARDED_BY(mu) = 0;
  };

  // On the EventLoop: sends what is due, re-arms for the next renewal.
  void Renew(uint64_t generation) ABSL_LOCKS_EXCLUDED(mu_);
  void ArmLocked(Clock::time_point when) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<v1::LockService::Stub> stub_;
  const std::shared_ptr<EventLoop> loop_;
  const std::shared_ptr<Streams> streams_ = std::make_shared<Streams>();
  absl::Mutex mu_;
  std::map<std::string, Entry> leases_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  TimerSlot timer_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<KeepAliveStream> stream_ ABSL_GUARDED_BY(mu_);
};

class KeepAliveStream final
    : public AsyncStream<v1::KeepAliveRequest, v1::KeepAliveResponse>,
      public std::enable_shared_from_this<KeepAliveStream> {
 public:
  using Clock = EventLoop::Clock;

  KeepAliveStream(std::weak_ptr<KeepAliver> owner, std::shared_ptr<EventLoop> loop)
      : AsyncStream(std::move(loop)), owner_(std::move(owner)) {}

  // Opens the stream with its first request. On the loop's thread.
  void Start(v1::LockService::Stub& stub, v1::KeepAliveRequest first);
  // False: the stream ended (or is ending) and sends nothing more. On the
  // loop's thread.
  bool Send(v1::KeepAliveRequest req);
  // When the oldest request still unanswered went out. On the loop's
  // thread.
  std::optional<Clock::time_point> OldestUnanswered() const;

 private:
  void NoteSent();
  void OnRead(const v1::KeepAliveResponse& response) override;
  void OnDone(const grpc::Status&) override;
  // Debug builds: the caller is on the loop's thread, which owns sent_.
  void AssertOnLoop() const;

  const std::weak_ptr<KeepAliver> owner_;
  // Send times of the requests not yet answered, oldest first. Owned by
  // the loop's thread (no lock; see the top).
  std::deque<Clock::time_point> sent_;
};

}  // namespace turnstile::client::internal

#endif  // TURNSTILE_CLIENT_LIB_KEEPALIVE_H_
