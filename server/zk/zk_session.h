// ZkSession: the one seam between turnstile and ZooKeeper.
//
// An asynchronous, callback-based view of one ZooKeeper session, shaped after
// the C client's async API. Every callback (completions, watches, session
// events) runs on the session's own thread: callbacks must not block. Calls may be made from any thread, including from callbacks. After an
// expiry the session reconnects with a new session id by itself and reports
// kExpired then kConnected. Implementations: ZkClientSession (the real C
// client, zk_session_internal.h, the only file that includes zookeeper.h)
// and test doubles that wrap it to inject faults.
#ifndef TURNSTILE_SERVER_ZK_ZK_SESSION_H_
#define TURNSTILE_SERVER_ZK_ZK_SESSION_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace turnstile {

// Result codes of ZooKeeper operations the engine distinguishes.
enum class ZkCode {
  kOk,
  kNoNode,
  kNodeExists,
  kBadVersion,
  kNotEmpty,
  kConnectionLoss,   // the reply is unknown: the operation may have applied
  kSessionExpired,
  kClosing,
  kNoAuth,
  kOther,
};
const char* ZkCodeName(ZkCode code);

// Fields of ZooKeeper's Stat that turnstile uses.
struct ZkStat {
  int64_t czxid = 0;
  int64_t mzxid = 0;
  int64_t ctime_ms = 0;
  int64_t mtime_ms = 0;
  int32_t version = 0;
  int32_t cversion = 0;
  int32_t num_children = 0;
  int64_t ephemeral_owner = 0;
  int32_t data_length = 0;
};

enum class CreateMode { kPersistent, kContainer, kEphemeralSequential, kEphemeral };

enum class WatchEventType { kCreated, kDeleted, kDataChanged, kChildrenChanged };

enum class SessionEvent {
  kConnected,     // connected (first time, after a reconnect, or new session)
  kDisconnected,  // connection lost; the session may still be alive
  kExpired,       // the session is gone; its ephemeral nodes are deleted
  kAuthFailed,
};

// Operation kinds, for counting calls (herd-freedom is asserted on counts).
enum class ZkOp { kCreate, kDelete, kGetData, kSetData, kGetChildren, kExists, kMulti, kSync, kCount };
const char* ZkOpName(ZkOp op);

// Receives measurements of a session (metrics). Called on the session's
// threads: implementations must be quick and thread-safe.
class ZkObserver {
 public:
  virtual ~ZkObserver() = default;
  // Every completed request, however it completed.
  virtual void OnRequestDone(ZkOp op, ZkCode code, double seconds) = 0;
  virtual void OnWatchEvent() = 0;
  virtual void OnSessionExpired() = 0;
};

// One operation of a ZooKeeper multi (a transaction: all apply or none).
struct ZkMultiOp {
  enum class Type { kDelete, kCheck, kSetData, kCreate };
  Type type = Type::kCheck;
  std::string path;
  std::string data;  // kSetData, kCreate
  int32_t version = -1;  // -1: any version
  CreateMode mode = CreateMode::kPersistent;  // kCreate
  static ZkMultiOp Delete(std::string path, int32_t version = -1) {
    return ZkMultiOp{Type::kDelete, std::move(path), "", version};
  }
  // Checks that `path` exists (at `version`, unless -1).
  static ZkMultiOp Check(std::string path, int32_t version = -1) {
    return ZkMultiOp{Type::kCheck, std::move(path), "", version};
  }
  static ZkMultiOp SetData(std::string path, std::string data, int32_t version = -1) {
    return ZkMultiOp{Type::kSetData, std::move(path), std::move(data), version};
  }
  // The created path (with a sequential suffix) comes back in its result;
  // a create in a multi reports no Stat (ZooKeeper's multi does not), but
  // every node a multi creates has the multi's zxid as its czxid, which a
  // kSetData in the same multi returns as its Stat's mzxid.
  static ZkMultiOp Create(std::string path, std::string data, CreateMode mode) {
    return ZkMultiOp{Type::kCreate, std::move(path), std::move(data), -1, mode};
  }
};

