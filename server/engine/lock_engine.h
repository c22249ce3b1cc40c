// LockEngine: fair, herd-free locks over a pool of ZooKeeper sessions.
//
// One Contender per Acquire: an EPHEMERAL_SEQUENTIAL node under the lock's
// CONTAINER node, listed once, then advanced by watching exactly the node that
// blocks it (see ordering.h). The engine is a state machine per contender
// driven by ZooKeeper completions, watches, session events and timers; it
// never blocks those threads. All state is guarded by one mutex; events reach
// sinks outside it, in the order they were produced. Thread-safe.
//
// Lock order (clang's -Wthread-safety checks every GUARDED_BY and REQUIRES
// below; tests/thread_safety_check.sh): LockObservers::mu_ -> mu_ -> the
// TimerQueue's lock and each ZkSession's work queue and its process-wide
// watch registry (zk_session.cc). deliver_mu_ is only ever try-locked, and
// held while sinks and listeners run, so they may take any of these but
// never wait for delivery. Sinks, listeners and `done` callbacks run with
// no engine lock held.
//
// Each lock lives on one session of the pool (SessionIndexFor its name; see
// session_slot.h); a session's failure affects only the locks on it.
//
// Where each rule lives: the ordering rule (who holds, whom a waiter
// watches) is the pure function in ordering.h; the per-lock ordered view in
// lock_queue.h; the contender state machine in lock_engine.cc (creating
// the node, the entry points), lock_engine_queue.cc (listings, advancing,
// positions), lock_engine_watch.cc (a waiter's one watch) and
// lock_engine_hold.cc (grants, holds, leases, endings); the session
// bookkeeping (connect, suspend, expiry, heartbeat, bootstrap) in
// lock_engine_session.cc; the RPCs that do not contend (Release and
// KeepAlive by lease id, Describe, List) in lock_engine_admin.cc.
//
// Knowledge shared on this replica: one ordered view per lock (LockQueue),
// shared by the replica's contenders on it. A departure is one erase, and
// only the contender directly behind it re-decides. Listings are pipelined
// behind creates and coalesced per lock (one listing in flight per lock
// covers every create sent before it). A view may still hold another
// replica's nodes that left unseen: once a read finds one gone, the waiter
// reads every other replica's node still ahead of it at once, pipelined in
// one round trip, and forgets those gone: a handoff costs a constant number
// of round trips whatever the queue, each unseen departure at most one read,
// and no listing beyond SPEC's (LockEngine::Advance, lock_engine_queue.cc).
#ifndef TURNSTILE_SERVER_ENGINE_LOCK_ENGINE_H_
#define TURNSTILE_SERVER_ENGINE_LOCK_ENGINE_H_

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

