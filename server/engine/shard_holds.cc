// Holding and letting go: the grant and its confirmation, a holder's
// watch on its own node (revocation, KeepAlive through other replicas,
// deletion by someone else), leases and their renewal, losing a hold,
// ending a contender (its node's delete, the local handoff to a successor
// of this replica), forgetting it. EngineShard::Holds (shard_holds.h).

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/common/flags.h"
#include "server/engine/engine_shard.h"
#include "server/engine/engine_shard_internal.h"
#include "server/engine/shard_holds.h"
#include "server/engine/shard_liveness.h"
#include "server/engine/shard_waiters.h"
#include "server/engine/shard_writes.h"
#include "server/recipe/handoff_rules.h"
#include "server/recipe/ordering.h"

namespace turnstile {

using namespace engine_internal;  // NOLINT(build/namespaces): the engine's own helpers

// The ordering rule says `c` holds. ACQUIRED is announced only once a read
// of its own node confirms the node still exists (Announce, from ArmOwn):
// when a session is closed under the replica, ZooKeeper deletes its nodes and
// fires their watches before the replica hears of the expiry, so a waiter
// could otherwise be told it holds a lock through a node that is gone.
//
// Two shortcuts skip that extra round trip, each with a read that was sent
// after the decision's cause and still saw the node:
// - a grant decided from a listing (sent behind the create): the listing
//   itself is that read, so ACQUIRED goes out at once;
// - a handoff between two contenders of this replica: the holder's delete
//   and a check of the successor's node are one transaction (LocalSuccessor,
//   IssueDelete), so the transaction's reply confirms the grant.
// - a grant decided from a stale view's probe (EngineShard::Advance): the
//   probe's read of the waiter's own node was sent behind the reads that
//   found the nodes ahead gone, and ZooKeeper answers them in order.
void EngineShard::Holds::Grant(EngineShard* s, Contender* c, bool confirmed) {
  if (confirmed_path_ && *confirmed_path_ == c->path()) {  // LocalSuccessor
    confirmed = true;
    ++s->stats_.handoffs_in_one_transaction;
  }
  s->waiters_->Disarm(s, c);
  s->SetState(c, State::kHeld);
  c->announced = false;
  c->handoff_from = s->handoff_from_;  // measured to the announcement
  c->watching.clear();
  c->suspended = false;
  c->own_read = false;
  // A mutex holder proves every earlier contender is gone.
  if (c->params.kind == ContenderKind::kExclusive)
    s->waiters_->NoteAllBefore(s, c->segment, c->seq);
  if (confirmed && s->liveness_->MayAnnounce(s, c)) Announce(s, c);
  if (c->params.kind == ContenderKind::kSemaphore) {
    // The grant mark first (it wakes the waiter behind): its success also
    // confirms the node, and the own watch is set after it, so the mark
    // wakes nobody on this side (OnGrantMarked).
    c->mark_written = false;
    if (c->granted_unix_ms == 0) c->granted_unix_ms = NowUnixMs();
    s->waiters_->WriteGrantMark(s, c, 0, s->CreateData(c), 5);
    return;
  }
  if (c->announced && c->params.ttl == Millis(0)) {
    DeferOwnWatch(s, c);
  } else {
    ArmOwn(s, c);  // the holder's watch on its own node (and, unconfirmed, the confirming read)
  }
}

// A semaphore holder's grant mark was written (or not).
void EngineShard::Holds::OnGrantMarked(EngineShard* s, Contender* c, ZkCode code, int32_t version) {
  if (code == ZkCode::kOk) {
    c->mark_written = true;
    // The mark is no renewal (NoteOwnNode counts version bumps).
    c->renewed_version = std::max(c->renewed_version, version);
    // A write after the decision that found the node: as a confirming read.
    if (!c->announced && s->liveness_->MayAnnounce(s, c)) Announce(s, c);
    if (c->announced && c->params.ttl == Millis(0)) {
      DeferOwnWatch(s, c);
    } else {
      ArmOwn(s, c);
    }
  } else if (code == ZkCode::kNoNode) {
    if (!c->announced) {
      Requeue(s, c);
    } else {
      s->liveness_->LoseGoneNode(s, c, "the lock's node was deleted outside this stream");
    }
  } else if (IsRetryable(code)) {
    s->Stall(c);  // Step writes the mark again
  }
  // Session gone: the expiry handling re-queues or loses the hold.
}

// A hold announced from a listing or a transaction that proved its node
// (the common, uncontended case) watches its own node only once it has
// lasted kOwnWatchDelay: most such holds are short, and the read and watch
// were a fourth ZooKeeper request per cycle (plus the notification of its
// own delete). What the watch is for still holds:
//   - a deletion by someone else (Release by lease id, an operator) is told
//     as LOST(DELETED) at most kOwnWatchDelay plus a round trip later;
//   - a release that finds the node already gone (in that window, or
//     before the watch's notification arrived) says
//     LOST(DELETED), never RELEASED (OnDeleteFoundNoNode): nothing held is
//     lost silently. A NO_NODE answer to the holder's own delete proves its
//     session alive, so it is a deletion by someone else, not an expiry;
//   - a revocation request written meanwhile is told once the read runs.
// Leases (ttl > 0) watch at once: renewals through other replicas are
// followed by the node's version.
void EngineShard::Holds::DeferOwnWatch(EngineShard* s, Contender* c) {
  // One timer for all of them (not one per hold: each would wake the timer
  // thread): holds are queued in grant order and armed in batches.
  own_pending_.push_back(PendingOwnWatch{Clock::now() + kOwnWatchDelay, c->id, c->own_gen});
  if (own_batch_timer_ == 0) ScheduleOwnWatches(s, own_pending_.front().due);
}

void EngineShard::Holds::ScheduleOwnWatches(EngineShard* s, EventLoop::Clock::time_point when) {
  own_batch_timer_ = s->loop_->Schedule(when, [this, s] {
    {
      OnLoop l(s);
      own_batch_timer_ = 0;
      if (s->shut_down_) return;
      // Holds due within half the delay are armed now too: the next run is
      // then at least that far off. Armed only at their due time, a stream
      // of short holds (one per W1 cycle, each due ~1 ms after the last)
      // woke the timer thread once per hold: 1.1 context switches per
      // cycle. A hold still gets its watch within kOwnWatchDelay.
      const auto horizon = Clock::now() + kOwnWatchDelay / 2;
      while (!own_pending_.empty() && own_pending_.front().due <= horizon) {
        const PendingOwnWatch p = own_pending_.front();
        own_pending_.pop_front();
        auto it = s->contenders_.find(p.id);
        if (it == s->contenders_.end()) continue;
        Contender* c = it->second.get();
        // Still the same hold, still unwatched (ArmOwn bumps own_gen).
        if (c->own_gen == p.own_gen && c->state == State::kHeld && c->announced && !c->own_read) {
          ArmOwn(s, c);
        }
      }
      if (!own_pending_.empty()) ScheduleOwnWatches(s, own_pending_.front().due);
    }
    s->Deliver();
  });
}

// The holder's own delete found no node. If the delete was answered the
// first time, the node was deleted by someone else: LOST, not RELEASED. This
// holds whether or not the hold watched its node: the watch's notification
// of that deletion may still be on its way when the release is sent (seen
// under load: RELEASED for a hold deleted through the other replica). Only a
// retried delete (an earlier attempt may have applied) is this release's own
// doing.
void EngineShard::Holds::OnDeleteFoundNoNode(EngineShard* s, Contender* c) {
  if (!c->sink || !c->announced || c->delete_retried) {
    OnDeleted(s, c, nullptr);
    return;
  }
  ++s->stats_.lost;
  if (s->observer_) s->observer_->OnLost(LostReason::kDeleted);
  LockEvent e;
  e.type = LockEvent::Type::kLost;
  e.reason = LostReason::kDeleted;
  e.message = "the lock's node was deleted outside this stream (Release by lease id, possibly "
              "through another replica, or an operator) before this release";
  s->Emit(c, e);
  s->Finish(c, absl::OkStatus());  // drops the sink: OnDeleted sends no RELEASED
  OnDeleted(s, c, nullptr);        // the node is gone: the contender behind re-decides
}

void EngineShard::Holds::Announce(EngineShard* s, Contender* c) {
  c->announced = true;
  s->loop_->Cancel(c->wait_timer);
  c->wait_timer = 0;
  ++s->stats_.granted;
  s->NoteWaitEnded(c, AcquireResult::kAcquired);
  c->granted_at = Clock::now();
  if (c->granted_unix_ms == 0) c->granted_unix_ms = NowUnixMs();
  c->hold_open = true;
  if (c->handoff_from && s->observer_) {
    s->observer_->OnHandoff(
        std::chrono::duration<double>(c->granted_at - *c->handoff_from).count());
  }
  LockEvent e;
  e.type = LockEvent::Type::kAcquired;
  e.lease_id = FormatLeaseId(c->segment, c->node);
  e.fencing_token = c->czxid;
  e.valid_for = c->params.ttl;
  e.session_timeout = c->zk()->session_timeout();
  e.safe_for = c->slot->SafeFor(Clock::now());
  e.refresh_within = Liveness::RefreshWithin(*c->slot);
  c->refreshed_at = Clock::now();
  s->Emit(c, e);
  if (c->params.ttl > Millis(0)) RenewTtl(s, c);
  TellRevoke(s, c);  // asked to let go before the grant was announced
}

// A contender whose node vanished before it was told it holds: it lost its
// place, so it queues again with a new node (as after a session expiry).
void EngineShard::Holds::Requeue(EngineShard* s, Contender* c) {
  auto it = s->by_path_.find(c->path());
  if (it != s->by_path_.end() && it->second == c->id) s->by_path_.erase(it);
  s->waiters_->Disarm(s, c);
  s->locks_[c->segment].queue.Erase(c->seq, c->node);
  c->node.clear();
  c->watching.clear();
  c->granted_unix_ms = 0;
  c->last_position = -1;
  c->stalled = false;
  c->create_attempts = 0;
  ++c->gen;
  s->SetState(c, State::kPendingCreate);
  ++s->stats_.requeued_lost_node;
  s->Step(c);
}

// A holder watches its own node: its deletion by someone else means the hold
// is gone (LOST, never a silent re-queue); a data change is a KeepAlive made
// through another replica.
void EngineShard::Holds::ArmOwn(EngineShard* s, Contender* c) {
  uint64_t id = c->id, gen = ++c->own_gen;
  c->own_read = true;
  auto find = [s](uint64_t id, uint64_t gen)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_) -> Contender* {
    auto it = s->contenders_.find(id);
    if (it == s->contenders_.end() || it->second->own_gen != gen) return nullptr;
    return it->second.get();
  };
  c->zk()->GetData(
      c->path(),
      [this, s, id, gen, find](WatchEventType type) {
        {
          OnLoop l(s);
          Contender* c = find(id, gen);
          if (c != nullptr && c->state == State::kDeleting && type == WatchEventType::kDeleted) {
            ++s->stats_.own_watch_fired_on_release;  // its own delete: it wakes nobody else
          }
          if (c == nullptr || c->state != State::kHeld || !c->announced) return;
          if (type == WatchEventType::kDeleted) {
            s->liveness_->LoseGoneNode(s, c,
                                    "the lock's node was deleted outside this stream (Release by "
                                    "lease id, possibly through another replica, or an operator)");
          } else {
            // A remote KeepAlive. The re-armed read's version counts it
            // (and any renewal that lands before the watch is back).
            ArmOwn(s, c);
          }
        }
        s->Deliver();
      },
      [this, s, id, gen, find](ZkCode code, const std::string& data, const ZkStat& stat) {
        {
          OnLoop l(s);
          Contender* c = find(id, gen);
          if (c == nullptr) return;
          if (c->state != State::kHeld) return;
          if (code == ZkCode::kOk) NoteOwnNode(s, c, data, stat.version);
          if (code == ZkCode::kOk && !c->announced) {
            if (s->liveness_->MayAnnounce(s, c)) Announce(s, c);
          } else if (code == ZkCode::kNoNode && !c->announced) {
            Requeue(s, c);
          } else if (code == ZkCode::kNoNode) {
            s->liveness_->LoseGoneNode(s, c, "the lock's node was deleted outside this stream");
          } else if (IsRetryable(code)) {
            s->Stall(c);
          }
        }
        s->Deliver();
      });
}

