// The only file that includes zookeeper.h.
//
// Threading: the single-threaded C client (libzookeeper_st). Each session
// has one thread, its EventLoop (event_loop.h), which alone touches the
// zhandle: as the loop's source it tells the loop what to wait for
// (zookeeper_interest), and the loop polls that socket beside its eventfd and
// timers and lets the C client work (zookeeper_process), which runs the
// completions and watchers on this same thread. Calls from other threads
// (and from callbacks) are queued and issued by the loop in call order, so
// ZooKeeper sees one session's requests in the order they were made. The
// multithreaded client spent an I/O thread and a completion thread per
// session, a pipe write to wake the first for every request and a
// condition-variable hand-off to the second for every reply.
//
// Ownership: every asynchronous call allocates one CallContext that the C
// client hands back to exactly one completion, which frees it. Watchers are
// not owned by the C client: a per-call watcher is registered here under a
// numeric id (the C client only sees the id), so a watch that never fires (the
// session expired or closed) is dropped with the registry instead of leaking.
//
// Locks: a session's loop's work queue, its mu_ and the watch registry's are
// leaves, taken by callers that may hold the engine's or the observers'
// lock; neither is held while a callback runs.
//
// Short outages (a replica cut from ZooKeeper for a second or two, well
// within the session): the loop watches its connection and replaces one
// that waits on TCP rather than on ZooKeeper (tcp_stall.h), and reports a
// connection the C client dropped without telling (after a failed send).
// Measured with tests/nemesis/short_outage.py.
#include "server/zk/zk_session.h"

#include <zookeeper/zookeeper.h>

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/zk/event_loop.h"
#include "server/zk/tcp_stall.h"
#include "server/zk/watch_registry.h"

namespace turnstile {

void SetZkClientLogLevel(const std::string& level) {
  ZooLogLevel l = ZOO_LOG_LEVEL_WARN;
  if (level == "error") l = ZOO_LOG_LEVEL_ERROR;
  if (level == "info") l = ZOO_LOG_LEVEL_INFO;
  if (level == "debug") l = ZOO_LOG_LEVEL_DEBUG;
  zoo_set_debug_level(l);
}

namespace {

ZkCode MapRc(int rc) {
  switch (rc) {
    case ZOK: return ZkCode::kOk;
    case ZNONODE: return ZkCode::kNoNode;
    case ZNODEEXISTS: return ZkCode::kNodeExists;
    case ZBADVERSION: return ZkCode::kBadVersion;
    case ZNOTEMPTY: return ZkCode::kNotEmpty;
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT: return ZkCode::kConnectionLoss;
    case ZSESSIONEXPIRED:
    case ZINVALIDSTATE: return ZkCode::kSessionExpired;
    case ZCLOSING: return ZkCode::kClosing;
    case ZNOAUTH:
    case ZAUTHFAILED: return ZkCode::kNoAuth;
    default: return ZkCode::kOther;
  }
}

ZkStat ToStat(const struct Stat* s) {
  ZkStat out;
  if (s == nullptr) return out;
  out.czxid = s->czxid;
  out.mzxid = s->mzxid;
  out.ctime_ms = s->ctime;
  out.mtime_ms = s->mtime;
  out.version = s->version;
  out.cversion = s->cversion;
  out.num_children = s->numChildren;
  out.ephemeral_owner = s->ephemeralOwner;
  out.data_length = s->dataLength;
  return out;
}

class ZkClientSession final : public ZkSession, private EventLoop::Source {
 public:
  explicit ZkClientSession(ZkClientOptions options) : options_(std::move(options)) {
    loop_.Start(this, options_.thread_name);
  }

  ~ZkClientSession() override { Close(); }

  void SetSessionListener(SessionListener listener) override {
    listener_ = std::move(listener);
  }

  // A connect string that does not parse fails here. One whose names do not
  // resolve yet (DNS not ready, a Service or container not created yet) does
  // not: the replica starts NOT_SERVING and keeps trying, with backoff.
  absl::Status Start() override {
    // The handle is made on the loop thread, its only user.
    std::promise<absl::Status> opened;
    Post([this, &opened] {
      absl::Status s = Open();
      if (!s.ok() && absl::IsUnavailable(s) && zh_ == nullptr) {
        ScheduleRetry(s);
        s = absl::OkStatus();
      }
      opened.set_value(s);
    });
    return opened.get_future().get();
  }

