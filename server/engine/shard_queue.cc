// The engine's view of each lock and a waiter's place in it: listings
// (one in flight per lock), entering the queue, re-deciding from the shared
// view (Advance, with the ordering rule of server/recipe/ordering.h), a
// semaphore first waiter's extra watches and grant marks, lock-delay, and
// QUEUED positions. EngineShard::Waiters (shard_waiters.h), with
// shard_watch.cc; the engine's lock rules hold here as in engine_shard.cc.

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/common/flags.h"
#include "server/engine/engine_shard.h"
#include "server/engine/engine_shard_internal.h"
#include "server/engine/shard_holds.h"
#include "server/engine/shard_waiters.h"
#include "server/engine/shard_liveness.h"
#include "server/recipe/ordering.h"
#include "server/recipe/queue_position.h"

namespace turnstile {

using namespace engine_internal;  // NOLINT(build/namespaces): the engine's own helpers

// One listing in flight per lock: it covers every create sent before it,
// so a burst of creates costs a few listings, not one each.
void EngineShard::Waiters::RequestList(EngineShard* s, const std::string& segment) {
  LockState& lock = s->locks_[segment];
  if (lock.list_in_flight) {
    lock.list_wanted = true;
    return;
  }
  lock.list_in_flight = true;
  lock.list_wanted = false;
  SessionSlot* slot = s->SlotOf(segment);
  const uint64_t covers = s->create_counter_, epoch = slot->epoch;
  slot->zk->GetChildrenStat(
      s->options_.root + "/" + segment,
      [this, s, segment, covers, epoch](ZkCode code, const std::vector<std::string>& children,
                                     const ZkStat& stat) {
        {
          OnLoop l(s);
          if (!s->shut_down_) {
            // Data on the lock node: a lock-delay may be running (started
            // by another replica). Grants wait until it is read.
            auto it = s->locks_.find(segment);
            if (code == ZkCode::kOk && stat.data_length > 0 && it != s->locks_.end() &&
                !it->second.mark_pending) {
              it->second.mark_pending = true;
              ReadLockMark(s, segment);
            }
            OnListed(s, segment, covers, epoch, code, children);
          }
        }
        s->Deliver();
      });
}

void EngineShard::Waiters::OnListed(EngineShard* s, const std::string& segment, uint64_t covers,
                                    uint64_t epoch, ZkCode code,
                                    const std::vector<std::string>& children) {
  auto it = s->locks_.find(segment);
  if (it == s->locks_.end() || epoch != s->SlotOf(segment)->epoch) return;
  LockState& lock = it->second;
  lock.list_in_flight = false;
  // The contenders this listing decides: listed after their create.
  std::vector<Contender*> covered;
  for (uint64_t id : lock.ids) {
    Contender* c = s->contenders_.at(id).get();
    if (c->state == State::kListing && c->create_order <= covers) covered.push_back(c);
  }
  if (code == ZkCode::kOk) {
    lock.queue.ReplaceWith(
        children,
        [&](const std::string& node) -> uint64_t {
          s->AssertHeld();
          auto p = s->by_path_.find(s->options_.root + "/" + segment + "/" + node);
          return p == s->by_path_.end() ? 0 : p->second;
        },
        [&](const LockQueue::Entry& e) {
          s->AssertHeld();
          // Created after this listing was sent: not in it, still here.
          Contender* c = s->LocalOf(&e);
          return c != nullptr && c->create_order > covers;
        });
    // Waiters whose blocker is no longer listed re-decide; local
    // contenders the listing should contain but does not lost their node.
    std::vector<Contender*> redo, gone;
    for (uint64_t id : lock.ids) {
      Contender* c = s->contenders_.at(id).get();
      if (c->node.empty()) continue;
      bool listed = lock.queue.Contains(c->seq, c->node);
      if (!listed && c->create_order <= covers &&
          (c->state == State::kListing || c->state == State::kWaiting)) {
        gone.push_back(c);
      } else if (c->state == State::kWaiting && !c->watching.empty()) {
        auto w = ParseContenderName(c->watching);
        bool blocker_gone = w && !lock.queue.Contains(w->sequence, c->watching);
        for (const auto& [node, key] : c->more_watching) {
          auto m = ParseContenderName(node);
          if (m && !lock.queue.Contains(m->sequence, node)) blocker_gone = true;
        }
        if (blocker_gone) redo.push_back(c);
      }
    }
    for (Contender* c : gone) {
      if (c->state == State::kListing) {
        s->holds_->FailWait(s, c, absl::AbortedError("this contender's node was deleted while it queued"));
      } else {
        s->holds_->Requeue(s, c);
      }
    }
    if (lock.queue.size() > s->options_.limits.max_contenders_per_lock) {
      for (Contender* c : covered) {
        if (c->state != State::kListing) continue;
        s->holds_->FailWait(s, c, absl::ResourceExhaustedError(absl::StrCat(
                        "lock \"", c->params.name, "\" has ", lock.queue.size() - 1,
                        " contenders; the limit is ", s->options_.limits.max_contenders_per_lock)));
      }
    }
    // Decide the covered contenders with their ranks, in one pass.
    std::unordered_map<uint64_t, int64_t> ranks;
    if (!covered.empty()) {
      lock.queue.ForFront(lock.queue.size(), [&](int64_t rank, int32_t, const LockQueue::Entry& e) {
        if (e.local_id != 0) ranks[e.local_id] = rank;
      });
    }
    for (Contender* c : covered) {
      if (c->state != State::kListing || s->Find(c->id, c->gen) == nullptr) continue;
      s->SetState(c, State::kWaiting);
      c->watching.clear();
      auto r = ranks.find(c->id);
      Advance(s, c, /*from_listing=*/true, r == ranks.end() ? -1 : r->second);
    }
    for (Contender* c : redo) {
      if (c->state == State::kWaiting) Advance(s, c, false);
    }
  } else if (IsRetryable(code)) {
    for (Contender* c : covered) s->Stall(c);  // Step() lists again
  } else if (code == ZkCode::kNoNode) {
    for (Contender* c : covered) {
      s->holds_->FailWait(s, c, absl::AbortedError("the lock node vanished while queueing"));
    }
  }
  // Creates sent while this listing was in flight need one sent after them.
  auto again = s->locks_.find(segment);
  if (again != s->locks_.end() && again->second.list_wanted && s->SlotOf(segment)->ready()) {
    RequestList(s, segment);
  }
}

// Puts a contender whose node is known into its lock's view.
void EngineShard::Waiters::EnterQueue(EngineShard* s, Contender* c) {
  LockQueue::Entry entry;
  entry.node = c->node;
  entry.kind = c->params.kind;
  entry.local_id = c->id;
  entry.max_holders = c->params.max_holders;
  s->locks_[c->segment].queue.Insert(c->seq, std::move(entry));
}

EngineShard::Contender* EngineShard::LocalOf(const LockQueue::Entry* e) {
  if (e == nullptr || e->local_id == 0) return nullptr;
  auto it = contenders_.find(e->local_id);
  if (it == contenders_.end() || it->second->node != e->node) return nullptr;
  return it->second.get();
}

// Re-decides from the shared view: nodes ahead can only disappear. The
// mutex rule looks only at the entry directly ahead (O(log n)); a shared
// contender at the nearest exclusive ahead (readers in between coexist).
//
// A stale view. This replica forgets another replica's node only when it
// sees it go (a watch of its own waiter, a read, a listing, a local grant),
// so the view may still hold remote nodes that left unseen: contenders of
// other replicas that handed over among themselves. Read one by one (each
// NO_NODE, then Arm on the next), k such nodes cost k + 1 reads in series
// on one handoff: k + 1 round trips (10 stale nodes: 11). Listing again
// would cost one round trip, but SPEC section 2 allows a contender one
// listing (a semaphore waiter two), all spent when it joined.
//
// So: when a read of a waiter's blocker answers NO_NODE (Arm, ArmMore: the
// proof that the view is stale), the waiter probes (JoinProbe, in
// shard_watch.cc). It reads, without a watch, every other replica's
// entry still ahead of it that can block it (a reader: the non-shared
// ones), all at once, and its own node behind them when nothing local
// blocks it; ZooKeeper answers one session's requests in order, so the
// batch costs one round trip. The probe's end erases what is gone from the
// shared view (so no later waiter reads those nodes again) and re-decides:
// a grant is confirmed by the own-node read (it was sent after the reads
// that found the nodes ahead gone, see Grant), otherwise the waiter arms
// its one watch on what really blocks it (the usual Arm). One probe is in
// flight per lock; a waiter whose remote blocker is in question meanwhile
// waits for it (the readers behind one writer share it). A handoff then
// costs 2 round trips whatever k is: the NO_NODE read, then the probe (its
// k - 1 reads and the own read, in one wave); and in requests 1 + k: one
// read per departed node, once, amortised O(1) per departure.
// Bound: a probe reads at most max_contenders_per_lock entries (the
// queue's limit: 1,000 by default), nearest first: under 100 bytes of
// request each (mostly the path), a 16-byte reply for a node gone and about
// 85 (header and stat) for one present, so at most about 100 KB out and
// 85 KB back in one round trip; a view holding more (only past the limit)
// is read on by a later probe. Nothing is listed: listings stay within SPEC.
// A contender decided from a listing (an exact view) never waits for one.
void EngineShard::Waiters::Advance(EngineShard* s, Contender* c, bool from_listing, int64_t rank) {
  LockState& lock = s->locks_[c->segment];
  // Kinds (and semaphores' N) do not mix on a lock: refused for anything
  // disagreeing ahead of it (O(1) unless the view holds a disagreement).
  if (const LockQueue::Entry* other = FirstDisagreeingAhead(
          lock.queue, c->seq, c->params.kind, c->params.max_holders)) {
    s->holds_->FailWait(s, c, absl::FailedPreconditionError(DisagreementMessage(c, *other)));
    return;
  }
  const bool probe_wanted = std::exchange(c->probe_wanted, false);
  const bool probe_saw_node = std::exchange(c->probe_saw_node, false);
  const OrderDecision decision =
      Decide(lock.queue, c->seq, c->params.kind, c->params.max_holders);
  // The node to watch (for a semaphore's first waiter, the nearest of the
  // holders it watches; the others are in more_watching).
  const LockQueue::Entry* ahead = decision.holds ? nullptr : decision.blockers.back();
  if (lock.probe != nullptr && lock.probe->epoch != s->SlotOf(c->segment)->epoch) {
    lock.probe.reset();  // sent on an expired session: its replies decide nothing
  }
  if (ahead != nullptr && !from_listing && c->params.wait_timeout != Millis(0) &&
      (probe_wanted || lock.probe != nullptr) &&
      std::any_of(decision.blockers.begin(), decision.blockers.end(),
                  [](const LockQueue::Entry* e) { return e->local_id == 0; })) {
    // Blocked by another replica's entry of a view proven stale (or being
    // probed): one probe decides, not a read of each entry in turn.
    JoinProbe(s, c, lock);
    return;
  }
  if (ahead == nullptr && lock.mark_pending) return;  // ReadLockMark re-decides
  if (ahead == nullptr && Clock::now() < lock.delayed_until) {
    // In lock-delay: the previous hold ended involuntarily.
    if (c->params.wait_timeout == Millis(0)) {
      ++s->stats_.not_acquired_try_once;
      s->holds_->FailWait(s, c, absl::FailedPreconditionError(absl::StrCat(
                      "lock \"", c->params.name, "\" is in lock-delay for another ",
                      FormatDuration(std::chrono::ceil<Millis>(lock.delayed_until - Clock::now())),
                      " (its last hold ended involuntarily; try-once: wait_timeout is 0)")));
      return;
    }
    if (c->delay_timer == 0) {
      uint64_t id = c->id, gen = c->gen;
      c->delay_timer = s->loop_->Schedule(lock.delayed_until, [this, s, id, gen] {
        {
          OnLoop l(s);
          if (s->shut_down_) return;
          Contender* c = s->Find(id, gen);
          if (c == nullptr) return;
          c->delay_timer = 0;
          if (c->state == State::kWaiting) Advance(s, c, false);
        }
        s->Deliver();
      });
    }
    return;
  }
  if (ahead == nullptr) {
    s->holds_->Grant(s, c, from_listing || probe_saw_node);
    return;
  }
  if (c->params.wait_timeout == Millis(0)) {
    ++s->stats_.not_acquired_try_once;
    s->holds_->FailWait(s, c, absl::FailedPreconditionError(
                    c->params.kind == ContenderKind::kSemaphore
                        ? absl::StrCat("semaphore \"", c->params.name, "\" has all ",
                                       c->params.max_holders,
                                       " permits held (try-once: wait_timeout is 0)")
                        : absl::StrCat("lock \"", c->params.name,
                                       "\" is held (try-once: wait_timeout is 0)")));
    return;
  }
  if (rank >= 0) {
    ReportPosition(s, c, rank);
  } else if (c->last_position < 0 || c->last_position <= 11) {
    ReportPosition(s, c, lock.queue.CountAhead(c->seq));
  }
  if (c->params.kind == ContenderKind::kSemaphore) {
    WatchSemaphoreBlockers(s, c, decision);
    return;
  }
  if (c->watching != ahead->node) {
    Disarm(s, c);
    c->watching = ahead->node;
    Arm(s, c);
  }
  if (c->params.revoke_holders && !c->revoke_sent) s->RequestRevokeOfHolders(c);
}

std::string EngineShard::Waiters::DisagreementMessage(const Contender* c,
                                                      const LockQueue::Entry& other) {
  auto describe = [](ContenderKind kind, int32_t n) {
    switch (kind) {
      case ContenderKind::kSemaphore: return absl::StrCat("a semaphore of max_holders ", n);
      case ContenderKind::kShared: return std::string("a shared (read/write) lock");
      case ContenderKind::kExclusive: break;
    }
    return std::string("an exclusive lock");
  };
  return absl::StrCat("lock \"", c->params.name, "\" is ",
                      describe(other.kind, other.max_holders),
                      " (a contender ahead in its queue says so); this contender asked for ",
                      describe(c->params.kind, c->params.max_holders),
                      ": every contender of a lock must agree");
}

// A semaphore waiter's watches (issue 21; the rule is in ordering.h): the
// first waiter watches every holder ahead of it, any other waiter its
// predecessor only. Re-armed only for what changed.
void EngineShard::Waiters::WatchSemaphoreBlockers(EngineShard* s, Contender* c,
                                                  const OrderDecision& decision) {
  WaiterWatches watches = WatchesOf(decision);
  const std::string& nearest = watches.nearest;
  std::vector<std::string>& others = watches.others;
  bool same = c->first_waiter == decision.first_waiter && c->watching == nearest &&
              others.size() == c->more_watching.size();
  for (size_t i = 0; same && i < others.size(); ++i) {
    same = others[i] == c->more_watching[i].first;
  }
  if (same) return;
  Disarm(s, c);
  c->first_waiter = decision.first_waiter;
  c->watching = nearest;
  for (std::string& node : others) c->more_watching.emplace_back(std::move(node), 0);
  Arm(s, c);
  ArmMore(s, c);
}

// The first waiter's watches on the holders other than its predecessor.
// A departure of any of them (or a read that finds it gone) makes it
// re-decide; a data change (that holder's grant mark, a remote KeepAlive)
// only re-arms that watch.
void EngineShard::Waiters::ArmMore(EngineShard* s, Contender* c) {
  const uint64_t id = c->id, gen = ++c->more_gen;
  const size_t per_path = s->options_.root.size() + c->segment.size() + kContenderPathOverhead;
  c->slot->watched_path_bytes -= c->more_path_bytes;
  c->more_path_bytes = per_path * c->more_watching.size();
  c->slot->watched_path_bytes += c->more_path_bytes;
  auto find = [s](uint64_t id, uint64_t gen)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_) -> Contender* {
    auto it = s->contenders_.find(id);
    if (it == s->contenders_.end() || it->second->more_gen != gen ||
        it->second->state != State::kWaiting) {
      return nullptr;
    }
    return it->second.get();
  };
  for (auto& [node_ref, key_ref] : c->more_watching) {
    if (key_ref != 0) continue;
    const std::string node = node_ref;
    const std::string segment = c->segment;
    // Forgets the node; the contender re-decides (normally: it now holds).
    auto gone = [this, s, find, id, gen, node, segment]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_) {
                      NoteGone(s, segment, node);
                      Contender* c = find(id, gen);
                      if (c == nullptr) return;
                      for (auto it = c->more_watching.begin(); it != c->more_watching.end(); ++it) {
                        if (it->first == node) {
                          c->more_watching.erase(it);
                          break;
                        }
                      }
                      Advance(s, c, false);
                    };
    key_ref = c->zk()->GetData(
        c->lock_path() + "/" + node,
        [this, s, find, id, gen, node, gone](WatchEventType type) {
          {
            OnLoop l(s);
            Contender* c = find(id, gen);
            if (c == nullptr) return;
            for (auto& [n, key] : c->more_watching) {
              if (n == node) key = 0;  // fired: nothing left to remove
            }
            if (type == WatchEventType::kDeleted) {
              if (!c->slot->trusted(Clock::now())) {
                c->stalled = true;  // as Arm: maybe the session's own expiry, seen late
                s->liveness_->SendHeartbeat(s, c->slot);
                return;
              }
              gone();
            } else {
              ArmMore(s, c);  // only the fired one (key 0) is armed again
            }
          }
          s->Deliver();
        },
        [s, find, id, gen, node, gone](ZkCode code, const std::string&, const ZkStat&) {
          {
            OnLoop l(s);
            Contender* c = find(id, gen);
            if (c == nullptr) return;
            if (code == ZkCode::kNoNode) {
              for (auto& [n, key] : c->more_watching) {
                if (n == node) key = 0;  // no watch is left on a missing node
              }
              c->probe_wanted = true;  // the view is stale: as in Arm
              gone();
              if (Contender* still = find(id, gen)) still->probe_wanted = false;
            } else if (IsRetryable(code)) {
              for (auto& [n, key] : c->more_watching) {
                if (n == node) key = 0;
              }
              s->Stall(c);  // Step re-arms what has no watch
            }
          }
          s->Deliver();
        });
  }
}

