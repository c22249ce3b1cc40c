// The in-memory ZooKeeper of tests/fake_zk_session.h.
#include "tests/fake_zk_session.h"

#include <algorithm>
#include <cstdio>
#include <future>
#include <utility>

namespace turnstile::testing {

namespace {

std::string ParentOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string BaseName(const std::string& path) { return path.substr(path.rfind('/') + 1); }

bool ValidPath(const std::string& path) {
  if (path.empty() || path[0] != '/') return false;
  if (path == "/") return true;
  return path.back() != '/' && path.find("//") == std::string::npos;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// ---------------------------------------------------------------------------
// FakeZkServer

FakeZkServer::FakeZkServer() { tree_["/"] = Node{}; }
FakeZkServer::~FakeZkServer() = default;

ZkStat FakeZkServer::StatOf(const Node& n) {
  ZkStat s = n.stat;
  s.num_children = static_cast<int32_t>(n.children.size());
  s.data_length = static_cast<int32_t>(n.data.size());
  return s;
}

bool FakeZkServer::Exists(const std::string& path) const {
  std::lock_guard<std::mutex> l(mu_);
  return tree_.count(path) > 0;
}

std::optional<ZkStat> FakeZkServer::Stat(const std::string& path) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = tree_.find(path);
  if (it == tree_.end()) return std::nullopt;
  return StatOf(it->second);
}

std::string FakeZkServer::Data(const std::string& path) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = tree_.find(path);
  return it == tree_.end() ? "" : it->second.data;
}

std::vector<std::string> FakeZkServer::Children(const std::string& path) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = tree_.find(path);
  if (it == tree_.end()) return {};
  return std::vector<std::string>(it->second.children.begin(), it->second.children.end());
}

ZkCode FakeZkServer::DeleteNode(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Fire> fires;
  const ZkCode code = ApplyDelete(tree_, zxid_ + 1, path, -1, &fires);
  if (code != ZkCode::kOk) return code;
  ++zxid_;
  Trigger(fires);
  ReapAfter(fires);
  return code;
}

ZkCode FakeZkServer::CreateNode(const std::string& path, const std::string& data) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Fire> fires;
  std::string created;
  const ZkCode code = ApplyCreate(tree_, zxid_ + 1, path, data, CreateMode::kPersistent, 0,
                                  &created, &fires);
  if (code != ZkCode::kOk) return code;
  ++zxid_;
  Trigger(fires);
  return code;
}

int FakeZkServer::ReapContainers() {
  std::lock_guard<std::mutex> l(mu_);
  return ReapLocked();
}

void FakeZkServer::set_reap_containers_at_once(bool on) {
  std::lock_guard<std::mutex> l(mu_);
  reap_at_once_ = on;
}

std::vector<FiredWatch> FakeZkServer::fired() const {
  std::lock_guard<std::mutex> l(mu_);
  return fired_;
}

size_t FakeZkServer::watch_count() const {
  std::lock_guard<std::mutex> l(mu_);
  return regs_.size();
}