  void Close() override {
    {
      absl::MutexLock l(&mu_);
      if (closed_) return;
      closed_ = true;
    }
    loop_.Stop();
    connected_ = false;
    // The loop is gone: this thread is now the handle's only user. Closing
    // a live session sends closeSession, so its ephemerals vanish at once.
    if (zh_ != nullptr) zookeeper_close(zh_);
    zh_ = nullptr;
    stall_.Forget();
    // Calls that never reached ZooKeeper are answered, each exactly once
    // (their callbacks may queue more).
    loop_.RunQueued();
    Watches().DropAll(this);
  }

  bool connected() const override { return connected_.load(); }

  std::chrono::milliseconds session_timeout() const override {
    return std::chrono::milliseconds(negotiated_timeout_ms_.load());
  }

  SessionCredentials credentials() const override {
    absl::MutexLock l(&mu_);
    return credentials_;
  }

  void Create(const std::string& path, const std::string& data,
              CreateMode mode, CreateCallback done) override {
    CountCall(ZkOp::kCreate);
    int flags = ZOO_PERSISTENT;
    if (mode == CreateMode::kContainer) flags = ZOO_CONTAINER;
    if (mode == CreateMode::kEphemeralSequential) flags = ZOO_EPHEMERAL_SEQUENTIAL;
    auto* ctx = new CallContext{this, 0};
    ctx->op = ZkOp::kCreate;
    ctx->create = std::move(done);
    Issue(ctx, [=](zhandle_t* zh) {
      return zoo_acreate2(zh, path.c_str(), data.data(),
                          static_cast<int>(data.size()), Acl(), flags,
                          &ZkClientSession::OnCreate, ctx);
    });
  }

  void Delete(const std::string& path, int32_t version,
              VoidCallback done) override {
    CountCall(ZkOp::kDelete);
    auto* ctx = new CallContext{this, 0};
    ctx->op = ZkOp::kDelete;
    ctx->void_cb = std::move(done);
    Issue(ctx, [=](zhandle_t* zh) {
      return zoo_adelete(zh, path.c_str(), version, &ZkClientSession::OnVoid,
                         ctx);
    });
  }

  void Multi(std::vector<ZkMultiOp> ops, MultiCallback done) override {
    CountCall(ZkOp::kMulti);
    auto* ctx = new CallContext{this, 0};
    ctx->op = ZkOp::kMulti;
    ctx->multi = std::move(done);
    ctx->multi_results.resize(ops.size());
    Issue(ctx, [=](zhandle_t* zh) {
      // The C client serializes the ops at once; only the results array
      // must live until the completion.
      std::vector<zoo_op_t> zops(ops.size());
      for (size_t i = 0; i < ops.size(); ++i) {
        const ZkMultiOp& op = ops[i];
        switch (op.type) {
          case ZkMultiOp::Type::kDelete:
            zoo_delete_op_init(&zops[i], op.path.c_str(), op.version);
            break;
          case ZkMultiOp::Type::kCheck:
            zoo_check_op_init(&zops[i], op.path.c_str(), op.version);
            break;
          case ZkMultiOp::Type::kSetData:
            zoo_set_op_init(&zops[i], op.path.c_str(), op.data.data(),
                            static_cast<int>(op.data.size()), op.version, nullptr);
            break;
        }
      }
      return zoo_amulti(zh, static_cast<int>(zops.size()), zops.data(),
                        ctx->multi_results.data(), &ZkClientSession::OnMulti, ctx);
    });
  }

  uint64_t GetData(const std::string& path, Watcher watcher,
                   DataCallback done) override {
    CountCall(ZkOp::kGetData);
    auto* ctx = new CallContext{this, 0};
    ctx->op = ZkOp::kGetData;
    ctx->data = std::move(done);
    if (watcher) ctx->watcher_id = Watches().Add(this, std::move(watcher), path);
    uint64_t wid = ctx->watcher_id;
    Issue(ctx, [=](zhandle_t* zh) {
      return zoo_awget(zh, path.c_str(),
                       wid != 0 ? &ZkClientSession::OnWatch : nullptr,
                       reinterpret_cast<void*>(static_cast<uintptr_t>(wid)),
                       &ZkClientSession::OnData, ctx);
    });
    return wid;
  }