// A semaphore holder's grant mark (issue 21): one write of its own node's
// data, whose data watch wakes the waiter behind it (now the first
// waiter). Read-modify-write with the version, as KeepAlive and Revoke
// through other replicas write the same data; the mark's own version is
// not a renewal (renewed_version).
void EngineShard::Waiters::WriteGrantMark(EngineShard* s, Contender* c, int32_t version,
                                          std::string data, int attempts) {
  absl::StatusOr<ContenderInfo> info = DecodeContenderInfo(data);
  if (!info.ok()) return;  // not ours to write (cannot happen: we created it)
  info->granted_unix_ms = c->granted_unix_ms > 0 ? c->granted_unix_ms : NowUnixMs();
  const uint64_t id = c->id;
  const std::string path = c->path();
  c->zk()->SetData(path, EncodeContenderInfo(*info), version,
                   [this, s, id, path, attempts](ZkCode code, const ZkStat& stat) {
    {
      OnLoop l(s);
      auto it = s->contenders_.find(id);
      if (s->shut_down_ || it == s->contenders_.end()) return;
      Contender* c = it->second.get();
      if (c->state != State::kHeld || c->path() != path) return;
      if (code == ZkCode::kBadVersion && attempts > 1) {
        // Someone wrote it meanwhile (a KeepAlive, a Revoke): read, mark again.
        c->zk()->GetData(path, nullptr, [this, s, id, path, attempts](ZkCode code,
                                                                     const std::string& data,
                                                                     const ZkStat& stat) {
          {
            OnLoop l(s);
            auto it = s->contenders_.find(id);
            if (s->shut_down_ || it == s->contenders_.end()) return;
            Contender* c = it->second.get();
            if (c->state != State::kHeld || c->path() != path) return;
            if (code == ZkCode::kOk) {
              s->holds_->NoteOwnNode(s, c, data, stat.version);  // the write it raced with counts
              WriteGrantMark(s, c, stat.version, data, attempts - 1);
            } else {
              s->holds_->OnGrantMarked(s, c, code, 0);
            }
          }
          s->Deliver();
        });
      } else {
        s->holds_->OnGrantMarked(s, c, code == ZkCode::kBadVersion ? ZkCode::kConnectionLoss : code,
                      stat.version);  // out of attempts: retried later, as a lost reply
      }
    }
    s->Deliver();
  });
}