std::vector<std::string> FakeZkServer::WatchedPaths(int64_t session_id) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  for (const auto& [key, r] : regs_) {
    if (r.session->session_id_ == session_id) out.push_back(r.path);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t FakeZkServer::last_zxid() const {
  std::lock_guard<std::mutex> l(mu_);
  return zxid_;
}

ZkCode FakeZkServer::ApplyCreate(Tree& t, int64_t zxid, const std::string& path,
                                 const std::string& data, CreateMode mode, int64_t owner,
                                 std::string* created, std::vector<Fire>* fires) {
  if (!ValidPath(path) || path == "/") return ZkCode::kOther;
  const std::string parent = ParentOf(path);
  auto p = t.find(parent);
  if (p == t.end()) return ZkCode::kNoNode;
  if (p->second.stat.ephemeral_owner != 0) return ZkCode::kOther;  // NOCHILDRENFOREPHEMERALS
  std::string name = path;
  if (mode == CreateMode::kEphemeralSequential) {
    // ZooKeeper's sequence: the parent's cversion before this create.
    char seq[16];
    std::snprintf(seq, sizeof(seq), "%010d", p->second.stat.cversion);
    name += seq;
  }
  if (t.count(name) > 0) return ZkCode::kNodeExists;
  Node n;
  n.data = data;
  n.stat.czxid = n.stat.mzxid = zxid;
  n.stat.ctime_ms = n.stat.mtime_ms = NowUnixMs();
  n.stat.ephemeral_owner =
      mode == CreateMode::kEphemeralSequential || mode == CreateMode::kEphemeral ? owner : 0;
  n.container = mode == CreateMode::kContainer;
  t.emplace(name, std::move(n));
  p->second.children.insert(BaseName(name));
  ++p->second.stat.cversion;
  fires->push_back(Fire{name, Change::kCreated});
  fires->push_back(Fire{parent, Change::kChildrenChanged});
  *created = name;
  return ZkCode::kOk;
}

ZkCode FakeZkServer::ApplyDelete(Tree& t, int64_t, const std::string& path, int32_t version,
                                 std::vector<Fire>* fires) {
  if (!ValidPath(path) || path == "/") return ZkCode::kOther;
  auto it = t.find(path);
  if (it == t.end()) return ZkCode::kNoNode;
  if (version != -1 && version != it->second.stat.version) return ZkCode::kBadVersion;
  if (!it->second.children.empty()) return ZkCode::kNotEmpty;
  t.erase(it);
  const std::string parent = ParentOf(path);
  Node& p = t.at(parent);
  p.children.erase(BaseName(path));
  ++p.stat.cversion;
  fires->push_back(Fire{path, Change::kDeleted});
  fires->push_back(Fire{parent, Change::kChildrenChanged});
  return ZkCode::kOk;
}

ZkCode FakeZkServer::ApplySetData(Tree& t, int64_t zxid, const std::string& path,
                                  const std::string& data, int32_t version,
                                  std::vector<Fire>* fires) {
  auto it = t.find(path);
  if (it == t.end()) return ZkCode::kNoNode;
  if (version != -1 && version != it->second.stat.version) return ZkCode::kBadVersion;
  it->second.data = data;
  ++it->second.stat.version;
  it->second.stat.mzxid = zxid;
  it->second.stat.mtime_ms = NowUnixMs();
  fires->push_back(Fire{path, Change::kDataChanged});
  return ZkCode::kOk;
}

// Fires (and removes) the registrations each change triggers, as ZooKeeper's
// WatchManager: a node's data and existence watches on its creation,
// deletion or data change; its children watches on a child's creation or
// deletion and on its own deletion.
void FakeZkServer::Trigger(const std::vector<Fire>& fires) {
  for (const Fire& f : fires) {
    for (auto it = regs_.begin(); it != regs_.end();) {
      const Registration& r = it->second;
      bool fire = false;
      WatchEventType type = WatchEventType::kDataChanged;
      if (r.path == f.path) {
        const bool data_like = r.kind != WatchKind::kChildren;
        switch (f.change) {
          case Change::kCreated:
            fire = data_like;
            type = WatchEventType::kCreated;
            break;
          case Change::kDeleted:
            fire = true;
            type = WatchEventType::kDeleted;
            break;
          case Change::kDataChanged:
            fire = data_like;
            type = WatchEventType::kDataChanged;
            break;
          case Change::kChildrenChanged:
            fire = !data_like;
            type = WatchEventType::kChildrenChanged;
            break;
        }
      }
      if (!fire) {
        ++it;
        continue;
      }
      fired_.push_back(FiredWatch{r.session->session_id_, r.path, type,
                                  r.kind == WatchKind::kChildren});
      r.session->QueueWatch(it->first, r.path, type, r.after_item);
      it = regs_.erase(it);
    }
  }
}

void FakeZkServer::ReapAfter(const std::vector<Fire>& fires) {
  if (!reap_at_once_) return;
  for (const Fire& f : fires) {
    if (f.change == Change::kChildrenChanged) {
      ReapLocked();
      return;
    }
  }
}

int FakeZkServer::ReapLocked() {
  int reaped = 0;
  for (bool again = true; again;) {
    again = false;
    for (const auto& [path, node] : tree_) {
      if (!node.container || !node.children.empty() || node.stat.cversion == 0) continue;
      std::vector<Fire> fires;
      const std::string gone = path;  // ApplyDelete invalidates `path`
      if (ApplyDelete(tree_, zxid_ + 1, gone, -1, &fires) == ZkCode::kOk) {
        ++zxid_;
        ++reaped;
        Trigger(fires);
        again = true;  // its parent may be an empty container now
        break;
      }
    }
  }
  return reaped;
}

void FakeZkServer::DeleteEphemerals(int64_t owner) {
  std::vector<std::string> mine;
  for (const auto& [path, node] : tree_) {
    if (node.stat.ephemeral_owner == owner) mine.push_back(path);
  }
  for (const std::string& path : mine) {
    std::vector<Fire> fires;
    if (ApplyDelete(tree_, zxid_ + 1, path, -1, &fires) != ZkCode::kOk) continue;
    ++zxid_;
    Trigger(fires);
    ReapAfter(fires);
  }
}

void FakeZkServer::DropRegistrations(FakeZkSession* session) {
  for (auto it = regs_.begin(); it != regs_.end();) {
    it = it->second.session == session ? regs_.erase(it) : std::next(it);
  }
}

// ---------------------------------------------------------------------------
// FakeZkSession

FakeZkSession::FakeZkSession(FakeZkServer* server, std::chrono::milliseconds timeout)
    : server_(server), timeout_(timeout) {
  own_loop_.Start(nullptr, "fake-zk-loop");
  thread_ = std::thread([this] { Loop(); });
}

FakeZkSession::~FakeZkSession() { Close(); }

void FakeZkSession::SetSessionListener(SessionListener listener) {
  std::lock_guard<std::mutex> l(mu_);
  listener_ = std::move(listener);
}

SessionCredentials FakeZkSession::credentials() const {
  std::lock_guard<std::mutex> l(mu_);
  return SessionCredentials{credentials_id_, "fake-password"};
}

absl::Status FakeZkSession::Start() {
  std::lock_guard<std::mutex> s(server_->mu_);
  if (state_ != State::kNew) return absl::FailedPreconditionError("already started");
  state_ = State::kConnected;
  session_id_ = server_->next_session_id_++;
  connected_ = true;
  {
    std::lock_guard<std::mutex> l(mu_);
    credentials_id_ = session_id_;
    watches_flow_ = true;
    EnqueueEventLocked(SessionEvent::kConnected);
  }
  std::vector<Unsent> unsent;
  unsent.swap(unsent_);
  for (Unsent& u : unsent) u.run();
  return absl::OkStatus();
}

void FakeZkSession::Close() {
  OpenGate();  // a caller blocked at the gate goes on, into the closed session
  {
    std::lock_guard<std::mutex> s(server_->mu_);
    if (state_ != State::kClosed) {
      const State was = state_;
      state_ = State::kClosed;
      connected_ = false;
      server_->DropRegistrations(this);
      // Closing a live session deletes its ephemerals at once.
      if (was != State::kNew) server_->DeleteEphemerals(session_id_);
      std::lock_guard<std::mutex> l(mu_);
      watchers_.clear();
      queue_.remove_if([](const Item& i) { return i.info.kind == FakeItem::Kind::kWatch; });
      FailPendingRepliesLocked(ZkCode::kClosing);
      for (Unsent& u : unsent_) EnqueueFailureLocked(u, ZkCode::kClosing);
      unsent_.clear();
      stop_ = true;
      cv_.notify_all();
    }
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  // As a real session's Close: the loop stops, and what was posted to it
  // (and is posted later) still runs, once.
  if (!own_loop_.InLoopThread()) {
    own_loop_.Stop();
    own_loop_.RunQueued();
  }
}

// --- Requests.

uint64_t FakeZkSession::NewWatcher(Watcher w) {
  std::lock_guard<std::mutex> s(server_->mu_);
  const uint64_t key = ++server_->next_key_;
  std::lock_guard<std::mutex> l(mu_);
  watchers_.emplace(key, std::move(w));
  return key;
}

void FakeZkSession::DropWatcher(uint64_t key) {
  if (key == 0) return;
  std::lock_guard<std::mutex> s(server_->mu_);
  server_->regs_.erase(key);
  std::lock_guard<std::mutex> l(mu_);
  watchers_.erase(key);
}

void FakeZkSession::Submit(ZkOp op, const std::string& path, Apply apply,
                           std::function<void(ZkCode)> fail, uint64_t watch_key,
                           bool keeps_watch_on_no_node) {
  {
    std::unique_lock<std::mutex> g(gate_mu_);
    if (gate_closed_) {
      ++at_gate_;
      gate_cv_.notify_all();
      gate_cv_.wait(g, [&] { return !gate_closed_; });
      --at_gate_;
    }
  }
  std::lock_guard<std::mutex> s(server_->mu_);
  {
    std::lock_guard<std::mutex> l(mu_);
    requests_.emplace_back(op, path);
  }
  switch (state_) {
    case State::kClosed: {
      // As the real session after Close: never answered.
      server_->regs_.erase(watch_key);
      std::lock_guard<std::mutex> l(mu_);
      watchers_.erase(watch_key);
      return;
    }
    case State::kNew:
    case State::kDisconnected: {
      // Sent once connected (the C client queues them meanwhile).
      Unsent u;
      u.op = op;
      u.path = path;
      u.fail = fail;
      u.watch_key = watch_key;
      u.keeps_watch_on_no_node = keeps_watch_on_no_node;
      u.run = [this, op, path, apply, fail, watch_key, keeps_watch_on_no_node] {
        RunRequest(op, path, apply, fail, watch_key, keeps_watch_on_no_node);
      };
      unsent_.push_back(std::move(u));
      return;
    }
    case State::kConnected:
      RunRequest(op, path, apply, fail, watch_key, keeps_watch_on_no_node);
      return;
  }
}

void FakeZkSession::RunRequest(ZkOp op, const std::string& path, const Apply& apply,
                               const std::function<void(ZkCode)>& fail, uint64_t watch_key,
                               bool keeps_watch_on_no_node) {
  uint64_t id;
  std::optional<Fault> fault;
  {
    std::lock_guard<std::mutex> l(mu_);
    id = ++next_item_;
    for (auto it = faults_.begin(); it != faults_.end(); ++it) {
      if (it->op == op && path.find(it->path_part) != std::string::npos) {
        fault = *it;
        faults_.erase(it);
        break;
      }
    }
  }
  Item item;
  item.info.id = id;
  item.info.kind = FakeItem::Kind::kReply;
  item.info.op = op;
  item.info.path = path;
  item.fail = fail;
  item.watch_key = watch_key;
  item.keeps_watch_on_no_node = keeps_watch_on_no_node;
  if (fault && fault->lose_request) {
    item.applied_code = item.info.code = ZkCode::kConnectionLoss;
  } else {
    item.applied_code = apply(id, &item.ok);
    item.info.code = fault ? ZkCode::kConnectionLoss : item.applied_code;
  }
  std::lock_guard<std::mutex> l(mu_);
  EnqueueLocked(std::move(item));
}

void FakeZkSession::Create(const std::string& path, const std::string& data, CreateMode mode,
                           CreateCallback done) {
  CountCall(ZkOp::kCreate);
  Submit(ZkOp::kCreate, path,
         [this, path, data, mode, done](uint64_t, std::function<void()>* ok) {
           FakeZkServer& srv = *server_;
           std::vector<FakeZkServer::Fire> fires;
           std::string created;
           const int64_t zxid = srv.zxid_ + 1;
           const ZkCode code =
               srv.ApplyCreate(srv.tree_, zxid, path, data, mode, session_id_, &created, &fires);
           if (code != ZkCode::kOk) {
             *ok = [done, code] { done(code, "", ZkStat{}); };
             return code;
           }
           srv.zxid_ = zxid;
           const ZkStat stat = FakeZkServer::StatOf(srv.tree_.at(created));
           srv.Trigger(fires);
           *ok = [done, created, stat] { done(ZkCode::kOk, created, stat); };
           return code;
         },
         [done](ZkCode code) { done(code, "", ZkStat{}); });
}

void FakeZkSession::Delete(const std::string& path, int32_t version, VoidCallback done) {
  CountCall(ZkOp::kDelete);
  Submit(ZkOp::kDelete, path,
         [this, path, version, done](uint64_t, std::function<void()>* ok) {
           FakeZkServer& srv = *server_;
           std::vector<FakeZkServer::Fire> fires;
           const ZkCode code = srv.ApplyDelete(srv.tree_, srv.zxid_ + 1, path, version, &fires);
           if (code == ZkCode::kOk) {
             ++srv.zxid_;
             srv.Trigger(fires);
             srv.ReapAfter(fires);
           }
           *ok = [done, code] { done(code); };
           return code;
         },
         [done](ZkCode code) { done(code); });
}

void FakeZkSession::Multi(std::vector<ZkMultiOp> ops, MultiCallback done) {
  CountCall(ZkOp::kMulti);
  const size_t n = ops.size();
  const std::string path = ops.empty() ? "" : ops.front().path;
  Submit(ZkOp::kMulti, path,
         [this, ops, done](uint64_t, std::function<void()>* ok) {
           FakeZkServer& srv = *server_;
           // All or nothing: applied to a copy, kept only if every op applies.
           FakeZkServer::Tree copy = srv.tree_;
           std::vector<FakeZkServer::Fire> fires;
           const int64_t zxid = srv.zxid_ + 1;  // one transaction, one zxid
           std::vector<ZkMultiResult> results(ops.size());
           for (ZkMultiResult& r : results) r.code = ZkCode::kOk;
           ZkCode failed = ZkCode::kOk;
           for (size_t i = 0; i < ops.size(); ++i) {
             const ZkMultiOp& op = ops[i];
             ZkCode c = ZkCode::kOk;
             switch (op.type) {
               case ZkMultiOp::Type::kDelete:
                 c = srv.ApplyDelete(copy, zxid, op.path, op.version, &fires);
                 break;
               case ZkMultiOp::Type::kSetData:
                 c = srv.ApplySetData(copy, zxid, op.path, op.data, op.version, &fires);
                 if (c == ZkCode::kOk) results[i].stat = FakeZkServer::StatOf(copy.at(op.path));
                 break;
               case ZkMultiOp::Type::kCreate:
                 c = srv.ApplyCreate(copy, zxid, op.path, op.data, op.mode, session_id_,
                                     &results[i].path, &fires);
                 break;
               case ZkMultiOp::Type::kCheck: {
                 auto it = copy.find(op.path);
                 if (it == copy.end()) {
                   c = ZkCode::kNoNode;
                 } else if (op.version != -1 && op.version != it->second.stat.version) {
                   c = ZkCode::kBadVersion;
                 }
                 break;
               }
             }
             if (c != ZkCode::kOk) {
               results[i].code = failed = c;
               for (size_t j = 0; j < ops.size(); ++j) {
                 results[j].path.clear();
                 results[j].stat = ZkStat{};
                 if (j > i) results[j].code = ZkCode::kOther;
               }
               break;
             }
           }
           if (failed == ZkCode::kOk) {
             srv.tree_ = std::move(copy);
             srv.zxid_ = zxid;
             srv.Trigger(fires);
             srv.ReapAfter(fires);
           }
           *ok = [done, results] { done(results); };
           return failed;
         },
         [done, n](ZkCode code) {
           std::vector<ZkMultiResult> out(n);
           for (ZkMultiResult& r : out) r.code = code;
           done(out);
         });
}

uint64_t FakeZkSession::GetData(const std::string& path, Watcher watcher, DataCallback done) {
  CountCall(ZkOp::kGetData);
  const uint64_t key = watcher ? NewWatcher(std::move(watcher)) : 0;
  Submit(ZkOp::kGetData, path,
         [this, path, key, done](uint64_t item, std::function<void()>* ok) {
           FakeZkServer& srv = *server_;
           auto it = srv.tree_.find(path);
           if (it == srv.tree_.end()) {
             // No watch on a missing node (unlike exists()).
             *ok = [done] { done(ZkCode::kNoNode, "", ZkStat{}); };
             return ZkCode::kNoNode;
           }
           if (key != 0) {
             srv.regs_[key] =
                 FakeZkServer::Registration{this, path, FakeZkServer::WatchKind::kData, item};
           }
           *ok = [done, data = it->second.data, stat = FakeZkServer::StatOf(it->second)] {
             done(ZkCode::kOk, data, stat);
           };
           return ZkCode::kOk;
         },
         [done](ZkCode code) { done(code, "", ZkStat{}); }, key);
  return key;
}

void FakeZkSession::RemoveWatch(const std::string&, uint64_t key, bool) {
  // Each registration here is its own: removing it never takes another
  // watcher's (the real session's only_watcher bookkeeping has the same
  // visible effect).
  DropWatcher(key);
}

void FakeZkSession::SetData(const std::string& path, const std::string& data, int32_t version,
                            StatCallback done) {
  CountCall(ZkOp::kSetData);
  Submit(ZkOp::kSetData, path,
         [this, path, data, version, done](uint64_t, std::function<void()>* ok) {
           FakeZkServer& srv = *server_;
           std::vector<FakeZkServer::Fire> fires;
           const int64_t zxid = srv.zxid_ + 1;
           const ZkCode code = srv.ApplySetData(srv.tree_, zxid, path, data, version, &fires);
           if (code != ZkCode::kOk) {
             *ok = [done, code] { done(code, ZkStat{}); };
             return code;
           }
           srv.zxid_ = zxid;
           const ZkStat stat = FakeZkServer::StatOf(srv.tree_.at(path));
           srv.Trigger(fires);
           *ok = [done, stat] { done(ZkCode::kOk, stat); };
           return code;
         },
         [done](ZkCode code) { done(code, ZkStat{}); });
}

void FakeZkSession::GetChildren(const std::string& path, ChildrenCallback done) {
  GetChildrenStat(path, [done = std::move(done)](ZkCode code, const std::vector<std::string>& c,
                                                 const ZkStat&) { done(code, c); });
}

namespace {
// ZooKeeper lists children in no particular order (a hash set's): the
// fake lists them backwards, so nothing may rely on the order.
std::vector<std::string> Unordered(const std::set<std::string>& children) {
  return std::vector<std::string>(children.rbegin(), children.rend());
}
}  // namespace

void FakeZkSession::GetChildrenStat(const std::string& path, ChildrenStatCallback done) {
  GetChildrenWatch(path, nullptr, std::move(done));
}

uint64_t FakeZkSession::GetChildrenWatch(const std::string& path, Watcher watcher,
                                         ChildrenStatCallback done) {
  CountCall(ZkOp::kGetChildren);
  const uint64_t key = watcher ? NewWatcher(std::move(watcher)) : 0;
  Submit(ZkOp::kGetChildren, path,
         [this, path, key, done](uint64_t item, std::function<void()>* ok) {
           FakeZkServer& srv = *server_;
           auto it = srv.tree_.find(path);
           if (it == srv.tree_.end()) {
             *ok = [done] { done(ZkCode::kNoNode, {}, ZkStat{}); };
             return ZkCode::kNoNode;
           }
           if (key != 0) {
             srv.regs_[key] = FakeZkServer::Registration{
                 this, path, FakeZkServer::WatchKind::kChildren, item};
           }
           *ok = [done, children = Unordered(it->second.children),
                  stat = FakeZkServer::StatOf(it->second)] {
             done(ZkCode::kOk, children, stat);
           };
           return ZkCode::kOk;
         },
         [done](ZkCode code) { done(code, {}, ZkStat{}); }, key);
  return key;
}

void FakeZkSession::Exists(const std::string& path, StatCallback done) {
  ExistsWatch(path, nullptr, std::move(done));
}

uint64_t FakeZkSession::ExistsWatch(const std::string& path, Watcher watcher,
                                    StatCallback done) {
  CountCall(ZkOp::kExists);
  const uint64_t key = watcher ? NewWatcher(std::move(watcher)) : 0;
  Submit(ZkOp::kExists, path,
         [this, path, key, done](uint64_t item, std::function<void()>* ok) {
           FakeZkServer& srv = *server_;
           if (key != 0) {  // either way: it also fires on the node's creation
             srv.regs_[key] =
                 FakeZkServer::Registration{this, path, FakeZkServer::WatchKind::kExist, item};
           }
           auto it = srv.tree_.find(path);
           if (it == srv.tree_.end()) {
             *ok = [done] { done(ZkCode::kNoNode, ZkStat{}); };
             return ZkCode::kNoNode;
           }
           *ok = [done, stat = FakeZkServer::StatOf(it->second)] { done(ZkCode::kOk, stat); };
           return ZkCode::kOk;
         },
         [done](ZkCode code) { done(code, ZkStat{}); }, key, /*keeps_watch_on_no_node=*/true);
  return key;
}

void FakeZkSession::Sync(const std::string& path, VoidCallback done) {
  CountCall(ZkOp::kSync);
  Submit(ZkOp::kSync, path,
         [done](uint64_t, std::function<void()>* ok) {
           *ok = [done] { done(ZkCode::kOk); };
           return ZkCode::kOk;
         },
         [done](ZkCode code) { done(code); });
}

// --- The queue.

void FakeZkSession::EnqueueLocked(Item item) {
  if (item.info.kind != FakeItem::Kind::kSessionEvent && hold_ && hold_(item.info)) {
    item.info.held = true;
  }
  queue_.push_back(std::move(item));
  cv_.notify_all();
}

void FakeZkSession::EnqueueEventLocked(SessionEvent e) {
  Item item;
  item.info.id = ++next_item_;
  item.info.kind = FakeItem::Kind::kSessionEvent;
  item.info.event = e;
  EnqueueLocked(std::move(item));
}

void FakeZkSession::EnqueueFailureLocked(const Unsent& u, ZkCode code) {
  Item item;
  item.info.id = ++next_item_;
  item.info.kind = FakeItem::Kind::kReply;
  item.info.op = u.op;
  item.info.path = u.path;
  item.info.code = code;
  item.applied_code = code;
  item.fail = u.fail;
  item.watch_key = u.watch_key;
  item.keeps_watch_on_no_node = u.keeps_watch_on_no_node;
  queue_.push_back(std::move(item));  // never held
  cv_.notify_all();
}

void FakeZkSession::QueueWatch(uint64_t key, const std::string& path, WatchEventType type,
                               uint64_t after_item) {
  std::lock_guard<std::mutex> l(mu_);
  Item item;
  item.info.id = ++next_item_;
  item.info.kind = FakeItem::Kind::kWatch;
  item.info.path = path;
  item.info.watch_type = type;
  item.watch_key = key;
  item.after_item = after_item;
  EnqueueLocked(std::move(item));
}

void FakeZkSession::FailPendingRepliesLocked(ZkCode code) {
  for (Item& i : queue_) {
    if (i.info.kind != FakeItem::Kind::kReply) continue;
    i.info.code = code;
    i.info.held = false;
  }
  cv_.notify_all();
}

bool FakeZkSession::DeliverableLocked(const Item& item) const {
  if (item.info.held) return false;
  if (item.info.kind != FakeItem::Kind::kWatch) return true;
  if (!watches_flow_) return false;
  if (item.after_item == 0) return true;
  // Never ahead of the reply of the read that set it.
  if (delivering_ == item.after_item) return false;
  return std::none_of(queue_.begin(), queue_.end(),
                      [&](const Item& i) { return i.info.id == item.after_item; });
}

void FakeZkSession::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [&](const Item& i) { return DeliverableLocked(i); });
    if (it == queue_.end()) {
      if (stop_) return;
      cv_.wait(l);
      continue;
    }
    Item item = std::move(*it);
    queue_.erase(it);
    delivering_ = item.info.id;
    SessionListener listener = listener_;
    l.unlock();
    auto deliver = [&] {
      switch (item.info.kind) {
        case FakeItem::Kind::kSessionEvent:
          if (item.info.event == SessionEvent::kExpired) {
            if (ZkObserver* o = observer()) o->OnSessionExpired();
          }
          if (listener) listener(item.info.event);
          break;
        case FakeItem::Kind::kWatch: {
          Watcher w;
          {
            std::lock_guard<std::mutex> g(mu_);
            auto found = watchers_.find(item.watch_key);
            if (found != watchers_.end()) {
              w = std::move(found->second);
              watchers_.erase(found);
            }
          }
          if (w) {  // not removed, not dropped with a failed read or the session
            CountWatchEvent();
            w(item.info.watch_type);
          }
          break;
        }
        case FakeItem::Kind::kReply: {
          const ZkCode code = item.info.code;
          // The C client keeps a watcher only if its read succeeded (an
          // existence watch also on NO_NODE).
          if (item.watch_key != 0 && code != ZkCode::kOk &&
              !(item.keeps_watch_on_no_node && code == ZkCode::kNoNode)) {
            DropWatcher(item.watch_key);
          }
          if (ZkObserver* o = observer()) o->OnRequestDone(item.info.op, code, 0.0);
          if (code == item.applied_code && item.ok) {
            item.ok();
          } else {
            item.fail(code);
          }
          break;
        }
      }
    };
    // On the session's loop, as a real session's callbacks; this thread
    // waits, so items still go one at a time and in order.
    EventLoop* loop = loop_;
    if (loop != nullptr && !loop->InLoopThread()) {
      std::promise<void> ran;
      loop->Post([&] {
        deliver();
        ran.set_value();
      });
      ran.get_future().wait();
    } else {
      deliver();
    }
    l.lock();
    delivering_ = 0;
    cv_.notify_all();
  }
}

