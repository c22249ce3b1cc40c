// LockEngine: fair, herd-free locks over a pool of ZooKeeper sessions.
//
// One Contender per Acquire: an EPHEMERAL_SEQUENTIAL node under the lock's
// CONTAINER node, listed once, then advanced by watching exactly the node that
// blocks it (see ordering.h). The engine is a state machine per contender
// driven by ZooKeeper completions, watches, session events and timers; it
// never blocks those threads. Thread-safe.
//
// Shards: each session of the pool has its own EngineShard (engine_shard.h),
// which owns the locks that live on that session (SessionIndexFor their
// name; see session_slot.h), their contenders, counters and delivery, and
// lives on that session's loop: no lock. LockEngine only routes: a call
// naming a lock goes to the lock's shard, one naming a contender id to the
// shard the id encodes, one naming a lease to its lock's shard; stats,
// loads, drain and serving gather from every shard. No call waits for two
// shards at once, so a session that is suspended, reconnecting or busy
// delays only its own locks. Events reach sinks on their shard's loop,
// between its work, in the order the shard produced them.
#ifndef TURNSTILE_SERVER_ENGINE_LOCK_ENGINE_H_
#define TURNSTILE_SERVER_ENGINE_LOCK_ENGINE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/zk/event_loop.h"
#include "server/recipe/lock_name.h"
#include "server/zk/zk_session.h"

namespace turnstile {

using Millis = std::chrono::milliseconds;

struct AcquireParams {
  std::string name;
  std::string owner;
  std::map<std::string, std::string> metadata;
  Millis wait_timeout{0};  // 0 = try once
  Millis ttl{0};           // 0 = no lease TTL
  ContenderKind kind = ContenderKind::kExclusive;
  // kSemaphore: how many may hold at once (N, 1..max_semaphore_holders);
  // 0 for the other kinds. Every semaphore contender of a lock must agree.
  int32_t max_holders = 0;
  // Once queued behind holders, ask them to let go (REVOKE_REQUESTED on
  // their streams; they decide), with this reason.
  bool revoke_holders = false;
  std::string revoke_reason;
  // Lock-delay (Chubby, Consul): when this hold ends involuntarily (lost,
  // released by lease id by someone else, the client gone), the next grant
  // waits this long from when the loss became known. 0..kMaxLockDelay.
  Millis lock_delay{0};
  // The caller's verified identity (mutual TLS; "" without), recorded on
  // the contender node beside the self-reported owner.
  std::string identity;
};

enum class LostReason { kSessionExpired, kLeaseExpired, kDeleted, kShutdown };
const char* LostReasonName(LostReason r);

struct LockEvent {
  enum class Type {
    kQueued, kAcquired, kSuspended, kResumed, kLost, kReleased, kStillHeld, kRevokeRequested,
    // The stream was half-closed by a holder with a lock-delay: the
    // adapter writes this and calls Release once the write went through
    // (see HalfClose).
    kReleasing
  };
  Type type = Type::kQueued;
  // kQueued
  int64_t position = 0;
  int64_t ahead = 0;
  // kAcquired
  std::string lease_id;
  uint64_t fencing_token = 0;
  Millis valid_for{0};
  Millis session_timeout{0};
  // kSuspended; kAcquired, kResumed and kStillHeld: how long the hold is
  // certainly valid from now (see SessionSlot::SafeFor)
  Millis safe_for{0};
  // kAcquired, kResumed, kStillHeld: the next STILL_HELD (or another event)
  // comes within this, or the client must treat the hold as in doubt.
  Millis refresh_within{0};
  // kLost
  LostReason reason = LostReason::kSessionExpired;
  std::string message;
  // kRevokeRequested: who asked and why (as they said)
  std::string requester;
  std::string revoke_reason;
};

// How a wait ended (metrics).
enum class AcquireResult { kAcquired, kTimeout, kBusy, kCancelled, kFailed, kCount };
const char* AcquireResultName(AcquireResult r);

// Receives the engine's measurements (metrics). Called from inside a shard's
// work on its loop, from several shards' loops at once: implementations
// must be quick, thread-safe, and must not call the engine.
class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void OnWaitEnded(AcquireResult result, double wait_seconds) = 0;
  virtual void OnHoldEnded(double hold_seconds) = 0;
  // From when the engine learned a waiter's last blocker was gone to its grant.
  virtual void OnHandoff(double seconds) = 0;
  virtual void OnLost(LostReason reason) = 0;
  // A revocation request written by this replica (Revoke, or a waiter that
  // asked), and one delivered to a holder on this replica.
  virtual void OnRevokeRequested() {}
  virtual void OnRevokeDelivered() {}
};

