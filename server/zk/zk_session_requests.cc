// Requests: each ZkSession operation as one asynchronous call of the C
// client, queued for the loop (Issue) with its CallContext, and answered
// by exactly one completion, which maps the C client's result and frees
// the context; and the per-call watchers (their registry, the watch
// function the C client calls, their removal). Part of ZkClientSession
// (zk_session_internal.h).
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "server/zk/zk_session_internal.h"

namespace turnstile {
namespace zk_internal {

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

int CreateFlags(CreateMode mode) {
  switch (mode) {
    case CreateMode::kContainer: return ZOO_CONTAINER;
    case CreateMode::kEphemeralSequential: return ZOO_EPHEMERAL_SEQUENTIAL;
    case CreateMode::kEphemeral: return ZOO_EPHEMERAL;
    case CreateMode::kPersistent: break;
  }
  return ZOO_PERSISTENT;
}

}  // namespace

struct ZkClientSession::CallContext {
  ZkClientSession* self;
  uint64_t watcher_id;
  CreateCallback create;
  VoidCallback void_cb;
  DataCallback data;
  StatCallback stat;
  ChildrenStatCallback children_stat;
  MultiCallback multi;
  std::vector<zoo_op_result_t> multi_results;
  // What the C client writes at the completion: a create's path, a
  // setData's Stat (one slot per op; unused for the other kinds).
  std::vector<std::vector<char>> multi_paths;
  std::vector<struct Stat> multi_stats;
  std::vector<bool> multi_sets;  // which ops are setData
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
    if (multi) {
      std::vector<ZkMultiResult> out(multi_results.size());
      for (ZkMultiResult& r : out) r.code = code;
      multi(out);
    }
  }
};

void ZkClientSession::Create(const std::string& path, const std::string& data,
                             CreateMode mode, CreateCallback done) {
  CountCall(ZkOp::kCreate);
  const int flags = CreateFlags(mode);
  auto* ctx = new CallContext{this, 0};
  ctx->op = ZkOp::kCreate;
  ctx->create = std::move(done);
  Issue(ctx, [=](zhandle_t* zh) {
    return zoo_acreate2(zh, path.c_str(), data.data(),
                        static_cast<int>(data.size()), Acl(), flags,
                        &ZkClientSession::OnCreate, ctx);
  });
}

void ZkClientSession::Delete(const std::string& path, int32_t version,
                             VoidCallback done) {
  CountCall(ZkOp::kDelete);
  auto* ctx = new CallContext{this, 0};
  ctx->op = ZkOp::kDelete;
  ctx->void_cb = std::move(done);
  Issue(ctx, [=](zhandle_t* zh) {
    return zoo_adelete(zh, path.c_str(), version, &ZkClientSession::OnVoid,
                       ctx);
  });
}

void ZkClientSession::Multi(std::vector<ZkMultiOp> ops, MultiCallback done) {
  CountCall(ZkOp::kMulti);
  auto* ctx = new CallContext{this, 0};
  ctx->op = ZkOp::kMulti;
  ctx->multi = std::move(done);
  ctx->multi_results.resize(ops.size());
  ctx->multi_paths.resize(ops.size());
  ctx->multi_stats.resize(ops.size());
  ctx->multi_sets.resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    ctx->multi_sets[i] = ops[i].type == ZkMultiOp::Type::kSetData;
  }
  Issue(ctx, [=](zhandle_t* zh) {
    // The C client serializes the ops at once; the results array, a
    // create's path buffer and a setData's Stat must live until the
    // completion (they are ctx's).
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
                          static_cast<int>(op.data.size()), op.version, &ctx->multi_stats[i]);
          break;
        case ZkMultiOp::Type::kCreate: {
          // A sequential suffix is 10 digits.
          std::vector<char>& buf = ctx->multi_paths[i];
          buf.assign(op.path.size() + 16, '\0');
          zoo_create_op_init(&zops[i], op.path.c_str(), op.data.data(),
                             static_cast<int>(op.data.size()), Acl(), CreateFlags(op.mode),
                             buf.data(), static_cast<int>(buf.size()));
          break;
        }
      }
    }
    return zoo_amulti(zh, static_cast<int>(zops.size()), zops.data(),
                      ctx->multi_results.data(), &ZkClientSession::OnMulti, ctx);
  });
}