// --- Test controls.

void FakeZkSession::SetHoldFilter(std::function<bool(const FakeItem&)> hold) {
  std::lock_guard<std::mutex> l(mu_);
  hold_ = std::move(hold);
}

std::vector<std::pair<ZkOp, std::string>> FakeZkSession::Requests() const {
  std::lock_guard<std::mutex> l(mu_);
  return requests_;
}

std::vector<FakeItem> FakeZkSession::Pending() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<FakeItem> out;
  for (const Item& i : queue_) out.push_back(i.info);
  return out;
}

std::optional<FakeItem> FakeZkSession::AwaitHeld(
    const std::function<bool(const FakeItem&)>& pred, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  std::optional<FakeItem> found;
  cv_.wait_for(l, timeout, [&] {
    for (const Item& i : queue_) {
      if (i.info.held && pred(i.info)) {
        found = i.info;
        return true;
      }
    }
    return false;
  });
  return found;
}

bool FakeZkSession::Release(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  for (Item& i : queue_) {
    if (i.info.id == id) {
      i.info.held = false;
      cv_.notify_all();
      return true;
    }
  }
  return false;
}

bool FakeZkSession::ReleaseAndWait(uint64_t id, std::chrono::milliseconds timeout) {
  if (!Release(id)) return false;
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [&] {
    return delivering_ != id && std::none_of(queue_.begin(), queue_.end(),
                                             [&](const Item& i) { return i.info.id == id; });
  });
}

