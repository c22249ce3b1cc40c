#include "server/zk_floor/zk_floor.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace turnstile::zk_floor {
namespace {

constexpr Millis kOpTimeout(10000);

double ToMs(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string CodeText(const char* what, const std::string& path, ZkCode code) {
  return std::string(what) + " " + path + ": " + ZkCodeName(code);
}

std::unique_ptr<ZkSession> Connect(const std::string& connect, std::string* error) {
  ZkClientOptions options;
  options.connect_string = connect;
  options.session_timeout = Millis(10000);
  std::unique_ptr<ZkSession> zk = NewZkClientSession(options);
  auto state = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
  auto connected = std::make_shared<bool>(false);
  zk->SetSessionListener([state, connected](SessionEvent e) {
    if (e != SessionEvent::kConnected) return;
    std::lock_guard<std::mutex> l(state->first);
    *connected = true;
    state->second.notify_all();
  });
  absl::Status s = zk->Start();
  if (!s.ok()) {
    *error = "ZooKeeper session to " + connect + ": " + std::string(s.message());
    return nullptr;
  }
  std::unique_lock<std::mutex> l(state->first);
  if (!state->second.wait_for(l, Millis(15000), [&] { return *connected; })) {
    l.unlock();
    zk->Close();
    *error = "cannot connect to ZooKeeper at " + connect + " within 15 s";
    return nullptr;
  }
  return zk;
}

// Blocking helpers (main thread only), bounded by kOpTimeout.
ZkCode SyncCreate(ZkSession& zk, const std::string& path, CreateMode mode,
                  std::string* created = nullptr) {
  auto p = std::make_shared<std::promise<std::pair<ZkCode, std::string>>>();
  auto f = p->get_future();
  zk.Create(path, "", mode, [p](ZkCode c, const std::string& out, const ZkStat&) {
    p->set_value({c, out});
  });
  if (f.wait_for(kOpTimeout) != std::future_status::ready) return ZkCode::kConnectionLoss;
  auto [code, out] = f.get();
  if (created != nullptr) *created = out;
  return code;
}

ZkCode SyncDelete(ZkSession& zk, const std::string& path) {
  auto p = std::make_shared<std::promise<ZkCode>>();
  auto f = p->get_future();
  zk.Delete(path, -1, [p](ZkCode c) { p->set_value(c); });
  if (f.wait_for(kOpTimeout) != std::future_status::ready) return ZkCode::kConnectionLoss;
  return f.get();
}

ZkCode SyncChildren(ZkSession& zk, const std::string& path, std::vector<std::string>* out) {
  auto p = std::make_shared<std::promise<std::pair<ZkCode, std::vector<std::string>>>>();
  auto f = p->get_future();
  zk.GetChildren(path, [p](ZkCode c, const std::vector<std::string>& v) {
    p->set_value({c, v});
  });
  if (f.wait_for(kOpTimeout) != std::future_status::ready) return ZkCode::kConnectionLoss;
  auto [code, v] = f.get();
  *out = std::move(v);
  return code;
}

// Deletes `path` and everything under it (bounded depth: the floor's tree is
// root/parent/node).
void DeleteTree(ZkSession& zk, const std::string& path, int depth = 0) {
  std::vector<std::string> kids;
  if (depth < 4 && SyncChildren(zk, path, &kids) == ZkCode::kOk) {
    for (const std::string& k : kids) DeleteTree(zk, path + "/" + k, depth + 1);
  }
  SyncDelete(zk, path);
}

// The 10-digit sequence suffix of a sequential node name.
int64_t Sequence(const std::string& name) {
  if (name.size() < 10) return -1;
  return std::strtoll(name.c_str() + name.size() - 10, nullptr, 10);
}

std::string BaseName(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// Shared by the loops of one cycle workload.
struct LoopState {
  std::mutex mu;
  std::condition_variable cv;
  Clock::time_point start{}, end{};
  int active = 0;
  bool stop = false;
  uint64_t cycles = 0;
  std::vector<double> cycle_ms;
  uint64_t errors = 0;
  std::string first_error;
  // Contended lock: every node with a smaller sequence than the latest
  // grant is gone (what turnstile's engine shares between local contenders).
  int64_t granted_seq = -1;

  // Records one finished cycle; true if the loop should run another.
  bool Record(Clock::time_point t0, Clock::time_point t) {
    std::lock_guard<std::mutex> l(mu);
    if (t <= end) {
      ++cycles;
      cycle_ms.push_back(ToMs(t - t0));
    }
    return !stop && t < end;
  }
  void LoopDone() {
    std::lock_guard<std::mutex> l(mu);
    --active;
    cv.notify_all();
  }
  void Fail(const std::string& what) {
    {
      std::lock_guard<std::mutex> l(mu);
      ++errors;
      if (first_error.empty()) first_error = what;
    }
    LoopDone();
  }
};

// Waits for every loop to finish (they stop starting cycles at `end`).
Samples Collect(const std::shared_ptr<LoopState>& s) {
  Samples r;
  std::unique_lock<std::mutex> l(s->mu);
  if (!s->cv.wait_until(l, s->end + Millis(30000), [&] { return s->active == 0; })) {
    s->stop = true;
    s->cv.wait_for(l, Millis(10000), [&] { return s->active == 0; });
    if (s->active != 0) {
      ++s->errors;
      if (s->first_error.empty()) s->first_error = "floor loops did not finish in time";
    }
  }
  r.seconds = std::chrono::duration<double>(s->end - s->start).count();
  r.cycles = s->cycles;
  r.cycle_ms = s->cycle_ms;
  r.errors = s->errors;
  r.error = s->first_error;
  return r;
}

// create(ES) -> getChildren -> delete, again until the end.
void CreateListDelete(std::shared_ptr<LoopState> s, ZkSession* zk, std::string parent) {
  const Clock::time_point t0 = Clock::now();
  zk->Create(parent + "/n-", "", CreateMode::kEphemeralSequential,
             [s, zk, parent, t0](ZkCode c, const std::string& path, const ZkStat&) {
               if (c != ZkCode::kOk) return s->Fail(CodeText("create", parent, c));
               zk->GetChildren(parent, [s, zk, parent, path, t0](ZkCode c,
                                                                 const std::vector<std::string>&) {
                 if (c != ZkCode::kOk) return s->Fail(CodeText("getChildren", parent, c));
                 zk->Delete(path, -1, [s, zk, parent, path, t0](ZkCode c) {
                   if (c != ZkCode::kOk) return s->Fail(CodeText("delete", path, c));
                   if (s->Record(t0, Clock::now())) {
                     CreateListDelete(s, zk, parent);
                   } else {
                     s->LoopDone();
                   }
                 });
               });
             });
}

// One client of the raw contended lock: the herd-free recipe turnstile
// implements, without re-listing and with grants shared on the session.
struct RecipeClient : std::enable_shared_from_this<RecipeClient> {
  std::shared_ptr<LoopState> s;
  ZkSession* zk = nullptr;
  std::string parent;
  std::string mine;  // full path of this client's node
  int64_t seq = -1;
  std::vector<std::pair<int64_t, std::string>> ahead;  // ascending
  Clock::time_point t0{};

  void Join() {
    t0 = Clock::now();
    auto self = shared_from_this();
    zk->Create(parent + "/n-", "", CreateMode::kEphemeralSequential,
               [self](ZkCode c, const std::string& path, const ZkStat&) {
                 if (c != ZkCode::kOk) return self->s->Fail(CodeText("create", self->parent, c));
                 self->mine = path;
                 self->seq = Sequence(BaseName(path));
                 self->zk->GetChildren(self->parent, [self](ZkCode c,
                                                            const std::vector<std::string>& kids) {
                   if (c != ZkCode::kOk) {
                     return self->s->Fail(CodeText("getChildren", self->parent, c));
                   }
                   self->ahead.clear();
                   for (const std::string& k : kids) {
                     int64_t q = Sequence(k);
                     if (q >= 0 && q < self->seq) self->ahead.push_back({q, k});
                   }
                   std::sort(self->ahead.begin(), self->ahead.end());
                   self->Next();
                 });
               });
  }

  void Next() {
    int64_t granted;
    {
      std::lock_guard<std::mutex> l(s->mu);
      granted = s->granted_seq;
    }
    ahead.erase(std::remove_if(ahead.begin(), ahead.end(),
                               [&](const auto& a) { return a.first < granted; }),
                ahead.end());
    if (ahead.empty()) return Acquired();
    auto self = shared_from_this();
    const std::string target = parent + "/" + ahead.back().second;
    zk->GetData(
        target,
        [self, target](WatchEventType e) {
          if (e == WatchEventType::kDeleted) self->Gone(target);
          self->Next();
        },
        [self, target](ZkCode c, const std::string&, const ZkStat&) {
          if (c == ZkCode::kNoNode) {
            self->Gone(target);
            self->Next();
          } else if (c != ZkCode::kOk) {
            self->s->Fail(CodeText("getData", target, c));
          }  // kOk: the watch is armed; wait for it
        });
  }

  void Gone(const std::string& target) {
    const std::string name = BaseName(target);
    ahead.erase(std::remove_if(ahead.begin(), ahead.end(),
                               [&](const auto& a) { return a.second == name; }),
                ahead.end());
  }

  void Acquired() {
    {
      std::lock_guard<std::mutex> l(s->mu);
      s->granted_seq = std::max(s->granted_seq, seq);
    }
    auto self = shared_from_this();
    zk->Delete(mine, -1, [self](ZkCode c) {
      if (c != ZkCode::kOk) return self->s->Fail(CodeText("delete", self->mine, c));
      if (self->s->Record(self->t0, Clock::now())) {
        self->Join();
      } else {
        self->s->LoopDone();
      }
    });
  }
};

}  // namespace

std::unique_ptr<Floor> Floor::Open(const std::string& zk_connect, const std::string& root,
                                   std::string* error) {
  SetZkClientLogLevel("error");
  std::unique_ptr<Floor> f(new Floor());
  f->zk_ = Connect(zk_connect, error);
  if (f->zk_ == nullptr) return nullptr;
  f->watcher_ = Connect(zk_connect, error);
  if (f->watcher_ == nullptr) return nullptr;
  if (root.empty()) return f;
  f->root_ = root;
  ZkCode c = SyncCreate(*f->zk_, f->root_, CreateMode::kPersistent);
  if (c != ZkCode::kOk && c != ZkCode::kNodeExists) {
    *error = CodeText("create", f->root_, c);
    f->root_.clear();
    return nullptr;
  }
  return f;
}

bool Floor::CountChildren(const std::vector<std::string>& paths, std::vector<int>* counts,
                          std::string* error) {
  counts->clear();
  for (const std::string& path : paths) {
    std::vector<std::string> kids;
    ZkCode c = SyncChildren(*zk_, path, &kids);
    if (c == ZkCode::kNoNode) kids.clear();  // a container node already reaped
    if (c != ZkCode::kOk && c != ZkCode::kNoNode) {
      *error = CodeText("getChildren", path, c);
      return false;
    }
    counts->push_back(static_cast<int>(kids.size()));
  }
  return true;
}

Floor::~Floor() {
  if (zk_ != nullptr && !root_.empty()) DeleteTree(*zk_, root_);
  if (watcher_ != nullptr) watcher_->Close();
  if (zk_ != nullptr) zk_->Close();
}

bool Floor::Ensure(const std::string& path, std::string* error) {
  if (made_.count(path)) return true;
  ZkCode c = SyncCreate(*zk_, path, CreateMode::kPersistent);
  if (c != ZkCode::kOk) {
    *error = CodeText("create", path, c);
    return false;
  }
  made_.insert(path);
  return true;
}

Samples Floor::Cycles(const std::string& tag, int loops, Millis duration) {
  Samples r;
  std::vector<std::string> parents;
  for (int i = 0; i < loops; ++i) {
    parents.push_back(root_ + "/" + tag + "-" + std::to_string(i));
    if (!Ensure(parents.back(), &r.error)) {
      r.errors = 1;
      return r;
    }
  }
  auto s = std::make_shared<LoopState>();
  s->start = Clock::now();
  s->end = s->start + duration;
  s->active = loops;
  for (int i = 0; i < loops; ++i) CreateListDelete(s, zk_.get(), parents[i]);
  return Collect(s);
}

Samples Floor::ContendedLock(const std::string& tag, int clients, Millis duration) {
  Samples r;
  const std::string parent = root_ + "/" + tag;
  if (!Ensure(parent, &r.error)) {
    r.errors = 1;
    return r;
  }
  auto s = std::make_shared<LoopState>();
  s->start = Clock::now();
  s->end = s->start + duration;
  s->active = clients;
  for (int i = 0; i < clients; ++i) {
    auto client = std::make_shared<RecipeClient>();
    client->s = s;
    client->zk = zk_.get();
    client->parent = parent;
    client->Join();
  }
  return Collect(s);
}

Samples Floor::DeleteToWatch(const std::string& tag, Millis duration) {
  Samples r;
  const std::string parent = root_ + "/" + tag;
  if (!Ensure(parent, &r.error)) {
    r.errors = 1;
    return r;
  }
  ZkCode c;
  constexpr uint64_t kMaxSamples = 100000;
  std::vector<double>& samples = r.handoff_ms;
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = start + duration;
  while (Clock::now() < end && samples.size() < kMaxSamples) {
    std::string path;
    c = SyncCreate(*zk_, parent + "/n-", CreateMode::kEphemeralSequential, &path);
    if (c != ZkCode::kOk) {
      ++r.errors;
      r.error = CodeText("create", parent, c);
      break;
    }
    // The other session watches it.
    auto fired = std::make_shared<std::promise<Clock::time_point>>();
    auto armed = std::make_shared<std::promise<ZkCode>>();
    watcher_->GetData(
        path,
        [fired](WatchEventType) { fired->set_value(Clock::now()); },
        [armed](ZkCode code, const std::string&, const ZkStat&) { armed->set_value(code); });
    auto armed_f = armed->get_future();
    auto fired_f = fired->get_future();
    if (armed_f.wait_for(kOpTimeout) != std::future_status::ready ||
        (c = armed_f.get()) != ZkCode::kOk) {
      ++r.errors;
      r.error = CodeText("getData (watch)", path, c);
      SyncDelete(*zk_, path);
      break;
    }
    auto deleted = std::make_shared<std::promise<ZkCode>>();
    auto deleted_f = deleted->get_future();
    const Clock::time_point t0 = Clock::now();
    zk_->Delete(path, -1, [deleted](ZkCode code) { deleted->set_value(code); });
    if (fired_f.wait_for(kOpTimeout) != std::future_status::ready) {
      ++r.errors;
      r.error = "the watch on " + path + " did not fire within 10 s of its delete";
      break;
    }
    samples.push_back(ToMs(fired_f.get() - t0));
    if (deleted_f.wait_for(kOpTimeout) != std::future_status::ready ||
        (c = deleted_f.get()) != ZkCode::kOk) {
      ++r.errors;
      r.error = CodeText("delete", path, c);
      break;
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.cycles = samples.size();
  return r;
}

struct ChainState {
  std::mutex mu;
  std::condition_variable cv;
  int created = 0;
  int armed = 0;
  int deleted = 0;
  int failed = 0;
  std::string first_error;
  std::vector<std::string> paths;
  std::vector<Clock::time_point> issued;  // delete of node i issued
  std::vector<Clock::time_point> fired;   // watch on node i-1 fired at node i
  std::vector<Clock::time_point> done;    // delete of node i completed
  Millis budget{30000};  // for each step of the chain

  // Waits until `pred` holds (under mu) or a step failed, at most `budget`;
  // true if `pred` holds and nothing failed.
  template <typename Pred>
  bool Wait(Pred pred) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, budget, [&] { return pred() || failed > 0; }) && failed == 0;
  }

  void Fail(const std::string& what) {
    std::lock_guard<std::mutex> l(mu);
    ++failed;
    if (first_error.empty()) first_error = what;
    cv.notify_all();
  }
};

namespace {

void DeleteLink(const std::shared_ptr<ChainState>& s, ZkSession* zk, size_t i) {
  s->issued[i] = Clock::now();
  zk->Delete(s->paths[i], -1, [s, i](ZkCode c) {
    if (c != ZkCode::kOk) return s->Fail(CodeText("delete", s->paths[i], c));
    std::lock_guard<std::mutex> l(s->mu);
    s->done[i] = Clock::now();
    ++s->deleted;
    s->cv.notify_all();
  });
}

}  // namespace

bool Floor::ArmChain(const std::string& tag, int n, std::string* error) {
  chain_.reset();
  const std::string parent = root_ + "/" + tag;
  ZkCode c = SyncCreate(*zk_, parent, CreateMode::kPersistent);
  if (c != ZkCode::kOk) {
    *error = CodeText("create", parent, c);
    return false;
  }
  const size_t nodes = static_cast<size_t>(n) + 1;
  auto s = std::make_shared<ChainState>();
  s->issued.resize(nodes);
  s->fired.resize(nodes);
  s->done.resize(nodes);
  s->budget = Millis(30000) + Millis(50) * n;

  // n+1 sequential nodes, created in a pipeline.
  for (size_t i = 0; i < nodes; ++i) {
    zk_->Create(parent + "/n-", "", CreateMode::kEphemeralSequential,
                [s](ZkCode code, const std::string& path, const ZkStat&) {
                  if (code != ZkCode::kOk) return s->Fail(CodeText("create", "chain node", code));
                  std::lock_guard<std::mutex> l(s->mu);
                  s->paths.push_back(path);
                  ++s->created;
                  s->cv.notify_all();
                });
  }
  if (!s->Wait([&] { return static_cast<size_t>(s->created) == nodes; })) {
    *error = s->first_error.empty() ? "chain creates timed out" : s->first_error;
    return false;
  }
  {
    std::lock_guard<std::mutex> l(s->mu);
    std::sort(s->paths.begin(), s->paths.end(), [](const std::string& a, const std::string& b) {
      return Sequence(BaseName(a)) < Sequence(BaseName(b));
    });
  }
  // Node i watches node i-1; when it goes, node i deletes itself (hold 0).
  ZkSession* zk = zk_.get();
  for (size_t i = 1; i < nodes; ++i) {
    zk_->GetData(
        s->paths[i - 1],
        [s, zk, i](WatchEventType e) {
          if (e != WatchEventType::kDeleted) {
            return s->Fail("unexpected watch event on " + s->paths[i - 1]);
          }
          s->fired[i] = Clock::now();
          DeleteLink(s, zk, i);
        },
        [s, i](ZkCode code, const std::string&, const ZkStat&) {
          if (code != ZkCode::kOk) return s->Fail(CodeText("getData", s->paths[i - 1], code));
          std::lock_guard<std::mutex> l(s->mu);
          ++s->armed;
          s->cv.notify_all();
        });
  }
  if (!s->Wait([&] { return static_cast<size_t>(s->armed) == nodes - 1; })) {
    *error = s->first_error.empty() ? "chain watches timed out" : s->first_error;
    return false;
  }
  chain_ = s;
  return true;
}

ChainDrain Floor::DrainChain() {
  ChainDrain r;
  std::shared_ptr<ChainState> s = std::move(chain_);
  if (s == nullptr) {
    r.error = "no chain armed";
    return r;
  }
  const size_t nodes = s->paths.size();
  DeleteLink(s, zk_.get(), 0);
  if (!s->Wait([&] { return static_cast<size_t>(s->deleted) == nodes; })) {
    r.error = s->first_error.empty() ? "the chain did not drain in time" : s->first_error;
    return r;
  }
  std::lock_guard<std::mutex> l(s->mu);
  for (size_t i = 1; i < nodes; ++i) r.handoff_ms.push_back(ToMs(s->fired[i] - s->issued[i - 1]));
  r.drain_seconds = std::chrono::duration<double>(s->done[nodes - 1] - s->done[0]).count();
  return r;
}

}  // namespace turnstile::zk_floor
