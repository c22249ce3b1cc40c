#include "server/lock_engine.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/ordering.h"

namespace turnstile {
namespace {

using Clock = TimerQueue::Clock;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "/" + "/x-<16 hex>-<11 chars>" plus slack.
constexpr size_t kContenderPathOverhead = 40;

bool IsRetryable(ZkCode code) { return code == ZkCode::kConnectionLoss; }
bool IsSessionGone(ZkCode code) {
  return code == ZkCode::kSessionExpired || code == ZkCode::kClosing;
}

// Every prefix of an absolute path, shortest first ("/a/b" -> "/a", "/a/b").
std::vector<std::string> PathPrefixes(const std::string& path) {
  std::vector<std::string> out;
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') out.push_back(path.substr(0, i));
  }
  return out;
}

}  // namespace

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

struct LockEngine::Contender {
  uint64_t id = 0;
  AcquireParams params;
  std::string segment;    // encoded lock name
  std::string lock_path;  // root/segment
  std::string uid;
  std::string data;       // EncodeContenderInfo
  std::shared_ptr<ContenderSink> sink;  // null once ended or abandoned
  State state = State::kPendingCreate;
  // Bumped whenever an operation in flight becomes stale (re-arm, reset).
  uint64_t gen = 0;
  bool stalled = false;    // an operation failed with connection loss
  bool abandoned = false;  // ended while its create was in flight
  bool suspended = false;
  bool announced = false;  // kHeld and told ACQUIRED (see Grant)
  std::optional<Clock::time_point> handoff_from;  // blocker known gone
  int create_attempts = 0;
  size_t path_bytes = 0;  // counted in watched_path_bytes_

  std::string node;  // own node name, once known
  int32_t seq = 0;
  uint64_t czxid = 0;
  // Contenders ahead, in queue order; pruned from the front as they go.
  std::deque<ContenderName> ahead;
  std::string watching;
  int32_t watching_seq = 0;
  int64_t last_position = -1;  // last QUEUED position sent
  Clock::time_point last_position_at;

  TimerQueue::TimerId wait_timer = 0;
  TimerQueue::TimerId ttl_timer = 0;
  Clock::time_point ttl_deadline;

  // Metrics.
  Clock::time_point opened_at = Clock::now();
  Clock::time_point granted_at;
  bool wait_noted = false;
  bool hold_open = false;

  std::string path() const { return lock_path + "/" + node; }
  bool waiting() const {
    return state == State::kPendingCreate || state == State::kCreating ||
           state == State::kCreateUnknown || state == State::kListing ||
           state == State::kWaiting || (state == State::kHeld && !announced);
  }
};

LockEngine::LockEngine(ZkSession* zk, TimerQueue* timers,
                       EngineOptions options)
    : zk_(zk), timers_(timers), options_(std::move(options)) {
  zk_->SetSessionListener([this](SessionEvent e) { OnSessionEvent(e); });
}

LockEngine::~LockEngine() {
  std::lock_guard<std::mutex> l(mu_);
  shut_down_ = true;
  timers_->Cancel(suspend_timer_);
  timers_->Cancel(heartbeat_timer_);
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
    std::unique_lock<std::mutex> d(deliver_mu_, std::try_to_lock);
    if (!d.owns_lock()) return;  // the thread holding it delivers ours too
    for (;;) {
      std::deque<std::function<void()>> batch;
      {
        std::lock_guard<std::mutex> l(mu_);
        batch.swap(pending_);
      }
      if (batch.empty()) break;
      for (auto& fn : batch) fn();
    }
    d.unlock();
    std::lock_guard<std::mutex> l(mu_);
    if (pending_.empty()) return;
  }
}

// ---------------------------------------------------------------------------
// Session.

void LockEngine::SetServingListener(std::function<void(bool)> listener) {
  {
    std::lock_guard<std::mutex> l(mu_);
    serving_listener_ = std::move(listener);
    Later([fn = serving_listener_, s = last_serving_] { fn(s); });
  }
  Deliver();
}

bool LockEngine::serving() const {
  std::lock_guard<std::mutex> l(mu_);
  return connected_ && bootstrapped_ && !draining_;
}

void LockEngine::UpdateServing() {
  bool now = connected_ && bootstrapped_ && !draining_;
  if (now == last_serving_) return;
  last_serving_ = now;
  if (serving_listener_) Later([fn = serving_listener_, now] { fn(now); });
}

Millis LockEngine::SafeFor() const {
  auto left = last_alive_ + zk_->session_timeout() - Clock::now();
  auto ms = std::chrono::duration_cast<Millis>(left);
  return ms.count() > 0 ? ms : Millis(0);
}

