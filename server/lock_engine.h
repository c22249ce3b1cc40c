// LockEngine: fair, herd-free locks over a pool of ZooKeeper sessions.
//
// One Contender per Acquire: an EPHEMERAL_SEQUENTIAL node under the lock's
// CONTAINER node, listed once, then advanced by watching exactly the node that
// blocks it (see ordering.h). The engine is a state machine per contender
// driven by ZooKeeper completions, watches, session events and timers; it
// never blocks those threads. All state is guarded by one mutex; events reach
// sinks outside it, in the order they were produced. Thread-safe.
//
// Each lock lives on one session of the pool (SessionIndexFor its name; see
// session_slot.h); a session's failure affects only the locks on it.
//
// Where each rule lives: the ordering rule (who holds, whom a waiter
// watches) is the pure function in ordering.h; the per-lock ordered view in
// lock_queue.h; the contender state machine in lock_engine.cc; the session
// bookkeeping (connect, suspend, expiry, heartbeat, bootstrap) in
// lock_engine_session.cc; the RPCs that do not contend (Release and
// KeepAlive by lease id, Describe, List) in lock_engine_admin.cc.
//
// Knowledge shared on this replica: one ordered view per lock (LockQueue),
// shared by the replica's contenders on it. A departure is one erase, and
// only the contender directly behind it re-decides. Listings are pipelined
// behind creates and coalesced per lock (one listing in flight per lock
// covers every create sent before it).
#ifndef TURNSTILE_SERVER_LOCK_ENGINE_H_
#define TURNSTILE_SERVER_LOCK_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/lock_name.h"
#include "server/lock_queue.h"
#include "server/ordering.h"
#include "server/session_slot.h"
#include "server/timer_queue.h"
#include "server/zk_session.h"

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

// Receives the engine's measurements (metrics). Called with the engine's lock
// held: implementations must be quick and must not call the engine.
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

// Receives one contender's events. Called outside the engine's lock, never
// concurrently for one sink. OnFinish is called exactly once and last, unless
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
  size_t contenders = 0;           // local contenders with any state
  size_t holders = 0;
};

class LockEngine {
 public:
  // The sessions and `timers` must outlive the engine. Installs the session
  // listeners: construct the engine before starting the sessions. At least
  // one session; a lock's session is sessions[SessionIndexFor(segment, n)].
  LockEngine(std::vector<ZkSession*> sessions, TimerQueue* timers, EngineOptions options);
  LockEngine(ZkSession* zk, TimerQueue* timers, EngineOptions options)
      : LockEngine(std::vector<ZkSession*>{zk}, timers, std::move(options)) {}
  ~LockEngine();
  LockEngine(const LockEngine&) = delete;
  LockEngine& operator=(const LockEngine&) = delete;

  // Validates `params` (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE)
  // before touching ZooKeeper, then starts contending. Returns the
  // contender id used by Release/Abandon.
  absl::StatusOr<uint64_t> Open(const AcquireParams& params,
                                std::shared_ptr<ContenderSink> sink);
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
  void KeepAlive(const std::string& lease_id,
                 std::function<void(absl::StatusOr<Millis>)> done);
  // Asks the holder of a lease to let go: its stream gets REVOKE_REQUESTED
  // (wherever it is served); it decides. NOT_FOUND if the lease is gone.
  // `identity` (the caller's verified identity, "" without mutual TLS)
  // qualifies the requester the holder is shown: a requester is then only
  // a label beside who really asked.
  void Revoke(const std::string& lease_id, const std::string& requester,
              const std::string& reason,
              std::function<void(absl::Status, const std::string& holder_identity)> done,
              const std::string& identity = "");
  void Describe(const std::string& name,
                std::function<void(absl::StatusOr<LockDescription>)> done);
  // `visible` (optional): only names it accepts count and are returned
  // (a policy's view), so `limit` and `truncated` are about visible names.
  void List(const std::string& prefix, int limit,
            std::function<void(absl::StatusOr<LockList>)> done,
            std::function<bool(const std::string&)> visible = nullptr);
  // List checks candidate lock nodes this many at a time.
  static constexpr size_t kListBatch = 128;
  // The longest revocation reason (Revoke, AcquireOpen.revoke_reason).
  static constexpr size_t kMaxRevokeReasonBytes = 256;
  // INVALID_ARGUMENT naming the field and its limit for any Acquire input
  // out of range (server/acquire_validate.cc). Pure.
  static absl::Status ValidateParams(const AcquireParams& p, const EngineLimits& lim);
  static absl::Status ValidateMetadata(const std::map<std::string, std::string>& metadata,
                                       const EngineLimits& lim);
  static constexpr Millis kMaxLockDelay{60000};