// This replica's live contenders on one lock.
struct LockLoad {
  std::string name;
  uint64_t first_id = 0;  // lowest contender id: arrival order
  int64_t waiters = 0;
  int64_t holders = 0;
  int32_t max_holders = 0;  // a semaphore's N (from this replica's contenders), else 0
};

// Receives one contender's events. Called on the contender's shard's loop,
// between two pieces of its work (so it may call the engine, which then
// runs in place), never concurrently for one sink. OnFinish is called exactly once and last, unless
// the contender was abandoned (then nothing more is called); after RELEASED
// or LOST it follows at once (the gRPC service sends the two together).
class ContenderSink {
 public:
  virtual ~ContenderSink() = default;
  virtual void OnEvent(const LockEvent& event) = 0;
  // OK after RELEASED or LOST; otherwise why the wait ended without the lock.
  virtual void OnFinish(const absl::Status& status) = 0;
};

struct EngineLimits {
  size_t max_owner_bytes = 128;
  size_t max_metadata_entries = 16;
  size_t max_metadata_key_bytes = 64;
  size_t max_metadata_value_bytes = 256;
  Millis max_wait_timeout{3600 * 1000};
  Millis min_ttl{500};
  Millis max_ttl{3600 * 1000};
  // Contenders (holders and waiters) on one lock, cluster-wide.
  size_t max_contenders_per_lock = 1000;
  size_t max_keepalive_leases = 100;
  // The largest N a semaphore may have (--max-semaphore-holders). Its first
  // waiter watches N nodes.
  int32_t max_semaphore_holders = 1000;
  // Sum of the path lengths the contenders of ONE session of the pool may
  // watch. ZooKeeper's C client re-sends all of a session's watches in one
  // SetWatches packet on reconnect, and a packet over jute.maxbuffer (1 MiB
  // by default) breaks the session.
  size_t max_watched_path_bytes = 512 * 1024;
};

struct EngineOptions {
  std::string root = "/turnstile";
  std::string replica_id = "turnstiled";
  EngineLimits limits;
  // Tests: after every locked section, count every contender and abort if
  // a lock's published load (LockLoads) differs. O(contenders) per call.
  bool check_invariants = false;
  // Creates of one loop turn go to ZooKeeper as one multi, and so do plain
  // deletes (issue 39; write_batcher.h). Off: one request per write.
  bool batch_writes = true;
};

struct ContenderView {
  ContenderInfo info;  // info.granted_unix_ms: a semaphore holder's grant time
  ContenderKind kind = ContenderKind::kExclusive;
  int32_t max_holders = 0;  // kSemaphore: its N
  int64_t since_unix_ms = 0;
  uint64_t fencing_token = 0;
  int64_t position = 0;
};
struct LockDescription {
  std::string name;
  int64_t delayed_until_unix_ms = 0;  // in lock-delay until then (0: not)
  int32_t max_holders = 0;  // a semaphore's N (its first contender's), 0 for other locks
  std::vector<ContenderView> holders;
  std::vector<ContenderView> waiters;
};
struct LockList {
  std::vector<std::string> names;
  bool truncated = false;
};
// A fencing token's check (CheckToken): whether it belongs to a hold.
struct TokenCheck {
  enum class Verdict {
    kCurrent,     // a holder's node has this czxid
    kSuperseded,  // no contender's node has it (gone, or never existed)
    kWaiting,     // a waiter's node has it (never granted yet)
  };
  Verdict verdict = Verdict::kSuperseded;
  // The highest czxid among the holders in the listing decided on (0: none).
  uint64_t highest_holder_token = 0;
  bool linearizable = false;  // a sync preceded the reads
};

