// EngineShard::Liveness (shard_liveness.h): what a connect, a disconnect
// and an expiry of the shard's session mean for its contenders (SPEC §4),
// the root bootstrap, the heartbeat that tracks when ZooKeeper last
// certainly heard from the session (the base of every SUSPENDED safe_for),
// and whether the shard serves; and the shard's entry points for these.
#include "server/engine/shard_liveness.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/engine_shard_internal.h"
#include "server/engine/shard_holds.h"
#include "server/engine/shard_writes.h"

namespace turnstile {

using namespace engine_internal;  // NOLINT(build/namespaces): the engine's own helpers

void EngineShard::SetServingListener(std::function<void(bool)> listener) {
  RunOnLoop([this, listener]() mutable {
    {
      OnLoop l(this);
      liveness_->SetServingListener(this, std::move(listener));
    }
    Deliver();
  });
}

void EngineShard::AddSessionListener(std::function<void(size_t, SessionEvent)> listener) {
  RunOnLoop([this, listener]() mutable {
    OnLoop l(this);
    liveness_->AddSessionListener(this, std::move(listener));
  });
}

void EngineShard::Liveness::SetServingListener(EngineShard* s,
                                               std::function<void(bool)> listener) {
  serving_listener_ = std::move(listener);
  s->Later([fn = serving_listener_, now = last_serving_] { fn(now); });
}

void EngineShard::Liveness::AddSessionListener(
    EngineShard* s, std::function<void(size_t, SessionEvent)> listener) {
  session_listeners_.push_back(std::move(listener));
}

void EngineShard::Liveness::ClearListeners(EngineShard* s) {
  serving_listener_ = nullptr;
  session_listeners_.clear();
}

namespace {

// A replica serves only when it can serve every lock: each lock lives on one
// session, so one session down (or in doubt) makes some names unavailable.
bool AllReady(const std::vector<SessionSlot>& slots) {
  return std::all_of(slots.begin(), slots.end(),
                     [](const SessionSlot& s) { return s.ready() && !s.in_doubt; });
}

}  // namespace

bool EngineShard::serving() const { return serving_now_.load(std::memory_order_acquire); }

void EngineShard::Liveness::UpdateServing(EngineShard* s) {
  bool now = AllReady(s->slots_) && !s->draining_;
  if (now == last_serving_) return;
  last_serving_ = now;
  s->serving_now_.store(now, std::memory_order_release);
  if (serving_listener_) s->Later([fn = serving_listener_, now] { fn(now); });
}

SessionSlot* EngineShard::SlotOf(const std::string& segment) {
  CheckMine(segment);
  return &slots_[0];
}

void EngineShard::Liveness::OnSessionEvent(EngineShard* s, SessionSlot* slot, SessionEvent e) {
  if (s->shut_down_) return;
  switch (e) {
    case SessionEvent::kConnected:
      OnConnected(s, slot);
      break;
    case SessionEvent::kDisconnected:
      OnDisconnected(s, slot);
      break;
    case SessionEvent::kExpired:
      OnExpired(s, slot);
      break;
    case SessionEvent::kAuthFailed:
      slot->connected = false;
      break;
  }
  UpdateServing(s);
  for (const auto& listener : session_listeners_) {
    s->Later([listener, index = slot->index, e] { listener(index, e); });
  }
}

void EngineShard::Liveness::OnConnected(EngineShard* s, SessionSlot* slot) {
  slot->connected = true;
  // Connecting (also to a follower, which validates the session with the
  // leader first) proves the session alive now.
  slot->last_alive = Clock::now();
  slot->in_doubt = false;
  s->loop_->Cancel(slot->suspend_timer);
  slot->suspend_timer = 0;
  if (!slot->bootstrapped) {
    Bootstrap(s, slot);
    return;
  }
  // RESUMED only once a read shows the holder's node is still there: a
  // deletion made while the replica was cut off (Release by lease id through
  // another replica, an operator) reaches it only after the reconnect.
  for (Contender* c : s->ContendersOf(slot->holders)) {
    if (c->state == State::kHeld && c->suspended) ConfirmResume(s, c);
  }
  StepStalled(s, slot);
}

// Steps the contenders of `slot` that waited for the connection or for a
// trusted contact, and runs the ttl checks that waited for one.
void EngineShard::Liveness::StepStalled(EngineShard* s, SessionSlot* slot) {
  std::vector<Contender*> stalled;
  std::vector<uint64_t> ttl_due;
  for (Contender* c : s->AllContenders()) {
    if (c->stalled) stalled.push_back(c);
    if (c->ttl_check_due) ttl_due.push_back(c->id);
  }
  for (Contender* c : stalled) {
    c->stalled = false;
    s->Step(c);
  }
  for (uint64_t id : ttl_due) {  // by id: a Step may have ended one
    auto it = s->contenders_.find(id);
    if (it == s->contenders_.end()) continue;
    Contender* c = it->second.get();
    if (c->ttl_check_due && c->state == State::kHeld && c->announced) s->holds_->CheckTtl(s, c);
  }
}

void EngineShard::Liveness::OnContact(EngineShard* s, SessionSlot* slot) {
  if (!slot->ready()) return;
  // Each confirmed contact refreshes the validity of the slot's holders on
  // their streams: a client that stops hearing these (its replica froze,
  // or the stream stalled) treats its hold as in doubt on its own.
  const auto now = Clock::now();
  const Millis interval = HeartbeatInterval(*slot);
  for (Contender* c : s->ContendersOf(slot->holders)) {
    if (c->state != State::kHeld || !c->announced || c->suspended || c->node_gone) {
      continue;
    }
    // Heartbeats come twice per interval; a holder is told on about every
    // other one.
    if (now - c->refreshed_at < interval * 3 / 4) continue;  // told just now
    c->refreshed_at = now;
    LockEvent ev;
    ev.type = LockEvent::Type::kStillHeld;
    ev.safe_for = slot->SafeFor(now);
    ev.refresh_within = RefreshWithin(*slot);
    s->Emit(c, ev);
  }
  if (slot->in_doubt) {
    slot->in_doubt = false;
    s->loop_->Cancel(slot->suspend_timer);
    slot->suspend_timer = 0;
    // The answer that ends a doubt was usually sent before it (a silent
    // cut that healed), and the contact dates from that send: the safe
    // time it leaves is short, and the silence rule would doubt again at
    // the next tick. A fresh sync at once dates the contact from now; it
    // goes before the holders' reads below, and ZooKeeper answers a
    // session in order, so their RESUMED carries the fresh safe time (a
    // second cut right after a heal found the contact 1.5 s old and the
    // hold LOST early: short_outage).
    SendHeartbeat(s, slot);
    for (Contender* c : s->ContendersOf(slot->holders)) {
      if (c->state == State::kHeld && c->suspended) ConfirmResume(s, c);
    }
  }
  StepStalled(s, slot);
}

bool EngineShard::Liveness::MayAnnounce(EngineShard* s, Contender* c) {
  if (c->slot->trusted(Clock::now())) return true;
  c->stalled = true;  // OnContact (or the reconnect) steps it again
  SendHeartbeat(s, c->slot);
  return false;
}

void EngineShard::Liveness::LoseGoneNode(EngineShard* s, Contender* c,
                                         const char* deleted_message) {
  if (c->slot->SafeFor(Clock::now()).count() == 0) {
    // The replica has not been sure of its session for longer than the
    // safe time (it was paused, or cut off): the deletion is most likely
    // the session's own expiry, seen late. Never send operators looking
    // for a Release that did not happen.
    s->holds_->Lose(s, c, LostReason::kSessionExpired,
         "this replica lost contact with ZooKeeper for longer than the session timeout "
         "(paused or cut off): its session expired and the lock's node went with it");
    return;
  }
  // Contact looked fine, yet the node is gone: someone deleted it (Release
  // by lease id), or the session itself just ended -- a session closed
  // while this replica's connection held it delivers the deletion of its
  // own ephemeral node a moment before the session event. One sync tells
  // them apart (only a live session completes it), at the price of one
  // round trip before LOST; never name a Release that did not happen.
  if (c->node_gone) return;  // already asking
  c->node_gone = true;
  const uint64_t id = c->id;
  const std::string message = deleted_message;
  c->zk()->Sync(c->lock_path(), [s, id, message](ZkCode code) {
    {
      OnLoop l(s);
      auto it = s->contenders_.find(id);
      if (s->shut_down_ || it == s->contenders_.end()) return;
      Contender* c = it->second.get();
      if (!c->node_gone || !c->sink) return;  // ended meanwhile
      if (code == ZkCode::kOk) {
        s->holds_->Lose(s, c, LostReason::kDeleted, message);
      } else {
        s->holds_->Lose(s, c, LostReason::kSessionExpired,
             "this replica's ZooKeeper session ended and the lock's node went with it");
      }
    }
    s->Deliver();
  });
}

// The session is back: tell a suspended holder RESUMED if its node still
// exists (ZooKeeper answers a session's requests in order, after the
// watches it re-sent on reconnect, so a deletion shows up here or as its
// watch event first); LOST(DELETED) if it is gone.
void EngineShard::Liveness::ConfirmResume(EngineShard* s, Contender* c) {
  uint64_t id = c->id;
  std::string path = c->path();
  c->zk()->Exists(path, [s, id, path](ZkCode code, const ZkStat&) {
    {
      OnLoop l(s);
      auto it = s->contenders_.find(id);
      if (s->shut_down_ || it == s->contenders_.end()) return;
      Contender* c = it->second.get();
      if (c->state != State::kHeld || !c->suspended || c->path() != path) return;
      if (code == ZkCode::kOk) {
        c->suspended = false;
        // With its validity from the contact the reconnect proved.
        c->refreshed_at = Clock::now();
        LockEvent ev;
        ev.type = LockEvent::Type::kResumed;
        ev.safe_for = c->slot->SafeFor(c->refreshed_at);
        ev.refresh_within = RefreshWithin(*c->slot);
        s->Emit(c, ev);
      } else if (code == ZkCode::kNoNode) {
        s->holds_->Lose(s, c, LostReason::kDeleted,
             "the lock's node was deleted while this replica was disconnected from "
             "ZooKeeper (Release by lease id, possibly through another replica, or an "
             "operator)");
      }
      // Otherwise (connection lost again) it stays SUSPENDED; the next
      // reconnect checks again, and the suspend timer bounds the wait.
    }
    s->Deliver();
  });
}

void EngineShard::Liveness::OnDisconnected(EngineShard* s, SessionSlot* slot) {
  slot->connected = false;
  Suspend(s, slot);
}

void EngineShard::Liveness::Suspend(EngineShard* s, SessionSlot* slot) {
  Millis safe = slot->SafeFor(Clock::now());
  for (Contender* c : s->ContendersOf(slot->holders)) {
    if (c->state != State::kHeld || c->suspended || !c->announced) continue;
    c->suspended = true;
    LockEvent ev;
    ev.type = LockEvent::Type::kSuspended;
    ev.safe_for = safe;
    s->Emit(c, ev);
  }
  // A disconnected replica learns of its expiry only on reconnect (and one
  // talking to a cut-off follower not even then): once the safe time has
  // passed, the holds on this session must count as lost.
  s->loop_->Cancel(slot->suspend_timer);
  slot->suspend_timer = s->loop_->ScheduleAfter(safe, [s, slot] {
    {
      OnLoop l(s);
      slot->suspend_timer = 0;
      if ((slot->connected && !slot->in_doubt) || s->shut_down_) return;
      std::vector<Contender*> held;
      for (Contender* c : s->ContendersOf(slot->holders)) {
        if (c->state == State::kHeld) held.push_back(c);
      }
      for (Contender* c : held) {
        if (!c->announced) {
          // Granted here but never told: still a waiter. It queues again
          // if the session turns out expired, or is announced once contact
          // is confirmed.
          c->stalled = true;
          continue;
        }
        s->holds_->Lose(s, c, LostReason::kSessionExpired,
             slot->connected
                 ? "no heartbeat confirmed by the ZooKeeper leader within the session "
                   "timeout (this replica's ZooKeeper server may be cut off from the quorum)"
                 : "disconnected from ZooKeeper for longer than the session timeout");
      }
    }
    s->Deliver();
  });
}

void EngineShard::Liveness::OnExpired(EngineShard* s, SessionSlot* slot) {
  slot->connected = false;
  slot->bootstrapped = false;
  slot->in_doubt = false;
  slot->heartbeat_in_flight = false;  // its reply, if any, is for the old epoch
  ++slot->epoch;
  // Its clock went with it; queued creates are stale (every contender is
  // re-queued below with a new generation), and no multi of the old
  // session holds a lock back any longer.
  slot->clock_path.clear();
  s->writes_->Clear(s);
  s->loop_->Cancel(slot->suspend_timer);
  slot->suspend_timer = 0;
  for (auto& [segment, lock] : s->locks_) {
    if (s->SlotOf(segment) != slot) continue;
    lock.queue.Clear();
    lock.list_in_flight = lock.list_wanted = false;
    // A probe of the old session answers for nobody: a contender of the
    // new one that joined it would wait for a reply OnProbed ignores.
    lock.probe.reset();
  }
  std::vector<Contender*> all = s->AllContenders();
  for (Contender* c : all) c->watch_key = 0;  // the session's watches are gone
  for (Contender* c : all) {
    // Every node of the old session is gone.
    if (c->state == State::kHeld && c->announced) {
      s->holds_->Lose(s, c, LostReason::kSessionExpired, "the replica's ZooKeeper session expired");
    }
    if (c->state == State::kDeleting || c->abandoned || !c->sink) {
      if (c->state == State::kDeleting && c->sink) {
        // A release waiting for the connection: the node went with the
        // session, so it is released.
        ++s->stats_.released;
        LockEvent ev;
        ev.type = LockEvent::Type::kReleased;
        s->Emit(c, ev);
        s->Finish(c, absl::OkStatus());
      }
      s->holds_->Forget(s, c);
      continue;
    }
    // Waiters queue again on the new session; they lose their place.
    s->by_path_.erase(c->path());
    c->node.clear();
    c->watching.clear();
    c->watch_key = 0;  // dropped with the session
    c->last_position = -1;
    c->stalled = false;
    ++c->gen;
    s->SetState(c, State::kPendingCreate);
    ++s->stats_.requeued_after_expiry;
  }
}

// Creates the root (each path component) on every new session, then starts
// the contenders of that session that were waiting for it.
void EngineShard::Liveness::Bootstrap(EngineShard* s, SessionSlot* slot) {
  EnsurePath(s, slot, 0, PathPrefixes(s->options_.root));
}

void EngineShard::Liveness::EnsurePath(EngineShard* s, SessionSlot* slot, size_t index,
                                       std::vector<std::string> paths) {
  if (index == paths.size()) {
    slot->bootstrapped = true;
    s->writes_->EnsureClock(s, slot);
    UpdateServing(s);
    Heartbeat(s, slot);
    std::vector<Contender*> pending;
    for (Contender* c : s->AllContenders()) {
      if (c->state == State::kPendingCreate || c->stalled) pending.push_back(c);
    }
    for (Contender* c : pending) {
      c->stalled = false;
      s->Step(c);
    }
    return;
  }
  std::string path = paths[index];
  uint64_t epoch = slot->epoch;
  slot->zk->Create(path, "", CreateMode::kPersistent,
                   [this, s, slot, index, paths = std::move(paths), epoch](
                       ZkCode code, const std::string&, const ZkStat&) {
                     {
                       OnLoop l(s);
                       if (s->shut_down_ || epoch != slot->epoch) return;
                       if (code == ZkCode::kOk || code == ZkCode::kNodeExists) {
                         EnsurePath(s, slot, index + 1, paths);
                       } else if (IsRetryable(code) && slot->connected) {
                         EnsurePath(s, slot, index, paths);
                       }
                       // Otherwise the next kConnected bootstraps again.
                     }
                     s->Deliver();
                   });
}

// Tracks when ZooKeeper's leader last certainly heard from the session: a
// sync sent at t0 that succeeds went through the leader, so the session was
// alive after t0 and its expiry is no earlier than t0 + session timeout. (A
// read would not do: a follower cut off from the quorum keeps answering
// reads from its own state while the leader expires the session.) A
// heartbeat that stays unanswered counts as lost contact: the slot's holds
// are SUSPENDED as on a disconnection, with the safe time left from the last
// confirmed contact, and LOST when it runs out.
//
// When to doubt. A sync's round trip is about a millisecond on a LAN (tens
// under load); one unanswered for DoubtAfter (a tenth of the session
// timeout, or 8 round trips if that is longer) is not slow but cut off.
// Doubting only after 2.5 heartbeat intervals of silence (2 s of a 4 s
// session), checked every interval, told a holder SUSPENDED 1.7-2.0 s into
// an outage with about 0.4 s of safe time left; a 1.7 s cut often went
// unreported (tests/nemesis/short_outage.py). Now: a sync every tenth of
// the timeout, doubt when one is unanswered for DoubtAfter, so SUSPENDED
// comes 0.4-0.8 s into an outage of a 4 s session with about 2 s of safe
// time (timeout - margin - sync interval - DoubtAfter). A false doubt (a
// ZooKeeper stalled that long) costs a SUSPENDED/RESUMED pair and a moment
// NOT_SERVING, never a hold: RESUMED still needs a confirmed contact and a
// read of the holder's node. The silence rule stays as a backstop.
namespace {
// Holders are refreshed (STILL_HELD) every fifth of the timeout, as the
// proto says; the leader-confirmed sync runs twice as often.
constexpr int kHeartbeatsPerTimeout = 5;
constexpr int kSyncsPerTimeout = 10;
constexpr double kDoubtAfterHeartbeats = 2.5;
constexpr int kDoubtAfterRoundTrips = 8;
// A holder is refreshed on every other confirmed sync; it may miss two
// refreshes before its client must doubt the hold.
constexpr int kRefreshWithinHeartbeats = 3;

Millis SyncInterval(const SessionSlot& slot) {
  return std::max(Millis(100), slot.zk->session_timeout() / kSyncsPerTimeout);
}

// How long a sync may stay unanswered before the slot's contact is in doubt.
Millis DoubtAfter(const SessionSlot& slot) {
  return std::max(SyncInterval(slot), slot.heartbeat_rtt * kDoubtAfterRoundTrips);
}
}  // namespace

Millis EngineShard::Liveness::HeartbeatInterval(const SessionSlot& slot) {
  return std::max(Millis(100), slot.zk->session_timeout() / kHeartbeatsPerTimeout);
}

Millis EngineShard::Liveness::RefreshWithin(const SessionSlot& slot) {
  return HeartbeatInterval(slot) * kRefreshWithinHeartbeats;
}

void EngineShard::Liveness::Heartbeat(EngineShard* s, SessionSlot* slot) {
  s->loop_->Cancel(slot->heartbeat_timer);
  const Millis interval = HeartbeatInterval(*slot);
  slot->heartbeat_timer = s->loop_->ScheduleAfter(SyncInterval(*slot), [this, s, slot, interval] {
    {
      OnLoop l(s);
      slot->heartbeat_timer = 0;
      if (s->shut_down_) return;
      if (slot->connected) {
        const auto now = Clock::now();
        const auto silent = now - slot->last_alive;
        const bool unanswered =
            slot->heartbeat_in_flight && now - slot->heartbeat_sent_at >= DoubtAfter(*slot);
        if (!slot->in_doubt && (unanswered || silent > interval * kDoubtAfterHeartbeats)) {
          slot->in_doubt = true;
          Suspend(s, slot);
          UpdateServing(s);
        }
        SendHeartbeat(s, slot);
      }
      Heartbeat(s, slot);
    }
    s->Deliver();
  });
}

void EngineShard::Liveness::SendHeartbeat(EngineShard* s, SessionSlot* slot) {
  if (slot->heartbeat_in_flight || !slot->connected) return;
  slot->heartbeat_in_flight = true;
  auto t0 = Clock::now();
  slot->heartbeat_sent_at = t0;
  uint64_t epoch = slot->epoch;
  slot->zk->Sync(s->options_.root, [this, s, slot, t0, epoch](ZkCode code) {
    {
      OnLoop l(s);
      if (s->shut_down_ || epoch != slot->epoch) return;
      slot->heartbeat_in_flight = false;
      if (code == ZkCode::kOk) {
        // A sync answered while the slot is in doubt was outstanding
        // through the doubt (a silent cut that healed): its wait measures
        // the cut, not the round trip, and would shrink the next safe time
        // and delay the next doubt by as much. The round trip stays the
        // last one measured outside doubt; the contact still dates from
        // the send.
        if (!slot->in_doubt) {
          slot->heartbeat_rtt = std::chrono::duration_cast<Millis>(Clock::now() - t0);
        }
        if (t0 > slot->last_alive) slot->last_alive = t0;
        OnContact(s, slot);
        UpdateServing(s);
      }
    }
    s->Deliver();
  });
}

}  // namespace turnstile
