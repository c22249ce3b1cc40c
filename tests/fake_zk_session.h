// FakeZkServer and FakeZkSession: an in-memory ZooKeeper for engine tests.
//
// FakeZkServer is the tree (nodes, versions, zxids, ephemeral owners,
// sequential names from the parent's cversion, container nodes) and the
// server side of watches. Several FakeZkSession objects share one server, so
// several engines ("replicas") contend on it; a session's ephemeral nodes
// vanish when it expires or closes, firing the other sessions' watches.
//
// A FakeZkSession implements the ZkSession seam with the real session's
// semantics (server/zk/zk_session.h): the codes each call returns; GetData
// leaves a data watch only if the node exists, ExistsWatch one either way,
// GetChildrenWatch a children watch on success; a watcher is called at most
// once, never after RemoveWatch or an expiry; Multi is all-or-nothing with
// per-operation codes; session events kConnected, kDisconnected, kExpired
// (then kConnected on a new session id).
//
// Timing. A request is applied to the tree when it is made (ZooKeeper's
// order is the order of the calls, as with one connection), or, made while
// disconnected, when the session reconnects. Its reply, and every watch
// event for the session, goes to the session's queue; ONE delivery thread
// per session runs the queue in order, so every callback comes from that
// thread, never from inside the caller's call. That thread runs each
// callback on the session's loop (ZkSession::loop: one of its own unless
// the test gives one) and waits for it, as a real session's callbacks run
// on its loop: the engine's shard lives there. As in ZooKeeper, a watch event queued by a write is ahead of
// that write's reply, and a watch event never overtakes the reply of the
// read that set it.
//
// Fault controls, for tests:
//   - hold: items the hold filter accepts (replies, watch events) stay in
//     the queue until the test releases them, in any order it chooses
//     (Release, ReleaseAndWait): replies are reordered, and later items
//     pass held ones;
//   - drop: DropReply turns a queued reply into CONNECTION_LOSS (the
//     request was applied: its outcome is unknown to the caller);
//     LoseNextReply does so for a future request, LoseNextRequest loses the
//     request itself (not applied, CONNECTION_LOSS);
//   - Disconnect: kDisconnected, every pending reply fails with
//     CONNECTION_LOSS, requests made meanwhile wait, watch events wait;
//     Reconnect: kConnected, then the waiting watch events and requests;
//   - Expire: as a real expiry seen by the client (kDisconnected if
//     connected, the session's ephemerals deleted, kExpired, then kConnected
//     on a new session id);
//   - counts: calls by op (ZkSession::call_count), watch events delivered
//     (ZkSession::watch_events), and the server's log of every watch fired.
//
// Thread-safe. Lock order: FakeZkServer::mu_ -> FakeZkSession::mu_; no lock
// is held while a callback runs.
#ifndef TURNSTILE_TESTS_FAKE_ZK_SESSION_H_
#define TURNSTILE_TESTS_FAKE_ZK_SESSION_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/zk/event_loop.h"
#include "server/zk/zk_session.h"

namespace turnstile::testing {

class FakeZkSession;

// One watch the server fired (FakeZkServer::fired()).
struct FiredWatch {
  int64_t session_id = 0;  // the session that had set it
  std::string path;
  WatchEventType type = WatchEventType::kDataChanged;
  bool children = false;  // a children watch (GetChildrenWatch)
};

class FakeZkServer {
 public:
  FakeZkServer();
  ~FakeZkServer();
  FakeZkServer(const FakeZkServer&) = delete;
  FakeZkServer& operator=(const FakeZkServer&) = delete;

  // Inspection (as a test's own reads; no watches, not counted).
  bool Exists(const std::string& path) const;
  std::optional<ZkStat> Stat(const std::string& path) const;
  std::string Data(const std::string& path) const;
  // Children names, sorted (the sessions' replies are not).
  std::vector<std::string> Children(const std::string& path) const;

  // Writes as another client would make them (an operator, a Release by
  // lease id through another replica): watches fire.
  ZkCode DeleteNode(const std::string& path);
  ZkCode CreateNode(const std::string& path, const std::string& data = "");

  // Container nodes: ZooKeeper deletes a container that had children and
  // has none, on a timer of its own (a minute by default). ReapContainers
  // does it now; with reap_containers_at_once, it happens as soon as the
  // last child goes. Returns how many were deleted.
  int ReapContainers();
  void set_reap_containers_at_once(bool on);

  // Every watch fired so far, in order, and how many are set now.
  std::vector<FiredWatch> fired() const;
  size_t watch_count() const;
  // The paths a session watches now (data, existence and children watches).
  std::vector<std::string> WatchedPaths(int64_t session_id) const;
  int64_t last_zxid() const;

