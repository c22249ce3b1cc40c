#include "server/engine/lock_observers.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/recipe/lock_name.h"
#include "server/recipe/lock_queue.h"
#include "server/recipe/ordering.h"

namespace turnstile {

LockObservers::LockObservers(LockEngine* engine) : engine_(engine) {
  for (size_t i = 0; i < engine->session_count(); ++i) {
    shards_.push_back(std::make_unique<ShardObservers>(engine, i));
  }
}

absl::StatusOr<uint64_t> LockObservers::Start(const std::string& name,
                                              std::shared_ptr<ObserveSink> sink) {
  if (absl::Status s = ValidateLockName(name); !s.ok()) return s;
  const size_t i = engine_->SessionIndexOf(name);
  absl::StatusOr<uint64_t> id = shards_[i]->Start(name, std::move(sink));
  if (!id.ok()) return id.status();
  return *id * shards_.size() + i;  // the id names its shard, as a contender's does
}

void LockObservers::Stop(uint64_t id) { shards_[id % shards_.size()]->Stop(id / shards_.size()); }

void LockObservers::Drain() {
  for (auto& shard : shards_) shard->Drain();
}

ObserveStats LockObservers::stats() const {
  ObserveStats sum;
  for (const auto& shard : shards_) {
    const ObserveStats s = shard->stats();
    sum.locks += s.locks;
    sum.observers += s.observers;
    sum.reads += s.reads;
    sum.states += s.states;
    sum.watch_events += s.watch_events;
  }
  return sum;
}

namespace {

enum Which { kChildren = 0, kExists = 1, kData = 2 };

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool SameHolder(const ContenderView& a, const ContenderView& b) {
  return a.fencing_token == b.fencing_token && a.kind == b.kind &&
         a.max_holders == b.max_holders && a.info.owner == b.info.owner &&
         a.info.identity == b.info.identity && a.info.metadata == b.info.metadata &&
         a.info.replica_id == b.info.replica_id &&
         a.info.granted_unix_ms == b.info.granted_unix_ms;
}

bool SameState(const LockSnapshot& a, const LockSnapshot& b) {
  if (a.known != b.known) return false;
  if (!a.known) return true;  // unknown is unknown, whatever the reason
  if (a.waiters != b.waiters || a.max_holders != b.max_holders ||
      a.holders.size() != b.holders.size()) {
    return false;
  }
  for (size_t i = 0; i < a.holders.size(); ++i) {
    if (!SameHolder(a.holders[i], b.holders[i])) return false;
  }
  return true;
}

void RunAll(std::vector<std::function<void()>>* later) {
  for (auto& fn : *later) fn();
  later->clear();
}

}  // namespace

ShardObservers::ShardObservers(LockEngine* engine, size_t index)
    : engine_(engine),
      index_(index),
      loop_(engine->session(index)->loop()),
      checks_(engine->options().check_invariants) {
  engine_->AddSessionListener([this](size_t index, SessionEvent e) {
    if (index == index_) OnSessionEvent(index, e);
  });
}

ShardObservers::OnLoop::OnLoop(const ShardObservers* o) {
  if (o->checks_ && !o->loop_->OwnedHere()) {
    std::fprintf(stderr, "turnstile observers: shard %zu's observers entered off its loop\n",
                 o->index_);
    std::abort();
  }
}

absl::StatusOr<uint64_t> ShardObservers::Start(const std::string& name,
                                              std::shared_ptr<ObserveSink> sink) {
  if (absl::Status s = ValidateLockName(name); !s.ok()) return s;
  if (draining_.load(std::memory_order_acquire)) {
    return absl::UnavailableError("replica is draining; observe through another");
  }
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed) + 1;
  loop_->Run([this, id, name, sink = std::move(sink)] {
    std::vector<std::function<void()>> later;
    {
      OnLoop l(this);
      Join(id, name, EncodeLockName(name), sink, &later);
    }
    RunAll(&later);
  });
  return id;
}

