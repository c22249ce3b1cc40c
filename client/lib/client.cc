// turnstile C++ client library: see client.h.
//
// Structure
//   Client::Impl     the channel and stub, the reentrancy Registry, the
//                    KeepAliver and the EventLoop (the process's one
//                    library thread, shared by every Client).
//   HoldCore         one Acquire stream = one server-side contender: an
//                    AsyncStream (completion-queue API) that owns the hold's
//                    state and keeps itself alive until OnDone. Reentrant
//                    handles of one hold share one HoldCore.
//   KeepAliver       renews the Client's TTL leases over one KeepAliveStream
//                    (an AsyncStream) at a time.
//   Lock::Hold       one handle (one Lock object's share of a HoldCore).
//
// Threads
//   - A hold costs no thread. One EventLoop thread per process (shared by
//     every Client: more pollers would hand gRPC's poller to each other on
//     every event, event_loop.h) polls the completion queue of all streams
//     (async_stream.h): stream events only update state and queue work
//     there, never wait and never run user code. The same thread runs every
//     timer (each hold's careful-client watchdog, the KeepAlive schedules)
//     and delivers on_change and on_revoke, never under an internal lock.
//     Notifications of one hold are queued and delivered in order. No gRPC
//     callback API anywhere: it would bring gRPC's two "nexting" threads
//     into the process, and a context switch between them on every event.
//   - Acquire opens the stream on the caller's thread, waits for the grant
//     on a condition variable (bounded), and calls on_queued on the caller's
//     thread, so every on_queued call happens before Acquire returns.
//     Release writes on the caller's thread too; other calls (Release and
//     Revoke by lease id) are blocking unary calls.
//
// Release (the last handle of a hold):
//   - held / suspended: sends `release` and half-closes, waits (at most 10 s)
//     for the stream to end (RELEASED first) and for the notifications to be
//     delivered. OK if RELEASED (or LOST) arrived; the stream's status if it
//     broke instead; DEADLINE_EXCEEDED after 10 s, when the stream is
//     cancelled (a cancel releases too).
//   - already lost (or ended): OK without contacting the server; a stream
//     still open (lease found gone by KeepAlive) is cancelled.
//   - called on the EventLoop thread (from inside on_change or on_revoke):
//     sends the release and returns OK without waiting (what it would wait
//     for runs on this very thread); the stream is still cancelled if it has
//     not ended 10 s later.
//   Idempotent: a second Release of a handle returns OK without a server
//   call; off the EventLoop thread it first waits (bounded) for what a first
//   Release made on the EventLoop did not wait for, so that once a Release or
//   the Lock's destructor returns off the loop, no callback of the handle
//   runs again (an object its callbacks point to may then be destroyed).
//   Non-last reentrant handles: Release only counts down (OK, no server call)
//   and that handle's on_change gets kReleased.
#include "client/lib/client.h"

#include "client/lib/async_stream.h"
#include "client/lib/careful.h"
#include "client/lib/coordination.h"  // AbandonWaits, WaitsAbandoned
#include "client/lib/event_loop.h"
#include "client/lib/tls.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "turnstile/v1/lock.grpc.pb.h"

namespace turnstile::client {

const char* LockStateName(LockState s) {
  switch (s) {
    case LockState::kHeld: return "HELD";
    case LockState::kSuspended: return "SUSPENDED";
    case LockState::kLost: return "LOST";
    case LockState::kReleased: return "RELEASED";
  }
  return "UNKNOWN";
}

namespace {

namespace v1 = ::turnstile::v1;
using Clock = EventLoop::Clock;
using Callback = std::function<void(const LockStatus&)>;
using RevokeCallback = std::function<void(const std::string&, const std::string&)>;

// How long Release waits for RELEASED and the end of the stream.
constexpr Millis kReleaseTimeout{10000};
// Acquire gives the server this long beyond wait_timeout to answer before
// it cancels the stream itself.
constexpr Millis kAcquireSlack{30000};
// Deadline of unary calls (Release by lease id).
constexpr Millis kUnaryTimeout{10000};
// Longest wait_timeout used for the client-side deadline (the server's
// maximum is far below).
constexpr Millis kMaxWaitForDeadline{100LL * 24 * 3600 * 1000};
// KeepAlive requests carry at most this many lease ids (the server's limit).
constexpr size_t kMaxLeasesPerKeepAlive = 100;

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

void SetDuration(Millis d, google::protobuf::Duration* out) {
  out->set_seconds(d.count() / 1000);
  out->set_nanos(static_cast<int32_t>((d.count() % 1000) * 1000000));
}

// Clamped to about 34 years, so adding it to a time point cannot overflow.
Millis FromDuration(const google::protobuf::Duration& d) {
  constexpr int64_t kMaxSeconds = int64_t{1} << 30;
  int64_t s = std::max(-kMaxSeconds, std::min(kMaxSeconds, d.seconds()));
  return Millis(s * 1000 + d.nanos() / 1000000);
}

Millis Left(Clock::time_point deadline, Clock::time_point now) {
  if (deadline <= now) return Millis(0);
  return std::chrono::duration_cast<Millis>(deadline - now);
}

class HoldCore;
class KeepAliveStream;

// AbandonWaits: the process's waits for a grant (HoldCore::Start calls in
// progress), so that they can all be abandoned at once, and whether they
// were. Lock order: ProcessWaits().mu before a HoldCore's mu_.
struct Waits {
  std::mutex mu;
  bool abandoned = false;              // GUARDED_BY(mu) for good
  std::vector<HoldCore*> waiting;      // GUARDED_BY(mu) each alive while listed
};
Waits& ProcessWaits() {
  static Waits* waits = new Waits;  // never destroyed: used until the process ends
  return *waits;
}

// Reentrancy: (name, owner) -> the hold this Client has under that owner.
class Registry {
 public:
  std::shared_ptr<HoldCore> Find(const std::string& key) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = holds_.find(key);
    if (it == holds_.end()) return nullptr;
    return it->second.lock();
  }
  void Put(const std::string& key, const std::shared_ptr<HoldCore>& core) {
    std::lock_guard<std::mutex> l(mu_);
    holds_[key] = core;
  }
  void Forget(const std::string& key, const HoldCore* core) {
    std::shared_ptr<HoldCore> found;  // dropped after the lock
    std::lock_guard<std::mutex> l(mu_);
    auto it = holds_.find(key);
    if (it == holds_.end()) return;
    found = it->second.lock();
    if (!found || found.get() == core) holds_.erase(it);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::weak_ptr<HoldCore>> holds_;  // GUARDED_BY(mu_)
};

// Renews TTL leases over one KeepAlive stream per Client: each lease id is
// sent every ttl/3, on the Client's EventLoop; the stream's answers (renewed
// until, or NOT_FOUND = the lease is gone) are applied from its reactions. A
// broken stream is replaced at the next renewal, a stuck one (an answer
// overdue by a whole TTL) at once.
class KeepAliver : public std::enable_shared_from_this<KeepAliver> {
 public:
  KeepAliver(std::shared_ptr<v1::LockService::Stub> stub, std::shared_ptr<EventLoop> loop)
      : stub_(std::move(stub)), loop_(std::move(loop)) {}