// KeepAlive and Revoke through any replica rewrite the node (read-modify-
// write with its version), counting renewals and revocation requests in its
// data: the owner follows the counters, so it misses neither, however many
// writes land between two of its reads. A version bump that neither counter
// explains is an older replica's KeepAlive (it rewrote the data unchanged):
// a renewal.
void EngineShard::Holds::NoteOwnNode(EngineShard* s, Contender* c, const std::string& data,
                                     int32_t version) {
  if (version <= c->renewed_version) return;
  c->renewed_version = version;
  bool renewal = true;
  if (absl::StatusOr<ContenderInfo> info = DecodeContenderInfo(data); info.ok()) {
    const bool revoked = info->revoke_id > c->seen_revoke_id;
    if (revoked) {
      c->seen_revoke_id = info->revoke_id;
      c->revoke_seen = std::make_unique<std::pair<std::string, std::string>>(
          info->revoke_by, info->revoke_reason);
      c->revoke_told = false;
    }
    // A Proclaim replaced the metadata: kept for a re-created node (after
    // a session expiry), and no renewal.
    const bool proclaimed = info->proclaims > c->seen_proclaims;
    if (proclaimed) {
      c->seen_proclaims = info->proclaims;
      c->params.metadata = info->metadata;
    }
    const bool renewed = info->renewals > c->seen_renewals;
    c->seen_renewals = std::max(c->seen_renewals, info->renewals);
    renewal = renewed || !(revoked || proclaimed);
  }
  if (!c->announced) return;  // Announce tells a pending revocation
  if (renewal && c->params.ttl > Millis(0)) RenewTtl(s, c);
  TellRevoke(s, c);
}