  // SIGTERM: refuse new contenders, end every wait with UNAVAILABLE.
  void BeginDrain();
  // After the drain timeout: every remaining holder gets LOST(SHUTDOWN).
  void EndDrain();

  // Serving = every session of the pool connected with the root present,
  // and not draining.
  bool serving() const;
  // The pool's size, and the index of the session that serves `name`.
  size_t session_count() const { return slots_.size(); }
  size_t SessionIndexOf(const std::string& name) const;
  // Called (outside the lock) whenever serving() changes.
  void SetServingListener(std::function<void(bool)> listener);
  EngineStats stats() const;
  // Per-lock waiters and holders of this replica, exact at the call.
  std::vector<LockLoad> LockLoads() const;
  // Set before the first Open; `observer` must outlive the engine's use.
  void SetObserver(EngineObserver* observer) { observer_ = observer; }
  // Session events of the pool (for LockObservers): `listener` gets the
  // session's index and the event, outside the lock, in order, after the
  // engine handled it. Add before the sessions start.
  void AddSessionListener(std::function<void(size_t index, SessionEvent)> listener);
  ZkSession* session(size_t index) const { return slots_[index].zk; }
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
  // One List call in progress: candidates in name order, checked in batches.
  struct ListJob {
    std::vector<std::pair<std::string, std::string>> names;  // name, znode segment
    size_t limit = 0;
    ZkSession* zk = nullptr;  // the session that answers this List
    std::function<void(absl::StatusOr<LockList>)> done;
    std::mutex mu;
    size_t next = 0;         // first candidate not yet asked about
    size_t left = 0;         // GUARDED_BY(mu) answers missing in this batch
    std::vector<bool> live;  // GUARDED_BY(mu) this batch's answers
    LockList out;            // GUARDED_BY(mu)
  };
  void ListBatch(std::shared_ptr<ListJob> job);

  enum class State {
    kPendingCreate,  // no node; create not yet issued (no session)
    kCreating,       // create in flight
    kCreateUnknown,  // create's reply lost: search for our node by uid
    kListing,        // getChildren in flight
    kWaiting,        // watching the node that blocks us
    kHeld,
    kDeleting,       // ending: deleting our node
  };
  struct Contender;
  using ContenderPtr = std::unique_ptr<Contender>;

  void OnSessionEvent(SessionSlot* slot, SessionEvent e);
  void OnConnected(SessionSlot* slot);
  void OnDisconnected(SessionSlot* slot);
  void OnExpired(SessionSlot* slot);
  void ConfirmResume(Contender* c);
  void Bootstrap(SessionSlot* slot);
  void EnsurePath(SessionSlot* slot, size_t index, std::vector<std::string> paths);
  // Schedules the next heartbeat tick of `slot`.
  void Heartbeat(SessionSlot* slot);
  // Sends a sync (unless one is in flight): its success proves the leader
  // heard from the session after it was sent.
  void SendHeartbeat(SessionSlot* slot);
  // Contact confirmed: ends an in-doubt period, steps stalled contenders,
  // refreshes the validity of the slot's holders on their streams.
  void OnContact(SessionSlot* slot);
  // How often a holder hears STILL_HELD, and within what it must.
  static Millis HeartbeatInterval(const SessionSlot& slot);
  static Millis RefreshWithin(const SessionSlot& slot);
  void StepStalled(SessionSlot* slot);
  // Holds of `slot` are in doubt (disconnected, or heartbeat overdue):
  // SUSPENDED now, LOST when the safe time runs out.
  void Suspend(SessionSlot* slot);
  // Whether `c`'s grant may be announced now (contact trusted); otherwise
  // it waits, stalled, for a heartbeat to confirm contact.
  bool MayAnnounce(Contender* c);
  // Why a holder's node is gone when its deletion is seen: SESSION_EXPIRED
  // if the session may have expired by now (the replica was paused or cut
  // off past the safe time), else DELETED (someone deleted it).
  void LoseGoneNode(Contender* c, const char* deleted_message);
  SessionSlot* SlotOf(const std::string& segment);
  // A connected session (the lowest index), or null.
  SessionSlot* AnyConnected();

