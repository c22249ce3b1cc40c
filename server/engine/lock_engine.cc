#include "server/engine/lock_engine.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/engine/lock_engine_internal.h"
#include "server/recipe/ordering.h"

namespace turnstile {

using namespace engine_internal;  // NOLINT(build/namespaces): the engine's own helpers

const char* LostReasonName(LostReason r) {
  switch (r) {
    case LostReason::kSessionExpired: return "session_expired";
    case LostReason::kLeaseExpired: return "lease_expired";
    case LostReason::kDeleted: return "deleted";
    case LostReason::kShutdown: return "shutdown";
  }
  return "?";
}

const char* AcquireResultName(AcquireResult r) {
  switch (r) {
    case AcquireResult::kAcquired: return "acquired";
    case AcquireResult::kTimeout: return "timeout";
    case AcquireResult::kBusy: return "busy";
    case AcquireResult::kCancelled: return "cancelled";
    case AcquireResult::kFailed: return "failed";
    case AcquireResult::kCount: break;
  }
  return "?";
}


LockEngine::LockEngine(std::vector<ZkSession*> sessions, TimerQueue* timers,
                       EngineOptions options)
    : timers_(timers), options_(std::move(options)), sessions_(sessions),
      slots_(sessions.size()) {
  for (size_t i = 0; i < sessions.size(); ++i) {
    SessionSlot* slot = &slots_[i];
    slot->index = i;
    slot->zk = sessions[i];
    slot->zk->SetSessionListener([this, slot](SessionEvent e) { OnSessionEvent(slot, e); });
  }
}

LockEngine::~LockEngine() {
  absl::MutexLock l(&mu_);
  shut_down_ = true;
  for (SessionSlot& slot : slots_) {
    timers_->Cancel(slot.suspend_timer);
    timers_->Cancel(slot.heartbeat_timer);
  }
  for (auto& [id, c] : contenders_) {
    timers_->Cancel(c->wait_timer);
    timers_->Cancel(c->ttl_timer);
  }
}

// ---------------------------------------------------------------------------
// Delivery: sink calls and listeners run outside mu_, in production order.

void LockEngine::Later(std::function<void()> fn) {
  pending_.push_back(std::move(fn));
}

void LockEngine::Emit(Contender* c, LockEvent e) {
  if (!c->sink) return;
  auto sink = c->sink;
  Later([sink, e = std::move(e)] { sink->OnEvent(e); });
}

void LockEngine::Finish(Contender* c, absl::Status status) {
  if (!c->sink) return;
  auto sink = std::move(c->sink);
  c->sink = nullptr;
  Later([sink, status = std::move(status)] { sink->OnFinish(status); });
}

void LockEngine::Deliver() {
  for (;;) {
    if (!deliver_mu_.TryLock()) return;  // the thread holding it delivers ours too
    for (;;) {
      std::deque<std::function<void()>> batch;
      {
        absl::MutexLock l(&mu_);
        batch.swap(pending_);
      }
      if (batch.empty()) break;
      for (auto& fn : batch) fn();
    }
    deliver_mu_.Unlock();
    absl::MutexLock l(&mu_);
    if (pending_.empty()) return;
  }
}

// ---------------------------------------------------------------------------
// Session.

// ---------------------------------------------------------------------------
// Contender lifecycle.

absl::StatusOr<uint64_t> LockEngine::Open(const AcquireParams& p,
                                          std::shared_ptr<ContenderSink> sink) {
  const EngineLimits& lim = options_.limits;
  if (absl::Status s = ValidateParams(p, lim); !s.ok()) return s;

  uint64_t id;
  {
    absl::MutexLock l(&mu_);
    if (draining_) {
      return absl::UnavailableError("replica is draining (shutting down)");
    }
    std::string segment = EncodeLockName(p.name);
    SessionSlot* slot = SlotOf(segment);
    if (!slot->ready()) {
      return absl::UnavailableError(
          slots_.size() == 1 ? std::string("replica has no ZooKeeper session")
                             : absl::StrCat("replica has no ZooKeeper session for this lock "
                                            "(session ", slot->index, " of ", slots_.size(), ")"));
    }
    auto& local = locks_[segment].ids;
    if (local.size() >= lim.max_contenders_per_lock) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "lock \"", p.name, "\" has ", local.size(),
          " contenders; the limit is ", lim.max_contenders_per_lock));
    }
    // Every watch of a session is re-sent in one SetWatches packet on
    // reconnect, which must fit jute.maxbuffer: budget the watched paths.
    size_t path_bytes = options_.root.size() + segment.size() + kContenderPathOverhead;
    if (slot->watched_path_bytes + path_bytes > lim.max_watched_path_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this replica's contenders would watch ", slot->watched_path_bytes + path_bytes,
          " bytes of paths on ZooKeeper session ", slot->index, " of ", slots_.size(),
          "; the limit is ", lim.max_watched_path_bytes, " per session (ZooKeeper re-sends "
          "all of a session's watches in one packet on reconnect; see --max-watch-bytes "
          "and --zk-sessions)"));
    }
    slot->watched_path_bytes += path_bytes;
    auto c = std::make_unique<Contender>();
    c->id = id = ++next_id_;
    c->path_bytes = path_bytes;
    c->params = p;
    c->segment = segment;
    c->root = &options_.root;
    c->slot = slot;
    c->uid = NewContenderUid();
    c->started_unix_ms = NowUnixMs();
    c->sink = std::move(sink);
    Contender* raw = c.get();
    contenders_.emplace(id, std::move(c));
    local.insert(id);
    if (p.wait_timeout > Millis(0)) {
      raw->wait_timer = timers_->ScheduleAfter(p.wait_timeout, [this, id] {
        {
          absl::MutexLock l(&mu_);
          auto it = contenders_.find(id);
          if (it == contenders_.end()) return;
          Contender* c = it->second.get();
          c->wait_timer = 0;
          if (c->waiting() && c->sink) {
            ++stats_.timed_out;
            FailWait(c, absl::DeadlineExceededError(absl::StrCat(
                            "lock \"", c->params.name, "\" not acquired within wait_timeout ",
                            c->params.wait_timeout.count(), "ms")));
          }
        }
        Deliver();
      });
    }
    Step(raw);
  }
  Deliver();
  return id;
}

LockEngine::Contender* LockEngine::Find(uint64_t id, uint64_t gen) {
  auto it = contenders_.find(id);
  if (it == contenders_.end()) return nullptr;
  if (it->second->gen != gen) return nullptr;
  return it->second.get();
}

LockEngine::Contender* LockEngine::FindByPath(const std::string& path) {
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return nullptr;
  auto c = contenders_.find(it->second);
  return c == contenders_.end() ? nullptr : c->second.get();
}

// (Re)issues the ZooKeeper operation the contender's state needs.
void LockEngine::Step(Contender* c) {
  if (!c->slot->ready()) {
    c->stalled = true;
    return;
  }
  switch (c->state) {
    case State::kPendingCreate:
    case State::kCreating:
      IssueCreate(c);
      break;
    case State::kCreateUnknown:
      SearchOwnNode(c);
      break;
    case State::kListing:
      RequestList(c->segment);
      break;
    case State::kWaiting:
      Arm(c);
      if (!c->more_watching.empty()) ArmMore(c);
      break;
    case State::kHeld:
      if (c->params.kind == ContenderKind::kSemaphore && !c->mark_written) {
        WriteGrantMark(c, 0, CreateData(c), 5);  // its reply arms the own watch
      } else {
        ArmOwn(c);
      }
      break;
    case State::kDeleting:
      IssueDelete(c);
      break;
  }
}

void LockEngine::Stall(Contender* c) {
  c->stalled = true;  // the next kConnected retries it
  if (!c->slot->ready()) return;
  // The connection is already back (or the failure was an operation
  // timeout): retry soon, but never in a tight loop.
  uint64_t id = c->id, gen = c->gen;
  timers_->ScheduleAfter(std::chrono::milliseconds(50), [this, id, gen] {
    {
      absl::MutexLock l(&mu_);
      if (shut_down_) return;
      Contender* c = Find(id, gen);
      if (c == nullptr || !c->stalled || !c->slot->ready()) return;
      c->stalled = false;
      Step(c);
    }
    Deliver();
  });
}