// REVOKE_REQUESTED for the latest request seen, once.
void EngineShard::Holds::TellRevoke(EngineShard* s, Contender* c) {
  if (c->revoke_told || !c->sink) return;
  c->revoke_told = true;
  ++s->stats_.revokes_delivered;
  if (s->observer_) s->observer_->OnRevokeDelivered();
  LockEvent e;
  e.type = LockEvent::Type::kRevokeRequested;
  if (c->revoke_seen) {
    e.requester = c->revoke_seen->first;
    e.revoke_reason = c->revoke_seen->second;
  }
  s->Emit(c, e);
}

void EngineShard::Holds::RenewTtl(EngineShard* s, Contender* c) {
  c->ttl_deadline = Clock::now() + c->params.ttl;
  c->ttl_check_due = false;
  s->loop_->Cancel(c->ttl_timer);
  uint64_t id = c->id;
  c->ttl_timer = s->loop_->Schedule(c->ttl_deadline, [this, s, id] {
    {
      OnLoop l(s);
      auto it = s->contenders_.find(id);
      if (it == s->contenders_.end()) return;
      Contender* c = it->second.get();
      c->ttl_timer = 0;
      if (c->state == State::kHeld && c->announced && Clock::now() >= c->ttl_deadline) {
        CheckTtl(s, c);
      }
    }
    s->Deliver();
  });
}