// Counters for tests and metrics.
struct EngineStats {
  uint64_t granted = 0;
  uint64_t timed_out = 0;
  uint64_t not_acquired_try_once = 0;
  uint64_t lost = 0;
  uint64_t released = 0;
  uint64_t requeued_after_expiry = 0;
  uint64_t requeued_lost_node = 0;  // node gone before the grant was announced
  uint64_t recovered_creates = 0;  // found their own node after a lost reply
  // Local handoffs granted from the reply of the holder's delete-and-check
  // transaction (no confirming read; see LockEngine::LocalSuccessor).
  uint64_t handoffs_in_one_transaction = 0;
  uint64_t lock_delays_started = 0;  // involuntary ends that delayed a grant
  // A holder's own-node watch fired by its own release's delete (it wakes
  // only this replica, which ignores it): ZooKeeper counts it among the
  // notifications of a departure.
  uint64_t own_watch_fired_on_release = 0;
  size_t locks_in_delay = 0;          // this replica's locks in lock-delay now
  uint64_t revokes_requested = 0;  // written by this replica
  uint64_t revokes_delivered = 0;  // told to holders on this replica
  // Batched creates (write_batcher.h): multis sent, the creates in them,
  // the largest, and multis that failed and were resent one by one.
  uint64_t create_batches = 0;
  uint64_t batched_creates = 0;
  size_t largest_create_batch = 0;
  uint64_t create_batches_split = 0;
  // Batched plain deletes, the same way.
  uint64_t delete_batches = 0;
  uint64_t batched_deletes = 0;
  size_t largest_delete_batch = 0;
  uint64_t delete_batches_split = 0;
  size_t contenders = 0;           // local contenders with any state
  size_t holders = 0;

  // Adds another shard's counters (keep in step with the fields above).
  void Add(const EngineStats& o) {
    granted += o.granted;
    timed_out += o.timed_out;
    not_acquired_try_once += o.not_acquired_try_once;
    lost += o.lost;
    released += o.released;
    requeued_after_expiry += o.requeued_after_expiry;
    requeued_lost_node += o.requeued_lost_node;
    recovered_creates += o.recovered_creates;
    handoffs_in_one_transaction += o.handoffs_in_one_transaction;
    lock_delays_started += o.lock_delays_started;
    own_watch_fired_on_release += o.own_watch_fired_on_release;
    locks_in_delay += o.locks_in_delay;
    revokes_requested += o.revokes_requested;
    revokes_delivered += o.revokes_delivered;
    create_batches += o.create_batches;
    batched_creates += o.batched_creates;
    if (o.largest_create_batch > largest_create_batch) largest_create_batch = o.largest_create_batch;
    create_batches_split += o.create_batches_split;
    delete_batches += o.delete_batches;
    batched_deletes += o.batched_deletes;
    if (o.largest_delete_batch > largest_delete_batch) largest_delete_batch = o.largest_delete_batch;
    delete_batches_split += o.delete_batches_split;
    contenders += o.contenders;
    holders += o.holders;
  }
};

class EngineShard;  // engine_shard.h

class LockEngine {
 public:
  // The sessions must outlive the engine; close them (which stops their
  // loops) before destroying it. Installs the session listeners: construct
  // the engine before starting the sessions. At least one session. Shard i
  // lives on session i's loop (ZkSession::loop): every call routed to it
  // posts its work there, where the session's completions and the shard's
  // timers (wait timeouts, heartbeats, leases) run too. So a shard's state
  // has one thread, and a shard stuck on its session never delays
  // another's. A lock's session (and shard) is
  // sessions[SessionIndexFor(segment, n)].
  LockEngine(std::vector<ZkSession*> sessions, EngineOptions options);
  LockEngine(ZkSession* zk, EngineOptions options)
      : LockEngine(std::vector<ZkSession*>{zk}, std::move(options)) {}
  ~LockEngine();
  LockEngine(const LockEngine&) = delete;
  LockEngine& operator=(const LockEngine&) = delete;
  // For the replica's stop, once the gRPC server has stopped (before its
  // completion queue shuts down): no sink is called after this returns
  // (one being called now is waited for), and nothing more is done.
  // Without it, a stream cancelled by the shutdown could end another
  // stream's call (a grant's handoff, a waiter's failure) after that call's
  // queue had shut down, which gRPC aborts on.
  void Quiesce();