  void RemoveWatch(const std::string& path, uint64_t key, bool only_watcher) override {
    if (key == 0) return;
    Watches().Drop(key);  // never called from now on, whatever the server says
    Post([this, path, key, only_watcher] {
      if (zh_ == nullptr) return;
      // The header declares the completion as void_completion_t*, but the C
      // client calls that pointer itself as the completion function (found
      // the hard way: passing a pointer to a function pointer crashes).
      auto* done = reinterpret_cast<void_completion_t*>(&ZkClientSession::OnWatchRemoved);
      // ZNOWATCHER (it fired, or the session that set it is gone) is fine:
      // nothing is left either way. The caller knows its own watchers; this
      // session also knows the others' (an observer's on a holder's node).
      if (only_watcher && !Watches().WatchesData(this, path)) {
        // REMOVE_WATCHES: the server drops the path's data watch of this session.
        zoo_aremove_all_watches(zh_, path.c_str(), ZWATCHTYPE_DATA, 0, done, nullptr);
      } else {
        // CHECK_WATCHES: only this watcher goes; the server keeps the path's
        // watch for the others.
        zoo_aremove_watches(zh_, path.c_str(), ZWATCHTYPE_DATA, &ZkClientSession::OnWatch,
                            reinterpret_cast<void*>(static_cast<uintptr_t>(key)), 0, done,
                            nullptr);
      }
    });
  }

  void SetData(const std::string& path, const std::string& data,
               int32_t version, StatCallback done) override {
    CountCall(ZkOp::kSetData);
    auto* ctx = new CallContext{this, 0};
    ctx->op = ZkOp::kSetData;
    ctx->stat = std::move(done);
    Issue(ctx, [=](zhandle_t* zh) {
      return zoo_aset(zh, path.c_str(), data.data(),
                      static_cast<int>(data.size()), version,
                      &ZkClientSession::OnStat, ctx);
    });
  }

  void GetChildren(const std::string& path, ChildrenCallback done) override {
    GetChildrenStat(path, [done = std::move(done)](ZkCode code, const std::vector<std::string>& c,
                                                   const ZkStat&) { done(code, c); });
  }

  void GetChildrenStat(const std::string& path, ChildrenStatCallback done) override {
    CountCall(ZkOp::kGetChildren);
    auto* ctx = new CallContext{this, 0};
    ctx->op = ZkOp::kGetChildren;
    ctx->children_stat = std::move(done);
    Issue(ctx, [=](zhandle_t* zh) {
      return zoo_awget_children2(zh, path.c_str(), nullptr, nullptr,
                                 &ZkClientSession::OnChildrenStat, ctx);
    });
  }

  void Exists(const std::string& path, StatCallback done) override {
    CountCall(ZkOp::kExists);
    auto* ctx = new CallContext{this, 0};
    ctx->op = ZkOp::kExists;
    ctx->stat = std::move(done);
    Issue(ctx, [=](zhandle_t* zh) {
      return zoo_aexists(zh, path.c_str(), 0, &ZkClientSession::OnStat, ctx);
    });
  }

  uint64_t GetChildrenWatch(const std::string& path, Watcher watcher,
                            ChildrenStatCallback done) override {
    CountCall(ZkOp::kGetChildren);
    auto* ctx = new CallContext{this, 0};
    ctx->op = ZkOp::kGetChildren;
    ctx->children_stat = std::move(done);
    if (watcher) ctx->watcher_id = Watches().Add(this, std::move(watcher));
    const uint64_t wid = ctx->watcher_id;
    Issue(ctx, [=](zhandle_t* zh) {
      return zoo_awget_children2(zh, path.c_str(),
                                 wid != 0 ? &ZkClientSession::OnWatch : nullptr,
                                 reinterpret_cast<void*>(static_cast<uintptr_t>(wid)),
                                 &ZkClientSession::OnChildrenStat, ctx);
    });
    return wid;
  }