// Renewal follows the node's version: a KeepAlive through another replica
// rewrites the node, and its watch event reaches this replica late (after a
// reconnect) or not at all (it landed between the event and the re-armed
// watch). So before revoking, read the version; while contact is not
// trusted, wait for it (the suspend timer bounds the hold meanwhile).
void EngineShard::Holds::CheckTtl(EngineShard* s, Contender* c) {
  if (!c->slot->trusted(Clock::now())) {
    c->ttl_check_due = true;  // OnConnected / OnContact check again
    return;
  }
  c->ttl_check_due = false;
  uint64_t id = c->id;
  std::string path = c->path();
  c->zk()->GetData(path, nullptr, [this, s, id, path](ZkCode code, const std::string& data,
                                                   const ZkStat& stat) {
    {
      OnLoop l(s);
      auto it = s->contenders_.find(id);
      if (s->shut_down_ || it == s->contenders_.end()) return;
      Contender* c = it->second.get();
      if (c->state != State::kHeld || !c->announced || c->path() != path) return;
      if (code == ZkCode::kOk) {
        NoteOwnNode(s, c, data, stat.version);
        if (Clock::now() >= c->ttl_deadline) {
          Lose(s, c, LostReason::kLeaseExpired,
               absl::StrCat("no KeepAlive within the lease ttl of ",
                            FormatDuration(c->params.ttl)));
        }
      } else if (code == ZkCode::kNoNode) {
        s->liveness_->LoseGoneNode(s, c, "the lock's node was deleted outside this stream");
      } else {
        c->ttl_check_due = true;  // connection lost: check on the next contact
      }
    }
    s->Deliver();
  });
}