  void Add(const std::string& lease_id, Millis ttl, std::weak_ptr<HoldCore> core);
  void Remove(const std::string& lease_id);
  // Stops renewing and cancels the stream. Off the loop's thread, waits
  // (at most 5 s) until every stream it started has ended and let go of
  // the loop, so that the loop's last user (the Client being destroyed,
  // when it is) joins the loop's thread rather than leaving it to end on
  // its own. Idempotent.
  void Shutdown();

  // From a KeepAliveStream's events (on the loop). `sent`: when the
  // answered request went out.
  void OnResponse(const v1::KeepAliveResponse& resp, Clock::time_point sent);
  void OnStreamDone(const KeepAliveStream* stream);

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
    std::mutex mu;
    std::condition_variable cv;
    int live = 0;  // GUARDED_BY(mu)
  };

  // On the EventLoop: sends what is due, re-arms for the next renewal.
  void Renew(uint64_t generation);
  void ArmLocked(Clock::time_point when);

  const std::shared_ptr<v1::LockService::Stub> stub_;
  const std::shared_ptr<EventLoop> loop_;
  const std::shared_ptr<Streams> streams_ = std::make_shared<Streams>();
  std::mutex mu_;
  std::map<std::string, Entry> leases_;     // GUARDED_BY(mu_)
  bool stop_ = false;                       // GUARDED_BY(mu_)
  TimerSlot timer_;                         // GUARDED_BY(mu_)
  std::shared_ptr<KeepAliveStream> stream_; // GUARDED_BY(mu_)
};

// One KeepAlive stream. Keeps itself alive from Start until OnDone; its
// KeepAliver is reached through a weak_ptr, so a Client gone meanwhile is
// simply not told.
class KeepAliveStream final
    : public AsyncStream<v1::KeepAliveRequest, v1::KeepAliveResponse>,
      public std::enable_shared_from_this<KeepAliveStream> {
 public:
  KeepAliveStream(std::weak_ptr<KeepAliver> owner, std::shared_ptr<EventLoop> loop)
      : AsyncStream(std::move(loop)), owner_(std::move(owner)) {}

  // Opens the stream with its first request.
  void Start(v1::LockService::Stub& stub, v1::KeepAliveRequest first) {
    NoteSent();
    AsyncStream::Start(
        [&stub](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) {
          return stub.PrepareAsyncKeepAlive(ctx, cq);
        },
        std::move(first), shared_from_this());
  }
  // False: the stream ended (or is ending) and sends nothing more.
  bool Send(v1::KeepAliveRequest req) {
    NoteSent();
    return Write(std::move(req), /*last=*/false);
  }
  // When the oldest request still unanswered went out.
  std::optional<Clock::time_point> OldestUnanswered() const {
    std::lock_guard<std::mutex> l(mu_);
    if (sent_.empty()) return std::nullopt;
    return sent_.front();
  }

 private:
  void NoteSent() {
    std::lock_guard<std::mutex> l(mu_);
    sent_.push_back(Clock::now());
  }
  void OnRead(const v1::KeepAliveResponse& response) override {
    Clock::time_point sent = Clock::now();
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!sent_.empty()) {
        sent = sent_.front();
        sent_.pop_front();
      }
    }
    if (auto owner = owner_.lock()) owner->OnResponse(response, sent);
  }
  void OnDone(const grpc::Status&) override {
    if (auto owner = owner_.lock()) owner->OnStreamDone(this);
  }

  const std::weak_ptr<KeepAliver> owner_;
  mutable std::mutex mu_;
  std::deque<Clock::time_point> sent_;      // GUARDED_BY(mu_) send times, unanswered
};