  // This replica's state of one lock.
  struct LockState {
    std::set<uint64_t> ids;  // local contenders
    LockQueue queue;
    bool list_in_flight = false;
    bool list_wanted = false;     // a create was sent after the listing in flight
    bool sweep_scheduled = false;  // a position sweep is due
    // Lock-delay: no grant before this. mark_pending: the lock node has
    // data (a listing said so) not read yet: grants wait for the read.
    TimerQueue::Clock::time_point delayed_until{};
    bool mark_pending = false;
  };

  void Step(Contender* c);
  void IssueCreate(Contender* c);
  void OnCreated(uint64_t id, uint64_t gen, ZkCode code, const std::string& path, const ZkStat& stat);
  void SearchOwnNode(Contender* c);
  void RequestList(const std::string& segment);
  void OnListed(const std::string& segment, uint64_t covers, uint64_t epoch,
                ZkCode code, const std::vector<std::string>& children);
  // `rank`: contenders ahead, when the caller knows it (-1: count).
  void Advance(Contender* c, bool from_listing, int64_t rank = -1);
  void ReportPosition(Contender* c, int64_t ahead);
  void RefreshPositions(const std::string& segment, size_t limit);
  void ScheduleSweep(const std::string& segment);
  void Arm(Contender* c);
  void Disarm(Contender* c);
  // Semaphores (issue 21): a waiter's watches from its decision; the first
  // waiter's watches on the holders other than its predecessor; the grant
  // mark; the refusal of a disagreeing contender.
  void WatchSemaphoreBlockers(Contender* c, const OrderDecision& decision);
  void ArmMore(Contender* c);
  void DisarmMore(Contender* c);
  void WriteGrantMark(Contender* c, int32_t version, std::string data, int attempts);
  void OnGrantMarked(Contender* c, ZkCode code, int32_t version);
  static std::string DisagreementMessage(const Contender* c, const LockQueue::Entry& other);
  // The contender node's data as created.
  std::string CreateData(const Contender* c) const;
  // `confirmed`: a read sent after the decision saw the node (a listing).
  void Grant(Contender* c, bool confirmed);
  void Announce(Contender* c);
  void Requeue(Contender* c);
  void ArmOwn(Contender* c);
  void DeferOwnWatch(Contender* c);
  void ScheduleOwnWatches(TimerQueue::Clock::time_point when);
  void OnDeleteFoundNoNode(Contender* c);
  void RenewTtl(Contender* c);
  // The ttl ran out: revoke unless the node's version shows a renewal.
  void CheckTtl(Contender* c);
  // A read of the own node saw `data` at `version`: a renewal and/or a
  // revocation request if its counters went up.
  void NoteOwnNode(Contender* c, const std::string& data, int32_t version);
  // The revocation request of waiter `c` to the holders ahead of it.
  void RequestRevokeOfHolders(Contender* c);
  // Lock-delay: no grant on `segment` for `delay` from now; the lock node
  // says so (for Describe and contenders of other replicas).
  void StartLockDelay(const std::string& segment, const std::string& lock_path, Millis delay,
                      const std::string& released);
  // Reads the lock node's mark (a listing saw data on it), then re-decides.
  void ReadLockMark(const std::string& segment);
  // Re-decides the local waiters of `segment` that have nothing ahead.
  void AdvanceUnblocked(const std::string& segment);
  void TellRevoke(Contender* c);
  // Writes a revocation request into the node at `path` (read-modify-write
  // with its version, retried on a race); `done` on this engine's thread.
  void WriteRevoke(ZkSession* zk, const std::string& path, const std::string& requester,
                   const std::string& reason, int attempts,
                   std::function<void(absl::Status, const std::string& holder_identity)> done);
  void Lose(Contender* c, LostReason reason, const std::string& message);
  void FailWait(Contender* c, const absl::Status& status);
  void EndContender(Contender* c);
  void IssueDelete(Contender* c);
  Contender* LocalSuccessor(Contender* c);
  void OnDeleted(Contender* c, const std::string* confirmed);
  void Forget(Contender* c);
  void Stall(Contender* c);
  void NoteGone(const std::string& segment, const std::string& node);
  void NoteAllBefore(const std::string& segment, int32_t seq);
  Contender* LocalOf(const LockQueue::Entry* e);
  void EnterQueue(Contender* c);
  Contender* Find(uint64_t id, uint64_t gen);
  Contender* FindByPath(const std::string& path);
  void UpdateServing();
  void NoteWaitEnded(Contender* c, AcquireResult result);
  void NoteHoldEnded(Contender* c);