uint64_t ZkClientSession::GetData(const std::string& path, Watcher watcher,
                                  DataCallback done) {
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

void ZkClientSession::RemoveWatch(const std::string& path, uint64_t key, bool only_watcher) {
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

void ZkClientSession::SetData(const std::string& path, const std::string& data,
                              int32_t version, StatCallback done) {
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

void ZkClientSession::GetChildren(const std::string& path, ChildrenCallback done) {
  GetChildrenStat(path, [done = std::move(done)](ZkCode code, const std::vector<std::string>& c,
                                                 const ZkStat&) { done(code, c); });
}

void ZkClientSession::GetChildrenStat(const std::string& path, ChildrenStatCallback done) {
  CountCall(ZkOp::kGetChildren);
  auto* ctx = new CallContext{this, 0};
  ctx->op = ZkOp::kGetChildren;
  ctx->children_stat = std::move(done);
  Issue(ctx, [=](zhandle_t* zh) {
    return zoo_awget_children2(zh, path.c_str(), nullptr, nullptr,
                               &ZkClientSession::OnChildrenStat, ctx);
  });
}

void ZkClientSession::Exists(const std::string& path, StatCallback done) {
  CountCall(ZkOp::kExists);
  auto* ctx = new CallContext{this, 0};
  ctx->op = ZkOp::kExists;
  ctx->stat = std::move(done);
  Issue(ctx, [=](zhandle_t* zh) {
    return zoo_aexists(zh, path.c_str(), 0, &ZkClientSession::OnStat, ctx);
  });
}

uint64_t ZkClientSession::GetChildrenWatch(const std::string& path, Watcher watcher,
                                           ChildrenStatCallback done) {
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

uint64_t ZkClientSession::ExistsWatch(const std::string& path, Watcher watcher, StatCallback done) {
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

void ZkClientSession::Sync(const std::string& path, VoidCallback done) {
  CountCall(ZkOp::kSync);
  auto* ctx = new CallContext{this, 0};
  ctx->op = ZkOp::kSync;
  ctx->void_cb = std::move(done);
  Issue(ctx, [=](zhandle_t* zh) {
    return zoo_async(zh, path.c_str(), &ZkClientSession::OnSynced, ctx);
  });
}

struct ACL_vector* ZkClientSession::Acl() const {
  return options_.auth.empty() ? &ZOO_OPEN_ACL_UNSAFE : &ZOO_CREATOR_ALL_ACL;
}

// Queues `call` for the loop, which runs it on the current handle in call
// order. `call` owns copies of its arguments. If the C client refuses it
// at once (no handle, bad state), the failure is delivered on the loop,
// never on the caller's thread, which may hold locks its callbacks take.
void ZkClientSession::Issue(CallContext* ctx, std::function<int(zhandle_t*)> call) {
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

void ZkClientSession::DropWatcher(uint64_t id) {
  if (id != 0) Watches().Drop(id);
}

void ZkClientSession::OnCreate(int rc, const char* value, const struct Stat* stat,
                               const void* data) {
  auto* ctx = static_cast<CallContext*>(const_cast<void*>(data));
  ctx->Report(MapRc(rc));
  ctx->create(MapRc(rc), rc == ZOK && value ? std::string(value) : std::string(),
              ToStat(rc == ZOK ? stat : nullptr));
  delete ctx;
}

void ZkClientSession::OnVoid(int rc, const void* data) {
  auto* ctx = static_cast<CallContext*>(const_cast<void*>(data));
  ctx->Report(MapRc(rc));
  ctx->void_cb(MapRc(rc));
  delete ctx;
}

void ZkClientSession::OnSynced(int rc, const char*, const void* data) { OnVoid(rc, data); }

void ZkClientSession::OnData(int rc, const char* value, int value_len,
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

void ZkClientSession::OnWatchRemoved(int, const void*) {}

void ZkClientSession::OnMulti(int rc, const void* data) {
  auto* ctx = static_cast<CallContext*>(const_cast<void*>(data));
  ZkCode code = MapRc(rc);
  ctx->Report(code);
  // A failed multi reports the failing op's error as rc and each op's own
  // result in the array (ZRUNTIMEINCONSISTENCY for those after it); a
  // request that never ran (connection loss, expiry) leaves the array
  // untouched.
  std::vector<ZkMultiResult> out(ctx->multi_results.size());
  for (ZkMultiResult& r : out) r.code = code;
  if (rc == ZOK || rc == ZNONODE || rc == ZBADVERSION || rc == ZNOAUTH ||
      rc == ZNOTEMPTY || rc == ZRUNTIMEINCONSISTENCY || rc == ZNODEEXISTS) {
    for (size_t i = 0; i < out.size(); ++i) {
      const int err = ctx->multi_results[i].err;
      out[i].code = err == ZRUNTIMEINCONSISTENCY ? ZkCode::kOther : MapRc(err);
    }
  }
  if (rc == ZOK) {
    for (size_t i = 0; i < out.size(); ++i) {
      const std::vector<char>& buf = ctx->multi_paths[i];
      if (!buf.empty()) out[i].path.assign(buf.data());  // NUL-terminated by the C client
      if (ctx->multi_sets[i]) out[i].stat = ToStat(&ctx->multi_stats[i]);
    }
  }
  ctx->multi(out);
  delete ctx;
}

void ZkClientSession::OnStat(int rc, const struct Stat* stat, const void* data) {
  auto* ctx = static_cast<CallContext*>(const_cast<void*>(data));
  ctx->Report(MapRc(rc));
  if (rc != ZOK && !(rc == ZNONODE && ctx->keeps_watch_on_no_node)) DropWatcher(ctx->watcher_id);
  ctx->stat(MapRc(rc), ToStat(rc == ZOK ? stat : nullptr));
  delete ctx;
}

void ZkClientSession::OnChildrenStat(int rc, const struct String_vector* strings,
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

void ZkClientSession::OnWatch(zhandle_t*, int type, int, const char*, void* wctx) {
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

ZkClientSession::WatchRegistry& ZkClientSession::Watches() {
  static WatchRegistry* r = new WatchRegistry();
  return *r;
}

}  // namespace zk_internal
}  // namespace turnstile