// One Acquire stream and the state of the hold it represents. It keeps
// itself alive from Start until OnDone, whoever else holds it; timers reach
// it through weak_ptrs, so a finished, released hold is not kept by its
// watchdog.
class HoldCore final : public AsyncStream<v1::AcquireRequest, v1::AcquireEvent>,
                       public std::enable_shared_from_this<HoldCore> {
 public:
  HoldCore(std::shared_ptr<v1::LockService::Stub> stub, std::shared_ptr<EventLoop> loop,
           std::shared_ptr<KeepAliver> ka, std::shared_ptr<Registry> registry, std::string name,
           std::string registry_key, Millis ttl, Callback first_on_change,
           RevokeCallback on_revoke = nullptr)
      : AsyncStream(std::move(loop)),
        stub_(std::move(stub)),
        ka_(std::move(ka)),
        registry_(std::move(registry)),
        name_(std::move(name)),
        registry_key_(std::move(registry_key)),
        ttl_(ttl),
        on_revoke_(std::move(on_revoke)) {
    live_handles_ = 1;  // handle 0, returned by Acquire
    next_handle_id_ = 1;
    if (first_on_change) subscribers_[0] = std::move(first_on_change);
  }

  // Opens the stream and waits for the grant. OK = granted (the state may
  // already have moved on, e.g. to kLost).
  absl::Status Start(const v1::AcquireOpen& open, Millis wait_timeout,
                     const std::function<void(int64_t)>& on_queued) {
    v1::AcquireRequest req;
    *req.mutable_open() = open;
    AsyncStream::Start(
        [this](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) {
          return stub_->PrepareAsyncAcquire(ctx, cq);
        },
        std::move(req), shared_from_this());
    // Listed while waiting, for AbandonWaits (already called: abandoned now).
    bool abandon_now = false;
    {
      Waits& w = ProcessWaits();
      std::lock_guard<std::mutex> wl(w.mu);
      abandon_now = w.abandoned;
      if (!abandon_now) w.waiting.push_back(this);
    }
    if (abandon_now) AbandonIfWaiting();
    struct Unlist {
      HoldCore* core;
      ~Unlist() {
        Waits& w = ProcessWaits();
        std::lock_guard<std::mutex> wl(w.mu);
        w.waiting.erase(std::remove(w.waiting.begin(), w.waiting.end(), core), w.waiting.end());
      }
    } unlist{this};

    std::unique_lock<std::mutex> l(mu_);
    Millis wait = std::max(Millis(0), std::min(wait_timeout, kMaxWaitForDeadline));
    const Clock::time_point deadline = Clock::now() + wait + kAcquireSlack;
    bool timed_out = false;
    for (;;) {
      while (!queued_.empty()) {
        int64_t position = queued_.front();
        queued_.pop_front();
        if (on_queued) {
          l.unlock();
          on_queued(position);
          l.lock();
        }
      }
      if (phase_ != Phase::kWaiting) break;
      if (!cv_.wait_until(l, deadline,
                          [&] { return phase_ != Phase::kWaiting || !queued_.empty(); })) {
        timed_out = true;
        break;
      }
    }
    if (timed_out) {
      l.unlock();
      Cancel();
      return absl::DeadlineExceededError(
          "turnstile client: no answer from the server within wait_timeout + " +
          std::to_string(kAcquireSlack.count()) + "ms; the wait was cancelled");
    }
    if (phase_ == Phase::kFailed) {
      if (abandoned_) {
        return absl::CancelledError(
            "the wait was abandoned (AbandonWaits); the replica deletes the waiting node");
      }
      if (end_status_.ok()) {
        return absl::UnknownError("the Acquire stream ended without ACQUIRED and without an error");
      }
      return FromGrpc(end_status_);
    }
    return absl::OkStatus();
  }

  // AbandonWaits: a stream still waiting for its grant is cancelled (a live
  // replica deletes the waiting node at once); Start then returns
  // CANCELLED. A hold already granted is left alone.
  void AbandonIfWaiting() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (phase_ != Phase::kWaiting) return;
      abandoned_ = true;
    }
    Cancel();
  }

  // Another handle for a reentrant acquire; -1 if this hold cannot be shared
  // any more (released, releasing or lost).
  int TryAddHandle(Callback on_change) {
    std::lock_guard<std::mutex> l(mu_);
    if (releasing_ || live_handles_ == 0 ||
        (phase_ != Phase::kHeld && phase_ != Phase::kSuspended)) {
      return -1;
    }
    int id = next_handle_id_++;
    ++live_handles_;
    if (on_change) subscribers_[id] = std::move(on_change);
    return id;
  }

  // Releases handle `id`; the hold itself when it is the last. `*final`
  // receives the status the handle reports from now on.
  absl::Status ReleaseHandle(int id, LockStatus* final) {
    // On the EventLoop thread nothing may wait: what Release waits for (the
    // delivery of RELEASED, the timers) runs on that very thread.
    const bool may_wait = !loop()->InLoopThread();
    std::unique_lock<std::mutex> l(mu_);
    --live_handles_;
    if (live_handles_ > 0) {
      // Not the last handle: count down only.
      auto it = subscribers_.find(id);
      LockStatus st;
      st.state = LockState::kReleased;
      st.valid_for = Millis(0);
      st.message = "this handle was released; " + std::to_string(live_handles_) +
                   " other handle(s) still hold the lock";
      if (phase_ == Phase::kLost) st = StatusLocked(Clock::now());
      *final = st;
      if (it != subscribers_.end()) {
        Callback cb = std::move(it->second);
        subscribers_.erase(it);
        QueueLocked([st, cb = std::move(cb)] { cb(st); });
        if (may_wait) AwaitDeliveredLocked(l);
      }
      return absl::OkStatus();
    }

    releasing_ = true;
    absl::Status result = absl::OkStatus();
    bool cancel = false;
    const bool held = phase_ == Phase::kHeld || phase_ == Phase::kSuspended;
    if (!held || ended_) {
      // Lost (or the stream is gone): nothing to tell the server. A stream
      // still open (KeepAlive found the lease gone first) is cancelled.
      cancel = !ended_;
    } else {
      l.unlock();
      v1::AcquireRequest req;
      req.mutable_release();
      // Refused only once the reads ended: the end is then on its way.
      Write(std::move(req), /*last=*/true);
      l.lock();
      if (may_wait) {
        if (!cv_.wait_for(l, kReleaseTimeout, [&] { return ended_; })) {
          cancel = true;
          result = absl::DeadlineExceededError(
              "no RELEASED from the server within " + std::to_string(kReleaseTimeout.count()) +
              "ms; the stream was cancelled (which releases the lock on a live server)");
        } else if (!saw_released_ && phase_ != Phase::kLost && !end_status_.ok()) {
          result = FromGrpc(end_status_);
        }
      } else {
        // Not waited for, still bounded.
        loop()->RunAt(Clock::now() + kReleaseTimeout, [weak = weak_from_this()] {
          if (auto self = weak.lock()) self->Cancel();
        });
      }
    }
    l.unlock();
    if (cancel) Cancel();
    l.lock();
    if (may_wait) AwaitDeliveredLocked(l);
    if (phase_ == Phase::kLost) {
      *final = StatusLocked(Clock::now());
    } else {
      final->state = LockState::kReleased;
      final->valid_for = Millis(0);
      final->lost_reason.clear();
      final->message = message_.empty() ? "released" : message_;
    }
    l.unlock();
    if (ttl_ > Millis(0) && !lease_id_.empty()) ka_->Remove(lease_id_);
    if (!registry_key_.empty()) registry_->Forget(registry_key_, this);
    return result;
  }

  // Off the EventLoop thread: once the last handle's release has begun,
  // waits (bounded) for the stream's end; then for every queued
  // notification to be delivered.
  void AwaitSettled() {
    if (loop()->InLoopThread()) return;
    std::unique_lock<std::mutex> l(mu_);
    if (releasing_) cv_.wait_for(l, kReleaseTimeout, [&] { return ended_; });
    AwaitDeliveredLocked(l);
  }

  LockStatus Status() const {
    std::lock_guard<std::mutex> l(mu_);
    return StatusLocked(Clock::now());
  }
  int live_handles() const {
    std::lock_guard<std::mutex> l(mu_);
    return live_handles_;
  }

  // Set once, before Acquire returns; read-only afterwards.
  const std::string& lease_id() const { return lease_id_; }
  uint64_t fencing_token() const { return token_; }
  const std::string& name() const { return name_; }

  // From the KeepAliver.
  void OnRenewed(Clock::time_point valid_until) {
    std::lock_guard<std::mutex> l(mu_);
    if (valid_until > lease_valid_until_) lease_valid_until_ = valid_until;
  }
  void OnLeaseGone(const std::string& message) {
    std::lock_guard<std::mutex> l(mu_);
    if (phase_ != Phase::kHeld && phase_ != Phase::kSuspended) return;
    // Our own Release deleted the node before RELEASED reached us: a
    // renewal in flight then finds the lease gone. Not a loss.
    if (releasing_) return;
    phase_ = Phase::kLost;
    lost_reason_ = "LEASE_EXPIRED";
    message_ = message.empty() ? "KeepAlive: the lease is gone" : "KeepAlive: " + message;
    NotifyLocked();
  }

 private:
  enum class Phase { kWaiting, kHeld, kSuspended, kLost, kReleased, kFailed };

  // ---- The stream's events (on the EventLoop: no waiting, no user code) ----

  void OnRead(const v1::AcquireEvent& ev) override { OnEvent(ev); }
  void OnDone(const grpc::Status& st) override { OnEnd(st); }

  void OnEvent(const v1::AcquireEvent& ev) {
    std::lock_guard<std::mutex> l(mu_);
    const Clock::time_point now = Clock::now();
    const bool held = phase_ == Phase::kHeld || phase_ == Phase::kSuspended;
    switch (ev.type()) {
      case v1::AcquireEvent::QUEUED:
        if (phase_ != Phase::kWaiting) return;
        queued_.push_back(ev.queued().position());
        cv_.notify_all();
        return;
      case v1::AcquireEvent::ACQUIRED: {
        if (phase_ != Phase::kWaiting) return;
        lease_id_ = ev.acquired().lease_id();
        token_ = ev.acquired().fencing_token();
        if (ttl_ > Millis(0)) {
          Millis valid = ev.acquired().has_valid_for() ? FromDuration(ev.acquired().valid_for()) : ttl_;
          if (valid <= Millis(0)) valid = ttl_;
          lease_valid_until_ = now + valid;
        }
        phase_ = Phase::kHeld;
        if (ev.acquired().has_refresh_within() &&
            FromDuration(ev.acquired().refresh_within()) > Millis(0)) {
          // The server refreshes the hold (STILL_HELD): watch for silence.
          refresh_within_ = FromDuration(ev.acquired().refresh_within());
          refresh_due_ = now + refresh_within_;
          valid_until_ = now + std::max(Millis(0), FromDuration(ev.acquired().safe_for()));
          ArmWatchdogLocked();
        }
        cv_.notify_all();
        return;
      }
      case v1::AcquireEvent::STILL_HELD:
        if (!held || refresh_within_ == Millis(0)) return;
        refresh_within_ = std::max(Millis(1), FromDuration(ev.still_held().refresh_within()));
        refresh_due_ = now + refresh_within_;
        valid_until_ = now + std::max(Millis(0), FromDuration(ev.still_held().safe_for()));
        if (phase_ == Phase::kSuspended && silent_) {
          phase_ = Phase::kHeld;
          silent_ = false;
          message_ = "the replica's refresh arrived again";
          NotifyLocked();
        }
        ArmWatchdogLocked();
        return;
      case v1::AcquireEvent::SUSPENDED:
        if (!held) return;
        phase_ = Phase::kSuspended;
        silent_ = false;
        suspend_deadline_ = now + std::max(Millis(0), FromDuration(ev.suspended().safe_for()));
        message_ = "the replica lost its ZooKeeper connection";
        NotifyLocked();
        ArmWatchdogLocked();
        return;
      case v1::AcquireEvent::RESUMED:
        if (phase_ != Phase::kSuspended) return;
        phase_ = Phase::kHeld;
        silent_ = false;
        if (refresh_within_ > Millis(0) && ev.has_still_held()) {
          refresh_within_ = std::max(Millis(1), FromDuration(ev.still_held().refresh_within()));
          valid_until_ = now + std::max(Millis(0), FromDuration(ev.still_held().safe_for()));
        }
        refresh_due_ = now + refresh_within_;
        message_ = "the replica's ZooKeeper connection is back";
        NotifyLocked();
        ArmWatchdogLocked();
        return;
      case v1::AcquireEvent::LOST:
        if (!held) return;
        phase_ = Phase::kLost;
        lost_reason_ = v1::Lost::Reason_Name(ev.lost().reason());
        message_ = ev.lost().message();
        NotifyLocked();
        return;
      case v1::AcquireEvent::REVOKE_REQUESTED: {
        if (!held || !on_revoke_) return;
        QueueLocked([cb = on_revoke_, requester = ev.revoke_requested().requester(),
                     reason = ev.revoke_requested().reason()] { cb(requester, reason); });
        return;
      }
      case v1::AcquireEvent::RELEASED:
        if (!held) return;
        phase_ = Phase::kReleased;
        saw_released_ = true;
        message_ = "released";
        NotifyLocked();
        return;
      default:
        // RELEASING (the server confirms a half-close; this client releases
        // with a message) and types newer than this client.
        return;
    }
  }

  void OnEnd(const grpc::Status& st) {
    std::unique_lock<std::mutex> l(mu_);
    ended_ = true;
    end_status_ = st;
    bool lease_done = false;
    switch (phase_) {
      case Phase::kWaiting:
        phase_ = Phase::kFailed;
        cv_.notify_all();
        return;
      case Phase::kHeld:
      case Phase::kSuspended:
        if (releasing_) {
          phase_ = Phase::kReleased;
          message_ = "the stream ended during release: " + std::string(st.ok() ? "OK" : st.error_message());
        } else {
          phase_ = Phase::kLost;
          lost_reason_ = "CONNECTION";
          message_ = st.ok() ? "the Acquire stream ended without RELEASED or LOST"
                             : "the Acquire stream broke: " + st.error_message();
        }
        lease_done = true;
        NotifyLocked();
        break;
      default:
        lease_done = true;
        cv_.notify_all();
        break;
    }
    const bool has_lease = lease_done && ttl_ > Millis(0) && !lease_id_.empty();
    l.unlock();
    if (has_lease) ka_->Remove(lease_id_);
  }

  // ---- The careful-client watchdog (on the EventLoop) ----
  //
  // A frozen replica or a stalled stream sends nothing, not even LOST: when
  // no refresh comes within refresh_within the hold is SUSPENDED here, with
  // the validity the last refresh gave; when that runs out (or a server
  // SUSPENDED's safe time does) it is LOST here and the stream is cancelled
  // (a live replica then deletes the node). Armed from the grant until the
  // hold ends. A STILL_HELD only moves the deadline later, so the steady
  // state costs one timer per refresh_within, not one per refresh.

  void ArmWatchdogLocked() {
    const bool held = phase_ == Phase::kHeld || phase_ == Phase::kSuspended;
    if (refresh_within_ == Millis(0) || !held || ended_ || releasing_) return;
    const Clock::time_point due = phase_ == Phase::kHeld ? refresh_due_ : suspend_deadline_;
    const uint64_t generation = watchdog_.Arm(due);
    if (generation == 0) return;
    loop()->RunAt(due, [weak = weak_from_this(), generation] {
      if (auto self = weak.lock()) self->OnWatchdog(generation);
    });
  }

  void OnWatchdog(uint64_t generation) {
    std::unique_lock<std::mutex> l(mu_);
    if (!watchdog_.Fire(generation)) return;
    const bool held = phase_ == Phase::kHeld || phase_ == Phase::kSuspended;
    if (!held || ended_ || releasing_) return;
    const Clock::time_point now = Clock::now();
    const careful::WatchdogStep step = careful::Step(
        phase_ == Phase::kHeld ? careful::Watch::kHeld : careful::Watch::kSuspended, now,
        refresh_due_, valid_until_, suspend_deadline_, silent_);
    if (step.state == careful::Watch::kSuspended && phase_ == Phase::kHeld) {
      phase_ = Phase::kSuspended;
      silent_ = step.silent;
      suspend_deadline_ = step.suspend_deadline;
      message_ = "no refresh from the replica within " + std::to_string(refresh_within_.count()) +
                 "ms: the replica or the stream may have failed";
      NotifyLocked();
    } else if (step.state == careful::Watch::kLost) {
      phase_ = Phase::kLost;
      lost_reason_ = step.lost_reason;
      message_ = silent_ ? "no refresh from the replica before the hold's validity ran out"
                         : "the replica's safe time ran out before its ZooKeeper "
                           "connection came back";
      NotifyLocked();
      l.unlock();
      Cancel();  // a live replica deletes the node
      return;
    }
    ArmWatchdogLocked();
  }

  // ---- State and notifications ----

  LockStatus StatusLocked(Clock::time_point now) const {
    LockStatus s;
    switch (phase_) {
      case Phase::kWaiting:
      case Phase::kHeld: s.state = LockState::kHeld; break;
      case Phase::kSuspended: s.state = LockState::kSuspended; break;
      case Phase::kLost: s.state = LockState::kLost; break;
      case Phase::kReleased:
      case Phase::kFailed: s.state = LockState::kReleased; break;
    }
    s.message = message_;
    if (s.state == LockState::kLost) s.lost_reason = lost_reason_;
    if (s.state == LockState::kLost || s.state == LockState::kReleased) {
      s.valid_for = Millis(0);
      return s;
    }
    std::optional<Clock::time_point> deadline;
    if (ttl_ > Millis(0)) deadline = lease_valid_until_;
    auto bound = [&](Clock::time_point t) { deadline = deadline ? std::min(*deadline, t) : t; };
    if (refresh_within_ > Millis(0)) bound(valid_until_);  // the latest refresh's validity
    if (s.state == LockState::kSuspended) bound(suspend_deadline_);
    s.valid_for = deadline ? Left(*deadline, now) : Millis::max();
    return s;
  }

  // Queues the current status for every subscriber.
  void NotifyLocked() {
    cv_.notify_all();
    if (subscribers_.empty()) return;
    std::vector<Callback> targets;
    for (const auto& [id, cb] : subscribers_) targets.push_back(cb);
    QueueLocked([status = StatusLocked(Clock::now()), targets = std::move(targets)] {
      for (const auto& cb : targets) cb(status);
    });
  }

  // User callbacks run on the EventLoop, in the order queued, without mu_.
  void QueueLocked(std::function<void()> note) {
    notes_.push_back(std::move(note));
    if (delivery_posted_) return;
    delivery_posted_ = true;
    loop()->Post([self = shared_from_this()] { self->Deliver(); });
  }
  void Deliver() {
    std::unique_lock<std::mutex> l(mu_);
    delivering_ = true;
    while (!notes_.empty()) {
      std::function<void()> note = std::move(notes_.front());
      notes_.pop_front();
      l.unlock();
      note();
      note = nullptr;  // drops callback copies outside the lock
      l.lock();
    }
    delivering_ = false;
    delivery_posted_ = false;
    cv_.notify_all();
  }
  // REQUIRES: not on the EventLoop thread.
  void AwaitDeliveredLocked(std::unique_lock<std::mutex>& l) {
    cv_.wait_for(l, kReleaseTimeout, [&] { return notes_.empty() && !delivering_; });
  }

  const std::shared_ptr<v1::LockService::Stub> stub_;
  const std::shared_ptr<KeepAliver> ka_;
  const std::shared_ptr<Registry> registry_;
  const std::string name_;
  const std::string registry_key_;  // empty unless reentrant
  const Millis ttl_;
  const RevokeCallback on_revoke_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::kWaiting;          // GUARDED_BY(mu_)
  bool abandoned_ = false;                 // GUARDED_BY(mu_) by AbandonWaits, while waiting
  std::deque<int64_t> queued_;             // GUARDED_BY(mu_) positions for on_queued
  std::string lease_id_;                   // written once under mu_ before the grant is seen
  uint64_t token_ = 0;                     // likewise
  Clock::time_point lease_valid_until_;    // GUARDED_BY(mu_) ttl > 0 only
  Clock::time_point suspend_deadline_;     // GUARDED_BY(mu_) kSuspended only
  // From ACQUIRED / STILL_HELD (servers that refresh; 0 = an older server):
  Millis refresh_within_{0};               // GUARDED_BY(mu_)
  Clock::time_point refresh_due_;          // GUARDED_BY(mu_) next refresh expected by
  Clock::time_point valid_until_;          // GUARDED_BY(mu_) the latest refresh's validity
  bool silent_ = false;                    // GUARDED_BY(mu_) kSuspended by the watchdog
  TimerSlot watchdog_;                     // GUARDED_BY(mu_)
  std::string lost_reason_;                // GUARDED_BY(mu_)
  std::string message_;                    // GUARDED_BY(mu_)
  bool ended_ = false;                     // GUARDED_BY(mu_)
  grpc::Status end_status_;                // GUARDED_BY(mu_)
  bool saw_released_ = false;              // GUARDED_BY(mu_)
  bool releasing_ = false;                 // GUARDED_BY(mu_)
  int live_handles_ = 0;                   // GUARDED_BY(mu_)
  int next_handle_id_ = 0;                 // GUARDED_BY(mu_)
  std::map<int, Callback> subscribers_;    // GUARDED_BY(mu_) handle id -> on_change
  std::deque<std::function<void()>> notes_;  // GUARDED_BY(mu_) callbacks to deliver
  bool delivery_posted_ = false;           // GUARDED_BY(mu_)
  bool delivering_ = false;                // GUARDED_BY(mu_)
};