// One operation's outcome in a multi: its code; a kCreate's created path
// and a kSetData's Stat when the multi applied.
struct ZkMultiResult {
  ZkCode code = ZkCode::kOther;
  std::string path;
  ZkStat stat;
};

struct SessionCredentials {
  int64_t session_id = 0;
  std::string password;
};

class EventLoop;

class ZkSession {
 public:
  using CreateCallback = std::function<void(ZkCode, const std::string& path, const ZkStat&)>;
  using VoidCallback = std::function<void(ZkCode)>;
  using DataCallback = std::function<void(ZkCode, const std::string& data, const ZkStat&)>;
  using StatCallback = std::function<void(ZkCode, const ZkStat&)>;
  using ChildrenCallback = std::function<void(ZkCode, const std::vector<std::string>&)>;
  // A multi's outcome: one result per operation, in order.
  using MultiCallback = std::function<void(const std::vector<ZkMultiResult>& results)>;
  // Called at most once, for a node event. Never called for session events;
  // dropped without a call if the session expires or closes first.
  using Watcher = std::function<void(WatchEventType)>;
  using SessionListener = std::function<void(SessionEvent)>;

  virtual ~ZkSession() = default;

  // Every callback below is called exactly once.
  virtual void Create(const std::string& path, const std::string& data,
                      CreateMode mode, CreateCallback done) = 0;
  virtual void Delete(const std::string& path, int32_t version,
                      VoidCallback done) = 0;
  // Runs `ops` as one transaction (ZooKeeper's multi): all apply, or none.
  // Applied: every code kOk (a create's path, a setData's Stat filled in).
  // Not applied: the operation that failed has
  // its error (e.g. kNoNode), the ones before it kOk (they would have
  // applied), the ones after it kOther (not reached). A failure of the
  // request as a whole (connection loss, session expiry) comes as that
  // code for every operation. The seam knows no recipe: the engine
  // composes its transactions (LockEngine::IssueDelete).
  virtual void Multi(std::vector<ZkMultiOp> ops, MultiCallback done) = 0;
  // With a non-null `watcher`, leaves a data watch only if the node exists
  // (unlike exists(), no watch dangles on a missing node). Returns a key
  // for RemoveWatch (0 without a watcher).
  virtual uint64_t GetData(const std::string& path, Watcher watcher,
                           DataCallback done) = 0;
  // Removes a watch left by GetData: its watcher is never called and it is
  // not re-sent on reconnect. With `only_watcher` (the caller knows no
  // other watch of this session on `path`) the server drops its watch too,
  // unless the session itself still has another data watcher there (one
  // the caller cannot see, e.g. an observer's); otherwise the server keeps
  // one for the others. Harmless if it already fired.
  virtual void RemoveWatch(const std::string& path, uint64_t key, bool only_watcher) = 0;
  virtual void SetData(const std::string& path, const std::string& data,
                       int32_t version, StatCallback done) = 0;
  // Never leaves a watch.
  virtual void GetChildren(const std::string& path, ChildrenCallback done) = 0;
  // Also the parent's Stat (ZooKeeper's getChildren2). The default (for test
  // doubles) reports an empty Stat.
  using ChildrenStatCallback =
      std::function<void(ZkCode, const std::vector<std::string>&, const ZkStat&)>;
  virtual void GetChildrenStat(const std::string& path, ChildrenStatCallback done) {
    GetChildren(path, [done = std::move(done)](ZkCode code, const std::vector<std::string>& c) {
      done(code, c, ZkStat{});
    });
  }
  virtual void Exists(const std::string& path, StatCallback done) = 0;
  // Watching reads for observers (LockObservers): a children watch left
  // only if the node exists (it fires on a child's creation or deletion,
  // and on the node's deletion), and an existence watch left whether or
  // not the node exists (it fires on its creation, deletion or a data
  // change). The watcher is called at most once, as GetData's.
  virtual uint64_t GetChildrenWatch(const std::string& path, Watcher watcher,
                                    ChildrenStatCallback done) = 0;
  virtual uint64_t ExistsWatch(const std::string& path, Watcher watcher, StatCallback done) = 0;
  // ZooKeeper's sync: the server this session is connected to catches up
  // with the leader. Its success proves the leader was reachable (and the
  // session valid) after the call was made; a follower cut off from the
  // quorum answers reads from its own state, but cannot complete a sync.
  virtual void Sync(const std::string& path, VoidCallback done) = 0;