// Tells the holder first (it must stop now), then deletes its node.
void EngineShard::Holds::Lose(EngineShard* s, Contender* c, LostReason reason,
                      const std::string& message) {
  if (!c->announced) {
    // It was never told it holds: its wait ends instead.
    FailWait(s, c, absl::UnavailableError(message));
    return;
  }
  ++s->stats_.lost;
  if (s->observer_) s->observer_->OnLost(reason);
  LockEvent e;
  e.type = LockEvent::Type::kLost;
  e.reason = reason;
  e.message = message;
  s->Emit(c, e);
  s->Finish(c, absl::OkStatus());
  EndContender(s, c);
}

void EngineShard::Holds::FailWait(EngineShard* s, Contender* c, const absl::Status& status) {
  AcquireResult r = AcquireResult::kFailed;
  if (absl::IsDeadlineExceeded(status)) r = AcquireResult::kTimeout;
  if (absl::IsFailedPrecondition(status)) r = AcquireResult::kBusy;
  if (absl::IsCancelled(status)) r = AcquireResult::kCancelled;
  s->NoteWaitEnded(c, r);
  s->Finish(c, status);
  EndContender(s, c);
}

// Ends a contender whose sink is done: delete its node if it has one (or
// will have one: then the create's completion deletes it).
void EngineShard::Holds::EndContender(EngineShard* s, Contender* c) {
  if (c->waiting()) s->NoteWaitEnded(c, AcquireResult::kCancelled);  // abandoned
  if (c->state == State::kHeld) s->NoteHoldEnded(c);
  if (c->state == State::kHeld && c->announced && c->params.lock_delay > Millis(0)) {
    // Ended without the client asking (lost, revoked by lease id, the
    // client gone): the next grant waits the holder's lock-delay.
    s->waiters_->StartLockDelay(s, c->segment, c->lock_path(), c->params.lock_delay, "");
  }
  s->loop_->Cancel(c->wait_timer);
  s->loop_->Cancel(c->ttl_timer);
  c->wait_timer = c->ttl_timer = 0;
  switch (c->state) {
    case State::kPendingCreate:
      Forget(s, c);
      return;
    case State::kCreating:
    case State::kCreateUnknown:
      c->abandoned = true;  // its completion finds and deletes the node
      return;
    case State::kDeleting:
      return;
    default:
      s->SetState(c, State::kDeleting);
      // Waiters behind it advance when the delete has completed.
      if (c->slot->connected) {
        IssueDelete(s, c);
      } else {
        c->stalled = true;
      }
  }
}

// A local handoff, when this replica's waiter directly behind the holder is
// waiting on it: the holder's delete and a check that the successor's node
// exists go to ZooKeeper as one transaction (a multi: delete, then check).
// If it applies, the successor's node existed at the very moment the holder's
// node was gone, which is exactly what the confirming read of Grant proves
// (a read after the blocker's departure that saw the node), so the successor
// is announced from the multi's reply: one round trip for the handoff, with
// no read queued behind the delete. If the successor's node is gone (deleted
// by lease id or an operator, or its session ended), nothing was applied:
// the holder's node is deleted alone and the successor re-queues on the
// usual path (its confirming read finds no node).
EngineShard::Contender* EngineShard::Holds::LocalSuccessor(EngineShard* s, Contender* c) {
  if (c->plain_delete) return nullptr;
  // The rule (handoff_rules.h), then whether the one behind is a local
  // waiter that watches this node.
  Contender* next = s->LocalOf(
      HandoffSuccessor(s->locks_[c->segment].queue, c->seq, c->node, c->params.kind));
  if (next == nullptr || next->state != State::kWaiting || next->watching != c->node) {
    return nullptr;
  }
  return next;
}