// ---- KeepAliver ----

void KeepAliver::Add(const std::string& lease_id, Millis ttl, std::weak_ptr<HoldCore> core) {
  std::lock_guard<std::mutex> l(mu_);
  if (stop_) return;
  const Millis interval = std::max(Millis(1), ttl / 3);
  const Clock::time_point due = Clock::now() + interval;
  leases_[lease_id] = Entry{interval, ttl, due, std::move(core)};
  ArmLocked(due);
}

void KeepAliver::Remove(const std::string& lease_id) {
  std::lock_guard<std::mutex> l(mu_);
  leases_.erase(lease_id);
}

void KeepAliver::Shutdown() {
  std::shared_ptr<KeepAliveStream> stream;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    leases_.clear();
    stream = std::move(stream_);
  }
  if (stream) stream->Cancel();
  stream.reset();
  if (loop_->InLoopThread()) return;
  std::unique_lock<std::mutex> l(streams_->mu);
  streams_->cv.wait_for(l, Millis(5000), [&] { return streams_->live == 0; });
}

void KeepAliver::ArmLocked(Clock::time_point when) {
  const uint64_t generation = timer_.Arm(when);
  if (generation == 0) return;
  loop_->RunAt(when, [weak = weak_from_this(), generation] {
    if (auto self = weak.lock()) self->Renew(generation);
  });
}

