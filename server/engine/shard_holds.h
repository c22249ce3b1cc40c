// EngineShard::Holds: how a shard's contenders hold and end. A grant (told
// only once contact is trusted), ACQUIRED, the holder's watch on its own
// node (deferred a moment, armed with others), STILL_HELD refreshes, TTL
// leases and their renewals, revocation requests, LOST; and every ending:
// a waiter's failure, a release's delete (with a lock-delay mark or a
// local handoff in one transaction, else batched by Writes), and the
// contender forgotten once its node is gone.
//
// A part of its shard, as Writes, Liveness and Waiters are
// (shard_writes.h): state of its own (the deferred own-node watches and
// their timer, the successor a handoff checked), no lock, and every method
// takes the shard and REQUIRES its loop role, so -Wthread-safety checks
// the calls both ways against one capability. Internal to server/engine/.
#ifndef TURNSTILE_SERVER_ENGINE_SHARD_HOLDS_H_
#define TURNSTILE_SERVER_ENGINE_SHARD_HOLDS_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "server/engine/engine_shard.h"

namespace turnstile {

class EngineShard::Holds {
 public:
  // A semaphore grant mark's write answered (shard_queue.cc writes it).
  void OnGrantMarked(EngineShard* s, Contender* c, ZkCode code, int32_t version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // `confirmed`: a read sent after the decision saw the node (a listing).
  void Grant(EngineShard* s, Contender* c, bool confirmed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // A contender whose node vanished before it was told it holds: it queues
  // again with a new node (as after a session expiry).
  void Requeue(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // A holder watches its own node: its deletion by someone else is LOST;
  // a data change is a KeepAlive (or a revocation request) made elsewhere.
  void ArmOwn(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // The holder's own delete found no node: LOST (deleted by someone else)
  // unless the delete was a retry, whose earlier attempt may have applied.
  void OnDeleteFoundNoNode(EngineShard* s, Contender* c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // A TTL lease renewed: its timer starts again.
  void RenewTtl(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // The ttl ran out: revoke unless the node's version shows a renewal.
  void CheckTtl(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // A read of the own node saw `data` at `version`: a renewal and/or a
  // revocation request if its counters went up.
  void NoteOwnNode(EngineShard* s, Contender* c, const std::string& data, int32_t version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // LOST with `reason`, then the contender ends.
  void Lose(EngineShard* s, Contender* c, LostReason reason, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // A waiter ends with `status` (timeout, busy, cancelled or another error).
  void FailWait(EngineShard* s, Contender* c, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Ends a contender whose sink is done: deletes its node if it has one
  // (or will have one: then the create's completion deletes it).
  void EndContender(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Deletes the contender's node: with a lock-delay mark or a local
  // handoff as one transaction, else a plain delete (Writes batches it).
  void IssueDelete(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // The node is gone: RELEASED, then the contender behind it re-decides.
  // `confirmed`: the successor whose node the same transaction checked.
  void OnDeleted(EngineShard* s, Contender* c, const std::string* confirmed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // Drops every trace of the contender on this replica (watches, timers,
  // its place in the view).
  void Forget(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);

 private:
  // ACQUIRED on the stream.
  void Announce(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // The own-node watch of a new hold, armed a moment later with others.
  void DeferOwnWatch(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // The one timer that arms the deferred own-node watches.
  void ScheduleOwnWatches(EngineShard* s, EventLoop::Clock::time_point when)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // REVOKE_REQUESTED on the holder's stream.
  void TellRevoke(EngineShard* s, Contender* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);
  // The local waiter behind `c` (by handoff_rules.h) that watches its node:
  // a release then checks that waiter's node in the delete's transaction.
  Contender* LocalSuccessor(EngineShard* s, Contender* c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_);

  // Reached only through the shard's holds_, on its loop.
  // Set while a local handoff's transaction is being applied: the path of
  // the successor whose node it checked (see LocalSuccessor).
  std::optional<std::string> confirmed_path_;
  // Holds whose own-node watch is deferred (DeferOwnWatch), in grant order,
  // and the one timer that arms them.
  static constexpr Millis kOwnWatchDelay{10};
  struct PendingOwnWatch {
    EventLoop::Clock::time_point due;
    uint64_t id;
    uint64_t own_gen;
  };
  std::deque<PendingOwnWatch> own_pending_;
  EventLoop::TimerId own_batch_timer_ = 0;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ENGINE_SHARD_HOLDS_H_