  // Validates `params` (INVALID_ARGUMENT, returned here), then starts
  // contending on the lock's shard and returns the contender id used by
  // Release/Abandon. What depends on the shard's state is decided there
  // and refused through the sink (OnFinish, no event): UNAVAILABLE while
  // draining or without the lock's session, RESOURCE_EXHAUSTED at the
  // per-lock limit or the session's watch budget.
  absl::StatusOr<uint64_t> Open(const AcquireParams& params, std::shared_ptr<ContenderSink> sink);
  // The client asked to release (or to stop waiting): RELEASED if held,
  // then OnFinish(OK); a waiter gets OnFinish(OK) with no event. The node is
  // deleted.
  void Release(uint64_t id);
  // The client half-closed its stream without a release message. For a
  // holder with a lock-delay the end must be told from a broken or
  // cancelled stream (which the adapter may report just after the failed
  // read that looks like a half-close): the engine emits kReleasing and
  // keeps the hold; the adapter calls Release once that event is written
  // (the stream is alive: a clean release, no delay), or Abandon when the
  // stream turns out cancelled (the lock-delay starts). Anything else is
  // released at once, as by Release.
  void HalfClose(uint64_t id);
  // The client is gone: delete the node, call nothing more on the sink.
  void Abandon(uint64_t id);

  // `done` also gets the released hold's verified identity (mutual TLS;
  // "" if none or unknown), so the caller can tell a release by someone
  // else.
  void ReleaseLease(const std::string& lease_id,
                    std::function<void(absl::Status, const std::string& holder_identity)> done);
  // Renews a lease; `done` gets how long it is valid from now.
  void KeepAlive(const std::string& lease_id, std::function<void(absl::StatusOr<Millis>)> done);
  // Asks the holder of a lease to let go: its stream gets REVOKE_REQUESTED
  // (wherever it is served); it decides. NOT_FOUND if the lease is gone.
  // `identity` (the caller's verified identity, "" without mutual TLS)
  // qualifies the requester the holder is shown: a requester is then only
  // a label beside who really asked.
  void Revoke(const std::string& lease_id, const std::string& requester,
              const std::string& reason,
              std::function<void(absl::Status, const std::string& holder_identity)> done,
              const std::string& identity = "");
  void Describe(const std::string& name, std::function<void(absl::StatusOr<LockDescription>)> done);
  // Whether `fencing_token` belongs to a hold of lock `name` (the CheckToken
  // RPC; server/engine/engine_shard_check.cc). Unless `allow_stale`, a
  // ZooKeeper sync comes first, so the answer reflects every change
  // committed before the call. INVALID_ARGUMENT (name, token 0), or
  // UNAVAILABLE (no session, the sync or a read failed, or the lock changed
  // under every one of kCheckAttempts listings).
  void CheckToken(const std::string& name, uint64_t fencing_token, bool allow_stale,
                  std::function<void(absl::StatusOr<TokenCheck>)> done);
  static constexpr int kCheckAttempts = 10;
  // `visible` (optional): only names it accepts count and are returned
  // (a policy's view), so `limit` and `truncated` are about visible names.
  void List(const std::string& prefix, int limit,
            std::function<void(absl::StatusOr<LockList>)> done,
            std::function<bool(const std::string&)> visible = nullptr);
  // List checks candidate lock nodes this many at a time.
  static constexpr size_t kListBatch = 128;
  // The longest revocation reason (Revoke, AcquireOpen.revoke_reason).
  static constexpr size_t kMaxRevokeReasonBytes = 256;
  // The request checks (server/engine/request_validate.cc): INVALID_ARGUMENT
  // naming the field and its limit for any input out of range, OK
  // otherwise. Pure. The RPC adapter calls them before it asks the policy,
  // so bad input gets INVALID_ARGUMENT whoever asks; the methods above
  // call them again (the engine is also a library of its own).
  static absl::Status ValidateParams(const AcquireParams& p, const EngineLimits& lim);
  static absl::Status ValidateMetadata(const std::map<std::string, std::string>& metadata,
                                       const EngineLimits& lim);
  // Release, KeepAlive's entries: the id's form (NOT_FOUND for an unknown
  // one comes later, from ZooKeeper).
  static absl::Status ValidateLeaseId(const std::string& lease_id);
  static absl::Status ValidateRevoke(const std::string& lease_id, const std::string& requester,
                                     const std::string& reason, const EngineLimits& lim);
  static absl::Status ValidateProclaim(const std::string& lease_id, uint64_t fencing_token,
                                       const std::map<std::string, std::string>& metadata,
                                       const EngineLimits& lim);
  static absl::Status ValidateCheckToken(const std::string& name, uint64_t fencing_token);
  static absl::Status ValidateList(const std::string& prefix, int limit);
  // The number of leases in one KeepAlive request.
  static absl::Status ValidateKeepAlive(size_t lease_count, const EngineLimits& lim);
  static constexpr int kDefaultListLimit = 1000;
  static constexpr int kMaxListLimit = 10000;
  static constexpr Millis kMaxLockDelay{60000};