  // Must be set before Start(); called on the completion thread.
  virtual void SetSessionListener(SessionListener listener) = 0;
  // Opens the session. Fails (InvalidArgument) if the connect string does
  // not parse; if its names do not resolve yet, succeeds and keeps trying in
  // the background (the session is simply not connected until then).
  virtual absl::Status Start() = 0;
  // Closes the session: its ephemeral nodes vanish at once. May block.
  virtual void Close() = 0;

  virtual bool connected() const = 0;
  // The negotiated session timeout (the requested one before connecting).
  virtual std::chrono::milliseconds session_timeout() const = 0;
  virtual SessionCredentials credentials() const = 0;
  // The loop every callback, watcher and session event of this session
  // runs on (test doubles too), where its user runs its own work and timers
  // (event_loop.h): the engine's shard of this session lives there. Stopped
  // by Close; work posted after that still runs, in place.
  virtual EventLoop* loop() = 0;

  uint64_t call_count(ZkOp op) const { return calls_[static_cast<int>(op)].load(); }
  uint64_t watch_events() const { return watch_events_.load(); }
  // Set before Start(); `observer` must outlive the session's callbacks.
  virtual void SetObserver(ZkObserver* observer) { observer_.store(observer); }

 protected:
  void CountCall(ZkOp op) { calls_[static_cast<int>(op)].fetch_add(1); }
  void CountWatchEvent() {
    watch_events_.fetch_add(1);
    if (ZkObserver* o = observer_.load()) o->OnWatchEvent();
  }
  ZkObserver* observer() const { return observer_.load(); }

 private:
  std::array<std::atomic<uint64_t>, static_cast<int>(ZkOp::kCount)> calls_{};
  std::atomic<uint64_t> watch_events_{0};
  std::atomic<ZkObserver*> observer_{nullptr};
};

struct ZkClientOptions {
  std::string connect_string = "127.0.0.1:2181";
  std::chrono::milliseconds session_timeout{10000};
  // "scheme:credentials" for zoo_add_auth (e.g. "digest:user:password");
  // empty = no auth. When set, nodes are created with ZOO_CREATOR_ALL_ACL.
  std::string auth;
  // Fault injection for tests: runs before every zookeeper_init (the first
  // open and each reopen after an expiry); a non-OK status fails that open
  // the way an unresolvable connect string does. Unset in production.
  std::function<absl::Status()> before_open;
  // The session's thread's name (up to 15 bytes), e.g. "ts-zk-0".
  std::string thread_name = "ts-zk";
};

// The real session over the single-threaded ZooKeeper C client
// (zookeeper_st), driven by one thread of its own (see zk_session_internal.h).
std::unique_ptr<ZkSession> NewZkClientSession(const ZkClientOptions& options);

// Expires the session `creds` on purpose, the way ZooKeeper's own tests do:
// attach a second handle with the same id and password, then close it.
absl::Status ExpireZkSession(const std::string& connect_string,
                             const SessionCredentials& creds);

// Sends the C client's log to stderr at WARN (default) or more.
void SetZkClientLogLevel(const std::string& level);

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_ZK_ZK_SESSION_H_