void KeepAliver::Renew(uint64_t generation) {
  std::shared_ptr<KeepAliveStream> stream;
  std::vector<v1::KeepAliveRequest> requests;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_ || !timer_.Fire(generation) || leases_.empty()) return;
    const Clock::time_point now = Clock::now();
    Millis min_ttl = Millis::max();
    for (const auto& [id, e] : leases_) min_ttl = std::min(min_ttl, e.ttl);
    // An answer overdue by a whole TTL (at least 1 s): the stream is stuck.
    // The old one is cancelled and left to end; a new one takes over now.
    if (stream_) {
      std::optional<Clock::time_point> oldest = stream_->OldestUnanswered();
      if (oldest && now - *oldest > std::max(Millis(1000), min_ttl)) {
        stream_->Cancel();
        stream_.reset();
      }
    }
    Clock::time_point next = Clock::time_point::max();
    for (auto& [id, e] : leases_) {
      if (e.next_due <= now) {
        e.next_due = now + e.interval;
        if (requests.empty() ||
            static_cast<size_t>(requests.back().lease_ids_size()) >= kMaxLeasesPerKeepAlive) {
          requests.emplace_back();
        }
        requests.back().add_lease_ids(id);
      }
      next = std::min(next, e.next_due);
    }
    ArmLocked(next);
    if (requests.empty()) return;
    if (!stream_) {
      {
        std::lock_guard<std::mutex> count(streams_->mu);
        ++streams_->live;
      }
      // A new stream opens with the first request.
      stream_ = std::make_shared<KeepAliveStream>(weak_from_this(), loop_);
      stream_->Start(*stub_, std::move(requests.front()));
      requests.erase(requests.begin());
    }
    stream = stream_;
  }
  for (auto& req : requests) {
    // Refused: the stream ended; OnStreamDone drops it, the next round opens
    // another.
    if (!stream->Send(std::move(req))) break;
  }
}