  // SIGTERM: refuse new contenders, end every wait with UNAVAILABLE.
  void BeginDrain();
  // After the drain timeout: every remaining holder gets LOST(SHUTDOWN).
  void EndDrain();

  // Serving = every session of the pool connected with the root present,
  // and not draining.
  bool serving() const;
  // The pool's size, and the index of the session (and shard) that serves
  // `name`.
  size_t session_count() const { return sessions_.size(); }
  size_t SessionIndexOf(const std::string& name) const;
  // Called (on the first shard's loop, one call at a time, in the order of
  // the changes) whenever serving() changes, and once with the state now
  // before this returns.
  void SetServingListener(std::function<void(bool)> listener);
  // The shards' counters, summed.
  EngineStats stats() const;
  // Per-lock waiters and holders of this replica, exact at the call for
  // each shard. Each lock's load is kept as its contenders change; on a
  // shard's loop the call reads only the locks that changed since the
  // previous call (the caller waits for that), so a scrape costs grants
  // nothing however many contenders wait. The rest comes from `cache`,
  // which holds the loads as last read: the caller's, one per engine (each
  // call takes the shards' marks of what changed), passed to one call at a
  // time (the engine has no lock for it).
  struct LoadsCache {
    std::vector<std::map<std::string, LockLoad>> shards;  // by segment
  };
  std::vector<LockLoad> LockLoads(LoadsCache* cache);
  // Set before the first Open; `observer` must outlive the engine's use and
  // take calls from several shards at once.
  void SetObserver(EngineObserver* observer);
  // Session events of the pool (for LockObservers): `listener` gets the
  // session's index and the event, outside the lock, in order per session,
  // after the engine handled it. Add before the sessions start.
  void AddSessionListener(std::function<void(size_t index, SessionEvent)> listener);
  ZkSession* session(size_t index) const { return sessions_[index]; }
  // Timers pending on the shards' loops (tests: nothing leaks). A session's
  // loop also holds the session's own (a reopen's back-off).
  size_t pending_timers() const;
  // Tests: returns once every shard's loop has run what was posted to it
  // before the call (the writes queued for a loop turn have reached the
  // sessions), or after `timeout`; false then. Not from a loop thread.
  bool AwaitLoops(std::chrono::milliseconds timeout) const;
  // When this replica granted the hold of the node at `path` (wall clock),
  // or 0 if it is not a hold announced by this replica.
  int64_t LocalGrantUnixMs(const std::string& path) const;
  // Replaces a hold's metadata (the Proclaim RPC): INVALID_ARGUMENT,
  // NOT_FOUND (lease gone), FAILED_PRECONDITION (token is not the lease's).
  void Proclaim(const std::string& lease_id, uint64_t fencing_token,
                const std::map<std::string, std::string>& metadata,
                std::function<void(absl::Status)> done);
  const EngineOptions& options() const { return options_; }

 private:
  EngineShard& ShardOfSegment(const std::string& segment) const;
  EngineShard& ShardOfLease(const std::string& lease_id) const;
  EngineShard& ShardOfId(uint64_t id) const { return *shards_[id % shards_.size()]; }

  const EngineOptions options_;
  const std::vector<ZkSession*> sessions_;
  // Each shard's loop: its session's.
  std::vector<EventLoop*> loops_;
  std::atomic<uint64_t> next_id_{0};  // the shards' contender ids (arrival order)

  // The pool serves when every shard does. The shards report from their
  // own loops; their reports, the listener and these are the first
  // shard's loop's alone (no lock), so its calls keep the changes' order.
  void OnShardServing(size_t index, bool serving);
  std::function<void(bool)> serving_listener_;
  std::vector<bool> shard_serving_;
  bool last_serving_ = false;

  // One per session, fixed. Last: destroyed first, while what their
  // listeners reach (the pool's serving state, next_id_) still exists.
  std::vector<std::unique_ptr<EngineShard>> shards_;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_LOCK_ENGINE_H_