void LockEngine::OnSessionEvent(SessionEvent e) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (shut_down_) return;
    switch (e) {
      case SessionEvent::kConnected: {
        connected_ = true;
        last_alive_ = Clock::now();
        timers_->Cancel(suspend_timer_);
        suspend_timer_ = 0;
        if (!bootstrapped_) {
          Bootstrap();
          break;
        }
        for (auto& [id, c] : contenders_) {
          if (c->state == State::kHeld && c->suspended) {
            c->suspended = false;
            LockEvent ev;
            ev.type = LockEvent::Type::kResumed;
            Emit(c.get(), ev);
          }
        }
        std::vector<Contender*> stalled;
        for (auto& [id, c] : contenders_) {
          if (c->stalled) stalled.push_back(c.get());
        }
        for (Contender* c : stalled) {
          c->stalled = false;
          Step(c);
        }
        break;
      }
      case SessionEvent::kDisconnected: {
        connected_ = false;
        Millis safe = SafeFor();
        for (auto& [id, c] : contenders_) {
          if (c->state != State::kHeld || c->suspended || !c->announced) continue;
          c->suspended = true;
          LockEvent ev;
          ev.type = LockEvent::Type::kSuspended;
          ev.safe_for = safe;
          Emit(c.get(), ev);
        }
        // A disconnected replica learns of its expiry only on reconnect:
        // once the session timeout has passed, its holds must count as lost.
        timers_->Cancel(suspend_timer_);
        suspend_timer_ = timers_->ScheduleAfter(safe, [this] {
          {
            std::lock_guard<std::mutex> l(mu_);
            suspend_timer_ = 0;
            if (connected_ || shut_down_) return;
            std::vector<Contender*> held;
            for (auto& [id, c] : contenders_) {
              if (c->state == State::kHeld) held.push_back(c.get());
            }
            for (Contender* c : held) {
              Lose(c, LostReason::kSessionExpired,
                   "disconnected from ZooKeeper for longer than the session "
                   "timeout");
            }
          }
          Deliver();
        });
        break;
      }
      case SessionEvent::kExpired: {
        connected_ = false;
        bootstrapped_ = false;
        ++session_epoch_;
        timers_->Cancel(suspend_timer_);
        suspend_timer_ = 0;
        std::vector<Contender*> all;
        for (auto& [id, c] : contenders_) all.push_back(c.get());
        for (Contender* c : all) {
          // Every node of the old session is gone.
          if (c->state == State::kHeld && c->announced) {
            Lose(c, LostReason::kSessionExpired,
                 "the replica's ZooKeeper session expired");
          }
          if (c->state == State::kDeleting || c->abandoned || !c->sink) {
            if (c->state == State::kDeleting && c->sink) {
              // A release waiting for the connection: the node went with
              // the session, so it is released.
              ++stats_.released;
              LockEvent ev;
              ev.type = LockEvent::Type::kReleased;
              Emit(c, ev);
              Finish(c, absl::OkStatus());
            }
            Forget(c);
            continue;
          }
          // Waiters queue again on the new session; they lose their place.
          by_path_.erase(c->path());
          c->node.clear();
          c->ahead.clear();
          c->watching.clear();
          c->last_position = -1;
          c->stalled = false;
          ++c->gen;
          c->state = State::kPendingCreate;
          ++stats_.requeued_after_expiry;
        }
        break;
      }
      case SessionEvent::kAuthFailed:
        connected_ = false;
        break;
    }
    UpdateServing();
  }
  Deliver();
}

// Creates the root (each path component) on every new session, then starts
// the contenders that were waiting for a session.
void LockEngine::Bootstrap() {
  EnsurePath(0, PathPrefixes(options_.root));
}

void LockEngine::EnsurePath(size_t index, std::vector<std::string> paths) {
  if (index == paths.size()) {
    bootstrapped_ = true;
    UpdateServing();
    Heartbeat();
    std::vector<Contender*> pending;
    for (auto& [id, c] : contenders_) {
      if (c->state == State::kPendingCreate || c->stalled) pending.push_back(c.get());
    }
    for (Contender* c : pending) {
      c->stalled = false;
      Step(c);
    }
    return;
  }
  std::string path = paths[index];
  uint64_t epoch = session_epoch_;
  zk_->Create(path, "", CreateMode::kPersistent,
              [this, index, paths = std::move(paths), epoch](
                  ZkCode code, const std::string&, const ZkStat&) {
                {
                  std::lock_guard<std::mutex> l(mu_);
                  if (shut_down_ || epoch != session_epoch_) return;
                  if (code == ZkCode::kOk || code == ZkCode::kNodeExists) {
                    EnsurePath(index + 1, paths);
                  } else if (IsRetryable(code) && connected_) {
                    EnsurePath(index, paths);
                  }
                  // Otherwise the next kConnected bootstraps again.
                }
                Deliver();
              });
}

// Tracks when ZooKeeper last certainly heard from us: a read sent at t0 that
// succeeds means the server saw the session alive after t0, so its expiry
// is no earlier than t0 + session timeout.
void LockEngine::Heartbeat() {
  timers_->Cancel(heartbeat_timer_);
  heartbeat_timer_ = timers_->ScheduleAfter(
      std::max(Millis(100), zk_->session_timeout() / 4), [this] {
        {
          std::lock_guard<std::mutex> l(mu_);
          heartbeat_timer_ = 0;
          if (shut_down_) return;
          if (connected_) {
            auto t0 = Clock::now();
            zk_->Exists(options_.root, [this, t0](ZkCode code, const ZkStat&) {
              std::lock_guard<std::mutex> l(mu_);
              if (code == ZkCode::kOk && t0 > last_alive_) last_alive_ = t0;
            });
          }
          Heartbeat();
        }
        Deliver();
      });
}

// ---------------------------------------------------------------------------
// Contender lifecycle.