 private:
  friend class FakeZkSession;
  struct Node {
    std::string data;
    ZkStat stat;
    bool container = false;
    std::set<std::string> children;
  };
  using Tree = std::map<std::string, Node>;
  enum class Change { kCreated, kDeleted, kDataChanged, kChildrenChanged };
  struct Fire {
    std::string path;
    Change change;
  };
  enum class WatchKind { kData, kExist, kChildren };
  struct Registration {
    FakeZkSession* session = nullptr;
    std::string path;
    WatchKind kind = WatchKind::kData;
    uint64_t after_item = 0;  // the reply item of the read that set it
  };

  // All REQUIRE mu_.
  ZkCode ApplyCreate(Tree& t, int64_t zxid, const std::string& path, const std::string& data,
                     CreateMode mode, int64_t owner, std::string* created,
                     std::vector<Fire>* fires);
  ZkCode ApplyDelete(Tree& t, int64_t zxid, const std::string& path, int32_t version,
                     std::vector<Fire>* fires);
  ZkCode ApplySetData(Tree& t, int64_t zxid, const std::string& path, const std::string& data,
                      int32_t version, std::vector<Fire>* fires);
  void Trigger(const std::vector<Fire>& fires);
  void DeleteEphemerals(int64_t owner);
  void DropRegistrations(FakeZkSession* session);
  void ReapAfter(const std::vector<Fire>& fires);
  int ReapLocked();
  static ZkStat StatOf(const Node& n);

  mutable std::mutex mu_;
  Tree tree_;
  int64_t zxid_ = 0;
  int64_t next_session_id_ = 0x100;
  uint64_t next_key_ = 0;
  bool reap_at_once_ = false;
  std::map<uint64_t, Registration> regs_;
  std::vector<FiredWatch> fired_;
};

// What a test sees of a queued item.
struct FakeItem {
  enum class Kind { kReply, kWatch, kSessionEvent };
  uint64_t id = 0;
  Kind kind = Kind::kReply;
  ZkOp op = ZkOp::kCount;        // kReply
  std::string path;              // kReply, kWatch (the request's path; a create's asked-for path)
  ZkCode code = ZkCode::kOk;     // kReply: what it will report
  WatchEventType watch_type = WatchEventType::kDataChanged;  // kWatch
  SessionEvent event = SessionEvent::kConnected;             // kSessionEvent
  bool held = false;
};

class FakeZkSession final : public ZkSession {
 public:
  explicit FakeZkSession(FakeZkServer* server,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));
  ~FakeZkSession() override;

  // --- ZkSession.
  void Create(const std::string& path, const std::string& data, CreateMode mode,
              CreateCallback done) override;
  void Delete(const std::string& path, int32_t version, VoidCallback done) override;
  void Multi(std::vector<ZkMultiOp> ops, MultiCallback done) override;
  uint64_t GetData(const std::string& path, Watcher watcher, DataCallback done) override;
  void RemoveWatch(const std::string& path, uint64_t key, bool only_watcher) override;
  void SetData(const std::string& path, const std::string& data, int32_t version,
               StatCallback done) override;
  void GetChildren(const std::string& path, ChildrenCallback done) override;
  void GetChildrenStat(const std::string& path, ChildrenStatCallback done) override;
  void Exists(const std::string& path, StatCallback done) override;
  uint64_t GetChildrenWatch(const std::string& path, Watcher watcher,
                            ChildrenStatCallback done) override;
  uint64_t ExistsWatch(const std::string& path, Watcher watcher, StatCallback done) override;
  void Sync(const std::string& path, VoidCallback done) override;
  void SetSessionListener(SessionListener listener) override;
  absl::Status Start() override;
  void Close() override;
  bool connected() const override { return connected_.load(); }
  std::chrono::milliseconds session_timeout() const override { return timeout_; }
  SessionCredentials credentials() const override;

  int64_t session_id() const { return credentials().session_id; }
  // Every request made so far (op and path), in call order.
  std::vector<std::pair<ZkOp, std::string>> Requests() const;

  // --- Holding and reordering.
  // Items (replies and watch events; never session events) the filter
  // accepts when they are queued are held until released. Null: none.
  void SetHoldFilter(std::function<bool(const FakeItem&)> hold);
  // The items not yet delivered, in queue order.
  std::vector<FakeItem> Pending() const;
  // Waits for a held item `pred` accepts; the first such, or nullopt.
  std::optional<FakeItem> AwaitHeld(const std::function<bool(const FakeItem&)>& pred,
                                    std::chrono::milliseconds timeout);
  // Lets a held item go (the delivery thread runs it in queue order among
  // the deliverable ones). False if it is not queued.
  bool Release(uint64_t id);
  // Release, then wait until its callback has returned.
  bool ReleaseAndWait(uint64_t id, std::chrono::milliseconds timeout);
  void ReleaseAll();
  // Waits until nothing deliverable is queued and no callback runs.
  bool AwaitIdle(std::chrono::milliseconds timeout);