void KeepAliver::OnResponse(const v1::KeepAliveResponse& resp, Clock::time_point sent) {
  struct Action {
    std::shared_ptr<HoldCore> core;
    bool gone;
    Clock::time_point valid_until;
    std::string message;
  };
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& ls : resp.leases()) {
      auto it = leases_.find(ls.lease_id());
      if (it == leases_.end()) continue;
      std::shared_ptr<HoldCore> core = it->second.core.lock();
      if (!core) {
        leases_.erase(it);
        continue;
      }
      if (ls.code() == static_cast<int32_t>(grpc::StatusCode::OK)) {
        // Conservative: the validity counts from when the request was sent.
        actions.push_back(Action{std::move(core), false, sent + FromDuration(ls.valid_for()), ""});
      } else if (ls.code() == static_cast<int32_t>(grpc::StatusCode::NOT_FOUND)) {
        leases_.erase(it);
        actions.push_back(Action{std::move(core), true, {}, ls.message()});
      }
      // Other codes (UNAVAILABLE, ...): retried at the next renewal.
    }
  }
  for (auto& a : actions) {
    if (a.gone) {
      a.core->OnLeaseGone(a.message);
    } else {
      a.core->OnRenewed(a.valid_until);
    }
  }
}

void KeepAliver::OnStreamDone(const KeepAliveStream* stream) {
  std::shared_ptr<KeepAliveStream> dropped;  // released after the lock
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stream_.get() == stream) dropped = std::move(stream_);
  }
  // Counted as ended once its OnDone returned and it let go of the loop: a
  // task posted now runs after that (the loop runs one thing at a time).
  loop_->Post([streams = streams_] {
    std::lock_guard<std::mutex> l(streams->mu);
    --streams->live;
    streams->cv.notify_all();
  });
}

}  // namespace

// ---- AbandonWaits (coordination.h) ----

void AbandonWaits() {
  Waits& w = ProcessWaits();
  std::lock_guard<std::mutex> wl(w.mu);
  w.abandoned = true;
  // Each listed core is alive: Start unlists it (under w.mu) before it
  // returns, and its caller keeps it until then.
  for (HoldCore* core : w.waiting) core->AbandonIfWaiting();
}

bool WaitsAbandoned() {
  Waits& w = ProcessWaits();
  std::lock_guard<std::mutex> wl(w.mu);
  return w.abandoned;
}

// ---- Client ----