void EngineShard::Waiters::StartLockDelay(EngineShard* s, const std::string& segment,
                                          const std::string& lock_path, Millis delay,
                                          const std::string& released) {
  LockState& lock = s->locks_[segment];
  const auto until = Clock::now() + delay;
  if (until <= lock.delayed_until) return;
  lock.delayed_until = until;
  s->delayed_locks_.insert(segment);
  ++s->stats_.lock_delays_started;
  const int64_t until_unix_ms = std::chrono::duration_cast<Millis>(
                                    std::chrono::system_clock::now().time_since_epoch() + delay)
                                    .count();
  // For Describe and for contenders that list the lock on other replicas
  // (best effort: without it they only miss the delay).
  s->SlotOf(segment)->zk->SetData(lock_path, EncodeLockMark(released, until_unix_ms), -1,
                               [](ZkCode, const ZkStat&) {});
}

void EngineShard::Waiters::ReadLockMark(EngineShard* s, const std::string& segment) {
  const std::string lock_path = s->options_.root + "/" + segment;
  const uint64_t epoch = s->SlotOf(segment)->epoch;
  s->SlotOf(segment)->zk->GetData(lock_path, nullptr, [this, s, segment, epoch](
                                                       ZkCode code, const std::string& data,
                                                       const ZkStat&) {
    {
      OnLoop l(s);
      auto it = s->locks_.find(segment);
      if (s->shut_down_ || it == s->locks_.end() || epoch != s->SlotOf(segment)->epoch) return;
      it->second.mark_pending = false;
      if (code == ZkCode::kOk) {
        const LockMark mark = DecodeLockMark(data);
        const int64_t now_unix_ms = std::chrono::duration_cast<Millis>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count();
        if (mark.delay_until_unix_ms > now_unix_ms) {
          const auto until = Clock::now() + Millis(mark.delay_until_unix_ms - now_unix_ms);
          it->second.delayed_until = std::max(it->second.delayed_until, until);
          s->delayed_locks_.insert(segment);
        }
      }
      AdvanceUnblocked(s, segment);
    }
    s->Deliver();
  });
}

