// EngineShard: the lock engine of one ZooKeeper session of the pool (see
// lock_engine.h, which routes every call to its shard). Internal to
// server/engine/: only LockEngine and the engine's translation units
// include it.
//
// A shard owns its session's locks, contenders, counters and delivery
// queue, and lives on its session's loop (server/zk/event_loop.h): every
// entry point posts its work there, and the session's completions and
// watchers and the shard's timers run there already. So the shard's state
// has one thread and no lock; shards never wait for each other (a session
// in doubt or reconnecting stalls only its own locks).
//
// The analysis still checks who touches what (clang's -Wthread-safety,
// tests/thread_safety_check.sh): the state is GUARDED_BY the capability
// loop_role_, which is no lock but the fact "this shard's loop runs here".
// OnLoop acquires it and, with checks on, aborts off the loop or nested.
// Sinks, listeners and `done` callbacks run on the loop after the section
// that queued them (Later, Deliver), never inside one: they may call any
// entry point, which then runs in place.
//
// Where each rule lives: the ordering rule (who holds, whom a waiter
// watches) is the pure function in ordering.h; the per-lock ordered view in
// lock_queue.h; the contender state machine in engine_shard.cc (creating
// the node, the entry points), its part EngineShard::Waiters
// (shard_waiters.h: listings, advancing, positions in shard_queue.cc, a
// waiter's one watch in shard_watch.cc) and its part EngineShard::Holds
// (shard_holds.h: grants, holds, leases, endings); the session bookkeeping (connect, suspend,
// expiry, heartbeat, bootstrap) in its part EngineShard::Liveness
// (shard_liveness.h); the RPCs that do not contend (Release and
// KeepAlive by lease id, Describe, List) in engine_shard_admin.cc, the
// fencing-token check in engine_shard_check.cc; the kept
// loads in engine_shard_loads.cc; the shard's loop (OnLoop), its checks and delivery
// in engine_shard_lock.cc; the writes of one loop turn sent together (a
// multi of creates with the session's clock, a multi of deletes) in its
// part EngineShard::Writes (shard_writes.h), by the rules of
// write_batcher.h.
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
// and no listing beyond SPEC's (EngineShard::Waiters::Advance, shard_queue.cc).
#ifndef TURNSTILE_SERVER_ENGINE_ENGINE_SHARD_H_
#define TURNSTILE_SERVER_ENGINE_ENGINE_SHARD_H_

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
#include "server/engine/lock_engine.h"
#include "server/engine/session_slot.h"
#include "server/zk/event_loop.h"
#include "server/recipe/lock_name.h"
#include "server/recipe/lock_queue.h"
#include "server/recipe/ordering.h"
#include "server/zk/zk_session.h"

namespace turnstile {

class EngineShard {
 public:
  // `session` (index `index` of `count` in the pool), `loop` (where its
  // timers run: the session's own) and `ids` must outlive the shard. Installs the session's listener: construct
  // before starting the session. Contender ids are drawn from `ids` (shared
  // by the shards, so ids keep arrival order) as n * count + index: the id
  // names its shard (LockEngine routes by id % count).
  EngineShard(ZkSession* session, size_t index, size_t count, std::atomic<uint64_t>* ids,
              EventLoop* loop, const EngineOptions& options);
  ~EngineShard();
  EngineShard(const EngineShard&) = delete;
  EngineShard& operator=(const EngineShard&) = delete;

