// LockObservers: the Observe RPC's side of a replica (issue 23).
//
// Herd-free towards ZooKeeper however many observe: per observed lock (not
// per observer) the replica keeps one children watch on the lock node (an
// existence watch instead while the lock node does not exist) and one data
// watch per holder (one for a mutex: the leader). Any of them firing makes
// the replica read the lock again (one read in flight per lock; changes
// that arrive meanwhile are coalesced into one more read), and the new
// state goes to every local observer of the lock. Holders are a prefix of
// the queue (the ordering rule, ordering.h), so a read lists the lock and
// reads only the holders' nodes.
//
// Observers create no nodes. An observer that reads slower than the lock
// changes gets the latest state (each state carries a version; the gRPC
// adapter keeps at most one pending). When the lock's session disconnects
// or expires every observer is told the state is unknown; after the
// reconnect the lock is read again (watches are re-armed after an expiry).
//
// When the last observer of a lock leaves, its watches stay armed until
// they fire (ZooKeeper has no cheap way to drop a children watch from the C
// client); the entry lingers until then, so observing a lock again re-uses
// them instead of piling up watchers. Thread-safe.
//
// Per shard (issue 39): a lock's observer entries live in the
// ShardObservers of the engine shard that owns the lock (the same session,
// LockEngine::SessionIndexOf), each with its own lock; LockObservers only
// routes. No lock spans shards.
//
// Threads: a ShardObservers lives on its shard's loop (the session's,
// server/zk/event_loop.h), as the engine shard does. Start, Stop, Drain
// and stats post their work there (Drain and stats wait for it); the
// session's replies, watches and events run there already. So its state
// has one thread and no lock: -Wthread-safety checks it against the
// capability loop_role_ (no lock, the fact "this runs on the loop"), and
// with the engine's checks on a section opened off the loop aborts.
// LocalGrantUnixMs, called in a section, is a section of the engine shard
// on the same loop. Sinks are called after the section that queued them.
#ifndef TURNSTILE_SERVER_ENGINE_LOCK_OBSERVERS_H_
#define TURNSTILE_SERVER_ENGINE_LOCK_OBSERVERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "server/engine/lock_engine.h"
#include "server/zk/event_loop.h"

namespace turnstile {

// One observed state of a lock.
struct LockSnapshot {
  uint64_t version = 0;  // increases with every state of this lock on this replica
  bool known = false;    // false: the replica has no ZooKeeper contact
  std::string message;   // !known: why
  std::string name;
  int32_t max_holders = 0;
  std::vector<ContenderView> holders;  // grant order; info.granted_unix_ms where known
  int64_t waiters = 0;
};

class ObserveSink {
 public:
  virtual ~ObserveSink() = default;
  // Called on the lock's shard loop, between its work; states of one lock
  // come in order, but keep the highest version all the same.
  virtual void OnState(std::shared_ptr<const LockSnapshot> state) = 0;
  // The replica drains: end the stream (UNAVAILABLE).
  virtual void OnDrain() = 0;
};

struct ObserveStats {
  size_t locks = 0;       // observed locks (entries, lingering ones included)
  size_t observers = 0;   // open observers
  uint64_t reads = 0;     // lock reads (listings) so far
  uint64_t states = 0;    // distinct states fanned out
  uint64_t watch_events = 0;
};

// The observers of the locks of one engine shard (one session of the pool).
class ShardObservers {
 public:
  // Subscribes to the engine's session events of session `index`:
  // construct before the sessions start.
  ShardObservers(LockEngine* engine, size_t index);
  ShardObservers(const ShardObservers&) = delete;
  ShardObservers& operator=(const ShardObservers&) = delete;

  // Starts observing `name` (INVALID_ARGUMENT for a bad name, UNAVAILABLE
  // while draining). The sink's first state comes from a read of the lock
  // started after this call (never a cached one from before), then one
  // after every change. Returns the id for Stop.
  // From any thread; the observer joins on the loop.
  absl::StatusOr<uint64_t> Start(const std::string& name, std::shared_ptr<ObserveSink> sink)
      ABSL_LOCKS_EXCLUDED(loop_role_);
  void Stop(uint64_t id) ABSL_LOCKS_EXCLUDED(loop_role_);
  // SIGTERM: every observer is told to end; new ones are refused (one that
  // raced the drain is told to end as it joins). Returns once told.
  void Drain() ABSL_LOCKS_EXCLUDED(loop_role_);
  // Waits for the loop.
  ObserveStats stats() const ABSL_LOCKS_EXCLUDED(loop_role_);