// The node's data is encoded for each create (a re-create after expiry
// too) rather than kept: a waiting stream would carry it for its life.
std::string LockEngine::CreateData(const Contender* c) const {
  ContenderInfo info;
  info.owner = c->params.owner;
  info.metadata = c->params.metadata;
  info.replica_id = options_.replica_id;
  info.started_unix_ms = c->started_unix_ms;
  info.ttl_ms = c->params.ttl.count();
  info.lock_delay_ms = c->params.lock_delay.count();
  info.identity = c->params.identity;
  return EncodeContenderInfo(info);
}

void LockEngine::IssueCreate(Contender* c) {
  if (c->abandoned) {
    Forget(c);
    return;
  }
  c->state = State::kCreating;
  c->create_order = ++create_counter_;
  uint64_t id = c->id, gen = ++c->gen;
  c->zk()->Create(c->lock_path() + "/" +
                      ContenderNodePrefix(c->params.kind, c->uid, c->params.max_holders),
              CreateData(c), CreateMode::kEphemeralSequential,
              [this, id, gen](ZkCode code, const std::string& path,
                              const ZkStat& stat) {
                OnCreated(id, gen, code, path, stat);
                Deliver();
              });
  // Pipelined: ZooKeeper answers one session's requests in order, so a
  // listing sent right behind the create already contains the new node and
  // costs no extra round trip.
  RequestList(c->segment);
}

namespace {

// A ZooKeeper write that failed for good. NO_AUTH means this replica's
// ZooKeeper credentials (--zk-auth-file) do not match the ACL of nodes made
// by replicas with other credentials: PERMISSION_DENIED, saying so.
absl::Status ZkWriteFailure(const char* what, const std::string& path, ZkCode code) {
  if (code == ZkCode::kNoAuth) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, " under ", path, " was refused by ZooKeeper (NO_AUTH): this replica's "
        "ZooKeeper credentials (--zk-auth-file) differ from those that created the nodes"));
  }
  return absl::InternalError(absl::StrCat(what, " failed: ", ZkCodeName(code)));
}

}  // namespace

void LockEngine::OnCreated(uint64_t id, uint64_t gen, ZkCode code,
                           const std::string& path, const ZkStat& stat) {
  absl::MutexLock l(&mu_);
  Contender* c = Find(id, gen);
  if (c == nullptr) return;
  if (code == ZkCode::kNoNode) {
    // The lock's container node is missing (never made, or reaped while
    // empty): make it, then create again.
    if (++c->create_attempts > 5) {
      c->state = State::kPendingCreate;  // no node, nothing in flight: forgotten
      FailWait(c, absl::UnavailableError(absl::StrCat(
                      "cannot create the lock node for \"", c->params.name, "\"")));
      return;
    }
    uint64_t g = ++c->gen;
    c->zk()->Create(c->lock_path(), "", CreateMode::kContainer,
                [this, id, g](ZkCode code, const std::string&, const ZkStat&) {
                  {
                    absl::MutexLock l(&mu_);
                    Contender* c = Find(id, g);
                    if (c == nullptr) return;
                    if (code == ZkCode::kOk || code == ZkCode::kNodeExists) {
                      IssueCreate(c);
                    } else if (IsRetryable(code)) {
                      c->state = State::kPendingCreate;
                      Stall(c);
                    } else if (!IsSessionGone(code)) {
                      c->state = State::kPendingCreate;  // no node: forgotten
                      FailWait(c, ZkWriteFailure("creating the lock node", c->lock_path(), code));
                    }
                  }
                  Deliver();
                });
    return;
  }
  if (IsRetryable(code)) {
    // The create may have been applied: find our node by its uid, never
    // create a second one.
    c->state = State::kCreateUnknown;
    Stall(c);
    return;
  }
  if (IsSessionGone(code)) return;  // the expiry handler re-queues it
  if (code != ZkCode::kOk) {
    // Failed for good (NO_AUTH, ...): no node and no create in flight, so
    // the contender is forgotten at once, not left in the tables (and the
    // per-lock limit and watch budget) until the session ends.
    c->state = State::kPendingCreate;
    FailWait(c, ZkWriteFailure("creating the contender node", c->lock_path(), code));
    return;
  }
  c->node = path.substr(path.rfind('/') + 1);
  auto parsed = ParseContenderName(c->node);
  c->seq = parsed ? parsed->sequence : 0;
  c->czxid = static_cast<uint64_t>(stat.czxid);
  by_path_[c->path()] = c->id;
  EnterQueue(c);
  if (c->abandoned || !c->sink) {
    // The caller gave up while the create was in flight.
    c->state = State::kDeleting;
    IssueDelete(c);
    return;
  }
  // The listing sent behind the create (or the next one) decides.
  c->state = State::kListing;
}

void LockEngine::SearchOwnNode(Contender* c) {
  uint64_t id = c->id, gen = ++c->gen;
  c->zk()->GetChildren(c->lock_path(), [this, id, gen](
                                     ZkCode code,
                                     const std::vector<std::string>& children) {
    {
      absl::MutexLock l(&mu_);
      Contender* c = Find(id, gen);
      if (c == nullptr) return;
      if (IsRetryable(code)) {
        Stall(c);
      } else if (code == ZkCode::kNoNode) {
        // No lock node, so our create never applied.
        if (c->abandoned || !c->sink) {
          Forget(c);
        } else {
          IssueCreate(c);
        }
      } else if (code == ZkCode::kOk) {
        std::string mine;
        for (const auto& child : children) {
          auto n = ParseContenderName(child);
          if (n && n->uid == c->uid) mine = child;
        }
        if (mine.empty()) {
          if (c->abandoned || !c->sink) {
            Forget(c);
          } else {
            IssueCreate(c);
          }
        } else {
          // Found it: adopt it; its Stat gives the fencing token.
          ++stats_.recovered_creates;
          c->node = mine;
          c->seq = ParseContenderName(mine)->sequence;
          by_path_[c->path()] = c->id;
          uint64_t g = ++c->gen;
          c->zk()->Exists(c->path(), [this, id, g](ZkCode code,
                                                         const ZkStat& stat) {
            {
              absl::MutexLock l(&mu_);
              Contender* c = Find(id, g);
              if (c == nullptr) return;
              if (IsRetryable(code)) {
                c->state = State::kCreateUnknown;
                Stall(c);
              } else if (code == ZkCode::kOk) {
                c->czxid = static_cast<uint64_t>(stat.czxid);
                EnterQueue(c);
                if (c->abandoned || !c->sink) {
                  c->state = State::kDeleting;
                  IssueDelete(c);
                } else {
                  // A listing sent from here covers it (its create came first).
                  c->state = State::kListing;
                  RequestList(c->segment);
                }
              } else if (!IsSessionGone(code)) {
                by_path_.erase(c->path());
                c->node.clear();
                if (c->abandoned || !c->sink) {
                  Forget(c);
                } else {
                  IssueCreate(c);
                }
              }
            }
            Deliver();
          });
        }
      }
    }
    Deliver();
  });
}

// One listing in flight per lock: it covers every create sent before it,
// so a burst of creates costs a few listings, not one each.
void LockEngine::RequestList(const std::string& segment) {
  LockState& lock = locks_[segment];
  if (lock.list_in_flight) {
    lock.list_wanted = true;
    return;
  }
  lock.list_in_flight = true;
  lock.list_wanted = false;
  SessionSlot* slot = SlotOf(segment);
  const uint64_t covers = create_counter_, epoch = slot->epoch;
  slot->zk->GetChildrenStat(
      options_.root + "/" + segment,
      [this, segment, covers, epoch](ZkCode code, const std::vector<std::string>& children,
                                     const ZkStat& stat) {
        {
          absl::MutexLock l(&mu_);
          if (!shut_down_) {
            // Data on the lock node: a lock-delay may be running (started
            // by another replica). Grants wait until it is read.
            auto it = locks_.find(segment);
            if (code == ZkCode::kOk && stat.data_length > 0 && it != locks_.end() &&
                !it->second.mark_pending) {
              it->second.mark_pending = true;
              ReadLockMark(segment);
            }
            OnListed(segment, covers, epoch, code, children);
          }
        }
        Deliver();
      });
}