class Client::Impl {
 public:
  ~Impl() {
    if (keepaliver) keepaliver->Shutdown();
  }
  ClientOptions options;
  std::shared_ptr<v1::LockService::Stub> stub;
  std::shared_ptr<EventLoop> loop;
  std::shared_ptr<KeepAliver> keepaliver;
  std::shared_ptr<Registry> registry;
};

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("target: empty");
  TlsFiles tls{options.tls_ca_file, options.tls_cert_file, options.tls_key_file};
  if (tls.empty()) tls = TlsFiles::FromEnv();
  auto creds = MakeChannelCredentials(tls);
  if (!creds.ok()) return creds.status();
  grpc::ChannelArguments args;
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->stub = std::shared_ptr<v1::LockService::Stub>(
      v1::LockService::NewStub(grpc::CreateCustomChannel(options.target, *creds, args)));
  impl->loop = SharedEventLoop();
  impl->keepaliver = std::make_shared<KeepAliver>(impl->stub, impl->loop);
  impl->registry = std::make_shared<Registry>();
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<Lock> Client::Acquire(const std::string& name, const AcquireOptions& options) {
  Impl& im = *impl_;
  const std::string owner = options.owner.empty() ? im.options.default_owner : options.owner;
  // Lock names cannot contain NUL (a control character), so the key is unique.
  const std::string key = options.reentrant ? name + std::string(1, '\0') + owner : "";
  if (options.reentrant) {
    if (std::shared_ptr<HoldCore> core = im.registry->Find(key)) {
      int id = core->TryAddHandle(options.on_change);
      if (id >= 0) return Lock(std::make_shared<Lock::Hold>(std::move(core), id));
    }
  }

  v1::AcquireOpen open;
  open.set_name(name);
  open.set_owner(owner);
  SetDuration(options.wait_timeout, open.mutable_wait_timeout());
  SetDuration(options.ttl, open.mutable_ttl());
  open.mutable_metadata()->insert(options.metadata.begin(), options.metadata.end());
  if (options.max_holders > 0) {
    // With `shared` too, the server refuses the mix (INVALID_ARGUMENT).
    open.set_kind(options.shared ? v1::LOCK_KIND_SHARED : v1::LOCK_KIND_SEMAPHORE);
    open.set_max_holders(options.max_holders);
  } else {
    open.set_kind(options.shared ? v1::LOCK_KIND_SHARED : v1::LOCK_KIND_EXCLUSIVE);
  }
  SetDuration(options.lock_delay, open.mutable_lock_delay());
  open.set_revoke_holders(options.revoke_holders);
  open.set_revoke_reason(options.revoke_reason);

  // A wait that ends UNAVAILABLE (the replica is draining, lost ZooKeeper,
  // or cannot be reached; or CANCELLED by a replica shutting down) is
  // opened again until the wait timeout, with
  // backoff: through a load-balanced target the retry reaches another
  // replica, so rolling restarts do not fail waiters. The retry queues anew
  // (the old replica deleted its node, or its session will). Try-once
  // (wait_timeout 0) is not retried.
  if (absl::Status s = careful::ValidateAcquireOptions(name, options); !s.ok()) return s;
  const auto deadline = std::chrono::steady_clock::now() + options.wait_timeout;
  careful::Backoff backoff;
  std::shared_ptr<HoldCore> core;
  for (;;) {
    if (WaitsAbandoned()) {
      return absl::CancelledError("waits for locks were abandoned in this process (AbandonWaits)");
    }
    // Rounded up: truncated, the server's wait would end (up to 1 ms) before
    // the caller's wait_timeout has passed.
    Millis remaining = std::chrono::ceil<Millis>(deadline - std::chrono::steady_clock::now());
    if (options.wait_timeout > Millis(0)) {
      remaining = std::max(remaining, Millis(1));
      SetDuration(remaining, open.mutable_wait_timeout());
    } else {
      remaining = Millis(0);
    }
    core = std::make_shared<HoldCore>(im.stub, im.loop, im.keepaliver, im.registry, name, key,
                                      options.ttl, options.on_change, options.on_revoke);
    absl::Status st = core->Start(open, remaining, options.on_queued);
    if (st.ok()) break;
    if (WaitsAbandoned()) return st;  // not retried
    // CANCELLED cannot come from the caller here (Acquire blocks): it is a
    // replica shutting down and cancelling the calls it still has.
    const Millis delay = backoff.Next();
    if (!careful::MayRetry(st, im.options.retry_unavailable, options.wait_timeout,
                           std::chrono::steady_clock::now(), delay, deadline)) {
      return st;
    }
    std::this_thread::sleep_for(delay);  // retry backoff, bounded by the deadline
  }
  if (options.ttl > Millis(0)) im.keepaliver->Add(core->lease_id(), options.ttl, core);
  if (options.reentrant) im.registry->Put(key, core);
  return Lock(std::make_shared<Lock::Hold>(std::move(core), 0));
}

absl::Status Client::Release(const std::string& lease_id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  v1::ReleaseRequest req;
  req.set_lease_id(lease_id);
  v1::ReleaseResponse resp;
  return FromGrpc(impl_->stub->Release(&ctx, req, &resp));
}

absl::Status Client::Revoke(const std::string& lease_id, const std::string& reason) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  v1::RevokeRequest req;
  req.set_lease_id(lease_id);
  req.set_requester(impl_->options.default_owner);
  req.set_reason(reason);
  v1::RevokeResponse resp;
  return FromGrpc(impl_->stub->Revoke(&ctx, req, &resp));
}