  // What LockEngine's methods of the same names do, for this shard's locks
  // (lock_engine.h says what each means).
  // Entry points. Those with a result answer it through `done` or the
  // sink, on the loop; each may be called from any thread.
  void Quiesce() ABSL_LOCKS_EXCLUDED(loop_role_);
  absl::StatusOr<uint64_t> Open(const AcquireParams& params,
                                std::shared_ptr<ContenderSink> sink) ABSL_LOCKS_EXCLUDED(loop_role_);
  void Release(uint64_t id) ABSL_LOCKS_EXCLUDED(loop_role_);
  void HalfClose(uint64_t id) ABSL_LOCKS_EXCLUDED(loop_role_);
  void Abandon(uint64_t id) ABSL_LOCKS_EXCLUDED(loop_role_);
  void ReleaseLease(const std::string& lease_id,
                    std::function<void(absl::Status, const std::string& holder_identity)> done)
      ABSL_LOCKS_EXCLUDED(loop_role_);
  void KeepAlive(const std::string& lease_id,
                 std::function<void(absl::StatusOr<Millis>)> done) ABSL_LOCKS_EXCLUDED(loop_role_);
  void Revoke(const std::string& lease_id, const std::string& requester,
              const std::string& reason,
              std::function<void(absl::Status, const std::string& holder_identity)> done,
              const std::string& identity) ABSL_LOCKS_EXCLUDED(loop_role_);
  void Describe(const std::string& name,
                std::function<void(absl::StatusOr<LockDescription>)> done) ABSL_LOCKS_EXCLUDED(loop_role_);
  // Reads only, on this shard's session (engine_shard_check.cc).
  void CheckToken(const std::string& name, uint64_t fencing_token, bool allow_stale,
                  std::function<void(absl::StatusOr<TokenCheck>)> done) const;
  // Reads only: any shard whose session is connected answers for all.
  void List(const std::string& prefix, int limit,
            std::function<void(absl::StatusOr<LockList>)> done,
            std::function<bool(const std::string&)> visible) ABSL_LOCKS_EXCLUDED(loop_role_);
  void BeginDrain() ABSL_LOCKS_EXCLUDED(loop_role_);
  void EndDrain() ABSL_LOCKS_EXCLUDED(loop_role_);
  bool serving() const ABSL_LOCKS_EXCLUDED(loop_role_);
  bool connected() const { return session_->connected(); }
  void SetServingListener(std::function<void(bool)> listener) ABSL_LOCKS_EXCLUDED(loop_role_);
  EngineStats stats() const ABSL_LOCKS_EXCLUDED(loop_role_);
  // stats(), in a section.
  EngineStats Stats() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // Appends this shard's loads to `out`.
  // Applies the changes since the last call to `published` (the caller's:
  // LockEngine::LoadsCache), then appends it to `out`.
  void LockLoads(std::map<std::string, LockLoad>* published, std::vector<LockLoad>* out)
      ABSL_LOCKS_EXCLUDED(loop_role_);
  void SetObserver(EngineObserver* observer) { observer_ = observer; }
  // `listener` gets this shard's index.
  void AddSessionListener(std::function<void(size_t index, SessionEvent)> listener);
  int64_t LocalGrantUnixMs(const std::string& path) const;
  void Proclaim(const std::string& lease_id, uint64_t fencing_token,
                const std::map<std::string, std::string>& metadata,
                std::function<void(absl::Status)> done) ABSL_LOCKS_EXCLUDED(loop_role_);

 private:
  // One List call in progress: candidates in name order, checked in
  // batches, one batch at a time (ListBatch).
  struct ListJob {
    std::vector<std::pair<std::string, std::string>> names;  // name, znode segment
    size_t limit = 0;
    ZkSession* zk = nullptr;  // the session that answers this List
    std::function<void(absl::StatusOr<LockList>)> done;
    size_t next = 0;  // first candidate not yet asked about
    LockList out;
  };
  // Asks about the next kListBatch candidates.
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
  struct Probe;  // engine_shard_internal.h
  using ContenderPtr = std::unique_ptr<Contender>;