void FakeZkSession::ReleaseAll() {
  std::lock_guard<std::mutex> l(mu_);
  for (Item& i : queue_) i.info.held = false;
  cv_.notify_all();
}

bool FakeZkSession::AwaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [&] {
    return delivering_ == 0 && std::none_of(queue_.begin(), queue_.end(), [&](const Item& i) {
             return DeliverableLocked(i);
           });
  });
}

bool FakeZkSession::DropReply(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  for (Item& i : queue_) {
    if (i.info.id == id && i.info.kind == FakeItem::Kind::kReply) {
      i.info.code = ZkCode::kConnectionLoss;
      i.info.held = false;
      cv_.notify_all();
      return true;
    }
  }
  return false;
}

void FakeZkSession::LoseNextReply(ZkOp op, const std::string& path_part) {
  std::lock_guard<std::mutex> l(mu_);
  faults_.push_back(Fault{op, path_part, false});
}

void FakeZkSession::LoseNextRequest(ZkOp op, const std::string& path_part) {
  std::lock_guard<std::mutex> l(mu_);
  faults_.push_back(Fault{op, path_part, true});
}

// --- Connection and session.

void FakeZkSession::CloseGate() {
  std::lock_guard<std::mutex> g(gate_mu_);
  gate_closed_ = true;
}