void ShardObservers::Join(uint64_t id, const std::string& name, const std::string& segment,
                          std::shared_ptr<ObserveSink> sink,
                          std::vector<std::function<void()>>* later) {
  if (drained_) {
    // It raced the drain: told to end as every other observer was.
    later->push_back([sink] { sink->OnDrain(); });
    return;
  }
  auto [it, fresh] = locks_.try_emplace(segment);
  Observed& o = it->second;
  if (fresh) {
    o.epoch = ++next_epoch_;
    o.name = name;
    o.segment = segment;
    o.lock_path = engine_->options().root + "/" + segment;
    o.session = index_;  // LockObservers routed it here by SessionIndexOf
  }
  // The first state comes from a read that starts after this call (the
  // one in flight, if any, may predate a change already complete, e.g. a
  // release through another replica whose notification is still on its
  // way): never the cached state. Joining observers cost reads (at most
  // one in flight and one more per lock), changes do not. Every read
  // started from now on has a higher id than after_read.
  o.joining.emplace(id, Observed::Joining{std::move(sink), next_read_});
  by_id_.emplace(id, segment);
  Read(&o, later);
}

void ShardObservers::Stop(uint64_t id) {
  loop_->Run([this, id] {
    OnLoop l(this);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return;
    const std::string segment = it->second;
    by_id_.erase(it);
    auto o = locks_.find(segment);
    if (o == locks_.end()) return;
    o->second.sinks.erase(id);
    o->second.joining.erase(id);
    MaybeForget(segment);
  });
}

void ShardObservers::Drain() {
  draining_.store(true, std::memory_order_release);
  loop_->RunAndWait([this] {
    std::vector<std::shared_ptr<ObserveSink>> sinks;
    {
      OnLoop l(this);
      drained_ = true;
      for (auto& [segment, o] : locks_) {
        for (auto& [id, sink] : o.sinks) sinks.push_back(sink);
        for (auto& [id, j] : o.joining) sinks.push_back(j.sink);
      }
    }
    for (auto& s : sinks) s->OnDrain();
  });
}

ObserveStats ShardObservers::stats() const {
  ObserveStats s;
  loop_->RunAndWait([this, &s] {
    OnLoop l(this);
    s = stats_;
    s.locks = locks_.size();
    s.observers = by_id_.size();
  });
  return s;
}

ShardObservers::Observed* ShardObservers::Find(const std::string& segment, uint64_t epoch) {
  auto it = locks_.find(segment);
  if (it == locks_.end() || it->second.epoch != epoch) return nullptr;
  return &it->second;
}

void ShardObservers::MaybeForget(const std::string& segment) {
  auto it = locks_.find(segment);
  if (it == locks_.end()) return;
  const Observed& o = it->second;
  if (!Watched(o) && !o.children_watch && !o.exists_watch && o.data_watched.empty() &&
      o.reading == 0) {
    locks_.erase(it);
  }
}

void ShardObservers::Read(Observed* o, std::vector<std::function<void()>>* later) {
  (void)later;
  if (o->reading != 0) {
    o->read_wanted = true;
    return;
  }
  o->reading = ++next_read_;
  ++stats_.reads;
  ZkSession* zk = engine_->session(o->session);
  const std::string segment = o->segment;
  const uint64_t epoch = o->epoch, read = o->reading;
  const bool arm = !o->children_watch;
  auto done = [this, segment, epoch, read, arm](ZkCode code,
                                                const std::vector<std::string>& children,
                                                const ZkStat&) {
    {
      OnLoop l(this);
      // The C client keeps the watch only when the read succeeded.
      if (Observed* o = Find(segment, epoch); o != nullptr && arm && code != ZkCode::kOk) {
        o->children_watch = false;
      }
    }
    OnListed(segment, epoch, read, code, children);
  };
  if (arm) {
    o->children_watch = true;
    zk->GetChildrenWatch(
        o->lock_path,
        [this, segment, epoch](WatchEventType) { OnWatch(segment, epoch, kChildren, ""); },
        std::move(done));
  } else {
    zk->GetChildrenStat(o->lock_path, std::move(done));
  }
}