void LockEngine::OnListed(const std::string& segment, uint64_t covers, uint64_t epoch,
                          ZkCode code, const std::vector<std::string>& children) {
  auto it = locks_.find(segment);
  if (it == locks_.end() || epoch != SlotOf(segment)->epoch) return;
  LockState& lock = it->second;
  lock.list_in_flight = false;
  // The contenders this listing decides: listed after their create.
  std::vector<Contender*> covered;
  for (uint64_t id : lock.ids) {
    Contender* c = contenders_.at(id).get();
    if (c->state == State::kListing && c->create_order <= covers) covered.push_back(c);
  }
  if (code == ZkCode::kOk) {
    lock.queue.ReplaceWith(
        children,
        [&](const std::string& node) -> uint64_t {
          AssertHeld();
          auto p = by_path_.find(options_.root + "/" + segment + "/" + node);
          return p == by_path_.end() ? 0 : p->second;
        },
        [&](const LockQueue::Entry& e) {
          AssertHeld();
          // Created after this listing was sent: not in it, still here.
          Contender* c = LocalOf(&e);
          return c != nullptr && c->create_order > covers;
        });
    // Waiters whose blocker is no longer listed re-decide; local
    // contenders the listing should contain but does not lost their node.
    std::vector<Contender*> redo, gone;
    for (uint64_t id : lock.ids) {
      Contender* c = contenders_.at(id).get();
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
        FailWait(c, absl::AbortedError("this contender's node was deleted while it queued"));
      } else {
        Requeue(c);
      }
    }
    if (lock.queue.size() > options_.limits.max_contenders_per_lock) {
      for (Contender* c : covered) {
        if (c->state != State::kListing) continue;
        FailWait(c, absl::ResourceExhaustedError(absl::StrCat(
                        "lock \"", c->params.name, "\" has ", lock.queue.size() - 1,
                        " contenders; the limit is ", options_.limits.max_contenders_per_lock)));
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
      if (c->state != State::kListing || Find(c->id, c->gen) == nullptr) continue;
      c->state = State::kWaiting;
      c->watching.clear();
      auto r = ranks.find(c->id);
      Advance(c, /*from_listing=*/true, r == ranks.end() ? -1 : r->second);
    }
    for (Contender* c : redo) {
      if (c->state == State::kWaiting) Advance(c, false);
    }
  } else if (IsRetryable(code)) {
    for (Contender* c : covered) Stall(c);  // Step() lists again
  } else if (code == ZkCode::kNoNode) {
    for (Contender* c : covered) {
      FailWait(c, absl::AbortedError("the lock node vanished while queueing"));
    }
  }
  // Creates sent while this listing was in flight need one sent after them.
  auto again = locks_.find(segment);
  if (again != locks_.end() && again->second.list_wanted && SlotOf(segment)->ready()) {
    RequestList(segment);
  }
}

// Puts a contender whose node is known into its lock's view.
void LockEngine::EnterQueue(Contender* c) {
  LockQueue::Entry entry;
  entry.node = c->node;
  entry.kind = c->params.kind;
  entry.local_id = c->id;
  entry.max_holders = c->params.max_holders;
  locks_[c->segment].queue.Insert(c->seq, std::move(entry));
}

LockEngine::Contender* LockEngine::LocalOf(const LockQueue::Entry* e) {
  if (e == nullptr || e->local_id == 0) return nullptr;
  auto it = contenders_.find(e->local_id);
  if (it == contenders_.end() || it->second->node != e->node) return nullptr;
  return it->second.get();
}

// Re-decides from the shared view: nodes ahead can only disappear. The
// mutex rule looks only at the entry directly ahead (O(log n)); a shared
// contender at the nearest exclusive ahead (readers in between coexist).
void LockEngine::Advance(Contender* c, bool from_listing, int64_t rank) {
  LockState& lock = locks_[c->segment];
  // Kinds (and semaphores' N) do not mix on a lock: refused for anything
  // disagreeing ahead of it (O(1) unless the view holds a disagreement).
  if (const LockQueue::Entry* other = FirstDisagreeingAhead(
          lock.queue, c->seq, c->params.kind, c->params.max_holders)) {
    FailWait(c, absl::FailedPreconditionError(DisagreementMessage(c, *other)));
    return;
  }
  const OrderDecision decision =
      Decide(lock.queue, c->seq, c->params.kind, c->params.max_holders);
  // The node to watch (for a semaphore's first waiter, the nearest of the
  // holders it watches; the others are in more_watching).
  const LockQueue::Entry* ahead = decision.holds ? nullptr : decision.blockers.back();
  if (ahead == nullptr && lock.mark_pending) return;  // ReadLockMark re-decides
  if (ahead == nullptr && Clock::now() < lock.delayed_until) {
    // In lock-delay: the previous hold ended involuntarily.
    if (c->params.wait_timeout == Millis(0)) {
      ++stats_.not_acquired_try_once;
      FailWait(c, absl::FailedPreconditionError(absl::StrCat(
                      "lock \"", c->params.name, "\" is in lock-delay for another ",
                      std::chrono::duration_cast<Millis>(lock.delayed_until - Clock::now()).count(),
                      "ms (its last hold ended involuntarily; try-once: wait_timeout is 0)")));
      return;
    }
    if (c->delay_timer == 0) {
      uint64_t id = c->id, gen = c->gen;
      c->delay_timer = timers_->Schedule(lock.delayed_until, [this, id, gen] {
        {
          absl::MutexLock l(&mu_);
          if (shut_down_) return;
          Contender* c = Find(id, gen);
          if (c == nullptr) return;
          c->delay_timer = 0;
          if (c->state == State::kWaiting) Advance(c, false);
        }
        Deliver();
      });
    }
    return;
  }
  if (ahead == nullptr) {
    Grant(c, from_listing);
    return;
  }
  if (c->params.wait_timeout == Millis(0)) {
    ++stats_.not_acquired_try_once;
    FailWait(c, absl::FailedPreconditionError(
                    c->params.kind == ContenderKind::kSemaphore
                        ? absl::StrCat("semaphore \"", c->params.name, "\" has all ",
                                       c->params.max_holders,
                                       " permits held (try-once: wait_timeout is 0)")
                        : absl::StrCat("lock \"", c->params.name,
                                       "\" is held (try-once: wait_timeout is 0)")));
    return;
  }
  if (rank >= 0) {
    ReportPosition(c, rank);
  } else if (c->last_position < 0 || c->last_position <= 11) {
    ReportPosition(c, lock.queue.CountAhead(c->seq));
  }
  if (c->params.kind == ContenderKind::kSemaphore) {
    WatchSemaphoreBlockers(c, decision);
    return;
  }
  if (c->watching != ahead->node) {
    Disarm(c);
    c->watching = ahead->node;
    Arm(c);
  }
  if (c->params.revoke_holders && !c->revoke_sent) RequestRevokeOfHolders(c);
}

