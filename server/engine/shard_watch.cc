// A waiter's watches: arming the one watch on the node that blocks it,
// removing it when the waiter ends, what a departure seen through a watch
// or a read tells the view (NoteGone, NoteAllBefore), and the probe of a
// view proven stale (JoinProbe, OnProbed). EngineShard::Waiters
// (shard_waiters.h), with shard_queue.cc.

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/engine/engine_shard.h"
#include "server/engine/engine_shard_internal.h"
#include "server/engine/shard_waiters.h"
#include "server/engine/shard_liveness.h"
#include "server/recipe/handoff_rules.h"
#include "server/recipe/ordering.h"

namespace turnstile {

using namespace engine_internal;  // NOLINT(build/namespaces): the engine's own helpers

// Watches c->watching with getData: no watch is left if it is already gone.
void EngineShard::Waiters::Arm(EngineShard* s, Contender* c) {
  uint64_t id = c->id, gen = ++c->gen;
  std::string node = c->watching;
  std::string segment = c->segment;
  // After NoteGone the contender behind `node` re-decides; if the view had
  // already dropped `node`, this one re-decides here.
  auto gone = [this, s, id, node, segment]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->loop_role_) {
    NoteGone(s, segment, node);
    auto it = s->contenders_.find(id);
    if (it == s->contenders_.end()) return;
    Contender* c = it->second.get();
    if (c->state == State::kWaiting && c->watching == node) {
      c->watching.clear();
      c->watch_key = 0;
      Advance(s, c, false);
    }
  };
  c->watch_key = c->zk()->GetData(
      c->lock_path() + "/" + node,
      [this, s, id, gen, gone](WatchEventType type) {
        {
          OnLoop l(s);
          Contender* c = s->Find(id, gen);
          if (c == nullptr || c->state != State::kWaiting) return;
          c->watch_key = 0;  // fired: nothing left to remove
          if (type == WatchEventType::kDeleted) {
            // ZooKeeper fires the watch before it answers the transaction
            // that deleted the node: when that is this replica's local
            // handoff, its reply (which also confirms this waiter's node)
            // decides, a moment later.
            Contender* blocker = s->FindByPath(c->lock_path() + "/" + c->watching);
            if (blocker != nullptr && blocker->state == State::kDeleting &&
                blocker->handoff_in_flight) {
              return;
            }
            if (!c->slot->trusted(Clock::now())) {
              // After a pause past the safe time this may be the session's
              // own expiry seen late (its nodes deleted, this waiter's
              // blocker among them): wait for a confirmed contact (then
              // re-arm and find the blocker gone) or the expiry (then queue
              // again on the new session).
              c->stalled = true;
              s->liveness_->SendHeartbeat(s, c->slot);
              return;
            }
            if (c->blocker_delay_ms > 0 && blocker == nullptr) {
              // The blocker held with a lock-delay: was its end clean? The
              // lock node's mark (written in its release's transaction)
              // says. (A local blocker's end is known here: EndContender.)
              const std::string node = c->watching;
              const Millis delay(c->blocker_delay_ms);
              c->zk()->GetData(c->lock_path(), nullptr,
                               [this, s, id, gen, gone, node, delay](
                                   ZkCode code, const std::string& d, const ZkStat&) {
                                 {
                                   OnLoop l(s);
                                   Contender* c = s->Find(id, gen);
                                   if (c == nullptr || c->state != State::kWaiting) return;
                                   if (code != ZkCode::kOk || DecodeLockMark(d).released != node) {
                                     StartLockDelay(s, c->segment, c->lock_path(), delay, "");
                                   }
                                   gone();
                                 }
                                 s->Deliver();
                               });
              return;
            }
            gone();
          } else {
            Arm(s, c);  // data changed (a remote KeepAlive): watch again
          }
        }
        s->Deliver();
      },
      [this, s, id, gen, gone](ZkCode code, const std::string& data, const ZkStat&) {
        {
          OnLoop l(s);
          Contender* c = s->Find(id, gen);
          if (c == nullptr || c->state != State::kWaiting) return;
          if (code == ZkCode::kOk) {
            // The blocker's lock-delay (decoded only when it has one).
            c->blocker_delay_ms = 0;
            if (data.find("\nlock_delay_ms=") != std::string::npos) {
              absl::StatusOr<ContenderInfo> info = DecodeContenderInfo(data);
              if (info.ok()) c->blocker_delay_ms = info->lock_delay_ms;
            }
            if (c->params.kind == ContenderKind::kSemaphore && !c->first_waiter &&
                data.find("\ngranted_unix_ms=") != std::string::npos) {
              // The semaphore waiter's predecessor holds (its grant mark):
              // this one is now the first waiter. One more listing (its
              // second and last), then an exact decision.
              Disarm(s, c);
              c->watching.clear();
              s->SetState(c, State::kListing);
              c->create_order = ++s->create_counter_;
              RequestList(s, c->segment);
            }
          }
          if (code == ZkCode::kNoNode) {
            c->watch_key = 0;  // no watch is left on a missing node
            // The view still had it: other nodes ahead may have gone
            // unseen too. One probe reads them all at once, not one after
            // another (EngineShard::Advance).
            c->probe_wanted = true;
            gone();
            auto still = s->contenders_.find(id);
            if (still != s->contenders_.end()) still->second->probe_wanted = false;
          } else if (IsRetryable(code)) {
            c->watch_key = 0;
            s->Stall(c);
          }
        }
        s->Deliver();
      });
}

