#include "server/engine/engine_shard.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/common/flags.h"
#include "server/engine/engine_shard_internal.h"
#include "server/engine/shard_holds.h"
#include "server/engine/shard_liveness.h"
#include "server/engine/shard_waiters.h"
#include "server/engine/shard_writes.h"
#include "server/recipe/ordering.h"

namespace turnstile {

using namespace engine_internal;  // NOLINT(build/namespaces): the engine's own helpers

EngineShard::EngineShard(ZkSession* session, size_t index, size_t count,
                         std::atomic<uint64_t>* ids, EventLoop* loop,
                         const EngineOptions& options)
    : loop_(loop), options_(options), session_(session),
#ifdef NDEBUG
      checks_(options.check_invariants),
#else
      checks_(true),
#endif
      index_(index), count_(count), ids_(ids), slots_(1),
      writes_(std::make_unique<Writes>()), liveness_(std::make_unique<Liveness>()),
      waiters_(std::make_unique<Waiters>()),
      holds_(std::make_unique<Holds>()) {
  SessionSlot* slot = &slots_[0];
  slot->index = index;
  slot->zk = session;
  slot->zk->SetSessionListener([this, slot](SessionEvent e) {
    {
      OnLoop l(this);
      liveness_->OnSessionEvent(this, slot, e);
    }
    Deliver();
  });
}

EngineShard::~EngineShard() {
  // On the loop if it still runs (then nothing of this shard runs after),
  // else here.
  RunOnLoopAndWait([this] {
    OnLoop l(this);
    shut_down_ = true;
    for (SessionSlot& slot : slots_) {
      loop_->Cancel(slot.suspend_timer);
      loop_->Cancel(slot.heartbeat_timer);
    }
    for (auto& [id, c] : contenders_) {
      loop_->Cancel(c->wait_timer);
      loop_->Cancel(c->ttl_timer);
    }
  });
}

void EngineShard::Quiesce() {
  // Between two turns of the loop: no delivery is under way.
  RunOnLoopAndWait([this] {
    OnLoop l(this);
    shut_down_ = true;
    for (auto& [id, c] : contenders_) {
      c->sink = nullptr;
      Retally(c.get());
    }
    pending_.clear();
    liveness_->ClearListeners(this);
  });
}

// ---------------------------------------------------------------------------
// Contender lifecycle.

absl::StatusOr<uint64_t> EngineShard::Open(const AcquireParams& p,
                                          std::shared_ptr<ContenderSink> sink) {
  // Bad input is refused here, synchronously; what depends on the shard's
  // state (draining, the session, the limits) is decided on the loop and
  // refused through the sink.
  if (absl::Status s = LockEngine::ValidateParams(p, options_.limits); !s.ok()) return s;
  std::string segment = EncodeLockName(p.name);
  CheckMine(segment);
  // Drawn from the pool's counter (arrival order across shards), then made
  // to name this shard: LockEngine routes Release/Abandon by id.
  const uint64_t id = ids_->fetch_add(1, std::memory_order_relaxed) * count_ + index_ + count_;
  RunOnLoop([this, id, p, segment = std::move(segment), sink = std::move(sink)]() mutable {
    OpenOnLoop(id, std::move(p), segment, std::move(sink));
  });
  return id;
}

void EngineShard::OpenOnLoop(uint64_t id, AcquireParams p, const std::string& segment,
                             std::shared_ptr<ContenderSink> sink) {
  const EngineLimits& lim = options_.limits;
  {
    OnLoop l(this);
    absl::Status refused;
    auto refuse = [&refused](absl::Status status) { refused = std::move(status); };
    SessionSlot* slot = SlotOf(segment);
    if (draining_) {
      refuse(absl::UnavailableError("replica is draining (shutting down)"));
    } else if (!slot->ready()) {
      refuse(absl::UnavailableError(
          count_ == 1 ? std::string("replica has no ZooKeeper session")
                      : absl::StrCat("replica has no ZooKeeper session for this lock "
                                     "(session ", index_, " of ", count_, ")")));
    } else if (size_t n = LocalContenders(segment); n >= lim.max_contenders_per_lock) {
      refuse(absl::ResourceExhaustedError(absl::StrCat(
          "lock \"", p.name, "\" has ", n, " contenders; the limit is ",
          lim.max_contenders_per_lock)));
    } else {
      // Every watch of a session is re-sent in one SetWatches packet on
      // reconnect, which must fit jute.maxbuffer: budget the watched paths.
      size_t path_bytes = options_.root.size() + segment.size() + kContenderPathOverhead;
      if (slot->watched_path_bytes + path_bytes > lim.max_watched_path_bytes) {
        refuse(absl::ResourceExhaustedError(absl::StrCat(
            "this replica's contenders would watch ", slot->watched_path_bytes + path_bytes,
            " bytes of paths on ZooKeeper session ", index_, " of ", count_,
            "; the limit is ", lim.max_watched_path_bytes, " per session (ZooKeeper re-sends "
            "all of a session's watches in one packet on reconnect; see --max-watch-bytes "
            "and --zk-sessions)")));
      } else {
        Admit(id, std::move(p), segment, slot, path_bytes, std::move(sink));
      }
    }
    if (!refused.ok() && sink) {
      Later([sink, refused = std::move(refused)] { sink->OnFinish(refused); });
    }
  }
  Deliver();
}

size_t EngineShard::LocalContenders(const std::string& segment) const {
  auto it = locks_.find(segment);
  return it == locks_.end() ? 0 : it->second.ids.size();
}

void EngineShard::Admit(uint64_t id, AcquireParams p, const std::string& segment,
                        SessionSlot* slot, size_t path_bytes,
                        std::shared_ptr<ContenderSink> sink) {
  slot->watched_path_bytes += path_bytes;
  auto& local = locks_[segment].ids;
  {
    auto c = std::make_unique<Contender>();
    c->id = id;
    c->path_bytes = path_bytes;
    c->params = std::move(p);
    c->segment = segment;
    c->root = &options_.root;
    c->slot = slot;
    const std::string uid = NewContenderUid();
    std::copy_n(uid.data(), c->uid.size(), c->uid.begin());
    c->started_unix_ms = NowUnixMs();
    c->sink = std::move(sink);
    Contender* raw = c.get();
    contenders_.emplace(id, std::move(c));
    local.insert(id);
    LockState& lock = locks_[segment];
    const AcquireParams& params = raw->params;
    if (lock.name.empty()) lock.name = params.name;
    if (params.kind == ContenderKind::kSemaphore) {
      lock.max_holders = std::max(lock.max_holders, params.max_holders);
    }
    Retally(raw);
    loads_changed_.insert(segment);
    if (params.wait_timeout > Millis(0)) {
      raw->wait_timer = loop_->ScheduleAfter(params.wait_timeout, [this, id] {
        {
          OnLoop l(this);
          auto it = contenders_.find(id);
          if (it == contenders_.end()) return;
          Contender* c = it->second.get();
          c->wait_timer = 0;
          if (c->waiting() && c->sink) {
            ++stats_.timed_out;
            holds_->FailWait(this, c, absl::DeadlineExceededError(absl::StrCat(
                            "lock \"", c->params.name, "\" not acquired within wait_timeout ",
                            FormatDuration(c->params.wait_timeout))));
          }
        }
        Deliver();
      });
    }
    Step(raw);
  }
}

std::vector<EngineShard::Contender*> EngineShard::ContendersOf(const std::set<uint64_t>& ids) {
  std::vector<Contender*> out;
  out.reserve(ids.size());
  for (uint64_t id : ids) {
    auto it = contenders_.find(id);
    if (it != contenders_.end()) out.push_back(it->second.get());
  }
  return out;
}

std::vector<EngineShard::Contender*> EngineShard::AllContenders() {
  std::vector<Contender*> out;
  out.reserve(contenders_.size());
  for (auto& [id, c] : contenders_) out.push_back(c.get());
  return out;
}

EngineShard::Contender* EngineShard::Find(uint64_t id, uint64_t gen) {
  auto it = contenders_.find(id);
  if (it == contenders_.end()) return nullptr;
  if (it->second->gen != gen) return nullptr;
  return it->second.get();
}

EngineShard::Contender* EngineShard::FindByPath(const std::string& path) {
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return nullptr;
  auto c = contenders_.find(it->second);
  return c == contenders_.end() ? nullptr : c->second.get();
}

// (Re)issues the ZooKeeper operation the contender's state needs.
void EngineShard::Step(Contender* c) {
  if (!c->slot->ready()) {
    c->stalled = true;
    return;
  }
  switch (c->state) {
    case State::kPendingCreate:
    case State::kCreating:
      writes_->IssueCreate(this, c);
      break;
    case State::kCreateUnknown:
      SearchOwnNode(c);
      break;
    case State::kListing:
      waiters_->RequestList(this, c->segment);
      break;
    case State::kWaiting:
      waiters_->Arm(this, c);
      if (!c->more_watching.empty()) waiters_->ArmMore(this, c);
      break;
    case State::kHeld:
      if (c->params.kind == ContenderKind::kSemaphore && !c->mark_written) {
        waiters_->WriteGrantMark(this, c, 0, CreateData(c), 5);  // its reply arms the own watch
      } else {
        holds_->ArmOwn(this, c);
      }
      break;
    case State::kDeleting:
      holds_->IssueDelete(this, c);
      break;
  }
}

void EngineShard::Stall(Contender* c) {
  c->stalled = true;  // the next kConnected retries it
  if (!c->slot->ready()) return;
  // The connection is already back (or the failure was an operation
  // timeout): retry soon, but never in a tight loop.
  uint64_t id = c->id, gen = c->gen;
  loop_->ScheduleAfter(std::chrono::milliseconds(50), [this, id, gen] {
    {
      OnLoop l(this);
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
std::string EngineShard::CreateData(const Contender* c) const {
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

void EngineShard::OnCreated(uint64_t id, uint64_t gen, ZkCode code,
                           const std::string& path, const ZkStat& stat) {
  Contender* c = Find(id, gen);
  if (c == nullptr) return;
  if (code == ZkCode::kNoNode) {
    // The lock's container node is missing (never made, or reaped while
    // empty): make it, then create again.
    if (++c->create_attempts > 5) {
      SetState(c, State::kPendingCreate);  // no node, nothing in flight: forgotten
      holds_->FailWait(this, c, absl::UnavailableError(absl::StrCat(
                      "cannot create the lock node for \"", c->params.name, "\"")));
      return;
    }
    uint64_t g = ++c->gen;
    c->zk()->Create(c->lock_path(), "", CreateMode::kContainer,
                [this, id, g](ZkCode code, const std::string&, const ZkStat&) {
                  {
                    OnLoop l(this);
                    Contender* c = Find(id, g);
                    if (c == nullptr) return;
                    if (code == ZkCode::kOk || code == ZkCode::kNodeExists) {
                      writes_->IssueCreate(this, c);
                    } else if (IsRetryable(code)) {
                      SetState(c, State::kPendingCreate);
                      Stall(c);
                    } else if (!IsSessionGone(code)) {
                      SetState(c, State::kPendingCreate);  // no node: forgotten
                      holds_->FailWait(this, c, ZkWriteFailure("creating the lock node", c->lock_path(), code));
                    }
                  }
                  Deliver();
                });
    return;
  }
  if (IsRetryable(code)) {
    // The create may have been applied: find our node by its uid, never
    // create a second one.
    SetState(c, State::kCreateUnknown);
    Stall(c);
    return;
  }
  if (IsSessionGone(code)) return;  // the expiry handler re-queues it
  if (code != ZkCode::kOk) {
    // Failed for good (NO_AUTH, ...): no node and no create in flight, so
    // the contender is forgotten at once, not left in the tables (and the
    // per-lock limit and watch budget) until the session ends.
    SetState(c, State::kPendingCreate);
    holds_->FailWait(this, c, ZkWriteFailure("creating the contender node", c->lock_path(), code));
    return;
  }
  c->node = path.substr(path.rfind('/') + 1);
  auto parsed = ParseContenderName(c->node);
  c->seq = parsed ? parsed->sequence : 0;
  c->czxid = static_cast<uint64_t>(stat.czxid);
  by_path_[c->path()] = c->id;
  waiters_->EnterQueue(this, c);
  if (c->abandoned || !c->sink) {
    // The caller gave up while the create was in flight.
    SetState(c, State::kDeleting);
    holds_->IssueDelete(this, c);
    return;
  }
  // The listing sent behind the create (or the next one) decides.
  SetState(c, State::kListing);
}

void EngineShard::SearchOwnNode(Contender* c) {
  uint64_t id = c->id, gen = ++c->gen;
  c->zk()->GetChildren(c->lock_path(), [this, id, gen](
                                     ZkCode code,
                                     const std::vector<std::string>& children) {
    {
      OnLoop l(this);
      Contender* c = Find(id, gen);
      if (c == nullptr) return;
      if (IsRetryable(code)) {
        Stall(c);
      } else if (code == ZkCode::kNoNode) {
        // No lock node, so our create never applied.
        if (c->abandoned || !c->sink) {
          holds_->Forget(this, c);
        } else {
          writes_->IssueCreate(this, c);
        }
      } else if (code == ZkCode::kOk) {
        std::string mine;
        for (const auto& child : children) {
          auto n = ParseContenderName(child);
          if (n && n->uid == c->uid_view()) mine = child;
        }
        if (mine.empty()) {
          if (c->abandoned || !c->sink) {
            holds_->Forget(this, c);
          } else {
            writes_->IssueCreate(this, c);
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
              OnLoop l(this);
              Contender* c = Find(id, g);
              if (c == nullptr) return;
              if (IsRetryable(code)) {
                SetState(c, State::kCreateUnknown);
                Stall(c);
              } else if (code == ZkCode::kOk) {
                c->czxid = static_cast<uint64_t>(stat.czxid);
                waiters_->EnterQueue(this, c);
                if (c->abandoned || !c->sink) {
                  SetState(c, State::kDeleting);
                  holds_->IssueDelete(this, c);
                } else {
                  // A listing sent from here covers it (its create came first).
                  SetState(c, State::kListing);
                  waiters_->RequestList(this, c->segment);
                }
              } else if (!IsSessionGone(code)) {
                by_path_.erase(c->path());
                c->node.clear();
                if (c->abandoned || !c->sink) {
                  holds_->Forget(this, c);
                } else {
                  writes_->IssueCreate(this, c);
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

void EngineShard::Release(uint64_t id) {
  CheckMine(id);
  RunOnLoop([this, id] {
    {
      OnLoop l(this);
      auto it = contenders_.find(id);
      if (it == contenders_.end()) return;
      Contender* c = it->second.get();
      if (!c->sink) return;
      if (c->state == State::kHeld && c->announced) {
        // RELEASED is sent once the node is gone (IssueDelete keeps the sink).
        c->clean_end = true;
        NoteHoldEnded(c);
        loop_->Cancel(c->ttl_timer);
        c->ttl_timer = 0;
        SetState(c, State::kDeleting);
        if (c->slot->connected) {
          holds_->IssueDelete(this, c);
        } else {
          c->stalled = true;
        }
      } else if (c->state != State::kDeleting) {
        // Abandoning a wait on request is a clean end, as the proto's
        // AcquireRequest.release says: the stream ends OK without ACQUIRED
        // (a cancelled stream, by contrast, ends CANCELLED).
        NoteWaitEnded(c, AcquireResult::kCancelled);
        Finish(c, absl::OkStatus());
        holds_->EndContender(this, c);
      }
    }
    Deliver();
  });
}

void EngineShard::HalfClose(uint64_t id) {
  CheckMine(id);
  RunOnLoop([this, id] {
    bool probe = false;
    {
      OnLoop l(this);
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
  });
}

void EngineShard::Abandon(uint64_t id) {
  CheckMine(id);
  RunOnLoop([this, id] {
    {
      OnLoop l(this);
      auto it = contenders_.find(id);
      if (it == contenders_.end()) return;
      Contender* c = it->second.get();
      c->sink = nullptr;
      Retally(c);
      if (c->state != State::kDeleting) holds_->EndContender(this, c);
    }
    Deliver();
  });
}

// ---------------------------------------------------------------------------
// Drain.

void EngineShard::BeginDrain() {
  RunOnLoop([this] {
    {
      OnLoop l(this);
      draining_ = true;
      liveness_->UpdateServing(this);
      std::vector<Contender*> waiting;
      for (auto& [id, c] : contenders_) {
        if (c->waiting() && c->sink) waiting.push_back(c.get());
      }
      for (Contender* c : waiting) {
        holds_->FailWait(this, c, absl::UnavailableError(
                        "replica is draining (shutting down); retry elsewhere"));
      }
    }
    Deliver();
  });
}

void EngineShard::EndDrain() {
  RunOnLoop([this] {
    {
      OnLoop l(this);
      std::vector<Contender*> held;
      for (auto& [id, c] : contenders_) {
        if (c->state == State::kHeld && c->sink) held.push_back(c.get());
      }
      for (Contender* c : held) {
        holds_->Lose(this, c, LostReason::kShutdown,
             "the replica shut down and the drain timeout ran out");
      }
    }
    Deliver();
  });
}

void EngineShard::NoteWaitEnded(Contender* c, AcquireResult result) {
  if (c->wait_noted) return;
  c->wait_noted = true;
  if (observer_) {
    observer_->OnWaitEnded(
        result, std::chrono::duration<double>(Clock::now() - c->opened_at).count());
  }
}

void EngineShard::NoteHoldEnded(Contender* c) {
  if (!c->hold_open) return;
  c->hold_open = false;
  if (observer_) {
    observer_->OnHoldEnded(
        std::chrono::duration<double>(Clock::now() - c->granted_at).count());
  }
}

}  // namespace turnstile