#include "absl/status/status.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/recipe/lock_name.h"
#include "server/recipe/lock_queue.h"
#include "server/recipe/ordering.h"
#include "server/engine/session_slot.h"
#include "server/engine/timer_queue.h"
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
  // Tests: after every locked section, count every contender and abort if
  // a lock's published load (LockLoads) differs. O(contenders) per call.
  bool check_invariants = false;
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
  // For the replica's stop, once the gRPC server has stopped (before its
  // completion queue shuts down): no sink is called after this returns
  // (one being called now is waited for), and nothing more is done.
  // Without it, a stream cancelled by the shutdown could end another
  // stream's call (a grant's handoff, a waiter's failure) after that call's
  // queue had shut down, which gRPC aborts on.
  void Quiesce() ABSL_LOCKS_EXCLUDED(mu_, deliver_mu_);
  LockEngine& operator=(const LockEngine&) = delete;

  // Validates `params` (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE)
  // before touching ZooKeeper, then starts contending. Returns the
  // contender id used by Release/Abandon.
  absl::StatusOr<uint64_t> Open(const AcquireParams& params,
                                std::shared_ptr<ContenderSink> sink) ABSL_LOCKS_EXCLUDED(mu_);
  // The client asked to release (or to stop waiting): RELEASED if held,
  // then OnFinish(OK); a waiter gets OnFinish(OK) with no event. The node is
  // deleted.
  void Release(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // The client half-closed its stream without a release message. For a
  // holder with a lock-delay the end must be told from a broken or
  // cancelled stream (which the adapter may report just after the failed
  // read that looks like a half-close): the engine emits kReleasing and
  // keeps the hold; the adapter calls Release once that event is written
  // (the stream is alive: a clean release, no delay), or Abandon when the
  // stream turns out cancelled (the lock-delay starts). Anything else is
  // released at once, as by Release.
  void HalfClose(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // The client is gone: delete the node, call nothing more on the sink.
  void Abandon(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  // `done` also gets the released hold's verified identity (mutual TLS;
  // "" if none or unknown), so the caller can tell a release by someone
  // else.
  void ReleaseLease(const std::string& lease_id,
                    std::function<void(absl::Status, const std::string& holder_identity)> done)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Renews a lease; `done` gets how long it is valid from now.
  void KeepAlive(const std::string& lease_id,
                 std::function<void(absl::StatusOr<Millis>)> done) ABSL_LOCKS_EXCLUDED(mu_);
  // Asks the holder of a lease to let go: its stream gets REVOKE_REQUESTED
  // (wherever it is served); it decides. NOT_FOUND if the lease is gone.
  // `identity` (the caller's verified identity, "" without mutual TLS)
  // qualifies the requester the holder is shown: a requester is then only
  // a label beside who really asked.
  void Revoke(const std::string& lease_id, const std::string& requester,
              const std::string& reason,
              std::function<void(absl::Status, const std::string& holder_identity)> done,
              const std::string& identity = "") ABSL_LOCKS_EXCLUDED(mu_);
  void Describe(const std::string& name,
                std::function<void(absl::StatusOr<LockDescription>)> done) ABSL_LOCKS_EXCLUDED(mu_);
  // `visible` (optional): only names it accepts count and are returned
  // (a policy's view), so `limit` and `truncated` are about visible names.
  void List(const std::string& prefix, int limit,
            std::function<void(absl::StatusOr<LockList>)> done,
            std::function<bool(const std::string&)> visible = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // List checks candidate lock nodes this many at a time.
  static constexpr size_t kListBatch = 128;
  // The longest revocation reason (Revoke, AcquireOpen.revoke_reason).
  static constexpr size_t kMaxRevokeReasonBytes = 256;
  // INVALID_ARGUMENT naming the field and its limit for any Acquire input
  // out of range (server/engine/acquire_validate.cc). Pure.
  static absl::Status ValidateParams(const AcquireParams& p, const EngineLimits& lim);
  static absl::Status ValidateMetadata(const std::map<std::string, std::string>& metadata,
                                       const EngineLimits& lim);
  static constexpr Millis kMaxLockDelay{60000};

  // SIGTERM: refuse new contenders, end every wait with UNAVAILABLE.
  void BeginDrain() ABSL_LOCKS_EXCLUDED(mu_);
  // After the drain timeout: every remaining holder gets LOST(SHUTDOWN).
  void EndDrain() ABSL_LOCKS_EXCLUDED(mu_);

  // Serving = every session of the pool connected with the root present,
  // and not draining.
  bool serving() const ABSL_LOCKS_EXCLUDED(mu_);
  // The pool's size, and the index of the session that serves `name`.
  size_t session_count() const { return sessions_.size(); }
  size_t SessionIndexOf(const std::string& name) const;
  // Called (outside the lock) whenever serving() changes.
  void SetServingListener(std::function<void(bool)> listener) ABSL_LOCKS_EXCLUDED(mu_);
  EngineStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // Per-lock waiters and holders of this replica, exact at the call. Each
  // lock's load is kept as its contenders change; under the engine's lock
  // the call reads only the locks that changed since the previous call, so
  // a scrape costs grants nothing however many contenders wait.
  std::vector<LockLoad> LockLoads() ABSL_LOCKS_EXCLUDED(mu_, loads_mu_);
  // Set before the first Open; `observer` must outlive the engine's use.
  void SetObserver(EngineObserver* observer) { observer_ = observer; }
  // Session events of the pool (for LockObservers): `listener` gets the
  // session's index and the event, outside the lock, in order, after the
  // engine handled it. Add before the sessions start.
  void AddSessionListener(std::function<void(size_t index, SessionEvent)> listener);
  ZkSession* session(size_t index) const { return sessions_[index]; }
  // When this replica granted the hold of the node at `path` (wall clock),
  // or 0 if it is not a hold announced by this replica.
  int64_t LocalGrantUnixMs(const std::string& path) const;
  // Replaces a hold's metadata (the Proclaim RPC): INVALID_ARGUMENT,
  // NOT_FOUND (lease gone), FAILED_PRECONDITION (token is not the lease's).
  void Proclaim(const std::string& lease_id, uint64_t fencing_token,
                const std::map<std::string, std::string>& metadata,
                std::function<void(absl::Status)> done) ABSL_LOCKS_EXCLUDED(mu_);
  const EngineOptions& options() const { return options_; }

 private:
  // One List call in progress: candidates in name order, checked in batches.
  struct ListJob {
    std::vector<std::pair<std::string, std::string>> names;  // name, znode segment
    size_t limit = 0;
    ZkSession* zk = nullptr;  // the session that answers this List
    std::function<void(absl::StatusOr<LockList>)> done;
    absl::Mutex mu;
    size_t next ABSL_GUARDED_BY(mu) = 0;         // first candidate not yet asked about
    size_t left ABSL_GUARDED_BY(mu) = 0;         // answers missing in this batch
    std::vector<bool> live ABSL_GUARDED_BY(mu);  // this batch's answers
    LockList out ABSL_GUARDED_BY(mu);
  };
  // Asks about the next kListBatch candidates. REQUIRES: job->mu not held.
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
  struct Probe;  // lock_engine_internal.h
  using ContenderPtr = std::unique_ptr<Contender>;

  void OnSessionEvent(SessionSlot* slot, SessionEvent e);
  void OnConnected(SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnDisconnected(SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnExpired(SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ConfirmResume(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Bootstrap(SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnsurePath(SessionSlot* slot, size_t index, std::vector<std::string> paths)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Schedules the next heartbeat tick of `slot`.
  void Heartbeat(SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends a sync (unless one is in flight): its success proves the leader
  // heard from the session after it was sent.
  void SendHeartbeat(SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Contact confirmed: ends an in-doubt period, steps stalled contenders,
  // refreshes the validity of the slot's holders on their streams.
  void OnContact(SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How often a holder hears STILL_HELD, and within what it must.
  static Millis HeartbeatInterval(const SessionSlot& slot);
  static Millis RefreshWithin(const SessionSlot& slot);
  void StepStalled(SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds of `slot` are in doubt (disconnected, or heartbeat overdue):
  // SUSPENDED now, LOST when the safe time runs out.
  void Suspend(SessionSlot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `c`'s grant may be announced now (contact trusted); otherwise
  // it waits, stalled, for a heartbeat to confirm contact.
  bool MayAnnounce(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a holder's node is gone when its deletion is seen: SESSION_EXPIRED
  // if the session may have expired by now (the replica was paused or cut
  // off past the safe time), else DELETED (someone deleted it).
  void LoseGoneNode(Contender* c, const char* deleted_message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SessionSlot* SlotOf(const std::string& segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The session of `segment`'s lock; no lock needed (sessions_ is fixed).
  ZkSession* SessionOf(const std::string& segment) const;
  // A connected session (the lowest index), or null; no lock needed.
  ZkSession* AnyConnected() const;

  struct LockState;  // this replica's state of one lock (lock_engine_internal.h)
  // What a contender counts as in its lock's load: a holder (kHeld,
  // announced or not), a waiter (waiting, with a stream to tell), or
  // nothing (ending, abandoned, forgotten).
  enum class Tally : uint8_t { kNone, kWaiter, kHolder };
  // Every change of a contender's state goes through here (Retally).
  void SetState(Contender* c, State s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts `c` again in its lock's load and the engine's holders after its
  // state or stream changed; `gone`: it is being forgotten.
  void Retally(Contender* c, bool gone = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static Tally TallyOf(const Contender& c, bool gone);
  // The loads by counting every contender (what the tallies must equal).
  std::map<std::string, LockLoad> CountLoads() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With EngineOptions::check_invariants: aborts if a tally differs from a count.
  void CheckLoads() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void Step(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void IssueCreate(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnCreated(uint64_t id, uint64_t gen, ZkCode code, const std::string& path,
                 const ZkStat& stat) ABSL_LOCKS_EXCLUDED(mu_);
  void SearchOwnNode(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RequestList(const std::string& segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnListed(const std::string& segment, uint64_t covers, uint64_t epoch,
                ZkCode code, const std::vector<std::string>& children)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `rank`: contenders ahead, when the caller knows it (-1: count).
  void Advance(Contender* c, bool from_listing, int64_t rank = -1)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReportPosition(Contender* c, int64_t ahead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshPositions(const std::string& segment, size_t limit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleSweep(const std::string& segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Arm(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Disarm(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Semaphores (issue 21): a waiter's watches from its decision; the first
  // waiter's watches on the holders other than its predecessor; the grant
  // mark; the refusal of a disagreeing contender.
  void WatchSemaphoreBlockers(Contender* c, const OrderDecision& decision)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ArmMore(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DisarmMore(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteGrantMark(Contender* c, int32_t version, std::string data, int attempts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnGrantMarked(Contender* c, ZkCode code, int32_t version) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static std::string DisagreementMessage(const Contender* c, const LockQueue::Entry& other);
  // The contender node's data as created.
  std::string CreateData(const Contender* c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `confirmed`: a read sent after the decision saw the node (a listing).
  void Grant(Contender* c, bool confirmed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Announce(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Requeue(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ArmOwn(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeferOwnWatch(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleOwnWatches(TimerQueue::Clock::time_point when) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnDeleteFoundNoNode(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RenewTtl(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ttl ran out: revoke unless the node's version shows a renewal.
  void CheckTtl(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A read of the own node saw `data` at `version`: a renewal and/or a
  // revocation request if its counters went up.
  void NoteOwnNode(Contender* c, const std::string& data, int32_t version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The revocation request of waiter `c` to the holders ahead of it.
  void RequestRevokeOfHolders(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lock-delay: no grant on `segment` for `delay` from now; the lock node
  // says so (for Describe and contenders of other replicas).
  void StartLockDelay(const std::string& segment, const std::string& lock_path, Millis delay,
                      const std::string& released) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the lock node's mark (a listing saw data on it), then re-decides.
  void ReadLockMark(const std::string& segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-decides the local waiters of `segment` that have nothing ahead.
  void AdvanceUnblocked(const std::string& segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TellRevoke(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes a revocation request into the node at `path` (read-modify-write
  // with its version, retried on a race); `done` on this engine's thread.
  void WriteRevoke(ZkSession* zk, const std::string& path, const std::string& requester,
                   const std::string& reason, int attempts,
                   std::function<void(absl::Status, const std::string& holder_identity)> done);
  void Lose(Contender* c, LostReason reason, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailWait(Contender* c, const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndContender(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void IssueDelete(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Contender* LocalSuccessor(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnDeleted(Contender* c, const std::string* confirmed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Stall(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteGone(const std::string& segment, const std::string& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteAllBefore(const std::string& segment, int32_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stale view's probe (lock_engine_watch.cc): `c` waits for the one in
  // flight on its lock, or starts one; its end re-decides its waiters.
  void JoinProbe(Contender* c, LockState& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnProbed(const std::string& segment, const std::shared_ptr<Probe>& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Contender* LocalOf(const LockQueue::Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnterQueue(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Contender* Find(uint64_t id, uint64_t gen) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The contenders of `ids` (a session's set), in id order: a snapshot, so
  // the caller may change them (and the set) while it goes through them.
  std::vector<Contender*> ContendersOf(const std::set<uint64_t>& ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Contender* FindByPath(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateServing() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteWaitEnded(Contender* c, AcquireResult result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteHoldEnded(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // For lambdas that run synchronously under mu_ (LockQueue's ForFront,
  // ReplaceWith...): tells the analysis what their caller holds. Checked in
  // debug builds; free in release ones (leveldb's port::Mutex::AssertHeld).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK(mu_) {
#ifndef NDEBUG
    mu_.AssertHeld();
#endif
  }

  // Queues `fn` to run after the lock is released, in order.
  void Later(std::function<void()> fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(Contender* c, LockEvent e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(Contender* c, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs queued work outside the lock; call after every locked section.
  void Deliver() ABSL_LOCKS_EXCLUDED(mu_, deliver_mu_);

  TimerQueue* const timers_;
  const EngineOptions options_;
  // The pool's sessions, fixed at construction: read without the lock
  // (session(), SessionOf, AnyConnected). Everything else a slot holds is
  // the engine's state, in slots_.
  const std::vector<ZkSession*> sessions_;

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, ContenderPtr> contenders_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, LockState> locks_ ABSL_GUARDED_BY(mu_);
  uint64_t create_counter_ ABSL_GUARDED_BY(mu_) = 0;
  std::unordered_map<std::string, uint64_t> by_path_ ABSL_GUARDED_BY(mu_);
  // One per session, never resized after construction, so the SessionSlot*
  // that contenders and timers keep stay valid. A slot reached through such
  // a pointer is still guarded by mu_ (which the analysis cannot follow
  // through the pointer: every function that takes one REQUIRES mu_).
  std::vector<SessionSlot> slots_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool last_serving_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(bool)> serving_listener_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(size_t, SessionEvent)>> session_listeners_
      ABSL_GUARDED_BY(mu_);
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  size_t holders_ ABSL_GUARDED_BY(mu_) = 0;  // contenders of Tally::kHolder
  // Locks whose load changed since the last LockLoads, and locks that
  // entered a lock-delay (stats().locks_in_delay counts only these).
  std::set<std::string> loads_changed_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> delayed_locks_ ABSL_GUARDED_BY(mu_);
  // The loads LockLoads last published, by segment: a scrape copies these
  // outside mu_, and under mu_ reads only the locks that changed.
  absl::Mutex loads_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::map<std::string, LockLoad> published_loads_ ABSL_GUARDED_BY(loads_mu_);
  std::deque<std::function<void()>> pending_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Set before the first Open (SetObserver), then only read; called with
  // mu_ held.
  EngineObserver* observer_ = nullptr;
  // Set while a departure is being noted: the start of a handoff.
  std::optional<TimerQueue::Clock::time_point> handoff_from_ ABSL_GUARDED_BY(mu_);
  // Set while a local handoff's transaction is being applied: the path of
  // the successor whose node it checked (see LockEngine::LocalSuccessor).
  std::optional<std::string> confirmed_path_ ABSL_GUARDED_BY(mu_);
  // Holds whose own-node watch is deferred (DeferOwnWatch), in grant order,
  // and the one timer that arms them.
  static constexpr Millis kOwnWatchDelay{10};
  struct PendingOwnWatch {
    TimerQueue::Clock::time_point due;
    uint64_t id;
    uint64_t own_gen;
  };
  std::deque<PendingOwnWatch> own_pending_ ABSL_GUARDED_BY(mu_);
  TimerQueue::TimerId own_batch_timer_ ABSL_GUARDED_BY(mu_) = 0;

  // Serializes Deliver(): held while queued sink calls and listeners run,
  // so they run one at a time and in order. Only try-locked, and taken
  // before mu_ (never while holding it).
  absl::Mutex deliver_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_LOCK_ENGINE_H_