// Removes the watch a waiter leaves on its blocker, so an ended or
// re-armed waiter does not keep a watch (outside the watch budget) until
// that node changes.
void EngineShard::Waiters::Disarm(EngineShard* s, Contender* c) {
  if (c->watch_key != 0 && !c->watching.empty()) {
    // A node is watched by the contenders it blocks (one for a mutex; the
    // readers behind a writer) and, if it is this replica's, by its own
    // holder. The server's watch goes only when none of them is left.
    bool only_watcher = s->by_path_.count(c->lock_path() + "/" + c->watching) == 0;
    if (only_watcher && c->params.kind == ContenderKind::kShared) {
      auto lk = s->locks_.find(c->segment);
      if (lk != s->locks_.end()) {
        for (uint64_t other : lk->second.ids) {
          auto it = s->contenders_.find(other);
          if (other != c->id && it != s->contenders_.end() && it->second->watch_key != 0 &&
              it->second->watching == c->watching) {
            only_watcher = false;
            break;
          }
        }
      }
    }
    c->zk()->RemoveWatch(c->lock_path() + "/" + c->watching, c->watch_key, only_watcher);
  }
  c->watch_key = 0;
  if (!c->more_watching.empty() || c->more_path_bytes > 0) DisarmMore(s, c);
}

// Removes a semaphore first waiter's other watches. The server's watch on
// a node goes only when no other local contender watches it (its own
// holder, or the waiter behind it as its predecessor).
void EngineShard::Waiters::DisarmMore(EngineShard* s, Contender* c) {
  ++c->more_gen;
  for (const auto& [node, key] : c->more_watching) {
    if (key == 0) continue;
    const std::string path = c->lock_path() + "/" + node;
    bool only_watcher = s->by_path_.count(path) == 0;
    auto lk = s->locks_.find(c->segment);
    if (only_watcher && lk != s->locks_.end()) {
      for (uint64_t other : lk->second.ids) {
        auto it = s->contenders_.find(other);
        if (other == c->id || it == s->contenders_.end()) continue;
        const Contender* o = it->second.get();
        if (o->watch_key != 0 && o->watching == node) only_watcher = false;
        for (const auto& [n, k] : o->more_watching) {
          if (k != 0 && n == node) only_watcher = false;
        }
        if (!only_watcher) break;
      }
    }
    c->zk()->RemoveWatch(path, key, only_watcher);
  }
  c->more_watching.clear();
  c->first_waiter = false;
  c->slot->watched_path_bytes -= c->more_path_bytes;
  c->more_path_bytes = 0;
}

void EngineShard::Waiters::NoteGone(EngineShard* s, const std::string& segment,
                                    const std::string& node) {
  auto it = s->locks_.find(segment);
  if (it == s->locks_.end()) return;
  std::optional<ContenderName> gone = ParseContenderName(node);
  if (!gone) return;
  LockQueue& q = it->second.queue;
  if (!q.Erase(gone->sequence, node)) return;
  const bool top = !s->handoff_from_;
  if (top) s->handoff_from_ = Clock::now();
  // Who may now hold or watch another node: the contender directly behind
  // (it watched the node, or a shared one watched an exclusive further
  // ahead and gains nothing: Advance finds the same blocker); and when an
  // exclusive node went, every shared contender behind it up to the next
  // exclusive one (they all watched it). A reader's departure concerns only
  // the one behind it, so it costs no walk.
  // (The rule: WhoDecidesAgain, handoff_rules.h.) Each is re-decided if
  // it is a local waiter: the first whatever it watched, the others only if
  // they watched the departed node.
  std::vector<Contender*> next;
  bool first = true;
  for (int32_t seq : WhoDecidesAgain(q, gone->sequence, gone->kind)) {
    Contender* n = s->LocalOf(q.Find(seq));
    if (n != nullptr && n->state == State::kWaiting && (first || n->watching == node)) {
      next.push_back(n);
    }
    first = false;
  }
  for (Contender* n : next) {
    if (n->watching == node) {
      n->watching.clear();
      n->watch_key = 0;
    }
    Advance(s, n, false);
  }
  if (top) s->handoff_from_.reset();
  RefreshPositions(s, segment, kFrontPositions);
  ScheduleSweep(s, segment);
}