std::string LockEngine::DisagreementMessage(const Contender* c, const LockQueue::Entry& other) {
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
void LockEngine::WatchSemaphoreBlockers(Contender* c, const OrderDecision& decision) {
  const std::string& nearest = decision.blockers.back()->node;
  std::vector<std::string> others;
  if (decision.first_waiter) {
    for (size_t i = 0; i + 1 < decision.blockers.size(); ++i) {
      others.push_back(decision.blockers[i]->node);
    }
  }
  bool same = c->first_waiter == decision.first_waiter && c->watching == nearest &&
              others.size() == c->more_watching.size();
  for (size_t i = 0; same && i < others.size(); ++i) {
    same = others[i] == c->more_watching[i].first;
  }
  if (same) return;
  Disarm(c);
  c->first_waiter = decision.first_waiter;
  c->watching = nearest;
  for (std::string& node : others) c->more_watching.emplace_back(std::move(node), 0);
  Arm(c);
  ArmMore(c);
}

// The first waiter's watches on the holders other than its predecessor.
// A departure of any of them (or a read that finds it gone) makes it
// re-decide; a data change (that holder's grant mark, a remote KeepAlive)
// only re-arms that watch.
void LockEngine::ArmMore(Contender* c) {
  const uint64_t id = c->id, gen = ++c->more_gen;
  const size_t per_path = options_.root.size() + c->segment.size() + kContenderPathOverhead;
  c->slot->watched_path_bytes -= c->more_path_bytes;
  c->more_path_bytes = per_path * c->more_watching.size();
  c->slot->watched_path_bytes += c->more_path_bytes;
  auto find = [this](uint64_t id, uint64_t gen)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Contender* {
    auto it = contenders_.find(id);
    if (it == contenders_.end() || it->second->more_gen != gen ||
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
    auto gone = [this, find, id, gen, node, segment]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      NoteGone(segment, node);
      Contender* c = find(id, gen);
      if (c == nullptr) return;
      for (auto it = c->more_watching.begin(); it != c->more_watching.end(); ++it) {
        if (it->first == node) {
          c->more_watching.erase(it);
          break;
        }
      }
      Advance(c, false);
    };
    key_ref = c->zk()->GetData(
        c->lock_path() + "/" + node,
        [this, find, id, gen, node, gone](WatchEventType type) {
          {
            absl::MutexLock l(&mu_);
            Contender* c = find(id, gen);
            if (c == nullptr) return;
            for (auto& [n, key] : c->more_watching) {
              if (n == node) key = 0;  // fired: nothing left to remove
            }
            if (type == WatchEventType::kDeleted) {
              if (!c->slot->trusted(Clock::now())) {
                c->stalled = true;  // as Arm: maybe the session's own expiry, seen late
                SendHeartbeat(c->slot);
                return;
              }
              gone();
            } else {
              ArmMore(c);  // only the fired one (key 0) is armed again
            }
          }
          Deliver();
        },
        [this, find, id, gen, node, gone](ZkCode code, const std::string&, const ZkStat&) {
          {
            absl::MutexLock l(&mu_);
            Contender* c = find(id, gen);
            if (c == nullptr) return;
            if (code == ZkCode::kNoNode) {
              for (auto& [n, key] : c->more_watching) {
                if (n == node) key = 0;  // no watch is left on a missing node
              }
              gone();
            } else if (IsRetryable(code)) {
              for (auto& [n, key] : c->more_watching) {
                if (n == node) key = 0;
              }
              Stall(c);  // Step re-arms what has no watch
            }
          }
          Deliver();
        });
  }
}

// A semaphore holder's grant mark (issue 21): one write of its own node's
// data, whose data watch wakes the waiter behind it (now the first
// waiter). Read-modify-write with the version, as KeepAlive and Revoke
// through other replicas write the same data; the mark's own version is
// not a renewal (renewed_version).
void LockEngine::WriteGrantMark(Contender* c, int32_t version, std::string data, int attempts) {
  absl::StatusOr<ContenderInfo> info = DecodeContenderInfo(data);
  if (!info.ok()) return;  // not ours to write (cannot happen: we created it)
  info->granted_unix_ms = c->granted_unix_ms > 0 ? c->granted_unix_ms : NowUnixMs();
  const uint64_t id = c->id;
  const std::string path = c->path();
  c->zk()->SetData(path, EncodeContenderInfo(*info), version,
                   [this, id, path, attempts](ZkCode code, const ZkStat& stat) {
    {
      absl::MutexLock l(&mu_);
      auto it = contenders_.find(id);
      if (shut_down_ || it == contenders_.end()) return;
      Contender* c = it->second.get();
      if (c->state != State::kHeld || c->path() != path) return;
      if (code == ZkCode::kBadVersion && attempts > 1) {
        // Someone wrote it meanwhile (a KeepAlive, a Revoke): read, mark again.
        c->zk()->GetData(path, nullptr, [this, id, path, attempts](ZkCode code,
                                                                     const std::string& data,
                                                                     const ZkStat& stat) {
          {
            absl::MutexLock l(&mu_);
            auto it = contenders_.find(id);
            if (shut_down_ || it == contenders_.end()) return;
            Contender* c = it->second.get();
            if (c->state != State::kHeld || c->path() != path) return;
            if (code == ZkCode::kOk) {
              NoteOwnNode(c, data, stat.version);  // the write it raced with counts
              WriteGrantMark(c, stat.version, data, attempts - 1);
            } else {
              OnGrantMarked(c, code, 0);
            }
          }
          Deliver();
        });
      } else {
        OnGrantMarked(c, code == ZkCode::kBadVersion ? ZkCode::kConnectionLoss : code,
                      stat.version);  // out of attempts: retried later, as a lost reply
      }
    }
    Deliver();
  });
}

void LockEngine::StartLockDelay(const std::string& segment, const std::string& lock_path,
                                Millis delay, const std::string& released) {
  LockState& lock = locks_[segment];
  const auto until = Clock::now() + delay;
  if (until <= lock.delayed_until) return;
  lock.delayed_until = until;
  ++stats_.lock_delays_started;
  const int64_t until_unix_ms =
      std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch() + delay)
          .count();
  // For Describe and for contenders that list the lock on other replicas
  // (best effort: without it they only miss the delay).
  SlotOf(segment)->zk->SetData(lock_path, EncodeLockMark(released, until_unix_ms), -1,
                               [](ZkCode, const ZkStat&) {});
}

void LockEngine::ReadLockMark(const std::string& segment) {
  const std::string lock_path = options_.root + "/" + segment;
  const uint64_t epoch = SlotOf(segment)->epoch;
  SlotOf(segment)->zk->GetData(lock_path, nullptr, [this, segment, epoch](
                                                       ZkCode code, const std::string& data,
                                                       const ZkStat&) {
    {
      absl::MutexLock l(&mu_);
      auto it = locks_.find(segment);
      if (shut_down_ || it == locks_.end() || epoch != SlotOf(segment)->epoch) return;
      it->second.mark_pending = false;
      if (code == ZkCode::kOk) {
        const LockMark mark = DecodeLockMark(data);
        const int64_t now_unix_ms = std::chrono::duration_cast<Millis>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count();
        if (mark.delay_until_unix_ms > now_unix_ms) {
          const auto until = Clock::now() + Millis(mark.delay_until_unix_ms - now_unix_ms);
          it->second.delayed_until = std::max(it->second.delayed_until, until);
        }
      }
      AdvanceUnblocked(segment);
    }
    Deliver();
  });
}

void LockEngine::AdvanceUnblocked(const std::string& segment) {
  auto it = locks_.find(segment);
  if (it == locks_.end()) return;
  std::vector<Contender*> ready;
  for (uint64_t id : it->second.ids) {
    Contender* c = contenders_.at(id).get();
    if (c->state == State::kWaiting && c->watching.empty() && c->delay_timer == 0) {
      ready.push_back(c);
    }
  }
  for (Contender* c : ready) {
    if (c->state == State::kWaiting) Advance(c, false);
  }
}

// QUEUED is sent on every change within the last 10 places; further back
// only when the position has halved or a second has passed, so a long queue
// does not cost every waiter a message on every handoff.
void LockEngine::ReportPosition(Contender* c, int64_t ahead) {
  // Mutex: one holder ahead = position 1, next in line. A semaphore's
  // waiter with N ahead (all holders) is next in line too.
  const int64_t position = c->params.kind == ContenderKind::kSemaphore
                               ? std::max<int64_t>(1, ahead - c->params.max_holders + 1)
                               : ahead;
  auto now = Clock::now();
  bool report = c->last_position < 0 || position > c->last_position ||
                (position < c->last_position &&
                 (position <= 10 || position * 2 <= c->last_position ||
                  now - c->last_position_at >= std::chrono::seconds(1)));
  if (!report) return;
  c->last_position = position;
  c->last_position_at = now;
  LockEvent e;
  e.type = LockEvent::Type::kQueued;
  e.position = position;
  e.ahead = ahead;
  Emit(c, e);
}

