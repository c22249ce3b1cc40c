// EngineShard::Waiters: the waiting side of a shard's locks. The ordered
// view per lock (LockQueue, shared by this replica's contenders on it),
// kept by listings pipelined behind creates and coalesced per lock; a
// waiter's advance (the ordering rule of ordering.h decides: hold, or
// watch the one node that blocks it), its position reports and their
// sweep; its one watch, and a stale view's probe, which reads every other
// replica's node still ahead at once; a semaphore's extra watches and grant
// mark; and lock-delay. shard_queue.cc holds the view, listings, advance,
// positions and lock-delay; shard_watch.cc the watches and probes.
//
// A part of its shard, as Writes and Liveness are (shard_writes.h): no
// lock, and every method takes the shard and REQUIRES its loop role, so
// -Wthread-safety checks the calls both ways against one capability. Its
// state is the shard's per-lock state (LockState, engine_shard_internal.h),
// which the granting side reads too. Internal to server/engine/.
#ifndef TURNSTILE_SERVER_ENGINE_SHARD_WAITERS_H_
#define TURNSTILE_SERVER_ENGINE_SHARD_WAITERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "server/engine/engine_shard.h"
#include "server/recipe/lock_queue.h"
#include "server/recipe/ordering.h"

namespace turnstile {

class EngineShard::Waiters {
 public:
  // A listing of the lock's children, sent behind the creates before it
  // (one in flight per lock covers every create sent before it).
  void RequestList(EngineShard* s, const std::string& segment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void OnListed(EngineShard* s, const std::string& segment, uint64_t covers, uint64_t epoch,
                ZkCode code, const std::vector<std::string>& children)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // `rank`: contenders ahead, when the caller knows it (-1: count).
  void Advance(EngineShard* s, Contender* c, bool from_listing, int64_t rank = -1)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void ReportPosition(EngineShard* s, Contender* c, int64_t ahead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void RefreshPositions(EngineShard* s, const std::string& segment, size_t limit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void ScheduleSweep(EngineShard* s, const std::string& segment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // A waiter's one watch, on the node that blocks it, set and cleared.
  void Arm(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void Disarm(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Semaphores (issue 21): a waiter's watches from its decision; the first
  // waiter's watches on the holders other than its predecessor; the grant
  // mark; the refusal of a disagreeing contender.
  void WatchSemaphoreBlockers(EngineShard* s, Contender* c, const OrderDecision& decision)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void ArmMore(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void DisarmMore(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void WriteGrantMark(EngineShard* s, Contender* c, int32_t version, std::string data, int attempts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  static std::string DisagreementMessage(const Contender* c, const LockQueue::Entry& other);
  // Lock-delay: no grant on `segment` for `delay` from now; the lock node
  // says so (for Describe and contenders of other replicas).
  void StartLockDelay(EngineShard* s, const std::string& segment, const std::string& lock_path,
                      Millis delay, const std::string& released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Reads the lock node's mark (a listing saw data on it), then re-decides.
  void ReadLockMark(EngineShard* s, const std::string& segment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Re-decides the local waiters of `segment` that have nothing ahead.
  void AdvanceUnblocked(EngineShard* s, const std::string& segment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void NoteGone(EngineShard* s, const std::string& segment, const std::string& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void NoteAllBefore(EngineShard* s, const std::string& segment, int32_t seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // A stale view's probe (shard_watch.cc): `c` waits for the one in
  // flight on its lock, or starts one; its end re-decides its waiters.
  void JoinProbe(EngineShard* s, Contender* c, LockState& lock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  void OnProbed(EngineShard* s, const std::string& segment, const std::shared_ptr<Probe>& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // A contender whose node exists takes its place in the lock's view.
  void EnterQueue(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_SHARD_WAITERS_H_