void FakeZkSession::OpenGate() {
  std::lock_guard<std::mutex> g(gate_mu_);
  gate_closed_ = false;
  gate_cv_.notify_all();
}

bool FakeZkSession::AwaitCallerAtGate(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> g(gate_mu_);
  return gate_cv_.wait_for(g, timeout, [&] { return at_gate_ > 0; });
}

void FakeZkSession::Disconnect() {
  std::lock_guard<std::mutex> s(server_->mu_);
  if (state_ != State::kConnected) return;
  state_ = State::kDisconnected;
  connected_ = false;
  std::lock_guard<std::mutex> l(mu_);
  watches_flow_ = false;
  // The event first, then every reply still queued, as CONNECTION_LOSS: the
  // requests were applied or not, the client cannot tell.
  EnqueueEventLocked(SessionEvent::kDisconnected);
  queue_.splice(queue_.begin(), queue_, std::prev(queue_.end()));
  FailPendingRepliesLocked(ZkCode::kConnectionLoss);
}

void FakeZkSession::Reconnect() {
  std::lock_guard<std::mutex> s(server_->mu_);
  if (state_ != State::kDisconnected) return;
  state_ = State::kConnected;
  connected_ = true;
  {
    std::lock_guard<std::mutex> l(mu_);
    // kConnected, then the watch events that waited (the C client re-sends
    // its watches on reconnect and the server fires those whose node
    // changed), then the requests made meanwhile.
    std::list<Item> watches;
    for (auto it = queue_.begin(); it != queue_.end();) {
      auto next = std::next(it);
      if (it->info.kind == FakeItem::Kind::kWatch) watches.splice(watches.end(), queue_, it);
      it = next;
    }
    EnqueueEventLocked(SessionEvent::kConnected);
    queue_.splice(queue_.end(), watches);
    watches_flow_ = true;
    cv_.notify_all();
  }
  std::vector<Unsent> unsent;
  unsent.swap(unsent_);
  for (Unsent& u : unsent) u.run();
}