 private:
  struct Observed {
    uint64_t epoch = 0;  // this entry's identity (a re-created entry gets a new one)
    std::string name, segment, lock_path;
    size_t session = 0;
    std::map<uint64_t, std::shared_ptr<ObserveSink>> sinks;
    // New observers, until a read that started after they came completes
    // (their first state is never the cache from before their call): by
    // id, with the last read id started before they came.
    struct Joining {
      std::shared_ptr<ObserveSink> sink;
      uint64_t after_read = 0;
    };
    std::map<uint64_t, Joining> joining;
    std::shared_ptr<const LockSnapshot> last;
    uint64_t reading = 0;  // the read in flight (0: none)
    bool read_wanted = false;
    bool children_watch = false;
    bool exists_watch = false;
    std::set<std::string> data_watched;  // holder nodes with a data watch
    // Nodes this replica saw become holders while observing: when.
    std::map<std::string, int64_t> seen_granted;
  };

  void OnSessionEvent(size_t index, SessionEvent e) ABSL_LOCKS_EXCLUDED(loop_role_);
  // Reads the lock unless a read is in flight (then once more after it).
  void Read(Observed* o, std::vector<std::function<void()>>* later)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  void OnListed(const std::string& segment, uint64_t epoch, uint64_t read, ZkCode code,
                const std::vector<std::string>& children) ABSL_LOCKS_EXCLUDED(loop_role_);
  void OnWatch(const std::string& segment, uint64_t epoch, int which, const std::string& node)
      ABSL_LOCKS_EXCLUDED(loop_role_);
  void Publish(Observed* o, std::shared_ptr<LockSnapshot> s,
               std::vector<std::function<void()>>* later) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  void FinishRead(Observed* o, std::vector<std::function<void()>>* later)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  // Observers, joining ones included.
  static bool Watched(const Observed& o) { return !o.sinks.empty() || !o.joining.empty(); }
  // Drops an entry with no observers and no watch armed.
  void MaybeForget(const std::string& segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);
  Observed* Find(const std::string& segment, uint64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);

  // The capability of running on the shard's loop (as the engine shard's:
  // engine_shard.h): nothing is locked.
  class ABSL_LOCKABLE LoopRole {};
  // A section on the loop; with checks on, aborts off it.
  class ABSL_SCOPED_LOCKABLE OnLoop {
   public:
    explicit OnLoop(const ShardObservers* o) ABSL_EXCLUSIVE_LOCK_FUNCTION(o->loop_role_);
    ~OnLoop() ABSL_UNLOCK_FUNCTION() {}
    OnLoop(const OnLoop&) = delete;
    OnLoop& operator=(const OnLoop&) = delete;
  };
  // Observer `id` joins `name` (Start's work, on the loop).
  void Join(uint64_t id, const std::string& name, const std::string& segment,
            std::shared_ptr<ObserveSink> sink, std::vector<std::function<void()>>* later)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_);

  LockEngine* const engine_;
  const size_t index_;  // its session in the engine's pool
  EventLoop* const loop_;  // that session's
  const bool checks_;
  mutable LoopRole loop_role_;
  std::atomic<uint64_t> next_id_{0};   // observer ids
  std::atomic<bool> draining_{false};  // Start refuses
  uint64_t next_read_ ABSL_GUARDED_BY(loop_role_) = 0;  // read ids, increasing
  uint64_t next_epoch_ ABSL_GUARDED_BY(loop_role_) = 0;
  // By segment. An Observed reached through a pointer is the loop's too:
  // every function that takes one REQUIRES loop_role_.
  std::map<std::string, Observed> locks_ ABSL_GUARDED_BY(loop_role_);
  std::unordered_map<uint64_t, std::string> by_id_ ABSL_GUARDED_BY(loop_role_);
  bool drained_ ABSL_GUARDED_BY(loop_role_) = false;  // Drain's work ran
  ObserveStats stats_ ABSL_GUARDED_BY(loop_role_);
};

// The Observe RPC's entry: routes each call to the ShardObservers of the
// lock's shard. Ids name their shard (id % shards), as contender ids do.
class LockObservers {
 public:
  // One ShardObservers per session of `engine`: construct before the
  // sessions start.
  explicit LockObservers(LockEngine* engine);
  LockObservers(const LockObservers&) = delete;
  LockObservers& operator=(const LockObservers&) = delete;

  // ShardObservers::Start of the lock's shard.
  absl::StatusOr<uint64_t> Start(const std::string& name, std::shared_ptr<ObserveSink> sink);
  void Stop(uint64_t id);
  void Drain();
  ObserveStats stats() const;  // summed over the shards

 private:
  LockEngine* const engine_;
  std::vector<std::unique_ptr<ShardObservers>> shards_;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_LOCK_OBSERVERS_H_