// Positions near the front change with every departure: walk the first
// `limit` entries. Waiters further back are refreshed by a sweep at most
// once a second, and only after the queue changed (an idle queue costs
// nothing).
void LockEngine::RefreshPositions(const std::string& segment, size_t limit) {
  auto it = locks_.find(segment);
  if (it == locks_.end()) return;
  std::vector<std::pair<Contender*, int64_t>> waiters;
  it->second.queue.ForFront(limit, [&](int64_t rank, int32_t, const LockQueue::Entry& e) {
    AssertHeld();
    Contender* c = LocalOf(&e);
    if (c != nullptr && c->state == State::kWaiting) waiters.emplace_back(c, rank);
  });
  for (auto& [c, rank] : waiters) ReportPosition(c, rank);
}

void LockEngine::ScheduleSweep(const std::string& segment) {
  auto it = locks_.find(segment);
  if (it == locks_.end() || it->second.sweep_scheduled ||
      it->second.queue.size() <= kFrontPositions) {
    return;
  }
  it->second.sweep_scheduled = true;
  timers_->ScheduleAfter(std::chrono::seconds(1), [this, segment] {
    {
      absl::MutexLock l(&mu_);
      if (shut_down_) return;
      auto it = locks_.find(segment);
      if (it == locks_.end()) return;
      it->second.sweep_scheduled = false;
      RefreshPositions(segment, it->second.queue.size());
    }
    Deliver();
  });
}

// Watches c->watching with getData: no watch is left if it is already gone.
void LockEngine::Arm(Contender* c) {
  uint64_t id = c->id, gen = ++c->gen;
  std::string node = c->watching;
  std::string segment = c->segment;
  // After NoteGone the contender behind `node` re-decides; if the view had
  // already dropped `node`, this one re-decides here.
  auto gone = [this, id, node, segment]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    NoteGone(segment, node);
    auto it = contenders_.find(id);
    if (it == contenders_.end()) return;
    Contender* c = it->second.get();
    if (c->state == State::kWaiting && c->watching == node) {
      c->watching.clear();
      c->watch_key = 0;
      Advance(c, false);
    }
  };
  c->watch_key = c->zk()->GetData(
      c->lock_path() + "/" + node,
      [this, id, gen, gone](WatchEventType type) {
        {
          absl::MutexLock l(&mu_);
          Contender* c = Find(id, gen);
          if (c == nullptr || c->state != State::kWaiting) return;
          c->watch_key = 0;  // fired: nothing left to remove
          if (type == WatchEventType::kDeleted) {
            // ZooKeeper fires the watch before it answers the transaction
            // that deleted the node: when that is this replica's local
            // handoff, its reply (which also confirms this waiter's node)
            // decides, a moment later.
            Contender* blocker = FindByPath(c->lock_path() + "/" + c->watching);
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
              SendHeartbeat(c->slot);
              return;
            }
            if (c->blocker_delay_ms > 0 && blocker == nullptr) {
              // The blocker held with a lock-delay: was its end clean? The
              // lock node's mark (written in its release's transaction)
              // says. (A local blocker's end is known here: EndContender.)
              const std::string node = c->watching;
              const Millis delay(c->blocker_delay_ms);
              c->zk()->GetData(c->lock_path(), nullptr,
                               [this, id, gen, gone, node, delay](ZkCode code, const std::string& d,
                                                                  const ZkStat&) {
                                 {
                                   absl::MutexLock l(&mu_);
                                   Contender* c = Find(id, gen);
                                   if (c == nullptr || c->state != State::kWaiting) return;
                                   if (code != ZkCode::kOk || DecodeLockMark(d).released != node) {
                                     StartLockDelay(c->segment, c->lock_path(), delay, "");
                                   }
                                   gone();
                                 }
                                 Deliver();
                               });
              return;
            }
            gone();
          } else {
            Arm(c);  // data changed (a remote KeepAlive): watch again
          }
        }
        Deliver();
      },
      [this, id, gen, gone](ZkCode code, const std::string& data, const ZkStat&) {
        {
          absl::MutexLock l(&mu_);
          Contender* c = Find(id, gen);
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
              Disarm(c);
              c->watching.clear();
              c->state = State::kListing;
              c->create_order = ++create_counter_;
              RequestList(c->segment);
            }
          }
          if (code == ZkCode::kNoNode) {
            c->watch_key = 0;  // no watch is left on a missing node
            gone();
          } else if (IsRetryable(code)) {
            c->watch_key = 0;
            Stall(c);
          }
        }
        Deliver();
      });
}