void FakeZkSession::Expire() {
  std::lock_guard<std::mutex> s(server_->mu_);
  if (state_ == State::kClosed || state_ == State::kNew) return;
  const bool was_connected = state_ == State::kConnected;
  connected_ = false;
  // The session's watches go with it: its own deletions wake no one here.
  server_->DropRegistrations(this);
  {
    std::lock_guard<std::mutex> l(mu_);
    watches_flow_ = false;
    watchers_.clear();
    queue_.remove_if([](const Item& i) { return i.info.kind == FakeItem::Kind::kWatch; });
    if (was_connected) {
      EnqueueEventLocked(SessionEvent::kDisconnected);
      queue_.splice(queue_.begin(), queue_, std::prev(queue_.end()));
    }
    FailPendingRepliesLocked(ZkCode::kConnectionLoss);
  }
  // The server expires it: its ephemerals vanish, the others' watches fire.
  server_->DeleteEphemerals(session_id_);
  std::lock_guard<std::mutex> l(mu_);
  // Requests made while disconnected fail with the old session.
  for (Unsent& u : unsent_) EnqueueFailureLocked(u, ZkCode::kSessionExpired);
  unsent_.clear();
  EnqueueEventLocked(SessionEvent::kExpired);
  // A new session, as the real one reopens by itself.
  state_ = State::kConnected;
  session_id_ = server_->next_session_id_++;
  credentials_id_ = session_id_;
  connected_ = true;
  watches_flow_ = true;
  EnqueueEventLocked(SessionEvent::kConnected);
}

}  // namespace turnstile::testing