void ShardObservers::OnListed(const std::string& segment, uint64_t epoch, uint64_t read,
                             ZkCode code, const std::vector<std::string>& children) {
  std::vector<std::function<void()>> later;
  {
    OnLoop l(this);
    Observed* o = Find(segment, epoch);
    if (o == nullptr || o->reading != read) return;
    if (code == ZkCode::kNoNode) {
      // No lock node: nobody holds or waits. Watch for its creation.
      if (!o->exists_watch) {
        o->exists_watch = true;
        ZkSession* zk = engine_->session(o->session);
        zk->ExistsWatch(
            o->lock_path,
            [this, segment, epoch](WatchEventType) { OnWatch(segment, epoch, kExists, ""); },
            [this, segment, epoch](ZkCode code, const ZkStat&) {
              std::vector<std::function<void()>> later;
              {
                OnLoop l(this);
                Observed* o = Find(segment, epoch);
                if (o == nullptr) return;
                if (code != ZkCode::kOk && code != ZkCode::kNoNode) o->exists_watch = false;
                // Created between the listing and this: read it.
                if (code == ZkCode::kOk && Watched(*o)) Read(o, &later);
                MaybeForget(segment);
              }
              RunAll(&later);
            });
      }
      auto s = std::make_shared<LockSnapshot>();
      s->known = true;
      s->name = o->name;
      Publish(o, std::move(s), &later);
      FinishRead(o, &later);
    } else if (code != ZkCode::kOk) {
      // Unknown: told (once) to observers that knew the state, and to
      // joining ones, which get it as their first.
      if (!o->last || o->last->known) {
        auto s = std::make_shared<LockSnapshot>();
        s->name = o->name;
        s->message = absl::StrCat("ZooKeeper read failed: ", ZkCodeName(code));
        Publish(o, std::move(s), &later);
      }
      FinishRead(o, &later);
    } else {
      // The holders: a prefix of the queue.
      auto view = std::make_shared<LockQueue>();
      view->ReplaceWith(children, [](const std::string&) { return uint64_t{0}; },
                        [](const LockQueue::Entry&) { return false; });
      // The loop's, as every callback that touches it runs there.
      struct Gather {
        size_t left = 0;
        std::vector<std::optional<ContenderView>> holders;
        std::vector<std::string> nodes;
        bool gone = false;  // a holder left while it was read
      };
      auto g = std::make_shared<Gather>();
      bool stop = false;
      view->ForFront(view->size(), [&](int64_t, int32_t seq, const LockQueue::Entry& e) {
        if (stop) return;
        if (!Decide(*view, seq, e.kind, e.max_holders).holds) {
          stop = true;
          return;
        }
        g->nodes.push_back(e.node);
      });
      const int64_t contenders = static_cast<int64_t>(view->size());
      g->holders.resize(g->nodes.size());
      g->left = g->nodes.size();
      auto complete = [this, segment, epoch, read, g, view, contenders]()
                          ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop_role_) {
        std::vector<std::function<void()>> later;
        Observed* o = Find(segment, epoch);
        if (o == nullptr || o->reading != read) return later;
        auto s = std::make_shared<LockSnapshot>();
        s->known = true;
        s->name = o->name;
        const bool saw_before = o->last && o->last->known;
        std::map<std::string, int64_t> seen;
        for (size_t i = 0; i < g->holders.size(); ++i) {
          if (!g->holders[i]) continue;
          ContenderView v = *g->holders[i];
          v.position = static_cast<int64_t>(s->holders.size()) + 1;
          const std::string& node = g->nodes[i];
          // The grant time, once chosen, stays (a later read must not
          // turn a seen time into the granting replica's, or back): a
          // semaphore's mark, else the one chosen before, else this
          // replica's own grant, else when this replica saw it happen.
          auto was = o->seen_granted.find(node);
          if (v.info.granted_unix_ms == 0 && was != o->seen_granted.end()) {
            v.info.granted_unix_ms = was->second;
          }
          if (v.info.granted_unix_ms == 0 && was == o->seen_granted.end()) {
            v.info.granted_unix_ms = engine_->LocalGrantUnixMs(o->lock_path + "/" + node);
            if (v.info.granted_unix_ms == 0 && saw_before) {
              bool held_before = false;
              for (const auto& h : o->last->holders) {
                held_before = held_before || h.fencing_token == v.fencing_token;
              }
              if (!held_before) v.info.granted_unix_ms = NowUnixMs();
            }
          }
          seen[node] = v.info.granted_unix_ms;
          if (v.kind == ContenderKind::kSemaphore && s->max_holders == 0) {
            s->max_holders = v.max_holders;
          }
          s->holders.push_back(std::move(v));
        }
        o->seen_granted = std::move(seen);
        s->waiters = contenders - static_cast<int64_t>(g->holders.size());
        if (g->gone) o->read_wanted = true;  // the children watch says so too
        Publish(o, std::move(s), &later);
        FinishRead(o, &later);
        return later;
      };
      if (g->nodes.empty()) {
        later = complete();
      } else {
        ZkSession* zk = engine_->session(o->session);
        for (size_t i = 0; i < g->nodes.size(); ++i) {
          const std::string node = g->nodes[i];
          const bool arm = o->data_watched.insert(node).second;
          ZkSession::Watcher w;
          if (arm) {
            w = [this, segment, epoch, node](WatchEventType) {
              OnWatch(segment, epoch, kData, node);
            };
          }
          zk->GetData(o->lock_path + "/" + node, std::move(w),
                      [this, segment, epoch, g, i, node, arm, view, complete](
                          ZkCode code, const std::string& data, const ZkStat& stat) {
                        std::vector<std::function<void()>> later;
                        {
                          OnLoop l(this);
                          Observed* o = Find(segment, epoch);
                          if (o != nullptr && arm && code != ZkCode::kOk) {
                            o->data_watched.erase(node);
                          }
                          if (code == ZkCode::kOk) {
                            ContenderView v;
                            if (auto info = DecodeContenderInfo(data); info.ok()) v.info = *info;
                            const LockQueue::Entry* e = nullptr;
                            view->ForFront(view->size(), [&](int64_t, int32_t,
                                                             const LockQueue::Entry& x) {
                              if (x.node == node) e = &x;
                            });
                            if (e != nullptr) {
                              v.kind = e->kind;
                              v.max_holders = e->max_holders;
                            }
                            v.since_unix_ms = stat.ctime_ms;
                            v.fencing_token = static_cast<uint64_t>(stat.czxid);
                            g->holders[i] = std::move(v);
                          } else {
                            g->gone = true;
                          }
                          if (--g->left == 0) later = complete();
                          if (o != nullptr) MaybeForget(segment);
                        }
                        RunAll(&later);
                      });
        }
      }
    }
  }
  RunAll(&later);
}