absl::StatusOr<uint64_t> LockEngine::Open(const AcquireParams& p,
                                          std::shared_ptr<ContenderSink> sink) {
  const EngineLimits& lim = options_.limits;
  if (absl::Status s = ValidateLockName(p.name); !s.ok()) return s;
  if (p.owner.size() > lim.max_owner_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "owner is ", p.owner.size(), " bytes; the limit is ", lim.max_owner_bytes));
  }
  if (p.metadata.size() > lim.max_metadata_entries) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata has ", p.metadata.size(),
                     " entries; the limit is ", lim.max_metadata_entries));
  }
  for (const auto& [k, v] : p.metadata) {
    if (k.empty() || k.size() > lim.max_metadata_key_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key \"", k.substr(0, 32), "\" is ", k.size(),
                       " bytes; keys must be 1..", lim.max_metadata_key_bytes));
    }
    if (v.size() > lim.max_metadata_value_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata value for \"", k, "\" is ", v.size(),
                       " bytes; the limit is ", lim.max_metadata_value_bytes));
    }
  }
  if (p.wait_timeout < Millis(0) || p.wait_timeout > lim.max_wait_timeout) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wait_timeout is ", p.wait_timeout.count(), "ms; it must be 0..",
        lim.max_wait_timeout.count(), "ms"));
  }
  if (p.ttl != Millis(0) && (p.ttl < lim.min_ttl || p.ttl > lim.max_ttl)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ttl is ", p.ttl.count(), "ms; it must be 0 or ", lim.min_ttl.count(),
        "..", lim.max_ttl.count(), "ms"));
  }
  if (p.kind != ContenderKind::kExclusive) {
    return absl::InvalidArgumentError(
        "kind: only LOCK_KIND_EXCLUSIVE is supported");
  }

  uint64_t id;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (draining_) {
      return absl::UnavailableError("replica is draining (shutting down)");
    }
    if (!connected_ || !bootstrapped_) {
      return absl::UnavailableError("replica has no ZooKeeper session");
    }
    std::string segment = EncodeLockName(p.name);
    auto& local = by_lock_[segment];
    if (local.size() >= lim.max_contenders_per_lock) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "lock \"", p.name, "\" has ", local.size(),
          " contenders; the limit is ", lim.max_contenders_per_lock));
    }
    // Every watch of the session is re-sent in one SetWatches packet on
    // reconnect, which must fit jute.maxbuffer: budget the watched paths.
    size_t path_bytes = options_.root.size() + segment.size() + kContenderPathOverhead;
    if (watched_path_bytes_ + path_bytes > lim.max_watched_path_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this replica's contenders would watch ", watched_path_bytes_ + path_bytes,
          " bytes of paths; the limit is ", lim.max_watched_path_bytes,
          " (ZooKeeper re-sends all watches in one packet on reconnect)"));
    }
    watched_path_bytes_ += path_bytes;
    auto c = std::make_unique<Contender>();
    c->id = id = ++next_id_;
    c->path_bytes = path_bytes;
    c->params = p;
    c->segment = segment;
    c->lock_path = options_.root + "/" + segment;
    c->uid = NewContenderUid();
    ContenderInfo info;
    info.owner = p.owner;
    info.metadata = p.metadata;
    info.replica_id = options_.replica_id;
    info.started_unix_ms = NowUnixMs();
    info.ttl_ms = p.ttl.count();
    c->data = EncodeContenderInfo(info);
    c->sink = std::move(sink);
    Contender* raw = c.get();
    contenders_.emplace(id, std::move(c));
    local.insert(id);
    if (p.wait_timeout > Millis(0)) {
      raw->wait_timer = timers_->ScheduleAfter(p.wait_timeout, [this, id] {
        {
          std::lock_guard<std::mutex> l(mu_);
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
  if (!connected_ || !bootstrapped_) {
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
      IssueList(c);
      break;
    case State::kWaiting:
      Arm(c);
      break;
    case State::kHeld:
      ArmOwn(c);
      break;
    case State::kDeleting:
      IssueDelete(c);
      break;
  }
}

void LockEngine::Stall(Contender* c) {
  c->stalled = true;  // the next kConnected retries it
  if (!connected_ || !bootstrapped_) return;
  // The connection is already back (or the failure was an operation
  // timeout): retry soon, but never in a tight loop.
  uint64_t id = c->id, gen = c->gen;
  timers_->ScheduleAfter(std::chrono::milliseconds(50), [this, id, gen] {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (shut_down_) return;
      Contender* c = Find(id, gen);
      if (c == nullptr || !c->stalled || !connected_ || !bootstrapped_) return;
      c->stalled = false;
      Step(c);
    }
    Deliver();
  });
}

void LockEngine::IssueCreate(Contender* c) {
  if (c->abandoned) {
    Forget(c);
    return;
  }
  c->state = State::kCreating;
  uint64_t id = c->id, gen = ++c->gen;
  zk_->Create(c->lock_path + "/" + ContenderNodePrefix(c->params.kind, c->uid),
              c->data, CreateMode::kEphemeralSequential,
              [this, id, gen](ZkCode code, const std::string& path,
                              const ZkStat& stat) {
                OnCreated(id, gen, code, path, stat);
                Deliver();
              });
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
  std::lock_guard<std::mutex> l(mu_);
  Contender* c = Find(id, gen);
  if (c == nullptr) return;
  if (code == ZkCode::kNoNode) {
    // The lock's container node is missing (never made, or reaped while
    // empty): make it, then create again.
    if (++c->create_attempts > 5) {
      FailWait(c, absl::UnavailableError(absl::StrCat(
                      "cannot create the lock node for \"", c->params.name, "\"")));
      return;
    }
    uint64_t g = ++c->gen;
    zk_->Create(c->lock_path, "", CreateMode::kContainer,
                [this, id, g](ZkCode code, const std::string&, const ZkStat&) {
                  {
                    std::lock_guard<std::mutex> l(mu_);
                    Contender* c = Find(id, g);
                    if (c == nullptr) return;
                    if (code == ZkCode::kOk || code == ZkCode::kNodeExists) {
                      IssueCreate(c);
                    } else if (IsRetryable(code)) {
                      c->state = State::kPendingCreate;
                      Stall(c);
                    } else if (!IsSessionGone(code)) {
                      FailWait(c, ZkWriteFailure("creating the lock node", c->lock_path, code));
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
    FailWait(c, ZkWriteFailure("creating the contender node", c->lock_path, code));
    return;
  }
  c->node = path.substr(path.rfind('/') + 1);
  auto parsed = ParseContenderName(c->node);
  c->seq = parsed ? parsed->sequence : 0;
  c->czxid = static_cast<uint64_t>(stat.czxid);
  by_path_[c->path()] = c->id;
  if (c->abandoned || !c->sink) {
    // The caller gave up while the create was in flight.
    c->state = State::kDeleting;
    IssueDelete(c);
    return;
  }
  c->state = State::kListing;
  IssueList(c);
}

void LockEngine::SearchOwnNode(Contender* c) {
  uint64_t id = c->id, gen = ++c->gen;
  zk_->GetChildren(c->lock_path, [this, id, gen](
                                     ZkCode code,
                                     const std::vector<std::string>& children) {
    {
      std::lock_guard<std::mutex> l(mu_);
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
          zk_->Exists(c->path(), [this, id, g, children](ZkCode code,
                                                         const ZkStat& stat) {
            {
              std::lock_guard<std::mutex> l(mu_);
              Contender* c = Find(id, g);
              if (c == nullptr) return;
              if (IsRetryable(code)) {
                c->state = State::kCreateUnknown;
                Stall(c);
              } else if (code == ZkCode::kOk) {
                c->czxid = static_cast<uint64_t>(stat.czxid);
                if (c->abandoned || !c->sink) {
                  c->state = State::kDeleting;
                  IssueDelete(c);
                } else {
                  OnChildren(c, children);
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

void LockEngine::IssueList(Contender* c) {
  c->state = State::kListing;
  uint64_t id = c->id, gen = ++c->gen;
  zk_->GetChildren(c->lock_path, [this, id, gen](
                                     ZkCode code,
                                     const std::vector<std::string>& children) {
    {
      std::lock_guard<std::mutex> l(mu_);
      Contender* c = Find(id, gen);
      if (c == nullptr) return;
      if (IsRetryable(code)) {
        Stall(c);
      } else if (code == ZkCode::kOk) {
        OnChildren(c, children);
      } else if (code == ZkCode::kNoNode) {
        FailWait(c, absl::AbortedError("the lock node vanished while queueing"));
      }
    }
    Deliver();
  });
}

void LockEngine::OnChildren(Contender* c,
                            const std::vector<std::string>& children) {
  std::vector<ContenderName> queue = OrderContenders(children);
  auto self = std::find_if(queue.begin(), queue.end(),
                           [&](const ContenderName& n) { return n.node == c->node; });
  if (self == queue.end()) {
    FailWait(c, absl::AbortedError(
                    "this contender's node was deleted while it queued"));
    return;
  }
  if (queue.size() > options_.limits.max_contenders_per_lock) {
    FailWait(c, absl::ResourceExhaustedError(absl::StrCat(
                    "lock \"", c->params.name, "\" has ", queue.size() - 1,
                    " contenders; the limit is ",
                    options_.limits.max_contenders_per_lock)));
    return;
  }
  c->ahead.assign(queue.begin(), self);
  c->state = State::kWaiting;
  c->watching.clear();
  Advance(c);
}

// Re-decides from the list already held: nodes ahead can only disappear.
// O(1) in the queue length: the mutex rule looks only at the nearest
// contender ahead, so only that tail is handed to Decide. (Shared kinds,
// once accepted, need the nearest exclusive ahead instead.)
void LockEngine::Advance(Contender* c) {
  constexpr int kHolderLimit = 1;
  const size_t n = c->ahead.size();
  std::vector<ContenderName> tail(c->ahead.end() - static_cast<long>(std::min<size_t>(n, kHolderLimit)),
                                  c->ahead.end());
  ContenderName self;
  self.kind = c->params.kind;
  self.uid = c->uid;
  self.sequence = c->seq;
  self.node = c->node;
  tail.push_back(self);
  absl::StatusOr<OrderDecision> d = Decide(tail, c->node, kHolderLimit);
  if (!d.ok()) {
    FailWait(c, absl::InternalError(d.status().ToString()));
    return;
  }
  if (d->holds) {
    Grant(c);
    return;
  }
  if (c->params.wait_timeout == Millis(0)) {
    ++stats_.not_acquired_try_once;
    FailWait(c, absl::FailedPreconditionError(absl::StrCat(
                    "lock \"", c->params.name,
                    "\" is held (try-once: wait_timeout is 0)")));
    return;
  }
  ReportPosition(c, static_cast<int64_t>(n));
  if (c->watching != d->watch) {
    c->watching = d->watch;
    c->watching_seq = c->ahead[n - kHolderLimit].sequence;
    Arm(c);
  }
}

// QUEUED is sent on every change within the last 10 places; further back
// only when the position has halved or a second has passed, so a long queue
// does not cost every waiter a message on every handoff.
void LockEngine::ReportPosition(Contender* c, int64_t ahead) {
  const int64_t position = ahead;  // mutex: one holder ahead = next in line
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

// Watches c->watching with getData: no watch is left if it is already gone.
void LockEngine::Arm(Contender* c) {
  uint64_t id = c->id, gen = ++c->gen;
  std::string node = c->watching;
  std::string segment = c->segment;
  zk_->GetData(
      c->lock_path + "/" + node,
      [this, id, gen, node, segment](WatchEventType type) {
        {
          std::lock_guard<std::mutex> l(mu_);
          Contender* c = Find(id, gen);
          if (c == nullptr || c->state != State::kWaiting) return;
          if (type == WatchEventType::kDeleted) {
            NoteGone(segment, node);
          } else {
            Arm(c);  // data changed (a remote KeepAlive): watch again
          }
        }
        Deliver();
      },
      [this, id, gen, node, segment](ZkCode code, const std::string&,
                                     const ZkStat&) {
        {
          std::lock_guard<std::mutex> l(mu_);
          Contender* c = Find(id, gen);
          if (c == nullptr || c->state != State::kWaiting) return;
          if (code == ZkCode::kNoNode) {
            NoteGone(segment, node);
          } else if (IsRetryable(code)) {
            Stall(c);
          }
        }
        Deliver();
      });
}

void LockEngine::NoteGone(const std::string& segment, const std::string& node) {
  auto it = by_lock_.find(segment);
  if (it == by_lock_.end()) return;
  std::optional<ContenderName> gone = ParseContenderName(node);
  if (!gone) return;
  std::vector<Contender*> affected;
  for (uint64_t id : it->second) {
    Contender* c = contenders_.at(id).get();
    if (c->state != State::kWaiting || !SequenceBefore(gone->sequence, c->seq)) continue;
    auto& a = c->ahead;
    // Usually the departed holder at the front; otherwise find it by
    // sequence (the list is in sequence order).
    auto pos = a.begin();
    if (a.empty() || a.front().node != node) {
      pos = std::lower_bound(a.begin(), a.end(), gone->sequence,
                             [](const ContenderName& n, int32_t seq) {
                               return SequenceBefore(n.sequence, seq);
                             });
    }
    if (pos != a.end() && pos->node == node) {
      a.erase(pos);
      affected.push_back(c);
    } else if (c->watching == node) {
      affected.push_back(c);
    }
  }
  const bool top = !handoff_from_;
  if (top) handoff_from_ = Clock::now();
  for (Contender* c : affected) {
    if (c->watching == node) c->watching.clear();
    if (c->state == State::kWaiting) Advance(c);
  }
  if (top) handoff_from_.reset();
}

void LockEngine::NoteAllBefore(const std::string& segment, int32_t seq) {
  auto it = by_lock_.find(segment);
  if (it == by_lock_.end()) return;
  std::vector<Contender*> affected;
  for (uint64_t id : it->second) {
    Contender* c = contenders_.at(id).get();
    if (c->state != State::kWaiting) continue;
    auto& a = c->ahead;
    size_t before = a.size();
    while (!a.empty() && SequenceBefore(a.front().sequence, seq)) a.pop_front();
    if (a.size() != before) affected.push_back(c);
  }
  const bool top = !handoff_from_;
  if (top) handoff_from_ = Clock::now();
  for (Contender* c : affected) {
    if (!c->watching.empty() && SequenceBefore(c->watching_seq, seq)) c->watching.clear();
    if (c->state == State::kWaiting) Advance(c);
  }
  if (top) handoff_from_.reset();
}

// The ordering rule says `c` holds. ACQUIRED is announced only once a read
// of its own node confirms the node still exists (Announce, from ArmOwn):
// when a session is closed under the replica, ZooKeeper deletes its nodes and
// fires their watches before the replica hears of the expiry, so a waiter
// could otherwise be told it holds a lock through a node that is gone.
void LockEngine::Grant(Contender* c) {
  c->state = State::kHeld;
  c->announced = false;
  c->handoff_from = handoff_from_;  // measured to the announcement
  c->ahead.clear();
  c->watching.clear();
  c->suspended = false;
  // A mutex holder proves every earlier contender is gone.
  if (c->params.kind == ContenderKind::kExclusive) NoteAllBefore(c->segment, c->seq);
  ArmOwn(c);
}

void LockEngine::Announce(Contender* c) {
  c->announced = true;
  timers_->Cancel(c->wait_timer);
  c->wait_timer = 0;
  ++stats_.granted;
  NoteWaitEnded(c, AcquireResult::kAcquired);
  c->granted_at = Clock::now();
  c->hold_open = true;
  if (c->handoff_from && observer_) {
    observer_->OnHandoff(std::chrono::duration<double>(c->granted_at - *c->handoff_from).count());
  }
  LockEvent e;
  e.type = LockEvent::Type::kAcquired;
  e.lease_id = FormatLeaseId(c->segment, c->node);
  e.fencing_token = c->czxid;
  e.valid_for = c->params.ttl;
  e.session_timeout = zk_->session_timeout();
  Emit(c, e);
  if (c->params.ttl > Millis(0)) RenewTtl(c);
}

// A contender whose node vanished before it was told it holds: it lost its
// place, so it queues again with a new node (as after a session expiry).
void LockEngine::Requeue(Contender* c) {
  auto it = by_path_.find(c->path());
  if (it != by_path_.end() && it->second == c->id) by_path_.erase(it);
  c->node.clear();
  c->ahead.clear();
  c->watching.clear();
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
  uint64_t id = c->id, gen = ++c->gen;
  zk_->GetData(
      c->path(),
      [this, id, gen](WatchEventType type) {
        {
          std::lock_guard<std::mutex> l(mu_);
          Contender* c = Find(id, gen);
          if (c == nullptr || c->state != State::kHeld || !c->announced) return;
          if (type == WatchEventType::kDeleted) {
            Lose(c, LostReason::kDeleted,
                 "the lock's node was deleted outside this stream (Release by "
                 "lease id, possibly through another replica, or an operator)");
          } else {
            if (c->params.ttl > Millis(0)) RenewTtl(c);
            ArmOwn(c);
          }
        }
        Deliver();
      },
      [this, id, gen](ZkCode code, const std::string&, const ZkStat&) {
        {
          std::lock_guard<std::mutex> l(mu_);
          Contender* c = Find(id, gen);
          if (c == nullptr || c->state != State::kHeld) return;
          if (code == ZkCode::kOk && !c->announced) {
            Announce(c);
          } else if (code == ZkCode::kNoNode && !c->announced) {
            Requeue(c);
          } else if (code == ZkCode::kNoNode) {
            Lose(c, LostReason::kDeleted,
                 "the lock's node was deleted outside this stream");
          } else if (IsRetryable(code)) {
            Stall(c);
          }
        }
        Deliver();
      });
}

void LockEngine::RenewTtl(Contender* c) {
  c->ttl_deadline = Clock::now() + c->params.ttl;
  timers_->Cancel(c->ttl_timer);
  uint64_t id = c->id;
  c->ttl_timer = timers_->Schedule(c->ttl_deadline, [this, id] {
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = contenders_.find(id);
      if (it == contenders_.end()) return;
      Contender* c = it->second.get();
      c->ttl_timer = 0;
      if (c->state == State::kHeld && Clock::now() >= c->ttl_deadline) {
        Lose(c, LostReason::kLeaseExpired,
             absl::StrCat("no KeepAlive within the lease ttl of ",
                          c->params.ttl.count(), "ms"));
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
      if (connected_) {
        IssueDelete(c);
      } else {
        c->stalled = true;
      }
  }
}

void LockEngine::IssueDelete(Contender* c) {
  c->state = State::kDeleting;
  uint64_t id = c->id, gen = ++c->gen;
  zk_->Delete(c->path(), -1, [this, id, gen](ZkCode code) {
    {
      std::lock_guard<std::mutex> l(mu_);
      Contender* c = Find(id, gen);
      if (c == nullptr) return;
      if (IsRetryable(code)) {
        Stall(c);
        return;
      }
      // Deleted, already gone, or gone with the session.
      if (c->sink) {
        ++stats_.released;
        LockEvent e;
        e.type = LockEvent::Type::kReleased;
        Emit(c, e);
        Finish(c, absl::OkStatus());
      }
      std::string segment = c->segment, node = c->node;
      Forget(c);
      NoteGone(segment, node);
    }
    Deliver();
  });
}

void LockEngine::Forget(Contender* c) {
  watched_path_bytes_ -= c->path_bytes;
  timers_->Cancel(c->wait_timer);
  timers_->Cancel(c->ttl_timer);
  if (!c->node.empty()) {
    auto it = by_path_.find(c->path());
    if (it != by_path_.end() && it->second == c->id) by_path_.erase(it);
  }
  auto lk = by_lock_.find(c->segment);
  if (lk != by_lock_.end()) {
    lk->second.erase(c->id);
    if (lk->second.empty()) by_lock_.erase(lk);
  }
  contenders_.erase(c->id);  // destroys *c
}

void LockEngine::Release(uint64_t id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = contenders_.find(id);
    if (it == contenders_.end()) return;
    Contender* c = it->second.get();
    if (!c->sink) return;
    if (c->state == State::kHeld && c->announced) {
      // RELEASED is sent once the node is gone (IssueDelete keeps the sink).
      NoteHoldEnded(c);
      timers_->Cancel(c->ttl_timer);
      c->ttl_timer = 0;
      c->state = State::kDeleting;
      if (connected_) {
        IssueDelete(c);
      } else {
        c->stalled = true;
      }
    } else if (c->state != State::kDeleting) {
      FailWait(c, absl::CancelledError("the client stopped waiting"));
    }
  }
  Deliver();
}

void LockEngine::Abandon(uint64_t id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = contenders_.find(id);
    if (it == contenders_.end()) return;
    Contender* c = it->second.get();
    c->sink = nullptr;
    if (c->state != State::kDeleting) EndContender(c);
  }
  Deliver();
}

// ---------------------------------------------------------------------------
// Lease operations from any replica.

void LockEngine::ReleaseLease(const std::string& lease_id,
                              std::function<void(absl::Status)> done) {
  absl::StatusOr<LeaseId> lease = ParseLeaseId(lease_id);
  if (!lease.ok()) {
    done(lease.status());
    return;
  }
  std::string path = options_.root + "/" + lease->lock_segment + "/" +
                     lease->contender.node;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!connected_) {
      Later([done] { done(absl::UnavailableError("replica has no ZooKeeper session")); });
    } else if (Contender* c = FindByPath(path);
               c != nullptr && c->state == State::kHeld && c->sink) {
      // Our own stream holds it, but did not ask: it is told LOST(DELETED),
      // exactly as a holder on another replica would be.
      Lose(c, LostReason::kDeleted, "released by lease id through the Release RPC");
      Later([done] { done(absl::OkStatus()); });
    } else {
      zk_->Delete(path, -1, [done, lease_id](ZkCode code) {
        if (code == ZkCode::kOk) {
          done(absl::OkStatus());
        } else if (code == ZkCode::kNoNode) {
          done(absl::NotFoundError(absl::StrCat(
              "lease_id \"", lease_id,
              "\" not found: already released, revoked or expired")));
        } else {
          done(absl::UnavailableError(
              absl::StrCat("ZooKeeper delete failed: ", ZkCodeName(code))));
        }
      });
    }
  }
  Deliver();
}

void LockEngine::KeepAlive(const std::string& lease_id,
                           std::function<void(absl::StatusOr<Millis>)> done) {
  absl::StatusOr<LeaseId> lease = ParseLeaseId(lease_id);
  if (!lease.ok()) {
    done(lease.status());
    return;
  }
  std::string path = options_.root + "/" + lease->lock_segment + "/" +
                     lease->contender.node;
  auto not_found = [lease_id] {
    return absl::NotFoundError(absl::StrCat(
        "lease_id \"", lease_id, "\" not found: released, revoked or lost"));
  };
  {
    std::lock_guard<std::mutex> l(mu_);
    Contender* c = FindByPath(path);
    if (c != nullptr) {
      if (c->state != State::kHeld || !c->sink) {
        Later([done, not_found] { done(not_found()); });
      } else {
        // Local: renew without touching ZooKeeper.
        if (c->params.ttl > Millis(0)) RenewTtl(c);
        Millis valid = c->params.ttl;
        if (!connected_) valid = std::min(valid, SafeFor());
        Later([done, valid] { done(valid); });
      }
    } else if (!connected_) {
      Later([done] { done(absl::UnavailableError("replica has no ZooKeeper session")); });
    } else {
      // Remote: rewrite the node's data unchanged; the owning replica's
      // watch on its own node sees the change and renews.
      zk_->GetData(path, nullptr, [this, path, done, not_found](
                                      ZkCode code, const std::string& data,
                                      const ZkStat& stat) {
        if (code == ZkCode::kNoNode) return done(not_found());
        if (code != ZkCode::kOk) {
          return done(absl::UnavailableError(
              absl::StrCat("ZooKeeper read failed: ", ZkCodeName(code))));
        }
        absl::StatusOr<ContenderInfo> info = DecodeContenderInfo(data);
        Millis ttl(info.ok() ? info->ttl_ms : 0);
        zk_->SetData(path, data, stat.version,
                     [done, ttl, not_found](ZkCode code, const ZkStat&) {
                       // BAD_VERSION: another renewal raced ours; renewed.
                       if (code == ZkCode::kOk || code == ZkCode::kBadVersion) {
                         done(ttl);
                       } else if (code == ZkCode::kNoNode) {
                         done(not_found());
                       } else {
                         done(absl::UnavailableError(absl::StrCat(
                             "ZooKeeper write failed: ", ZkCodeName(code))));
                       }
                     });
      });
    }
  }
  Deliver();
}

// ---------------------------------------------------------------------------
// Introspection.

void LockEngine::Describe(
    const std::string& name,
    std::function<void(absl::StatusOr<LockDescription>)> done) {
  if (absl::Status s = ValidateLockName(name); !s.ok()) return done(s);
  if (!zk_->connected()) {
    return done(absl::UnavailableError("replica has no ZooKeeper session"));
  }
  std::string lock_path = options_.root + "/" + EncodeLockName(name);
  auto not_found = [name] {
    return absl::NotFoundError(
        absl::StrCat("lock \"", name, "\" has no holders or waiters"));
  };
  zk_->GetChildren(lock_path, [this, name, lock_path, done, not_found](
                                  ZkCode code,
                                  const std::vector<std::string>& children) {
    if (code == ZkCode::kNoNode) return done(not_found());
    if (code != ZkCode::kOk) {
      return done(absl::UnavailableError(
          absl::StrCat("ZooKeeper read failed: ", ZkCodeName(code))));
    }
    std::vector<ContenderName> queue = OrderContenders(children);
    if (queue.empty()) return done(not_found());
    struct Gather {
      std::mutex mu;
      size_t left;
      std::vector<ContenderName> queue;
      std::vector<std::optional<ContenderView>> views;
    };
    auto g = std::make_shared<Gather>();
    g->left = queue.size();
    g->queue = queue;
    g->views.resize(queue.size());
    for (size_t i = 0; i < queue.size(); ++i) {
      zk_->GetData(lock_path + "/" + queue[i].node, nullptr,
                   [g, i, name, done, not_found](ZkCode code, const std::string& data,
                                                 const ZkStat& stat) {
                     std::unique_lock<std::mutex> l(g->mu);
                     if (code == ZkCode::kOk) {
                       ContenderView v;
                       if (auto info = DecodeContenderInfo(data); info.ok()) v.info = *info;
                       v.kind = g->queue[i].kind;
                       v.since_unix_ms = stat.ctime_ms;
                       v.fencing_token = static_cast<uint64_t>(stat.czxid);
                       g->views[i] = v;
                     }
                     if (--g->left > 0) return;
                     LockDescription d;
                     d.name = name;
                     int64_t pos = 0;
                     for (auto& v : g->views) {
                       if (!v) continue;  // left while we looked
                       v->position = ++pos;
                       // Mutex: the first live contender holds.
                       (pos == 1 ? d.holders : d.waiters).push_back(*v);
                     }
                     l.unlock();
                     if (pos == 0) return done(not_found());
                     done(std::move(d));
                   });
    }
  });
}

void LockEngine::List(const std::string& prefix, int limit,
                      std::function<void(absl::StatusOr<LockList>)> done) {
  if (limit == 0) limit = 1000;
  if (limit < 0 || limit > 10000) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("limit is ", limit, "; it must be 0 (default 1000) or 1..10000")));
  }
  if (prefix.size() > kMaxLockNameBytes) {
    return done(absl::InvalidArgumentError(absl::StrCat(
        "prefix is ", prefix.size(), " bytes; the limit is ", kMaxLockNameBytes)));
  }
  if (!zk_->connected()) {
    return done(absl::UnavailableError("replica has no ZooKeeper session"));
  }
  zk_->GetChildren(options_.root, [this, prefix, limit, done](
                                      ZkCode code,
                                      const std::vector<std::string>& children) {
    if (code != ZkCode::kOk) {
      return done(absl::UnavailableError(
          absl::StrCat("ZooKeeper read failed: ", ZkCodeName(code))));
    }
    std::vector<std::pair<std::string, std::string>> names;  // name, segment
    for (const auto& seg : children) {
      absl::StatusOr<std::string> n = DecodeLockName(seg);
      if (n.ok() && absl::StartsWith(*n, prefix)) names.emplace_back(*n, seg);
    }
    std::sort(names.begin(), names.end());
    if (names.empty()) return done(LockList{});
    // Empty lock nodes linger until ZooKeeper reaps containers: keep only
    // locks that have contenders now. One Exists per candidate, in name
    // order, kListBatch at a time, stopping once limit + 1 live locks are
    // known: the cost follows the answer, not the number of lock nodes.
    auto job = std::make_shared<ListJob>();
    job->names = std::move(names);
    job->limit = static_cast<size_t>(limit);
    job->done = std::move(done);
    ListBatch(std::move(job));
  });
}

void LockEngine::ListBatch(std::shared_ptr<ListJob> job) {
  const size_t begin = job->next;
  const size_t end = std::min(job->names.size(), begin + kListBatch);
  job->next = end;
  job->live.assign(end - begin, false);
  job->left = end - begin;
  for (size_t i = begin; i < end; ++i) {
    zk_->Exists(options_.root + "/" + job->names[i].second,
                [this, job, i, begin](ZkCode code, const ZkStat& stat) {
                  std::unique_lock<std::mutex> l(job->mu);
                  job->live[i - begin] = code == ZkCode::kOk && stat.num_children > 0;
                  if (--job->left > 0) return;
                  for (size_t j = 0; j < job->live.size(); ++j) {
                    if (job->live[j]) job->out.names.push_back(job->names[begin + j].first);
                  }
                  if (job->out.names.size() > job->limit) {
                    job->out.names.resize(job->limit);
                    job->out.truncated = true;
                  } else if (job->next < job->names.size()) {
                    l.unlock();
                    ListBatch(job);  // from this completion: issues async calls only
                    return;
                  }
                  l.unlock();
                  job->done(std::move(job->out));
                });
  }
}

// ---------------------------------------------------------------------------
// Drain.

void LockEngine::BeginDrain() {
  {
    std::lock_guard<std::mutex> l(mu_);
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
    std::lock_guard<std::mutex> l(mu_);
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
  std::lock_guard<std::mutex> l(mu_);
  EngineStats s = stats_;
  s.contenders = contenders_.size();
  s.holders = 0;
  for (auto& [id, c] : contenders_) {
    if (c->state == State::kHeld) ++s.holders;
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
  std::lock_guard<std::mutex> l(mu_);
  std::vector<LockLoad> out;
  out.reserve(by_lock_.size());
  for (const auto& [segment, ids] : by_lock_) {
    LockLoad load;
    for (uint64_t id : ids) {
      auto it = contenders_.find(id);
      if (it == contenders_.end()) continue;
      const Contender& c = *it->second;
      if (load.name.empty()) load.name = c.params.name;
      if (load.first_id == 0 || id < load.first_id) load.first_id = id;
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