  // Queues `fn` to run after the lock is released, in order.
  void Later(std::function<void()> fn);
  void Emit(Contender* c, LockEvent e);
  void Finish(Contender* c, absl::Status status);
  // Runs queued work outside the lock; call after every locked section.
  void Deliver();

  TimerQueue* const timers_;
  const EngineOptions options_;

  mutable std::mutex mu_;
  uint64_t next_id_ = 0;                                   // GUARDED_BY(mu_)
  std::map<uint64_t, ContenderPtr> contenders_;            // GUARDED_BY(mu_)
  std::map<std::string, LockState> locks_;                 // GUARDED_BY(mu_)
  uint64_t create_counter_ = 0;                            // GUARDED_BY(mu_)
  std::unordered_map<std::string, uint64_t> by_path_;      // GUARDED_BY(mu_)
  // The pool; never resized after construction, so pointers stay valid.
  std::vector<SessionSlot> slots_;                         // GUARDED_BY(mu_)
  bool draining_ = false;                                  // GUARDED_BY(mu_)
  bool last_serving_ = false;                              // GUARDED_BY(mu_)
  std::function<void(bool)> serving_listener_;             // GUARDED_BY(mu_)
  std::vector<std::function<void(size_t, SessionEvent)>> session_listeners_;  // GUARDED_BY(mu_)
  EngineStats stats_;                                      // GUARDED_BY(mu_)
  std::deque<std::function<void()>> pending_;              // GUARDED_BY(mu_)
  bool shut_down_ = false;                                 // GUARDED_BY(mu_)
  EngineObserver* observer_ = nullptr;
  // Set while a departure is being noted: the start of a handoff.
  std::optional<TimerQueue::Clock::time_point> handoff_from_;  // GUARDED_BY(mu_)
  // Set while a local handoff's transaction is being applied: the path of
  // the successor whose node it checked (see LockEngine::LocalSuccessor).
  std::optional<std::string> confirmed_path_;  // GUARDED_BY(mu_)
  // Holds whose own-node watch is deferred (DeferOwnWatch), in grant order,
  // and the one timer that arms them.
  static constexpr Millis kOwnWatchDelay{10};
  struct PendingOwnWatch {
    TimerQueue::Clock::time_point due;
    uint64_t id;
    uint64_t own_gen;
  };
  std::deque<PendingOwnWatch> own_pending_;   // GUARDED_BY(mu_)
  TimerQueue::TimerId own_batch_timer_ = 0;   // GUARDED_BY(mu_)

  std::mutex deliver_mu_;  // serializes Deliver(); never held with mu_ waiting on it
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_LOCK_ENGINE_H_