void ShardObservers::Publish(Observed* o, std::shared_ptr<LockSnapshot> s,
                            std::vector<std::function<void()>>* later) {
  if (o->last && SameState(*o->last, *s)) return;
  s->version = (o->last ? o->last->version : 0) + 1;
  std::shared_ptr<const LockSnapshot> state = std::move(s);
  o->last = state;
  ++stats_.states;
  for (auto& [id, sink] : o->sinks) {
    later->push_back([sink = sink, state] { sink->OnState(state); });
  }
}

void ShardObservers::FinishRead(Observed* o, std::vector<std::function<void()>>* later) {
  const uint64_t done = o->reading;
  o->reading = 0;
  // Joining observers this read was made for get its state first.
  for (auto it = o->joining.begin(); it != o->joining.end();) {
    if (it->second.after_read >= done || !o->last) {
      ++it;
      continue;
    }
    later->push_back([sink = it->second.sink, last = o->last] { sink->OnState(last); });
    o->sinks.emplace(it->first, std::move(it->second.sink));
    it = o->joining.erase(it);
  }
  if (o->read_wanted && Watched(*o)) {
    o->read_wanted = false;
    Read(o, later);
  } else {
    o->read_wanted = false;
  }
}

void ShardObservers::OnWatch(const std::string& segment, uint64_t epoch, int which,
                            const std::string& node) {
  std::vector<std::function<void()>> later;
  {
    OnLoop l(this);
    Observed* o = Find(segment, epoch);
    if (o == nullptr) return;
    ++stats_.watch_events;
    if (which == kChildren) o->children_watch = false;
    if (which == kExists) o->exists_watch = false;
    if (which == kData) o->data_watched.erase(node);
    if (!Watched(*o)) {
      MaybeForget(segment);
      return;
    }
    Read(o, &later);
  }
  RunAll(&later);
}

void ShardObservers::OnSessionEvent(size_t index, SessionEvent e) {
  std::vector<std::function<void()>> later;
  {
    OnLoop l(this);
    std::vector<std::string> forget;
    for (auto& [segment, o] : locks_) {
      if (o.session != index) continue;
      if (e == SessionEvent::kConnected) {
        if (Watched(o)) Read(&o, &later);
        continue;
      }
      if (e == SessionEvent::kExpired) {
        // The session's watches are gone with it.
        o.children_watch = false;
        o.exists_watch = false;
        o.data_watched.clear();
        o.seen_granted.clear();
      }
      auto s = std::make_shared<LockSnapshot>();
      s->name = o.name;
      s->message = e == SessionEvent::kExpired
                       ? "the replica's ZooKeeper session expired; reconnecting"
                       : "the replica lost its ZooKeeper connection";
      Publish(&o, std::move(s), &later);
      forget.push_back(segment);
    }
    for (const auto& segment : forget) MaybeForget(segment);
  }
  RunAll(&later);
}

}  // namespace turnstile
