// Internal to the engine's translation units (engine_shard*.cc): the
// contender record and small shared helpers. Not part of the engine's interface.
#ifndef TURNSTILE_SERVER_ENGINE_ENGINE_SHARD_INTERNAL_H_
#define TURNSTILE_SERVER_ENGINE_ENGINE_SHARD_INTERNAL_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/engine/engine_shard.h"

namespace turnstile {
namespace engine_internal {

using Clock = EventLoop::Clock;

inline int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "/" + "/x-<16 hex>-<11 chars>" plus slack.
constexpr size_t kContenderPathOverhead = 40;

// Waiters this close to the front hear of every change of position.
constexpr size_t kFrontPositions = 12;

inline bool IsRetryable(ZkCode code) { return code == ZkCode::kConnectionLoss; }
inline bool IsSessionGone(ZkCode code) {
  return code == ZkCode::kSessionExpired || code == ZkCode::kClosing;
}

// Every prefix of an absolute path, shortest first ("/a/b" -> "/a", "/a/b").
inline std::vector<std::string> PathPrefixes(const std::string& path) {
  std::vector<std::string> out;
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') out.push_back(path.substr(0, i));
  }
  return out;
}

// The engine's delete transactions, composed over the seam's generic
// multi: [set `mark_path`'s data to `mark_data`,] delete `path`[, check
// that `check_path` exists] (no mark when `mark_path` is empty, no check
// when `check_path` is). `done` gets the delete's code and the check's (kOk
// without a check): both kOk when applied; kNoNode on the delete: `path`
// was already gone; kNoNode on the check: that node is gone; kOther on the
// delete: the mark could not be set (nothing applied); a failure of the
// request as a whole as that code for both.
using DeleteCheckCallback = std::function<void(ZkCode delete_code, ZkCode check_code)>;
inline void DeleteInOneTransaction(ZkSession* zk, const std::string& path,
                                   const std::string& mark_path, std::string mark_data,
                                   const std::string& check_path, DeleteCheckCallback done) {
  std::vector<ZkMultiOp> ops;
  if (!mark_path.empty()) ops.push_back(ZkMultiOp::SetData(mark_path, std::move(mark_data)));
  const size_t del_at = ops.size();
  ops.push_back(ZkMultiOp::Delete(path));
  const bool check = !check_path.empty();
  if (check) ops.push_back(ZkMultiOp::Check(check_path));
  zk->Multi(std::move(ops), [done = std::move(done), del_at, check](
                                const std::vector<ZkMultiResult>& results) {
    ZkCode del = results[del_at].code;
    for (size_t i = 0; i < del_at; ++i) {
      // The mark failed (a code of its own, not the request's): nothing applied.
      if (results[i].code != ZkCode::kOk && results[i].code != del) del = ZkCode::kOther;
    }
    done(del, check ? results[del_at + 1].code : ZkCode::kOk);
  });
}

}  // namespace engine_internal

// One Acquire stream's contender: its node, its place in the state machine
// (EngineShard::State) and what it watches.
struct EngineShard::Contender {
  uint64_t id = 0;
  AcquireParams params;
  std::string segment;    // encoded lock name
  const std::string* root = nullptr;  // the engine's root (options_.root)
  SessionSlot* slot = nullptr;  // the pool's session for this lock
  int64_t started_unix_ms = 0;  // ContenderInfo.started_unix_ms (Open)
  std::shared_ptr<ContenderSink> sink;  // null once ended or abandoned
  // Bumped whenever an operation in flight becomes stale (re-arm, reset).
  uint64_t gen = 0;
  std::optional<engine_internal::Clock::time_point> handoff_from;  // blocker known gone
  // Waiting for its lock's probe (Advance) during a handoff that began then:
  // kept for the grant the probe decides.
  std::optional<engine_internal::Clock::time_point> probed_from;
  size_t path_bytes = 0;  // counted in slot->watched_path_bytes
  std::string node;  // own node name, once known
  uint64_t czxid = 0;
  // Order of the last create sent: a listing covers it if sent after it.
  uint64_t create_order = 0;
  std::string watching;     // the node ahead that blocks it
  uint64_t watch_key = 0;   // ZkSession key of that watch (for RemoveWatch)
  // A semaphore's first waiter watches every holder ahead of it:
  // `watching` is its predecessor, these the other holders (node, watch
  // key; 0 until armed), with their own generation; their path bytes are
  // counted in slot->watched_path_bytes while watched.
  std::vector<std::pair<std::string, uint64_t>> more_watching;
  uint64_t more_gen = 0;
  size_t more_path_bytes = 0;
  int64_t granted_unix_ms = 0;  // wall clock of the announcement (Describe)
  // The own-node read (grant confirmation and the holder's watch) has its
  // own generation: operations of the hold (delete, TTL) do not make it stale.
  uint64_t own_gen = 0;
  int64_t last_position = -1;  // last QUEUED position sent
  engine_internal::Clock::time_point last_position_at;
  EventLoop::TimerId wait_timer = 0;
  EventLoop::TimerId ttl_timer = 0;
  engine_internal::Clock::time_point ttl_deadline;
  // The own node's renewal and revocation counters last seen (ContenderInfo).
  int64_t seen_renewals = 0;
  int64_t seen_revoke_id = 0;
  int64_t seen_proclaims = 0;
  // The latest revocation request seen: who and why (rare; not kept inline).
  std::unique_ptr<std::pair<std::string, std::string>> revoke_seen;
  int64_t blocker_delay_ms = 0;  // the lock-delay of the node it watches
  EventLoop::TimerId delay_timer = 0;  // re-decides when a lock-delay ends
  // When the holder was last told its validity (ACQUIRED, STILL_HELD).
  engine_internal::Clock::time_point refreshed_at;
  // Metrics.
  engine_internal::Clock::time_point opened_at = engine_internal::Clock::now();
  engine_internal::Clock::time_point granted_at;