  uint64_t ExistsWatch(const std::string& path, Watcher watcher, StatCallback done) override {
    CountCall(ZkOp::kExists);
    auto* ctx = new CallContext{this, 0};
    ctx->op = ZkOp::kExists;
    ctx->stat = std::move(done);
    if (watcher) ctx->watcher_id = Watches().Add(this, std::move(watcher), path);
    ctx->keeps_watch_on_no_node = true;
    const uint64_t wid = ctx->watcher_id;
    Issue(ctx, [=](zhandle_t* zh) {
      return zoo_awexists(zh, path.c_str(), wid != 0 ? &ZkClientSession::OnWatch : nullptr,
                          reinterpret_cast<void*>(static_cast<uintptr_t>(wid)),
                          &ZkClientSession::OnStat, ctx);
    });
    return wid;
  }

  void Sync(const std::string& path, VoidCallback done) override {
    CountCall(ZkOp::kSync);
    auto* ctx = new CallContext{this, 0};
    ctx->op = ZkOp::kSync;
    ctx->void_cb = std::move(done);
    Issue(ctx, [=](zhandle_t* zh) {
      return zoo_async(zh, path.c_str(), &ZkClientSession::OnSynced, ctx);
    });
  }

 private:
  struct CallContext {
    ZkClientSession* self;
    uint64_t watcher_id;
    CreateCallback create;
    VoidCallback void_cb;
    DataCallback data;
    StatCallback stat;
    ChildrenStatCallback children_stat;
    MultiCallback multi;
    std::vector<zoo_op_result_t> multi_results;
    ZkOp op = ZkOp::kCount;
    // An exists watch stays on a missing node (ZNONODE): the watcher is kept.
    bool keeps_watch_on_no_node = false;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    // Handed to the C client (counted in in_flight_ until its completion).
    bool counted = false;

    ~CallContext() {
      if (counted) --self->in_flight_;
    }

    // Tells the observer (metrics) how the request completed.
    void Report(ZkCode code) const {
      if (ZkObserver* o = self->observer()) {
        o->OnRequestDone(op, code,
                         std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start).count());
      }
    }

    // Completes with `code` and no payload.
    void Fail(ZkCode code) {
      if (create) create(code, std::string(), ZkStat{});
      if (void_cb) void_cb(code);
      if (data) data(code, std::string(), ZkStat{});
      if (stat) stat(code, ZkStat{});
      if (children_stat) children_stat(code, {}, ZkStat{});
      if (multi) multi(std::vector<ZkCode>(multi_results.size(), code));
    }
  };

  struct ACL_vector* Acl() const {
    return options_.auth.empty() ? &ZOO_OPEN_ACL_UNSAFE : &ZOO_CREATOR_ALL_ACL;
  }

  // Queues `call` for the loop, which runs it on the current handle in call
  // order. `call` owns copies of its arguments. If the C client refuses it
  // at once (no handle, bad state), the failure is delivered on the loop,
  // never on the caller's thread, which may hold locks its callbacks take.
  void Issue(CallContext* ctx, std::function<int(zhandle_t*)> call) {
    Post([this, ctx, call = std::move(call)] {
      const int rc = zh_ != nullptr ? call(zh_) : ZINVALIDSTATE;
      if (rc == ZOK) {
        ctx->counted = true;
        ++in_flight_;
        return;
      }
      ZkCode code = MapRc(rc);
      if (code == ZkCode::kSessionExpired) code = ZkCode::kConnectionLoss;
      DropWatcher(ctx->watcher_id);
      ctx->Report(code);
      ctx->Fail(code);
      delete ctx;
    });
  }

  static void DropWatcher(uint64_t id) {
    if (id != 0) Watches().Drop(id);
  }

  static void OnCreate(int rc, const char* value, const struct Stat* stat,
                       const void* data) {
    auto* ctx = static_cast<CallContext*>(const_cast<void*>(data));
    ctx->Report(MapRc(rc));
    ctx->create(MapRc(rc), rc == ZOK && value ? std::string(value) : std::string(),
                ToStat(rc == ZOK ? stat : nullptr));
    delete ctx;
  }

  static void OnVoid(int rc, const void* data) {
    auto* ctx = static_cast<CallContext*>(const_cast<void*>(data));
    ctx->Report(MapRc(rc));
    ctx->void_cb(MapRc(rc));
    delete ctx;
  }