  // --- Dropping.
  // A queued reply reports CONNECTION_LOSS instead (and is released).
  bool DropReply(uint64_t id);
  // The next request of `op` whose path contains `path_part` is applied but
  // its reply says CONNECTION_LOSS (LoseNextReply), or is not applied at all
  // and fails with CONNECTION_LOSS (LoseNextRequest).
  void LoseNextReply(ZkOp op, const std::string& path_part);
  void LoseNextRequest(ZkOp op, const std::string& path_part);

  // --- The loop the session's user runs on (ZkSession::loop): by default
  // one of the session's own, stopped by Close (then, as a real session's,
  // it runs work posted to it in place). A test that sets its own (before
  // the engine is built) can hold that loop busy, so that what the engine
  // queues for its next turn piles up; it stops it after Close.
  void UseLoop(EventLoop* loop) { loop_ = loop; }
  EventLoop* loop() override { return loop_; }

  // --- A call that does not return.
  // While the gate is closed, every request (each ZkSession call that
  // Submits: creates, deletes, reads, writes, syncs) blocks in its caller's
  // thread before it reaches the server, until the gate opens. The engine
  // calls in from its shard's loop, so that shard's loop is stuck inside
  // the call: the worst a session in trouble could do to it.
  void CloseGate();
  void OpenGate();
  // Waits until a caller is blocked at the closed gate.
  bool AwaitCallerAtGate(std::chrono::milliseconds timeout);

  // --- The connection and the session.
  void Disconnect();
  void Reconnect();
  void Expire();

 private:
  friend class FakeZkServer;  // QueueWatch, session_id_ (under its lock)
  struct Item {
    FakeItem info;
    ZkCode applied_code = ZkCode::kOk;  // what the server answered
    std::function<void()> ok;           // delivers the server's answer
    std::function<void(ZkCode)> fail;   // delivers a failure with no payload
    uint64_t watch_key = 0;  // kReply: the watcher it set; kWatch: the one to call
    bool keeps_watch_on_no_node = false;
    uint64_t after_item = 0;  // kWatch: not before this reply
  };
  enum class State { kNew, kConnected, kDisconnected, kClosed };
  EventLoop own_loop_;
  EventLoop* loop_ = &own_loop_;
  // Builds the reply of a request made now (REQUIRES server_->mu_): runs
  // under the server's lock, returns the code and fills `ok`.
  using Apply = std::function<ZkCode(uint64_t item_id, std::function<void()>* ok)>;
  struct Fault {
    ZkOp op;
    std::string path_part;
    bool lose_request;
  };
  // A request made while not connected: run once connected.
  struct Unsent {
    ZkOp op = ZkOp::kCount;
    std::string path;
    std::function<void()> run;
    std::function<void(ZkCode)> fail;
    uint64_t watch_key = 0;
    bool keeps_watch_on_no_node = false;
  };
  void Submit(ZkOp op, const std::string& path, Apply apply, std::function<void(ZkCode)> fail,
              uint64_t watch_key = 0, bool keeps_watch_on_no_node = false);
  // REQUIRES server_->mu_ (and not mu_).
  void RunRequest(ZkOp op, const std::string& path, const Apply& apply,
                  const std::function<void(ZkCode)>& fail, uint64_t watch_key,
                  bool keeps_watch_on_no_node);
  // REQUIRES mu_.
  void EnqueueLocked(Item item);
  void EnqueueEventLocked(SessionEvent e);
  void EnqueueFailureLocked(const Unsent& u, ZkCode code);
  bool DeliverableLocked(const Item& item) const;
  // REQUIRES server_->mu_.
  void QueueWatch(uint64_t key, const std::string& path, WatchEventType type,
                  uint64_t after_item);
  void FailPendingRepliesLocked(ZkCode code);
  void DropWatcher(uint64_t key);
  uint64_t NewWatcher(Watcher w);
  void Loop();

  FakeZkServer* const server_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> connected_{false};

  // Guarded by server_->mu_.
  State state_ = State::kNew;
  int64_t session_id_ = 0;
  std::vector<Unsent> unsent_;  // requests made while not connected

  // Guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  SessionListener listener_;
  std::list<Item> queue_;
  uint64_t next_item_ = 0;
  uint64_t delivering_ = 0;  // the item whose callback runs now (0: none)
  bool stop_ = false;
  bool watches_flow_ = false;  // connected: watch events may be delivered
  std::function<bool(const FakeItem&)> hold_;
  std::vector<Fault> faults_;
  std::vector<std::pair<ZkOp, std::string>> requests_;
  std::map<uint64_t, Watcher> watchers_;  // client side, by key
  int64_t credentials_id_ = 0;
  std::thread thread_;

  // The gate (a leaf lock: nothing else is taken under it).
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool gate_closed_ = false;
  int at_gate_ = 0;  // callers blocked now
};

}  // namespace turnstile::testing

#endif  // TURNSTILE_TESTS_FAKE_ZK_SESSION_H_