// Removes the watch a waiter leaves on its blocker, so an ended or
// re-armed waiter does not keep a watch (outside the watch budget) until
// that node changes.
void LockEngine::Disarm(Contender* c) {
  if (c->watch_key != 0 && !c->watching.empty()) {
    // A node is watched by the contenders it blocks (one for a mutex; the
    // readers behind a writer) and, if it is this replica's, by its own
    // holder. The server's watch goes only when none of them is left.
    bool only_watcher = by_path_.count(c->lock_path() + "/" + c->watching) == 0;
    if (only_watcher && c->params.kind == ContenderKind::kShared) {
      auto lk = locks_.find(c->segment);
      if (lk != locks_.end()) {
        for (uint64_t other : lk->second.ids) {
          auto it = contenders_.find(other);
          if (other != c->id && it != contenders_.end() && it->second->watch_key != 0 &&
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
  if (!c->more_watching.empty() || c->more_path_bytes > 0) DisarmMore(c);
}

// Removes a semaphore first waiter's other watches. The server's watch on
// a node goes only when no other local contender watches it (its own
// holder, or the waiter behind it as its predecessor).
void LockEngine::DisarmMore(Contender* c) {
  ++c->more_gen;
  for (const auto& [node, key] : c->more_watching) {
    if (key == 0) continue;
    const std::string path = c->lock_path() + "/" + node;
    bool only_watcher = by_path_.count(path) == 0;
    auto lk = locks_.find(c->segment);
    if (only_watcher && lk != locks_.end()) {
      for (uint64_t other : lk->second.ids) {
        auto it = contenders_.find(other);
        if (other == c->id || it == contenders_.end()) continue;
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

void LockEngine::NoteGone(const std::string& segment, const std::string& node) {
  auto it = locks_.find(segment);
  if (it == locks_.end()) return;
  std::optional<ContenderName> gone = ParseContenderName(node);
  if (!gone) return;
  LockQueue& q = it->second.queue;
  if (!q.Erase(gone->sequence, node)) return;
  const bool top = !handoff_from_;
  if (top) handoff_from_ = Clock::now();
  // Who may now hold or watch another node: the contender directly behind
  // (it watched the node, or a shared one watched an exclusive further
  // ahead and gains nothing: Advance finds the same blocker); and when an
  // exclusive node went, every shared contender behind it up to the next
  // exclusive one (they all watched it). A reader's departure concerns only
  // the one behind it, so it costs no walk.
  std::vector<Contender*> next;
  q.ForBehind(gone->sequence, [&](int32_t, const LockQueue::Entry& e) {
    AssertHeld();
    Contender* n = LocalOf(&e);
    if (n != nullptr && n->state == State::kWaiting && (next.empty() || n->watching == node)) {
      next.push_back(n);
    } else if (next.empty()) {
      next.push_back(nullptr);  // the one directly behind is not a local waiter
    }
    return gone->kind == ContenderKind::kExclusive && e.kind == ContenderKind::kShared;
  });
  for (Contender* n : next) {
    if (n == nullptr) continue;
    if (n->watching == node) {
      n->watching.clear();
      n->watch_key = 0;
    }
    Advance(n, false);
  }
  if (top) handoff_from_.reset();
  RefreshPositions(segment, kFrontPositions);
  ScheduleSweep(segment);
}

void LockEngine::NoteAllBefore(const std::string& segment, int32_t seq) {
  auto it = locks_.find(segment);
  if (it == locks_.end()) return;
  if (it->second.queue.EraseRemoteBefore(seq) > 0) {
    RefreshPositions(segment, kFrontPositions);
    ScheduleSweep(segment);
  }
}

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
void LockEngine::Grant(Contender* c, bool confirmed) {
  if (confirmed_path_ && *confirmed_path_ == c->path()) {  // LocalSuccessor
    confirmed = true;
    ++stats_.handoffs_in_one_transaction;
  }
  Disarm(c);
  c->state = State::kHeld;
  c->announced = false;
  c->handoff_from = handoff_from_;  // measured to the announcement
  c->watching.clear();
  c->suspended = false;
  c->own_read = false;
  // A mutex holder proves every earlier contender is gone.
  if (c->params.kind == ContenderKind::kExclusive) NoteAllBefore(c->segment, c->seq);
  if (confirmed && MayAnnounce(c)) Announce(c);
  if (c->params.kind == ContenderKind::kSemaphore) {
    // The grant mark first (it wakes the waiter behind): its success also
    // confirms the node, and the own watch is set after it, so the mark
    // wakes nobody on this side (OnGrantMarked).
    c->mark_written = false;
    if (c->granted_unix_ms == 0) c->granted_unix_ms = NowUnixMs();
    WriteGrantMark(c, 0, CreateData(c), 5);
    return;
  }
  if (c->announced && c->params.ttl == Millis(0)) {
    DeferOwnWatch(c);
  } else {
    ArmOwn(c);  // the holder's watch on its own node (and, unconfirmed, the confirming read)
  }
}

// A semaphore holder's grant mark was written (or not).
void LockEngine::OnGrantMarked(Contender* c, ZkCode code, int32_t version) {
  if (code == ZkCode::kOk) {
    c->mark_written = true;
    // The mark is no renewal (NoteOwnNode counts version bumps).
    c->renewed_version = std::max(c->renewed_version, version);
    // A write after the decision that found the node: as a confirming read.
    if (!c->announced && MayAnnounce(c)) Announce(c);
    if (c->announced && c->params.ttl == Millis(0)) {
      DeferOwnWatch(c);
    } else {
      ArmOwn(c);
    }
  } else if (code == ZkCode::kNoNode) {
    if (!c->announced) {
      Requeue(c);
    } else {
      LoseGoneNode(c, "the lock's node was deleted outside this stream");
    }
  } else if (IsRetryable(code)) {
    Stall(c);  // Step writes the mark again
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
void LockEngine::DeferOwnWatch(Contender* c) {
  // One timer for all of them (not one per hold: each would wake the timer
  // thread): holds are queued in grant order and armed in batches.
  own_pending_.push_back(PendingOwnWatch{Clock::now() + kOwnWatchDelay, c->id, c->own_gen});
  if (own_batch_timer_ == 0) ScheduleOwnWatches(own_pending_.front().due);
}

void LockEngine::ScheduleOwnWatches(TimerQueue::Clock::time_point when) {
  own_batch_timer_ = timers_->Schedule(when, [this] {
    {
      absl::MutexLock l(&mu_);
      own_batch_timer_ = 0;
      if (shut_down_) return;
      const auto now = Clock::now();
      while (!own_pending_.empty() && own_pending_.front().due <= now) {
        const PendingOwnWatch p = own_pending_.front();
        own_pending_.pop_front();
        auto it = contenders_.find(p.id);
        if (it == contenders_.end()) continue;
        Contender* c = it->second.get();
        // Still the same hold, still unwatched (ArmOwn bumps own_gen).
        if (c->own_gen == p.own_gen && c->state == State::kHeld && c->announced && !c->own_read) {
          ArmOwn(c);
        }
      }
      if (!own_pending_.empty()) ScheduleOwnWatches(own_pending_.front().due);
    }
    Deliver();
  });
}

// The holder's own delete found no node. If the delete was answered the
// first time, the node was deleted by someone else: LOST, not RELEASED. This
// holds whether or not the hold watched its node: the watch's notification
// of that deletion may still be on its way when the release is sent (seen
// under load: RELEASED for a hold deleted through the other replica). Only a
// retried delete (an earlier attempt may have applied) is this release's own
// doing.
void LockEngine::OnDeleteFoundNoNode(Contender* c) {
  if (!c->sink || !c->announced || c->delete_retried) {
    OnDeleted(c, nullptr);
    return;
  }
  ++stats_.lost;
  if (observer_) observer_->OnLost(LostReason::kDeleted);
  LockEvent e;
  e.type = LockEvent::Type::kLost;
  e.reason = LostReason::kDeleted;
  e.message = "the lock's node was deleted outside this stream (Release by lease id, possibly "
              "through another replica, or an operator) before this release";
  Emit(c, e);
  Finish(c, absl::OkStatus());  // drops the sink: OnDeleted sends no RELEASED
  OnDeleted(c, nullptr);        // the node is gone: the contender behind re-decides
}

void LockEngine::Announce(Contender* c) {
  c->announced = true;
  timers_->Cancel(c->wait_timer);
  c->wait_timer = 0;
  ++stats_.granted;
  NoteWaitEnded(c, AcquireResult::kAcquired);
  c->granted_at = Clock::now();
  if (c->granted_unix_ms == 0) c->granted_unix_ms = NowUnixMs();
  c->hold_open = true;
  if (c->handoff_from && observer_) {
    observer_->OnHandoff(std::chrono::duration<double>(c->granted_at - *c->handoff_from).count());
  }
  LockEvent e;
  e.type = LockEvent::Type::kAcquired;
  e.lease_id = FormatLeaseId(c->segment, c->node);
  e.fencing_token = c->czxid;
  e.valid_for = c->params.ttl;
  e.session_timeout = c->zk()->session_timeout();
  e.safe_for = c->slot->SafeFor(Clock::now());
  e.refresh_within = RefreshWithin(*c->slot);
  c->refreshed_at = Clock::now();
  Emit(c, e);
  if (c->params.ttl > Millis(0)) RenewTtl(c);
  TellRevoke(c);  // asked to let go before the grant was announced
}

// A contender whose node vanished before it was told it holds: it lost its
// place, so it queues again with a new node (as after a session expiry).
void LockEngine::Requeue(Contender* c) {
  auto it = by_path_.find(c->path());
  if (it != by_path_.end() && it->second == c->id) by_path_.erase(it);
  Disarm(c);
  locks_[c->segment].queue.Erase(c->seq, c->node);
  c->node.clear();
  c->watching.clear();
  c->granted_unix_ms = 0;
  c->last_position = -1;
  c->stalled = false;
  c->create_attempts = 0;
  ++c->gen;
  c->state = State::kPendingCreate;
  ++stats_.requeued_lost_node;
  Step(c);
}

// A holder watches its own node: its deletion by someone else means the hold
// is gone (LOST, never a silent re-queue); a data change is a KeepAlive made
// through another replica.
void LockEngine::ArmOwn(Contender* c) {
  uint64_t id = c->id, gen = ++c->own_gen;
  c->own_read = true;
  auto find = [this](uint64_t id, uint64_t gen)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Contender* {
    auto it = contenders_.find(id);
    if (it == contenders_.end() || it->second->own_gen != gen) return nullptr;
    return it->second.get();
  };
  c->zk()->GetData(
      c->path(),
      [this, id, gen, find](WatchEventType type) {
        {
          absl::MutexLock l(&mu_);
          Contender* c = find(id, gen);
          if (c != nullptr && c->state == State::kDeleting && type == WatchEventType::kDeleted) {
            ++stats_.own_watch_fired_on_release;  // its own delete: it wakes nobody else
          }
          if (c == nullptr || c->state != State::kHeld || !c->announced) return;
          if (type == WatchEventType::kDeleted) {
            LoseGoneNode(c, "the lock's node was deleted outside this stream (Release by "
                            "lease id, possibly through another replica, or an operator)");
          } else {
            // A remote KeepAlive. The re-armed read's version counts it
            // (and any renewal that lands before the watch is back).
            ArmOwn(c);
          }
        }
        Deliver();
      },
      [this, id, gen, find](ZkCode code, const std::string& data, const ZkStat& stat) {
        {
          absl::MutexLock l(&mu_);
          Contender* c = find(id, gen);
          if (c == nullptr) return;
          if (c->state != State::kHeld) return;
          if (code == ZkCode::kOk) NoteOwnNode(c, data, stat.version);
          if (code == ZkCode::kOk && !c->announced) {
            if (MayAnnounce(c)) Announce(c);
          } else if (code == ZkCode::kNoNode && !c->announced) {
            Requeue(c);
          } else if (code == ZkCode::kNoNode) {
            LoseGoneNode(c, "the lock's node was deleted outside this stream");
          } else if (IsRetryable(code)) {
            Stall(c);
          }
        }
        Deliver();
      });
}

// KeepAlive and Revoke through any replica rewrite the node (read-modify-
// write with its version), counting renewals and revocation requests in its
// data: the owner follows the counters, so it misses neither, however many
// writes land between two of its reads. A version bump that neither counter
// explains is an older replica's KeepAlive (it rewrote the data unchanged):
// a renewal.
void LockEngine::NoteOwnNode(Contender* c, const std::string& data, int32_t version) {
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
  if (renewal && c->params.ttl > Millis(0)) RenewTtl(c);
  TellRevoke(c);
}

// REVOKE_REQUESTED for the latest request seen, once.
void LockEngine::TellRevoke(Contender* c) {
  if (c->revoke_told || !c->sink) return;
  c->revoke_told = true;
  ++stats_.revokes_delivered;
  if (observer_) observer_->OnRevokeDelivered();
  LockEvent e;
  e.type = LockEvent::Type::kRevokeRequested;
  if (c->revoke_seen) {
    e.requester = c->revoke_seen->first;
    e.revoke_reason = c->revoke_seen->second;
  }
  Emit(c, e);
}

void LockEngine::RenewTtl(Contender* c) {
  c->ttl_deadline = Clock::now() + c->params.ttl;
  c->ttl_check_due = false;
  timers_->Cancel(c->ttl_timer);
  uint64_t id = c->id;
  c->ttl_timer = timers_->Schedule(c->ttl_deadline, [this, id] {
    {
      absl::MutexLock l(&mu_);
      auto it = contenders_.find(id);
      if (it == contenders_.end()) return;
      Contender* c = it->second.get();
      c->ttl_timer = 0;
      if (c->state == State::kHeld && c->announced && Clock::now() >= c->ttl_deadline) {
        CheckTtl(c);
      }
    }
    Deliver();
  });
}

// Renewal follows the node's version: a KeepAlive through another replica
// rewrites the node, and its watch event reaches this replica late (after a
// reconnect) or not at all (it landed between the event and the re-armed
// watch). So before revoking, read the version; while contact is not
// trusted, wait for it (the suspend timer bounds the hold meanwhile).
void LockEngine::CheckTtl(Contender* c) {
  if (!c->slot->trusted(Clock::now())) {
    c->ttl_check_due = true;  // OnConnected / OnContact check again
    return;
  }
  c->ttl_check_due = false;
  uint64_t id = c->id;
  std::string path = c->path();
  c->zk()->GetData(path, nullptr, [this, id, path](ZkCode code, const std::string& data,
                                                   const ZkStat& stat) {
    {
      absl::MutexLock l(&mu_);
      auto it = contenders_.find(id);
      if (shut_down_ || it == contenders_.end()) return;
      Contender* c = it->second.get();
      if (c->state != State::kHeld || !c->announced || c->path() != path) return;
      if (code == ZkCode::kOk) {
        NoteOwnNode(c, data, stat.version);
        if (Clock::now() >= c->ttl_deadline) {
          Lose(c, LostReason::kLeaseExpired,
               absl::StrCat("no KeepAlive within the lease ttl of ", c->params.ttl.count(),
                            "ms"));
        }
      } else if (code == ZkCode::kNoNode) {
        LoseGoneNode(c, "the lock's node was deleted outside this stream");
      } else {
        c->ttl_check_due = true;  // connection lost: check on the next contact
      }
    }
    Deliver();
  });
}

// Tells the holder first (it must stop now), then deletes its node.
void LockEngine::Lose(Contender* c, LostReason reason,
                      const std::string& message) {
  if (!c->announced) {
    // It was never told it holds: its wait ends instead.
    FailWait(c, absl::UnavailableError(message));
    return;
  }
  ++stats_.lost;
  if (observer_) observer_->OnLost(reason);
  LockEvent e;
  e.type = LockEvent::Type::kLost;
  e.reason = reason;
  e.message = message;
  Emit(c, e);
  Finish(c, absl::OkStatus());
  EndContender(c);
}

void LockEngine::FailWait(Contender* c, const absl::Status& status) {
  AcquireResult r = AcquireResult::kFailed;
  if (absl::IsDeadlineExceeded(status)) r = AcquireResult::kTimeout;
  if (absl::IsFailedPrecondition(status)) r = AcquireResult::kBusy;
  if (absl::IsCancelled(status)) r = AcquireResult::kCancelled;
  NoteWaitEnded(c, r);
  Finish(c, status);
  EndContender(c);
}

// Ends a contender whose sink is done: delete its node if it has one (or
// will have one: then the create's completion deletes it).
void LockEngine::EndContender(Contender* c) {
  if (c->waiting()) NoteWaitEnded(c, AcquireResult::kCancelled);  // abandoned
  if (c->state == State::kHeld) NoteHoldEnded(c);
  if (c->state == State::kHeld && c->announced && c->params.lock_delay > Millis(0)) {
    // Ended without the client asking (lost, revoked by lease id, the
    // client gone): the next grant waits the holder's lock-delay.
    StartLockDelay(c->segment, c->lock_path(), c->params.lock_delay, "");
  }
  timers_->Cancel(c->wait_timer);
  timers_->Cancel(c->ttl_timer);
  c->wait_timer = c->ttl_timer = 0;
  switch (c->state) {
    case State::kPendingCreate:
      Forget(c);
      return;
    case State::kCreating:
    case State::kCreateUnknown:
      c->abandoned = true;  // its completion finds and deletes the node
      return;
    case State::kDeleting:
      return;
    default:
      c->state = State::kDeleting;
      // Waiters behind it advance when the delete has completed.
      if (c->slot->connected) {
        IssueDelete(c);
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
LockEngine::Contender* LockEngine::LocalSuccessor(Contender* c) {
  // Not for a semaphore: its holders are not a front of one, and its first
  // waiter learns of any holder's departure from its own watch.
  if (c->plain_delete || c->node.empty() || c->params.kind == ContenderKind::kSemaphore) {
    return nullptr;
  }
  LockState& lock = locks_[c->segment];
  if (!lock.queue.Contains(c->seq, c->node) || lock.queue.Ahead(c->seq) != nullptr) {
    return nullptr;  // not the front: deleting it grants no one
  }
  Contender* next = LocalOf(lock.queue.Behind(c->seq));
  if (next == nullptr || next->state != State::kWaiting || next->watching != c->node) {
    return nullptr;
  }
  return next;
}

void LockEngine::IssueDelete(Contender* c) {
  c->state = State::kDeleting;
  Disarm(c);
  uint64_t id = c->id, gen = ++c->gen;
  Contender* next = LocalSuccessor(c);
  // A clean release of a hold with a lock-delay says it was clean, in the
  // same transaction, so that waiters elsewhere do not wait the delay.
  const bool mark = c->clean_end && c->params.lock_delay > Millis(0) && !c->mark_failed;
  if (next != nullptr || mark) {
    std::string next_path = next != nullptr ? next->path() : "";
    c->handoff_in_flight = next != nullptr;
    auto done = [this, id, gen, next_path](ZkCode del, ZkCode check) {
      {
        absl::MutexLock l(&mu_);
        Contender* c = Find(id, gen);
        if (c == nullptr) return;
        c->handoff_in_flight = false;
        if (IsRetryable(del)) {
          c->delete_retried = true;
          Stall(c);
        } else if (del == ZkCode::kOk && check == ZkCode::kOk) {
          OnDeleted(c, next_path.empty() ? nullptr : &next_path);
        } else if (del == ZkCode::kOk) {
          // The successor's node is gone; nothing was applied.
          c->plain_delete = true;
          IssueDelete(c);
        } else if (del == ZkCode::kOther) {
          c->mark_failed = true;  // the lock node could not be marked: delete alone
          IssueDelete(c);
        } else if (del == ZkCode::kNoNode) {
          OnDeleteFoundNoNode(c);
        } else {
          OnDeleted(c, nullptr);  // gone with the session
        }
      }
      Deliver();
    };
    engine_internal::DeleteInOneTransaction(
        c->zk(), c->path(), mark ? c->lock_path() : "", mark ? EncodeLockMark(c->node, 0) : "",
        next_path, std::move(done));
    return;
  }
  c->zk()->Delete(c->path(), -1, [this, id, gen](ZkCode code) {
    {
      absl::MutexLock l(&mu_);
      Contender* c = Find(id, gen);
      if (c == nullptr) return;
      if (IsRetryable(code)) {
        c->delete_retried = true;
        Stall(c);
      } else if (code == ZkCode::kNoNode) {
        OnDeleteFoundNoNode(c);
      } else {
        OnDeleted(c, nullptr);  // deleted, or gone with the session
      }
    }
    Deliver();
  });
}

// The contender's node is gone: RELEASED, then the contender behind it
// re-decides. `confirmed`: the path of a successor whose node a check in the
// same transaction saw right after the delete (see LocalSuccessor).
void LockEngine::OnDeleted(Contender* c, const std::string* confirmed) {
  if (c->sink) {
    ++stats_.released;
    LockEvent e;
    e.type = LockEvent::Type::kReleased;
    Emit(c, e);
    Finish(c, absl::OkStatus());
  }
  std::string segment = c->segment, node = c->node;
  Forget(c);
  if (confirmed != nullptr) confirmed_path_ = *confirmed;
  NoteGone(segment, node);
  confirmed_path_.reset();
}

void LockEngine::Forget(Contender* c) {
  Disarm(c);
  timers_->Cancel(c->delay_timer);
  c->slot->watched_path_bytes -= c->path_bytes;
  timers_->Cancel(c->wait_timer);
  timers_->Cancel(c->ttl_timer);
  if (!c->node.empty()) {
    auto it = by_path_.find(c->path());
    if (it != by_path_.end() && it->second == c->id) by_path_.erase(it);
  }
  auto lk = locks_.find(c->segment);
  if (lk != locks_.end()) {
    lk->second.ids.erase(c->id);
    // The view is only kept while this replica has contenders on the lock
    // (a later contender lists again). A listing still in flight finds no
    // state and is dropped.
    if (lk->second.ids.empty()) locks_.erase(lk);
  }
  contenders_.erase(c->id);  // destroys *c
}

void LockEngine::Release(uint64_t id) {
  {
    absl::MutexLock l(&mu_);
    auto it = contenders_.find(id);
    if (it == contenders_.end()) return;
    Contender* c = it->second.get();
    if (!c->sink) return;
    if (c->state == State::kHeld && c->announced) {
      // RELEASED is sent once the node is gone (IssueDelete keeps the sink).
      c->clean_end = true;
      NoteHoldEnded(c);
      timers_->Cancel(c->ttl_timer);
      c->ttl_timer = 0;
      c->state = State::kDeleting;
      if (c->slot->connected) {
        IssueDelete(c);
      } else {
        c->stalled = true;
      }
    } else if (c->state != State::kDeleting) {
      // Abandoning a wait on request is a clean end, as the proto's
      // AcquireRequest.release says: the stream ends OK without ACQUIRED
      // (a cancelled stream, by contrast, ends CANCELLED).
      NoteWaitEnded(c, AcquireResult::kCancelled);
      Finish(c, absl::OkStatus());
      EndContender(c);
    }
  }
  Deliver();
}

void LockEngine::HalfClose(uint64_t id) {
  bool probe = false;
  {
    absl::MutexLock l(&mu_);
    auto it = contenders_.find(id);
    if (it == contenders_.end()) return;
    Contender* c = it->second.get();
    probe = c->sink && c->state == State::kHeld && c->announced &&
            c->params.lock_delay > Millis(0);
    if (probe && !c->releasing_sent) {
      // The hold stays until the adapter's Release (the event was written:
      // the stream is alive) or Abandon (it was cancelled).
      c->releasing_sent = true;
      LockEvent e;
      e.type = LockEvent::Type::kReleasing;
      Emit(c, e);
    }
  }
  if (probe) {
    Deliver();
    return;
  }
  Release(id);  // nothing to tell apart: a waiter, or no lock-delay
}

void LockEngine::Abandon(uint64_t id) {
  {
    absl::MutexLock l(&mu_);
    auto it = contenders_.find(id);
    if (it == contenders_.end()) return;
    Contender* c = it->second.get();
    c->sink = nullptr;
    if (c->state != State::kDeleting) EndContender(c);
  }
  Deliver();
}

// ---------------------------------------------------------------------------
// Drain.

void LockEngine::BeginDrain() {
  {
    absl::MutexLock l(&mu_);
    draining_ = true;
    UpdateServing();
    std::vector<Contender*> waiting;
    for (auto& [id, c] : contenders_) {
      if (c->waiting() && c->sink) waiting.push_back(c.get());
    }
    for (Contender* c : waiting) {
      FailWait(c, absl::UnavailableError(
                      "replica is draining (shutting down); retry elsewhere"));
    }
  }
  Deliver();
}

void LockEngine::EndDrain() {
  {
    absl::MutexLock l(&mu_);
    std::vector<Contender*> held;
    for (auto& [id, c] : contenders_) {
      if (c->state == State::kHeld && c->sink) held.push_back(c.get());
    }
    for (Contender* c : held) {
      Lose(c, LostReason::kShutdown,
           "the replica shut down and the drain timeout ran out");
    }
  }
  Deliver();
}

EngineStats LockEngine::stats() const {
  absl::MutexLock l(&mu_);
  EngineStats s = stats_;
  s.contenders = contenders_.size();
  s.holders = 0;
  for (auto& [id, c] : contenders_) {
    if (c->state == State::kHeld) ++s.holders;
  }
  const auto now = Clock::now();
  for (const auto& [segment, lock] : locks_) {
    if (lock.delayed_until > now) ++s.locks_in_delay;
  }
  return s;
}

void LockEngine::NoteWaitEnded(Contender* c, AcquireResult result) {
  if (c->wait_noted) return;
  c->wait_noted = true;
  if (observer_) {
    observer_->OnWaitEnded(
        result, std::chrono::duration<double>(Clock::now() - c->opened_at).count());
  }
}

void LockEngine::NoteHoldEnded(Contender* c) {
  if (!c->hold_open) return;
  c->hold_open = false;
  if (observer_) {
    observer_->OnHoldEnded(
        std::chrono::duration<double>(Clock::now() - c->granted_at).count());
  }
}

std::vector<LockLoad> LockEngine::LockLoads() const {
  absl::MutexLock l(&mu_);
  std::vector<LockLoad> out;
  out.reserve(locks_.size());
  for (const auto& [segment, lock] : locks_) {
    const std::set<uint64_t>& ids = lock.ids;
    LockLoad load;
    for (uint64_t id : ids) {
      auto it = contenders_.find(id);
      if (it == contenders_.end()) continue;
      const Contender& c = *it->second;
      if (load.name.empty()) load.name = c.params.name;
      if (load.first_id == 0 || id < load.first_id) load.first_id = id;
      if (c.params.kind == ContenderKind::kSemaphore) {
        load.max_holders = std::max(load.max_holders, c.params.max_holders);
      }
      if (c.state == State::kHeld) {
        ++load.holders;
      } else if (c.waiting() && c.sink) {
        ++load.waiters;
      }
    }
    if (!load.name.empty()) out.push_back(std::move(load));
  }
  return out;
}

}  // namespace turnstile