  // Flags and small fields together, after the 8-byte ones: no padding
  // holes between them (a contender per waiter: W5 keeps 20,000).
  // Its node's uid (NewContenderUid: 16 hex chars), inline: a std::string
  // of 16 would take its 32 bytes and a heap block besides.
  std::array<char, kContenderUidLen> uid{};
  int32_t seq = 0;
  int create_attempts = 0;
  // The own node's data version the last renewal was counted at: a remote
  // KeepAlive rewrites the data, so a higher version is a renewal, however
  // (or whether) its watch event arrived.
  int32_t renewed_version = 0;
  State state = State::kPendingCreate;  // changed only by SetState
  Tally tally = Tally::kNone;  // how its lock's load counts it (Retally)
  bool stalled = false;    // an operation failed with connection loss
  bool abandoned = false;  // ended while its create was in flight
  bool suspended = false;
  // Its own node was seen deleted; a sync is telling whether the session
  // itself ended (LoseGoneNode). No STILL_HELD meanwhile.
  bool node_gone = false;
  bool announced = false;  // kHeld and told ACQUIRED (see Grant)
  bool probe_wanted = false;    // a read just found its blocker gone (Arm)
  bool probe_saw_node = false;  // a read of the probe, behind its reads, saw its node
  bool plain_delete = false;  // the local-handoff transaction failed: delete alone
  bool handoff_in_flight = false;  // the local-handoff transaction is in flight
  bool first_waiter = false;  // a semaphore's first waiter (more_watching)
  bool mark_written = false;    // a semaphore holder's grant mark is on its node
  bool revoke_told = true;  // the latest request was told (set false when one is seen)
  bool revoke_sent = false;  // a waiter's request to the holders was sent
  // Lock-delay.
  bool clean_end = false;    // the client asked to release (not lost)
  bool releasing_sent = false;  // kReleasing emitted (HalfClose)
  bool mark_failed = false;  // the clean-release mark could not be written
  bool own_read = false;        // ArmOwn ran since the grant (see DeferOwnWatch)
  bool delete_retried = false;  // a delete of its node got no answer once
  // The ttl ran out while contact was not trusted: read the version again
  // once it is (a renewal may have landed meanwhile).
  bool ttl_check_due = false;
  bool wait_noted = false;  // metrics: the wait's end was counted
  bool hold_open = false;   // metrics: a hold's start was counted

  absl::string_view uid_view() const { return absl::string_view(uid.data(), uid.size()); }
  std::string lock_path() const { return *root + "/" + segment; }
  std::string path() const { return lock_path() + "/" + node; }
  ZkSession* zk() const { return slot->zk; }
  bool waiting() const {
    return state == State::kPendingCreate || state == State::kCreating ||
           state == State::kCreateUnknown || state == State::kListing ||
           state == State::kWaiting || (state == State::kHeld && !announced);
  }
};

// This replica's state of one lock.
struct EngineShard::LockState {
  std::set<uint64_t> ids;  // local contenders
  LockQueue queue;
  bool list_in_flight = false;
  bool list_wanted = false;     // a create was sent after the listing in flight
  // The probe in flight (Advance): reads of the other replicas' entries
  // ahead of a waiter whose view proved stale. Null: none.
  std::shared_ptr<Probe> probe;
  bool sweep_scheduled = false;  // a position sweep is due
  // Lock-delay: no grant before this. mark_pending: the lock node has
  // data (a listing said so) not read yet: grants wait for the read.
  engine_internal::Clock::time_point delayed_until{};
  bool mark_pending = false;
  // Its load as published to scrapes (LockLoads), kept as contenders
  // change (Retally) so a scrape never counts contenders.
  std::string name;          // the lock's name (its first contender's)
  int64_t holders = 0;       // contenders counted Tally::kHolder
  int64_t waiters = 0;       // contenders counted Tally::kWaiter
  int32_t max_holders = 0;   // the highest semaphore N among its contenders so far
};

// A stale view's probe (EngineShard::Advance): reads without a watch of the
// other replicas' entries ahead of a waiter, sent together (one round trip;
// ZooKeeper answers them in order), and of the waiters' own nodes behind
// them (a grant decided from the probe is confirmed by them, see Grant).
struct EngineShard::Probe {
  uint64_t epoch = 0;  // the session's; replies of an older one are ignored
  int pending = 0;     // replies still due
  std::vector<std::string> gone;  // nodes found gone
  std::vector<std::pair<uint64_t, uint64_t>> waiters;  // (id, gen) it re-decides
  std::set<uint64_t> own_read;  // waiters whose own node it reads
  std::set<uint64_t> saw_own;   // ... and saw
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_ENGINE_SHARD_INTERNAL_H_