// A waiter whose view proved stale waits for its lock's probe, starting
// one if none is in flight (why, and its bounds: EngineShard::Advance). The
// starter's probe reads the other replicas' entries that can block it;
// each waiter adds a read of its own node behind them when nothing local
// blocks it, so that a grant the probe decides is confirmed by it.
void EngineShard::Waiters::JoinProbe(EngineShard* s, Contender* c, LockState& lock) {
  Disarm(s, c);
  c->watching.clear();
  if (!c->probed_from) c->probed_from = s->handoff_from_;  // a handoff goes on
  SessionSlot* slot = s->SlotOf(c->segment);
  const bool start = lock.probe == nullptr;
  if (start) {
    lock.probe = std::make_shared<Probe>();
    lock.probe->epoch = slot->epoch;
  }
  std::shared_ptr<Probe> p = lock.probe;
  for (auto& [id, gen] : p->waiters) {
    if (id == c->id) {
      gen = c->gen;  // already waits for it
      return;
    }
  }
  p->waiters.emplace_back(c->id, c->gen);
  // What can block it: every entry ahead (a reader: the non-shared ones).
  const bool shared = c->params.kind == ContenderKind::kShared;
  const int64_t capacity =
      c->params.kind == ContenderKind::kSemaphore ? std::max<int32_t>(1, c->params.max_holders) : 1;
  const size_t bound = s->options_.limits.max_contenders_per_lock;
  int64_t local = 0;
  std::vector<std::string> remote;
  lock.queue.ForAhead(c->seq, [&](int32_t, const LockQueue::Entry& e) {
    if (shared && e.kind == ContenderKind::kShared) return true;
    if (e.local_id != 0) {
      ++local;
    } else if (start && remote.size() < bound) {
      remote.push_back(e.node);
    }
    return local < capacity || (start && remote.size() < bound);
  });
  const std::string segment = c->segment, base = c->lock_path() + "/";
  for (const std::string& node : remote) {
    ++p->pending;
    slot->zk->Exists(base + node, [this, s, segment, p, node](ZkCode code, const ZkStat&) {
      {
        OnLoop l(s);
        if (s->shut_down_) return;
        if (code == ZkCode::kNoNode) p->gone.push_back(node);
        if (--p->pending == 0) OnProbed(s, segment, p);
      }
      s->Deliver();
    });
  }
  if (local < capacity) {
    ++p->pending;
    const uint64_t id = c->id;
    p->own_read.insert(id);
    slot->zk->Exists(c->path(), [this, s, segment, p, id](ZkCode code, const ZkStat&) {
      {
        OnLoop l(s);
        if (s->shut_down_) return;
        if (code == ZkCode::kOk) p->saw_own.insert(id);
        if (--p->pending == 0) OnProbed(s, segment, p);
      }
      s->Deliver();
    });
  }
  if (start && p->pending == 0) OnProbed(s, segment, p);  // nothing to read: decide as usual
}

// The probe's replies are in: forget what they found gone (once, for every
// waiter of this replica) and re-decide its waiters, each arming the usual
// one watch on what really blocks it, or holding.
void EngineShard::Waiters::OnProbed(EngineShard* s, const std::string& segment,
                                    const std::shared_ptr<Probe>& p) {
  auto it = s->locks_.find(segment);
  if (it == s->locks_.end() || it->second.probe != p) return;
  LockState& lock = it->second;
  lock.probe.reset();
  if (p->epoch != s->SlotOf(segment)->epoch) return;  // OnExpired queued its waiters again
  size_t erased = 0;
  for (const std::string& node : p->gone) {
    std::optional<ContenderName> name = ParseContenderName(node);
    if (name && lock.queue.Erase(name->sequence, node)) ++erased;
  }
  const bool top = !s->handoff_from_;
  for (const auto& [id, gen] : p->waiters) {
    Contender* c = s->Find(id, gen);
    if (c == nullptr || c->state != State::kWaiting || !c->watching.empty()) continue;
    const std::optional<Clock::time_point> from = std::exchange(c->probed_from, std::nullopt);
    c->probe_saw_node = p->saw_own.count(id) > 0;
    if (top) s->handoff_from_ = from;  // the handoff's latency runs from its first departure
    Advance(s, c, false);
    if (top) s->handoff_from_.reset();
  }
  if (erased > 0) {
    RefreshPositions(s, segment, kFrontPositions);
    ScheduleSweep(s, segment);
  }
}

void EngineShard::Waiters::NoteAllBefore(EngineShard* s, const std::string& segment, int32_t seq) {
  auto it = s->locks_.find(segment);
  if (it == s->locks_.end()) return;
  if (it->second.queue.EraseRemoteBefore(seq) > 0) {
    RefreshPositions(s, segment, kFrontPositions);
    ScheduleSweep(s, segment);
  }
}

}  // namespace turnstile