  static void OnSynced(int rc, const char*, const void* data) { OnVoid(rc, data); }

  static void OnData(int rc, const char* value, int value_len,
                     const struct Stat* stat, const void* data) {
    auto* ctx = static_cast<CallContext*>(const_cast<void*>(data));
    ctx->Report(MapRc(rc));
    // The C client only keeps the watch when the read succeeded.
    if (rc != ZOK) DropWatcher(ctx->watcher_id);
    std::string bytes;
    if (rc == ZOK && value != nullptr && value_len > 0) bytes.assign(value, value_len);
    ctx->data(MapRc(rc), bytes, ToStat(rc == ZOK ? stat : nullptr));
    delete ctx;
  }

  static void OnWatchRemoved(int, const void*) {}

  static void OnMulti(int rc, const void* data) {
    auto* ctx = static_cast<CallContext*>(const_cast<void*>(data));
    ZkCode code = MapRc(rc);
    ctx->Report(code);
    // A failed multi reports the failing op's error as rc and each op's own
    // result in the array (ZRUNTIMEINCONSISTENCY for those after it); a
    // request that never ran (connection loss, expiry) leaves the array
    // untouched.
    std::vector<ZkCode> codes(ctx->multi_results.size(), code);
    if (rc == ZOK || rc == ZNONODE || rc == ZBADVERSION || rc == ZNOAUTH ||
        rc == ZNOTEMPTY || rc == ZRUNTIMEINCONSISTENCY || rc == ZNODEEXISTS) {
      for (size_t i = 0; i < codes.size(); ++i) {
        const int err = ctx->multi_results[i].err;
        codes[i] = err == ZRUNTIMEINCONSISTENCY ? ZkCode::kOther : MapRc(err);
      }
    }
    ctx->multi(codes);
    delete ctx;
  }

  static void OnStat(int rc, const struct Stat* stat, const void* data) {
    auto* ctx = static_cast<CallContext*>(const_cast<void*>(data));
    ctx->Report(MapRc(rc));
    if (rc != ZOK && !(rc == ZNONODE && ctx->keeps_watch_on_no_node)) DropWatcher(ctx->watcher_id);
    ctx->stat(MapRc(rc), ToStat(rc == ZOK ? stat : nullptr));
    delete ctx;
  }

  static void OnChildrenStat(int rc, const struct String_vector* strings,
                             const struct Stat* stat, const void* data) {
    auto* ctx = static_cast<CallContext*>(const_cast<void*>(data));
    ctx->Report(MapRc(rc));
    if (rc != ZOK) DropWatcher(ctx->watcher_id);  // the C client keeps it only on success
    std::vector<std::string> names;
    if (rc == ZOK && strings != nullptr) {
      names.reserve(strings->count);
      for (int i = 0; i < strings->count; ++i) names.emplace_back(strings->data[i]);
    }
    ctx->children_stat(MapRc(rc), names, rc == ZOK ? ToStat(stat) : ZkStat{});
    delete ctx;
  }

  static void OnWatch(zhandle_t*, int type, int, const char*, void* wctx) {
    // Session events reach every registered watcher in the C client; they
    // are handled once, by the session watcher, so ignore them here.
    if (type == ZOO_SESSION_EVENT) return;
    auto id = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(wctx));
    ZkClientSession* self = nullptr;
    Watcher w = Watches().Take(id, &self);
    if (!w) return;
    self->CountWatchEvent();
    WatchEventType t = WatchEventType::kDataChanged;
    if (type == ZOO_DELETED_EVENT) t = WatchEventType::kDeleted;
    if (type == ZOO_CREATED_EVENT) t = WatchEventType::kCreated;
    if (type == ZOO_CHILD_EVENT) t = WatchEventType::kChildrenChanged;
    w(t);
  }

  using WatchRegistry = zk_internal::WatchRegistry<ZkClientSession, Watcher>;
  static WatchRegistry& Watches() {
    static WatchRegistry* r = new WatchRegistry();
    return *r;
  }

  static void OnSessionEvent(zhandle_t* zh, int type, int state, const char*,
                             void* ctx) {
    if (type != ZOO_SESSION_EVENT) return;
    auto* self = static_cast<ZkClientSession*>(ctx);
    self->HandleSessionState(zh, state);
  }