void EngineShard::Waiters::AdvanceUnblocked(EngineShard* s, const std::string& segment) {
  auto it = s->locks_.find(segment);
  if (it == s->locks_.end()) return;
  std::vector<Contender*> ready;
  for (uint64_t id : it->second.ids) {
    Contender* c = s->contenders_.at(id).get();
    if (c->state == State::kWaiting && c->watching.empty() && c->delay_timer == 0) {
      ready.push_back(c);
    }
  }
  for (Contender* c : ready) {
    if (c->state == State::kWaiting) Advance(s, c, false);
  }
}

// QUEUED when the queue-position policy says so (server/recipe/queue_position.h).
void EngineShard::Waiters::ReportPosition(EngineShard* s, Contender* c, int64_t ahead) {
  const int64_t position = QueuePosition(c->params.kind, c->params.max_holders, ahead);
  auto now = Clock::now();
  if (!ShouldReportPosition(position, c->last_position, now - c->last_position_at)) return;
  c->last_position = position;
  c->last_position_at = now;
  LockEvent e;
  e.type = LockEvent::Type::kQueued;
  e.position = position;
  e.ahead = ahead;
  s->Emit(c, e);
}

// Positions near the front change with every departure: walk the first
// `limit` entries. Waiters further back are refreshed by a sweep at most
// once a second, and only after the queue changed (an idle queue costs
// nothing).
void EngineShard::Waiters::RefreshPositions(EngineShard* s, const std::string& segment,
                                            size_t limit) {
  auto it = s->locks_.find(segment);
  if (it == s->locks_.end()) return;
  std::vector<std::pair<Contender*, int64_t>> waiters;
  it->second.queue.ForFront(limit, [&](int64_t rank, int32_t, const LockQueue::Entry& e) {
    s->AssertHeld();
    Contender* c = s->LocalOf(&e);
    if (c != nullptr && c->state == State::kWaiting) waiters.emplace_back(c, rank);
  });
  for (auto& [c, rank] : waiters) ReportPosition(s, c, rank);
}

void EngineShard::Waiters::ScheduleSweep(EngineShard* s, const std::string& segment) {
  auto it = s->locks_.find(segment);
  if (it == s->locks_.end() || it->second.sweep_scheduled ||
      it->second.queue.size() <= kFrontPositions) {
    return;
  }
  it->second.sweep_scheduled = true;
  s->loop_->ScheduleAfter(std::chrono::seconds(1), [this, s, segment] {
    {
      OnLoop l(s);
      if (s->shut_down_) return;
      auto it = s->locks_.find(segment);
      if (it == s->locks_.end()) return;
      it->second.sweep_scheduled = false;
      RefreshPositions(s, segment, it->second.queue.size());
    }
    s->Deliver();
  });
}

}  // namespace turnstile