namespace {

Contender ConvertContender(const v1::Contender& c) {
  Contender out;
  out.owner = c.owner();
  out.metadata.insert(c.metadata().begin(), c.metadata().end());
  out.fencing_token = c.fencing_token();
  out.replica_id = c.replica_id();
  out.identity = c.identity();
  out.position = c.position();
  out.kind = c.kind() == v1::LOCK_KIND_SHARED      ? "SHARED"
             : c.kind() == v1::LOCK_KIND_SEMAPHORE ? "SEMAPHORE"
                                                   : "EXCLUSIVE";
  out.max_holders = c.max_holders();
  if (c.has_granted()) {
    out.granted_unix_ms = c.granted().seconds() * 1000 + c.granted().nanos() / 1000000;
  }
  return out;
}

// Client::Observe: one thread reads the stream (a blocking reader); when it
// fails with anything but the name's own refusal it says "unknown" and
// observes again after a backoff.
class ObservationImpl final : public Observation {
 public:
  ObservationImpl(std::shared_ptr<v1::LockService::Stub> stub, std::string name,
                  std::function<void(const LockObservation&)> on_state,
                  std::function<void(const absl::Status&)> on_end)
      : stub_(std::move(stub)), name_(std::move(name)), on_state_(std::move(on_state)),
        on_end_(std::move(on_end)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~ObservationImpl() override { Stop(); }
  void Stop() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopped_) return;
      stopped_ = true;
      if (ctx_) ctx_->TryCancel();
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    careful::Backoff backoff;
    bool told_unknown = false;
    for (;;) {
      auto ctx = std::make_shared<grpc::ClientContext>();
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stopped_) return;
        ctx_ = ctx;
      }
      v1::ObserveRequest req;
      req.set_name(name_);
      auto reader = stub_->Observe(ctx.get(), req);
      v1::ObserveEvent ev;
      bool got = false;
      while (reader->Read(&ev)) {
        got = true;
        told_unknown = ev.state() != v1::ObserveEvent::CURRENT;
        LockObservation o;
        o.known = ev.state() == v1::ObserveEvent::CURRENT;
        o.name = ev.name();
        o.waiters = ev.waiters();
        o.max_holders = ev.max_holders();
        o.message = ev.message();
        for (const auto& h : ev.holders()) o.holders.push_back(ConvertContender(h));
        Deliver(o);
      }
      const grpc::Status st = reader->Finish();
      {
        std::lock_guard<std::mutex> l(mu_);
        ctx_.reset();
        if (stopped_) return;
      }
      const auto code = st.error_code();
      if (code == grpc::StatusCode::INVALID_ARGUMENT ||
          code == grpc::StatusCode::PERMISSION_DENIED ||
          code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::UNIMPLEMENTED) {
        if (on_end_) on_end_(FromGrpc(st));
        return;
      }
      if (got) backoff = careful::Backoff();
      if (!told_unknown) {
        told_unknown = true;
        LockObservation o;
        o.name = name_;
        o.message = "observing again: " + st.error_message();
        Deliver(o);
      }
      std::unique_lock<std::mutex> l(mu_);
      if (cv_.wait_for(l, backoff.Next(), [this] { return stopped_; })) return;
    }
  }
  void Deliver(const LockObservation& o) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopped_) return;
    }
    on_state_(o);
  }

  const std::shared_ptr<v1::LockService::Stub> stub_;
  const std::string name_;
  const std::function<void(const LockObservation&)> on_state_;
  const std::function<void(const absl::Status&)> on_end_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;                       // GUARDED_BY(mu_)
  std::shared_ptr<grpc::ClientContext> ctx_;   // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace

absl::Status Client::Proclaim(const std::string& lease_id, uint64_t fencing_token,
                              const std::map<std::string, std::string>& metadata) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  v1::ProclaimRequest req;
  req.set_lease_id(lease_id);
  req.set_fencing_token(fencing_token);
  req.mutable_metadata()->insert(metadata.begin(), metadata.end());
  v1::ProclaimResponse resp;
  return FromGrpc(impl_->stub->Proclaim(&ctx, req, &resp));
}

absl::StatusOr<std::unique_ptr<Observation>> Client::Observe(
    const std::string& name, std::function<void(const LockObservation&)> on_state,
    std::function<void(const absl::Status&)> on_end) {
  if (name.empty()) return absl::InvalidArgumentError("name: must not be empty");
  if (!on_state) return absl::InvalidArgumentError("on_state: must be set");
  return std::unique_ptr<Observation>(
      new ObservationImpl(impl_->stub, name, std::move(on_state), std::move(on_end)));
}

absl::StatusOr<Description> Client::Describe(const std::string& name) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  v1::DescribeRequest req;
  req.set_name(name);
  v1::DescribeResponse resp;
  if (absl::Status s = FromGrpc(impl_->stub->Describe(&ctx, req, &resp)); !s.ok()) return s;
  Description d;
  d.name = resp.name();
  d.max_holders = resp.max_holders();
  for (const auto& c : resp.holders()) d.holders.push_back(ConvertContender(c));
  for (const auto& c : resp.waiters()) d.waiters.push_back(ConvertContender(c));
  return d;
}

absl::StatusOr<LockNames> Client::List(const std::string& prefix, int limit) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
  v1::ListRequest req;
  req.set_prefix(prefix);
  req.set_limit(limit);
  v1::ListResponse resp;
  if (absl::Status s = FromGrpc(impl_->stub->List(&ctx, req, &resp)); !s.ok()) return s;
  LockNames out;
  out.names.assign(resp.names().begin(), resp.names().end());
  out.truncated = resp.truncated();
  return out;
}

// ---- Lock ----

class Lock::Hold {
 public:
  Hold(std::shared_ptr<HoldCore> core, int id) : core_(std::move(core)), id_(id) {}

  absl::Status Release() {
    if (released_.exchange(true)) {
      // Released before, perhaps on the EventLoop thread (from a callback),
      // which does not wait: off that thread, wait now as the first Release
      // would have, so that no callback runs after this returns.
      core_->AwaitSettled();
      return absl::OkStatus();
    }
    LockStatus final;
    absl::Status st = core_->ReleaseHandle(id_, &final);
    std::lock_guard<std::mutex> l(mu_);
    final_ = std::move(final);
    return st;
  }
  LockStatus Status() const {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (final_) {
        LockStatus s = *final_;
        s.valid_for = Millis(0);
        return s;
      }
    }
    return core_->Status();
  }
  int HoldCount() const { return released_.load() ? 0 : core_->live_handles(); }
  const HoldCore& core() const { return *core_; }

 private:
  const std::shared_ptr<HoldCore> core_;
  const int id_;
  std::atomic<bool> released_{false};
  mutable std::mutex mu_;
  std::optional<LockStatus> final_;  // GUARDED_BY(mu_) once released
};

namespace {
const std::string& EmptyString() {
  static const std::string* empty = new std::string();
  return *empty;
}
}  // namespace

Lock::Lock(std::shared_ptr<Hold> hold) : hold_(std::move(hold)) {}
Lock::Lock(Lock&& other) noexcept = default;
Lock& Lock::operator=(Lock&& other) noexcept {
  if (this != &other) {
    if (hold_) hold_->Release().IgnoreError();
    hold_ = std::move(other.hold_);
  }
  return *this;
}
Lock::~Lock() {
  if (hold_) hold_->Release().IgnoreError();
}

uint64_t Lock::fencing_token() const { return hold_ ? hold_->core().fencing_token() : 0; }
const std::string& Lock::lease_id() const { return hold_ ? hold_->core().lease_id() : EmptyString(); }
const std::string& Lock::name() const { return hold_ ? hold_->core().name() : EmptyString(); }

LockStatus Lock::status() const {
  if (!hold_) {
    LockStatus s;
    s.state = LockState::kReleased;
    s.valid_for = Millis(0);
    s.message = "moved-from Lock";
    return s;
  }
  return hold_->Status();
}

int Lock::hold_count() const { return hold_ ? hold_->HoldCount() : 0; }

absl::Status Lock::Release() { return hold_ ? hold_->Release() : absl::OkStatus(); }

}  // namespace turnstile::client