void EngineShard::Holds::IssueDelete(EngineShard* s, Contender* c) {
  s->SetState(c, State::kDeleting);
  s->waiters_->Disarm(s, c);
  const uint64_t id = c->id, gen = ++c->gen;
  Contender* next = LocalSuccessor(s, c);
  // A clean release of a hold with a lock-delay says it was clean, in the
  // same transaction, so that waiters elsewhere do not wait the delay.
  const bool mark = c->clean_end && c->params.lock_delay > Millis(0) && !c->mark_failed;
  if (next != nullptr || mark) {
    std::string next_path = next != nullptr ? next->path() : "";
    c->handoff_in_flight = next != nullptr;
    auto done = [this, s, id, gen, next_path](ZkCode del, ZkCode check) {
      {
        OnLoop l(s);
        Contender* c = s->Find(id, gen);
        if (c == nullptr) return;
        c->handoff_in_flight = false;
        if (IsRetryable(del)) {
          c->delete_retried = true;
          s->Stall(c);
        } else if (del == ZkCode::kOk && check == ZkCode::kOk) {
          OnDeleted(s, c, next_path.empty() ? nullptr : &next_path);
        } else if (del == ZkCode::kOk) {
          // The successor's node is gone; nothing was applied.
          c->plain_delete = true;
          IssueDelete(s, c);
        } else if (del == ZkCode::kOther) {
          c->mark_failed = true;  // the lock node could not be marked: delete alone
          IssueDelete(s, c);
        } else if (del == ZkCode::kNoNode) {
          OnDeleteFoundNoNode(s, c);
        } else {
          OnDeleted(s, c, nullptr);  // gone with the session
        }
      }
      s->Deliver();
    };
    engine_internal::DeleteInOneTransaction(
        c->zk(), c->path(), mark ? c->lock_path() : "", mark ? EncodeLockMark(c->node, 0) : "",
        next_path, std::move(done));
    return;
  }
  // A plain delete: with the others of this loop turn (shard_writes.h).
  s->writes_->QueueDelete(s, c);
}

// The contender's node is gone: RELEASED, then the contender behind it
// re-decides. `confirmed`: the path of a successor whose node a check in the
// same transaction saw right after the delete (see LocalSuccessor).
void EngineShard::Holds::OnDeleted(EngineShard* s, Contender* c, const std::string* confirmed) {
  if (c->sink) {
    ++s->stats_.released;
    LockEvent e;
    e.type = LockEvent::Type::kReleased;
    s->Emit(c, e);
    s->Finish(c, absl::OkStatus());
  }
  std::string segment = c->segment, node = c->node;
  Forget(s, c);
  if (confirmed != nullptr) confirmed_path_ = *confirmed;
  s->waiters_->NoteGone(s, segment, node);
  confirmed_path_.reset();
}

void EngineShard::Holds::Forget(EngineShard* s, Contender* c) {
  s->waiters_->Disarm(s, c);
  s->loop_->Cancel(c->delay_timer);
  c->slot->watched_path_bytes -= c->path_bytes;
  s->loop_->Cancel(c->wait_timer);
  s->loop_->Cancel(c->ttl_timer);
  if (!c->node.empty()) {
    auto it = s->by_path_.find(c->path());
    if (it != s->by_path_.end() && it->second == c->id) s->by_path_.erase(it);
  }
  s->Retally(c, /*gone=*/true);
  s->loads_changed_.insert(c->segment);  // its first contender may change, or the lock go
  auto lk = s->locks_.find(c->segment);
  if (lk != s->locks_.end()) {
    lk->second.ids.erase(c->id);
    // The view is only kept while this replica has contenders on the lock
    // (a later contender lists again). A listing still in flight finds no
    // state and is dropped.
    if (lk->second.ids.empty()) {
      s->delayed_locks_.erase(c->segment);
      s->locks_.erase(lk);
    }
  }
  s->contenders_.erase(c->id);  // destroys *c
}

}  // namespace turnstile