  // Open's work on the loop: refuses through the sink, or admits.
  void OpenOnLoop(uint64_t id, AcquireParams p, const std::string& segment,
                  std::shared_ptr<ContenderSink> sink) ABSL_LOCKS_EXCLUDED(loop_role_);
  // This replica's contenders of the lock (a lock with none has no state:
  // a refusal leaves none behind).
  size_t LocalContenders(const std::string& segment) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  void Admit(uint64_t id, AcquireParams p, const std::string& segment, SessionSlot* slot,
             size_t path_bytes, std::shared_ptr<ContenderSink> sink)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // The shard's parts, each a class of its own over the shard's state
  // (their methods take the shard and require its loop role):
  // - the session's life and what it means for the contenders, and whether
  //   the shard serves (shard_liveness.h);
  // - the waiting side: the view, listings, advance, positions, a waiter's
  //   watch and probes, lock-delay (shard_waiters.h);
  // - grants, holds, leases, and how a contender ends (shard_holds.h);
  // - the writes of a loop turn sent together (shard_writes.h).
  class Liveness;
  class Waiters;
  class Holds;
  class Writes;
  SessionSlot* SlotOf(const std::string& segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // The shard's session (every lock of the shard lives on it); no lock
  // needed.
  ZkSession* SessionOf(const std::string& segment) const {
    CheckMine(segment);
    return session_;
  }
  // With checks on (--check-invariants, on in every test, or a build
  // without NDEBUG): abort unless the lock of `segment`, or the contender
  // `id`, belongs to this shard. SlotOf and SessionOf check the segment,
  // so every entry point naming a lock or a lease checks it was routed
  // here; Release, HalfClose and Abandon check the id.
  void CheckMine(const std::string& segment) const;
  void CheckMine(uint64_t id) const;

  // The capability of running on this shard's loop (as Chromium's
  // SequenceChecker): nothing is locked; it names, for the analysis, what
  // only the loop may touch.
  class ABSL_LOCKABLE LoopRole {};
  // A section on the shard's loop. With checks on, aborts unless this
  // thread runs the loop's work (EventLoop::OwnedHere), or if a section of
  // any shard is open on this thread already (work never nests: sinks and
  // listeners run between sections).
  class ABSL_SCOPED_LOCKABLE OnLoop {
   public:
    explicit OnLoop(const EngineShard* shard) ABSL_EXCLUSIVE_LOCK_FUNCTION(shard->loop_role_);
    ~OnLoop() ABSL_UNLOCK_FUNCTION();
    OnLoop(const OnLoop&) = delete;
    OnLoop& operator=(const OnLoop&) = delete;

   private:
    const EngineShard* const outer_;  // the section open before (null)
  };
  // Runs `fn` on the shard's loop: now if this thread runs it, else posted.
  void RunOnLoop(std::function<void()> fn) const;
  // RunOnLoop, and waits for it (never from a sink: it runs in place there).
  void RunOnLoopAndWait(std::function<void()> fn) const;
  // The session if connected, or null; no lock needed.
  ZkSession* AnyConnected() const { return session_->connected() ? session_ : nullptr; }

  struct LockState;  // this replica's state of one lock (engine_shard_internal.h)
  // What a contender counts as in its lock's load: a holder (kHeld,
  // announced or not), a waiter (waiting, with a stream to tell), or
  // nothing (ending, abandoned, forgotten).
  enum class Tally : uint8_t { kNone, kWaiter, kHolder };
  // Every change of a contender's state goes through here (Retally).
  void SetState(Contender* c, State s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // Counts `c` again in its lock's load and the engine's holders after its
  // state or stream changed; `gone`: it is being forgotten.
  void Retally(Contender* c, bool gone = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  static Tally TallyOf(const Contender& c, bool gone);
  // The loads by counting every contender (what the tallies must equal).
  std::map<std::string, LockLoad> CountLoads() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // With EngineOptions::check_invariants: aborts if a tally differs from a count.
  void CheckLoads() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);

  void Step(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  void OnCreated(uint64_t id, uint64_t gen, ZkCode code, const std::string& path,
                 const ZkStat& stat) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  void SearchOwnNode(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // The contender node's data as created.
  std::string CreateData(const Contender* c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // The revocation request of waiter `c` to the holders ahead of it.
  void RequestRevokeOfHolders(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // Writes a revocation request into the node at `path` (read-modify-write
  // with its version, retried on a race); `done` on this engine's thread.
  void WriteRevoke(ZkSession* zk, const std::string& path, const std::string& requester,
                   const std::string& reason, int attempts,
                   std::function<void(absl::Status, const std::string& holder_identity)> done);
  void Stall(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  Contender* LocalOf(const LockQueue::Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  Contender* Find(uint64_t id, uint64_t gen) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // The contenders of `ids` (a session's set), in id order: a snapshot, so
  // the caller may change them (and the set) while it goes through them.
  std::vector<Contender*> ContendersOf(const std::set<uint64_t>& ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // Every contender of the shard (all on its one session), in id order: a
  // snapshot, as ContendersOf.
  std::vector<Contender*> AllContenders() ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  Contender* FindByPath(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  void NoteWaitEnded(Contender* c, AcquireResult result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  void NoteHoldEnded(Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);

  // For lambdas that run synchronously inside a section (LockQueue's
  // ForFront, ReplaceWith...): tells the analysis what their caller holds.
  // Free (the section checked the thread).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK(loop_role_) {}

  // Queues `fn` to run after the section ends, in order.
  void Later(std::function<void()> fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  void Emit(Contender* c, LockEvent e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  void Finish(Contender* c, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // Runs queued work outside the section; call after every section. On
  // the loop; a call from inside delivery returns at once (the outer one
  // runs what was queued).
  void Deliver() ABSL_LOCKS_EXCLUDED(loop_role_);

  EventLoop* const loop_;  // the shard's timers
  const EngineOptions options_;
  // The shard's session, fixed at construction: read without the lock
  // (SessionOf, AnyConnected). Everything else about it is the shard's
  // state, in slots_.
  ZkSession* const session_;
  const bool checks_;   // CheckMine and OnLoop's check
  const size_t index_;  // in the pool
  const size_t count_;  // shards in the pool
  std::atomic<uint64_t>* const ids_;  // shared by the pool's shards

  mutable LoopRole loop_role_;
  std::map<uint64_t, ContenderPtr> contenders_ ABSL_GUARDED_BY(loop_role_);
  std::map<std::string, LockState> locks_ ABSL_GUARDED_BY(loop_role_);
  uint64_t create_counter_ ABSL_GUARDED_BY(loop_role_) = 0;
  std::unordered_map<std::string, uint64_t> by_path_ ABSL_GUARDED_BY(loop_role_);
  // One (the shard's session's), never resized after construction, so the
  // SessionSlot* that contenders and timers keep stay valid. A slot reached through such
  // a pointer is still guarded by loop_role_ (which the analysis cannot follow
  // through the pointer: every function that takes one REQUIRES loop_role_).
  std::vector<SessionSlot> slots_ ABSL_GUARDED_BY(loop_role_);
  bool draining_ ABSL_GUARDED_BY(loop_role_) = false;
  // Whether the shard serves as Liveness last found, for serving() off the loop.
  std::atomic<bool> serving_now_{false};
  EngineStats stats_ ABSL_GUARDED_BY(loop_role_);
  size_t holders_ ABSL_GUARDED_BY(loop_role_) = 0;  // contenders of Tally::kHolder
  // Locks whose load changed since the last LockLoads, and locks that
  // entered a lock-delay (stats().locks_in_delay counts only these).
  std::set<std::string> loads_changed_ ABSL_GUARDED_BY(loop_role_);
  std::set<std::string> delayed_locks_ ABSL_GUARDED_BY(loop_role_);
  // What Later queued, for Deliver to run after the section.
  std::deque<std::function<void()>> pending_ ABSL_GUARDED_BY(loop_role_);
  // Its parts (see Liveness above), fixed at construction; every method
  // of a part requires the loop role.
  const std::unique_ptr<Writes> writes_;
  const std::unique_ptr<Liveness> liveness_;
  const std::unique_ptr<Waiters> waiters_;
  const std::unique_ptr<Holds> holds_;
  bool shut_down_ ABSL_GUARDED_BY(loop_role_) = false;
  // Set before the first Open (SetObserver), then only read; called
  // inside sections.
  EngineObserver* observer_ = nullptr;
  // Set while a departure is being noted: the start of a handoff.
  std::optional<EventLoop::Clock::time_point> handoff_from_ ABSL_GUARDED_BY(loop_role_);

  // Deliver is running (on the loop): a nested call leaves the work to it.
  bool delivering_ = false;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_ENGINE_SHARD_H_