  // On the loop, inside zookeeper_process.
  void HandleSessionState(zhandle_t* zh, int state) {
    if (zh != zh_) return;  // an old handle's last words
    if (state == ZOO_CONNECTED_STATE) {
      negotiated_timeout_ms_ = zoo_recv_timeout(zh);
      {
        const clientid_t* id = zoo_client_id(zh);
        absl::MutexLock l(&mu_);
        credentials_.session_id = id->client_id;
        credentials_.password.assign(id->passwd, sizeof(id->passwd));
      }
      connected_ = true;
      Notify(SessionEvent::kConnected);
    } else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {
      if (connected_.exchange(false)) Notify(SessionEvent::kDisconnected);
    } else if (state == ZOO_EXPIRED_SESSION_STATE) {
      connected_ = false;
      Watches().DropAll(this);
      if (ZkObserver* o = observer()) o->OnSessionExpired();
      Notify(SessionEvent::kExpired);
      Post([this] { Reopen(); });  // after zookeeper_process has returned
    } else if (state == ZOO_AUTH_FAILED_STATE) {
      connected_ = false;
      Notify(SessionEvent::kAuthFailed);
    }
  }

  void Notify(SessionEvent e) {
    if (listener_) listener_(e);
  }

  // Replaces an expired handle with a new session. On the loop.
  void Reopen() {
    if (zh_ != nullptr) zookeeper_close(zh_);  // expired: nothing to send
    zh_ = nullptr;
    {
      absl::MutexLock l(&mu_);
      if (closed_) return;
      credentials_ = SessionCredentials{};
    }
    absl::Status s = Open();
    if (s.ok()) {
      reopen_backoff_ = kMinReopenBackoff;
      return;
    }
    if (zh_ != nullptr) return;  // opened; auth setup failed (kAuthFailed follows)
    // zookeeper_init fails when no server name resolves (a DNS outage often
    // comes with the network trouble that expired the session). Try again
    // with backoff until it works or Close() runs: giving up would leave the
    // replica NOT_SERVING for good.
    ScheduleRetry(s);
  }

  // On the loop.
  void ScheduleRetry(const absl::Status& why) {
    std::fprintf(stderr, "turnstile: cannot open a ZooKeeper session (retry in %lld ms): %s\n",
                 static_cast<long long>(reopen_backoff_.count()),
                 std::string(why.message()).c_str());
    loop_.RunAt(std::chrono::steady_clock::now() + reopen_backoff_, [this] { Reopen(); });
    reopen_backoff_ = std::min(reopen_backoff_ * 2, kMaxReopenBackoff);
  }

  // On the loop.
  absl::Status Open() {
    if (options_.before_open) {
      if (absl::Status s = options_.before_open(); !s.ok()) return s;
    }
    zh_ = zookeeper_init(options_.connect_string.c_str(),
                         &ZkClientSession::OnSessionEvent,
                         static_cast<int>(options_.session_timeout.count()), nullptr,
                         this, 0);
    if (zh_ == nullptr) {
      // EINVAL: the connect string does not parse (a configuration error).
      // Anything else (ENOENT, EAGAIN...: getaddrinfo found no address) may
      // pass: Unavailable.
      int err = errno;
      std::string msg = absl::StrCat("zookeeper_init failed for \"", options_.connect_string,
                                     "\": ", std::strerror(err));
      return err == EINVAL ? absl::InvalidArgumentError(msg) : absl::UnavailableError(msg);
    }
    // The C client re-resolves the server names before every poll of its
    // socket by default: a getaddrinfo (a netlink dump) per I/O loop, which
    // profiling showed on every request's path. Names are still resolved
    // on every connection loss, and at most once per window otherwise.
    zoo_set_servers_resolution_delay(zh_, static_cast<int>(kResolutionWindow.count()));
    if (negotiated_timeout_ms_ == 0) {
      negotiated_timeout_ms_ = static_cast<int>(options_.session_timeout.count());
    }
    if (!options_.auth.empty()) {
      auto colon = options_.auth.find(':');
      if (colon == std::string::npos) {
        return absl::InvalidArgumentError(
            "ZooKeeper auth must be \"scheme:credentials\"");
      }
      std::string scheme = options_.auth.substr(0, colon);
      std::string cred = options_.auth.substr(colon + 1);
      int rc = zoo_add_auth(zh_, scheme.c_str(), cred.data(),
                            static_cast<int>(cred.size()), nullptr, nullptr);
      if (rc != ZOK) {
        return absl::InvalidArgumentError(
            absl::StrCat("zoo_add_auth failed: ", zerror(rc)));
      }
    }
    return absl::OkStatus();
  }

  // Queues `fn` for the loop (in call order; see event_loop.h).
  void Post(std::function<void()> fn) { loop_.Post(std::move(fn)); }

  // EventLoop::Source: the C client's socket and deadline (pings, connect
  // attempts), asked before every poll.
  EventLoop::Interest Prepare() override {
    EventLoop::Interest in;
    if (zh_ == nullptr) return in;
    NoticeSilentClose();  // before zookeeper_interest starts the next connection
    int fd = -1, interest = 0;
    struct timeval tv {};
    zookeeper_interest(zh_, &fd, &interest, &tv);
    in.fd = fd;
    in.events = static_cast<short>(((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
                                   ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0));
    in.timeout_ms = static_cast<int>(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
    const int look_ms = WatchConnection(fd);
    if (look_ms == 0) {
      // The connection was just replaced: ask the C client again (at once).
      in.fd = -1;
      in.timeout_ms = 0;
    } else if (look_ms > 0) {
      in.timeout_ms = in.timeout_ms < 0 ? look_ms : std::min(in.timeout_ms, look_ms);
    }
    return in;
  }

  // ---- Short outages (see tcp_stall.h) ---------------------------------
  //
  // After a 1.7 s cut (session 4 s) the C client took 0.3-0.5 s more
  // after the heal to talk to ZooKeeper again: its connection was waiting
  // on TCP's backoff. The loop asks its TcpStallWatch about the C client's
  // socket and replaces a connection that waits on TCP while the server
  // answers a fresh one; the C client then re-attaches the same session
  // (id and password; its watches re-sent). The session is never closed:
  // no closeSession is sent, the connection is cut, not the session.

  // The C client closes its socket after a failed send (ECONNRESET,
  // EPIPE: a peer that reset the connection) and marks the handle not
  // connected, without a session event and without failing the requests
  // of that connection (zookeeper.c, nonblocking_send, 3.8). Measured: a
  // replica whose ZooKeeper answered every segment with a reset never
  // told its holders SUSPENDED. Report the disconnection here, and make
  // the C client fail those requests (on its error path) before a new
  // connection could answer in their place.
  void NoticeSilentClose() {
    if (!connected_.load() || zoo_state(zh_) != ZOO_NOTCONNECTED_STATE) return;
    silently_closed_ = true;
    stall_.Forget();
    connected_ = false;
    Notify(SessionEvent::kDisconnected);
  }

  // On the loop, after zookeeper_interest. Returns when to look again in
  // ms (-1: no need; 0: the connection was replaced, ask the C client
  // again now).
  int WatchConnection(int fd) {
    if (fd >= 0 && silently_closed_) {
      // The first attempt after a silent close (the old socket is closed,
      // so this is a new one): fail it, so that the C client's cleanup
      // answers the old connection's requests, each with ZCONNECTIONLOSS.
      silently_closed_ = false;
      Abandon(fd, false, nullptr);
      return 0;
    }
    const int state = fd >= 0 ? zoo_state(zh_) : 0;
    const TcpStallWatch::Verdict v =
        stall_.Look(fd, state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE,
                    in_flight_, std::chrono::steady_clock::now());
    if (v.action == TcpStallWatch::Verdict::kKeep) return v.look_ms;
    const bool at_once = v.action == TcpStallWatch::Verdict::kReconnectNow;
    Abandon(fd, at_once, at_once ? v.why.c_str() : nullptr);
    return 0;
  }

  // Ends the C client's connection (or connect attempt) on `fd`, which it
  // owns: shut down here (not closed: the descriptor stays the C client's
  // until it closes it), then the C client sees the error at once and runs
  // its error path (requests failed with ZCONNECTIONLOSS, the session event
  // if it was connected). With `path_up` (a probe just reached the server)
  // the C client's pause before reconnecting to the last server of its
  // list is skipped: it exists so that a client does not spin on dead
  // servers, and this one answers.
  void Abandon(int fd, bool path_up, const char* why) {
    if (why != nullptr) {
      std::fprintf(stderr, "turnstile: ZooKeeper connection to %s waits on TCP: %s; reconnecting\n",
                   zoo_get_current_server(zh_), why);
    }
    struct linger lg {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    shutdown(fd, SHUT_RDWR);
    zookeeper_process(zh_, ZOOKEEPER_READ | ZOOKEEPER_WRITE);
    stall_.Forget();
    if (path_up && zh_ != nullptr) {
      int nfd = -1, interest = 0;
      struct timeval tv {};
      zookeeper_interest(zh_, &nfd, &interest, &tv);  // consumes the pause (fd stays -1)
    }
  }
  void Dispatch(short revents) override {
    if (zh_ == nullptr) return;
    int events = 0;
    if (revents & (POLLIN | POLLHUP | POLLERR)) events |= ZOOKEEPER_READ;
    if (revents & POLLOUT) events |= ZOOKEEPER_WRITE;
    zookeeper_process(zh_, events);  // also due pings and timeouts
  }

  const ZkClientOptions options_;
  SessionListener listener_;

  // The loop's own (Close runs the last completions after the loop ended).
  int in_flight_ = 0;  // requests the C client holds (a completion pending)
  bool silently_closed_ = false;  // see NoticeSilentClose
  TcpStallWatch stall_{[this] {
    const char* server = zh_ != nullptr ? zoo_get_current_server(zh_) : nullptr;
    return std::string(server != nullptr ? server : "");
  }};

  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  SessionCredentials credentials_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> connected_{false};
  std::atomic<int> negotiated_timeout_ms_{0};

  // The loop's own (then Close's, once the loop has ended).
  zhandle_t* zh_ = nullptr;
  static constexpr std::chrono::milliseconds kResolutionWindow{5000};
  static constexpr std::chrono::milliseconds kMinReopenBackoff{250};
  static constexpr std::chrono::milliseconds kMaxReopenBackoff{10000};
  std::chrono::milliseconds reopen_backoff_ = kMinReopenBackoff;
  // Last: its thread must not outlive what it touches (Close stops it).
  EventLoop loop_;
};

}  // namespace

std::unique_ptr<ZkSession> NewZkClientSession(const ZkClientOptions& options) {
  return std::make_unique<ZkClientSession>(options);
}

absl::Status ExpireZkSession(const std::string& connect_string,
                             const SessionCredentials& creds) {
  clientid_t id{};
  id.client_id = creds.session_id;
  std::memcpy(id.passwd, creds.password.data(),
              std::min(creds.password.size(), sizeof(id.passwd)));
  int state = 0;
  auto watcher = [](zhandle_t*, int type, int st, const char*, void* ctx) {
    if (type == ZOO_SESSION_EVENT) *static_cast<int*>(ctx) = st;
  };
  zhandle_t* zh = zookeeper_init(connect_string.c_str(), watcher, 10000, &id, &state, 0);
  if (zh == nullptr) return absl::InternalError("zookeeper_init failed");
  // Single-threaded client: drive it here until the twin is attached.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (state != ZOO_CONNECTED_STATE && state != ZOO_EXPIRED_SESSION_STATE &&
         std::chrono::steady_clock::now() < deadline) {
    int fd = -1, interest = 0;
    struct timeval tv {};
    zookeeper_interest(zh, &fd, &interest, &tv);
    struct pollfd pfd = {fd, static_cast<short>(((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
                                                ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0)), 0};
    const int timeout_ms = static_cast<int>(std::min<int64_t>(
        100, tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000));
    poll(&pfd, fd >= 0 ? 1 : 0, timeout_ms);
    int events = 0;
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) events |= ZOOKEEPER_READ;
    if (pfd.revents & POLLOUT) events |= ZOOKEEPER_WRITE;
    zookeeper_process(zh, events);
  }
  const bool ok = state == ZOO_CONNECTED_STATE;
  zookeeper_close(zh);  // closing the twin ends the shared session
  if (!ok) return absl::DeadlineExceededError("could not attach to the session");
  return absl::OkStatus();
}

}  // namespace turnstile
