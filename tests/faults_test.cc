// Failure semantics (SPEC §4) against real ZooKeeper servers: session
// expiry, a ZooKeeper restart within the session timeout, a disconnection
// longer than it, a create whose reply is lost or late, and SIGTERM drain.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <csignal>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/engine/session_slot.h"
#include "server/recipe/lock_name.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

using v1::AcquireEvent;

// Wraps the real session; can lose or delay the reply of contender creates.
// The create itself always reaches ZooKeeper.
class FaultySession final : public ZkSession {
 public:
  explicit FaultySession(const std::string& connect) {
    ZkClientOptions o;
    o.connect_string = connect;
    o.session_timeout = milliseconds(6000);
    real_ = NewZkClientSession(o);
  }
  // The next contender create that succeeds is reported as CONNECTION_LOSS.
  void LoseNextCreateReply() {
    std::lock_guard<std::mutex> l(mu_);
    lose_next_ = true;
  }
  // The next successful contender create's reply is held until
  // DeliverHeldReply().
  void HoldNextCreateReply() {
    std::lock_guard<std::mutex> l(mu_);
    hold_next_ = true;
  }
  bool HasHeldReply() {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<bool>(held_);
  }
  void DeliverHeldReply() {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> l(mu_);
      fn = std::move(held_);
      held_ = nullptr;
    }
    if (fn) Post(std::move(fn));
  }

  void Create(const std::string& path, const std::string& data, CreateMode mode,
              CreateCallback done) override {
    CountCall(ZkOp::kCreate);
    bool contender = mode == CreateMode::kEphemeralSequential;
    real_->Create(path, data, mode,
                  [this, contender, done](ZkCode code, const std::string& p, const ZkStat& s) {
                    bool lose = false, hold = false;
                    if (contender && code == ZkCode::kOk) {
                      ++contender_creates;  // nodes actually created
                      std::lock_guard<std::mutex> l(mu_);
                      lose = std::exchange(lose_next_, false);
                      hold = !lose && std::exchange(hold_next_, false);
                      if (hold) held_ = [done, code, p, s] { done(code, p, s); };
                    }
                    if (lose) {
                      created_but_lost_ = p;
                      done(ZkCode::kConnectionLoss, "", ZkStat{});
                    } else if (!hold) {
                      done(code, p, s);
                    }
                  });
  }
  // Deletes report CONNECTION_LOSS without reaching ZooKeeper while set.
  void FailDeletes(bool fail) { fail_deletes_ = fail; }
  void Delete(const std::string& path, int32_t version, VoidCallback done) override {
    CountCall(ZkOp::kDelete);
    if (fail_deletes_) {
      Post([done] { done(ZkCode::kConnectionLoss); });
      return;
    }
    real_->Delete(path, version, std::move(done));
  }
  // Transactions with a delete fail the same way while FailDeletes is set.
  void Multi(std::vector<ZkMultiOp> ops, MultiCallback done) override {
    CountCall(ZkOp::kMulti);
    bool deletes = false;
    for (const auto& op : ops) deletes = deletes || op.type == ZkMultiOp::Type::kDelete;
    if (fail_deletes_ && deletes) {
      Post([done, n = ops.size()] {
        std::vector<ZkMultiResult> out(n);
        for (ZkMultiResult& r : out) r.code = ZkCode::kConnectionLoss;
        done(out);
      });
      return;
    }
    real_->Multi(std::move(ops), std::move(done));
  }
  uint64_t GetData(const std::string& path, Watcher w, DataCallback done) override {
    CountCall(ZkOp::kGetData);
    if (!w) return real_->GetData(path, nullptr, std::move(done));
    // While "partitioned", watch events are held back and delivered after
    // the reconnect, as the C client does (it re-sends its watches on
    // reconnect and the server then fires those whose node changed).
    return real_->GetData(path, [this, w = std::move(w)](WatchEventType type) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (partitioned_) {
          held_watches_.push_back([w, type] { w(type); });
          return;
        }
      }
      w(type);
    }, std::move(done));
  }
  void SetData(const std::string& path, const std::string& data, int32_t version,
               StatCallback done) override {
    CountCall(ZkOp::kSetData);
    real_->SetData(path, data, version, std::move(done));
  }
  void RemoveWatch(const std::string& path, uint64_t key, bool only_watcher) override {
    real_->RemoveWatch(path, key, only_watcher);
  }
  uint64_t GetChildrenWatch(const std::string& path, Watcher w,
                            ChildrenStatCallback done) override {
    CountCall(ZkOp::kGetChildren);
    return real_->GetChildrenWatch(path, std::move(w), std::move(done));
  }
  uint64_t ExistsWatch(const std::string& path, Watcher w, StatCallback done) override {
    CountCall(ZkOp::kExists);
    return real_->ExistsWatch(path, std::move(w), std::move(done));
  }
  void GetChildren(const std::string& path, ChildrenCallback done) override {
    CountCall(ZkOp::kGetChildren);
    real_->GetChildren(path, std::move(done));
  }
  void GetChildrenStat(const std::string& path, ChildrenStatCallback done) override {
    CountCall(ZkOp::kGetChildren);
    real_->GetChildrenStat(path, std::move(done));
  }
  void Exists(const std::string& path, StatCallback done) override {
    CountCall(ZkOp::kExists);
    real_->Exists(path, std::move(done));
  }
  // While set, heartbeats (syncs) get no answer until cleared: the replica
  // is connected to a follower that lost the quorum (it answers reads from
  // its own state, but a sync needs the leader).
  // When the first sync still hung was made (the epoch if none).
  std::chrono::steady_clock::time_point FirstHungSyncAt() {
    std::lock_guard<std::mutex> l(mu_);
    return hung_syncs_.empty() ? std::chrono::steady_clock::time_point{} : first_hung_at_;
  }
  void HangSyncs(bool hang) {
    std::vector<VoidCallback> release;
    {
      std::lock_guard<std::mutex> l(mu_);
      hang_syncs_ = hang;
      if (!hang) release.swap(hung_syncs_);
    }
    for (auto& done : release) Post([done] { done(ZkCode::kOk); });
  }
  void Sync(const std::string& path, VoidCallback done) override {
    CountCall(ZkOp::kSync);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (hang_syncs_) {
        if (hung_syncs_.empty()) first_hung_at_ = std::chrono::steady_clock::now();
        hung_syncs_.push_back(std::move(done));
        return;
      }
    }
    real_->Sync(path, std::move(done));
  }
  void SetSessionListener(SessionListener l) override {
    listener_ = l;
    real_->SetSessionListener([this, l](SessionEvent e) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (partitioned_) return;  // the fake partition decides what the engine hears
      }
      l(e);
    });
  }
  // A fake partition of this session: the engine hears kDisconnected now;
  // the real session stays up (so others can change nodes meanwhile), and
  // watch events are held until Reconnect(), which reports kConnected and
  // then delivers them, in that order.
  void Partition() {
    {
      std::lock_guard<std::mutex> l(mu_);
      partitioned_ = true;
    }
    Post([this] { listener_(SessionEvent::kDisconnected); });
  }
  void Reconnect() {
    std::vector<std::function<void()>> held;
    {
      std::lock_guard<std::mutex> l(mu_);
      partitioned_ = false;
      held.swap(held_watches_);
    }
    Post([this, held = std::move(held)] {
      listener_(SessionEvent::kConnected);
      for (auto& fn : held) fn();
    });
  }
  absl::Status Start() override { return real_->Start(); }
  void Close() override { real_->Close(); }
  // The real session's loop: its callbacks run there, and so must every
  // answer or event this wrapper makes up (the engine's shard lives there).
  EventLoop* loop() override { return real_->loop(); }
  void Post(std::function<void()> fn) { real_->loop()->Post(std::move(fn)); }
  bool connected() const override { return real_->connected(); }
  milliseconds session_timeout() const override { return real_->session_timeout(); }
  SessionCredentials credentials() const override { return real_->credentials(); }

  std::string created_but_lost_;
  std::atomic<int> contender_creates{0};
  std::atomic<bool> fail_deletes_{false};

 private:
  std::unique_ptr<ZkSession> real_;
  std::mutex mu_;
  bool lose_next_ = false;            // GUARDED_BY(mu_)
  bool hold_next_ = false;            // GUARDED_BY(mu_)
  std::function<void()> held_;        // GUARDED_BY(mu_)
  SessionListener listener_;          // set before Start()
  bool partitioned_ = false;          // GUARDED_BY(mu_)
  std::vector<std::function<void()>> held_watches_;  // GUARDED_BY(mu_)
  bool hang_syncs_ = false;                    // GUARDED_BY(mu_)
  std::vector<VoidCallback> hung_syncs_;       // GUARDED_BY(mu_)
  std::chrono::steady_clock::time_point first_hung_at_{};  // GUARDED_BY(mu_)
};

class FaultsTest : public ::testing::Test {
 protected:
  void UseServer(const std::string& connect) {
    connect_ = connect;
    root_ = UniqueRoot("faults");
    zk_ = std::make_unique<SyncZk>(connect_);
  }
  // A replica over a FaultySession (6 s session timeout) on the shared server.
  std::unique_ptr<Replica> StartFaultyReplica(FaultySession** fs) {
    UseServer(SharedZkServer().ConnectString());
    auto faulty = std::make_unique<FaultySession>(connect_);
    *fs = faulty.get();
    return StartReplica(TestConfig(connect_, root_), std::move(faulty));
  }
  std::string LockPath(const std::string& name) { return root_ + "/" + EncodeLockName(name); }
  bool ContendersBecome(const std::string& name, size_t n, milliseconds timeout = milliseconds(20000)) {
    return WaitFor([&] { return zk_->Contenders(LockPath(name)).size() == n; }, timeout);
  }

  std::string connect_, root_;
  std::unique_ptr<SyncZk> zk_;
};

// Must-show 7: session expiry of a replica.
TEST_F(FaultsTest, SessionExpiryLosesHoldersAndRequeuesWaiters) {
  UseServer(SharedZkServer().ConnectString());
  auto r1 = StartReplica(TestConfig(connect_, root_));
  auto r2 = StartReplica(TestConfig(connect_, root_));
  auto s1 = NewStub(r1->address());
  auto s2 = NewStub(r2->address());
  AcquireStream holder(s1.get(), OpenMsg("exp", milliseconds(60000)));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  AcquireStream w1(s1.get(), OpenMsg("exp", milliseconds(60000), "w1"));
  ASSERT_TRUE(w1.Next());
  AcquireStream w2(s2.get(), OpenMsg("exp", milliseconds(60000), "w2"));
  ASSERT_TRUE(w2.Next());
  ASSERT_TRUE(ContendersBecome("exp", 3));
  auto old_session = r1->zk().credentials().session_id;

  ASSERT_TRUE(ExpireReplicaSession(connect_, *r1));

  auto lost = holder.AwaitAfterSuspension(AcquireEvent::LOST);
  ASSERT_TRUE(lost);
  // When the session is closed while the replica is still connected,
  // ZooKeeper deletes the node (DELETED) before the replica hears of the
  // expiry; otherwise the expiry is seen first (SESSION_EXPIRED).
  EXPECT_TRUE(lost->lost().reason() == v1::Lost::SESSION_EXPIRED ||
              lost->lost().reason() == v1::Lost::DELETED)
      << lost->ShortDebugString();
  // w2 (other replica) is now first; w1 queued again behind it — never
  // granted through its vanished node.
  ASSERT_TRUE(w2.Await(AcquireEvent::ACQUIRED));
  auto requeued = w1.Next();
  ASSERT_TRUE(requeued);
  EXPECT_EQ(requeued->type(), AcquireEvent::QUEUED);
  ASSERT_TRUE(WaitFor([&] { return r1->engine().serving(); }, milliseconds(20000)));
  EXPECT_NE(r1->zk().credentials().session_id, old_session);
  EXPECT_EQ(r1->engine().stats().requeued_after_expiry + r1->engine().stats().requeued_lost_node, 1u);
  ASSERT_TRUE(ContendersBecome("exp", 2));  // w2 + w1's new node; no orphans
  w2.SendRelease();
  ASSERT_TRUE(w1.Await(AcquireEvent::ACQUIRED));
  w1.SendRelease();
  ASSERT_TRUE(w1.Await(AcquireEvent::RELEASED));
  EXPECT_TRUE(ContendersBecome("exp", 0));
}

// After an expiry the replica opens a new session; when that open fails
// (zookeeper_init cannot resolve the connect string: DNS trouble often comes
// with the network trouble that expired the session) it retries with backoff
// until it works, and serves again — it never stays NOT_SERVING for good.
TEST_F(FaultsTest, FailedReopenAfterExpiryIsRetriedUntilItWorks) {
  UseServer(SharedZkServer().ConnectString());
  std::atomic<int> opens{0}, fail_next{0};
  ZkClientOptions o;
  o.connect_string = connect_;
  o.session_timeout = milliseconds(6000);
  o.before_open = [&]() -> absl::Status {
    ++opens;
    if (fail_next > 0) {
      --fail_next;
      return absl::UnavailableError("injected: cannot resolve ZooKeeper hosts");
    }
    return absl::OkStatus();
  };
  auto r = StartReplica(TestConfig(connect_, root_), NewZkClientSession(o));
  ASSERT_TRUE(r);
  ASSERT_EQ(opens.load(), 1);
  auto stub = NewStub(r->address());

  fail_next = 3;  // the reopen and two retries fail
  ASSERT_TRUE(ExpireReplicaSession(connect_, *r)) << "no new session; opens: " << opens.load();
  ASSERT_TRUE(WaitFor([&] { return IsServing(r->address()); }, milliseconds(20000)));
  EXPECT_EQ(fail_next.load(), 0);
  EXPECT_GE(opens.load(), 5) << "first open, 3 failed reopens, 1 that worked";
  AcquireStream s(stub.get(), OpenMsg("reopened", milliseconds(10000)));
  ASSERT_TRUE(s.Await(AcquireEvent::ACQUIRED));
  s.SendRelease();
  ASSERT_TRUE(s.Await(AcquireEvent::RELEASED));
}

// A replica whose ZooKeeper names do not resolve yet at start-up (DNS not
// ready, the ZooKeeper Service or container not created yet) starts
// NOT_SERVING and keeps trying; it serves once they do.
TEST_F(FaultsTest, UnresolvableZooKeeperAtStartIsRetried) {
  UseServer(SharedZkServer().ConnectString());
  std::atomic<int> opens{0};
  ZkClientOptions o;
  o.connect_string = connect_;
  o.session_timeout = milliseconds(6000);
  o.before_open = [&]() -> absl::Status {
    return ++opens <= 2 ? absl::UnavailableError("injected: cannot resolve ZooKeeper hosts")
                        : absl::OkStatus();
  };
  auto r = StartReplica(TestConfig(connect_, root_), NewZkClientSession(o));
  ASSERT_TRUE(r) << "Start must not fail while names do not resolve";
  EXPECT_EQ(opens.load(), 3);
  auto stub = NewStub(r->address());
  AcquireStream s(stub.get(), OpenMsg("late-zk", milliseconds(10000)));
  ASSERT_TRUE(s.Await(AcquireEvent::ACQUIRED));
  s.SendRelease();
  ASSERT_TRUE(s.Await(AcquireEvent::RELEASED));
}

// turnstiled itself: a connect string that does not parse is a configuration
// error (exit 1 at once); one whose host does not resolve leaves it running,
// NOT_SERVING, until SIGTERM.
TEST_F(FaultsTest, TurnstiledFailsFastOnlyOnAMalformedConnectString) {
  auto bad = ChildProcess::Spawn({TestBinary("turnstiled"), "--listen", "127.0.0.1:0",
                                  "--metrics-listen", "", "--zk", "no-port-here"});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->Wait(milliseconds(20000)), 1);

  auto waiting = ChildProcess::Spawn({TestBinary("turnstiled"), "--listen", "127.0.0.1:0",
                                      "--metrics-listen", "", "--zk", "zk.turnstile-test.invalid:2181",
                                      "--log-level", "error"});
  ASSERT_TRUE(waiting);
  // Listening, but never SERVING: its ZooKeeper cannot be reached.
  absl::StatusOr<std::string> address = AwaitListeningAddress(*waiting);
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_FALSE(IsServing(*address));
  EXPECT_FALSE(waiting->Wait(milliseconds(0)).has_value()) << "must keep running";
  waiting->Signal(SIGTERM);
  EXPECT_EQ(waiting->Wait(milliseconds(20000)), 0);
}

// Must-show 8: ZooKeeper stopped and restarted within the session timeout.
TEST_F(FaultsTest, ZooKeeperRestartWithinSessionTimeoutSuspendsAndResumes) {
  auto server = ZkServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  UseServer((*server)->ConnectString());
  ReplicaConfig cfg = TestConfig(connect_, root_);
  cfg.zk_session_timeout = milliseconds(20000);
  auto r = StartReplica(cfg);
  auto stub = NewStub(r->address());
  AcquireStream holder(stub.get(), OpenMsg("restart", milliseconds(60000)));
  auto acq = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq);
  AcquireStream waiter(stub.get(), OpenMsg("restart", milliseconds(120000)));
  ASSERT_TRUE(waiter.Next());
  ASSERT_TRUE(IsServing(r->address()));
  zk_.reset();  // our checker's session would only get in the way

  ASSERT_TRUE((*server)->Stop().ok());
  auto suspended = holder.Await(AcquireEvent::SUSPENDED);
  ASSERT_TRUE(suspended);
  int64_t safe_ms = suspended->suspended().safe_for().seconds() * 1000 +
                    suspended->suspended().safe_for().nanos() / 1000000;
  EXPECT_GT(safe_ms, 0);
  EXPECT_LE(safe_ms, 20000 - 400);  // the margin: max(200 ms, 2 % of 20 s) at least
  EXPECT_TRUE(WaitFor([&] { return !IsServing(r->address()); }, milliseconds(10000)));
  // While ZooKeeper is away new contenders are refused.
  AcquireStream refused(stub.get(), OpenMsg("restart-other", milliseconds(1000)));
  auto st = refused.AwaitEnd();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->error_code(), grpc::StatusCode::UNAVAILABLE);

  ASSERT_TRUE((*server)->Restart().ok());
  ASSERT_TRUE(holder.Await(AcquireEvent::RESUMED, milliseconds(30000)));
  EXPECT_TRUE(WaitFor([&] { return IsServing(r->address()); }, milliseconds(30000)));
  // Nothing was lost: the holder still holds, the lock still works.
  zk_ = std::make_unique<SyncZk>(connect_);
  auto nodes = zk_->Contenders(LockPath("restart"));
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(FormatLeaseId(EncodeLockName("restart"), nodes[0]), acq->acquired().lease_id());
  holder.SendRelease();
  ASSERT_TRUE(holder.Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(waiter.Await(AcquireEvent::ACQUIRED));
}

// SPEC §8: a replica cut off for longer than the session timeout must treat
// its holds as lost without waiting to hear of the expiry.
TEST_F(FaultsTest, DisconnectedLongerThanSessionTimeoutIsLost) {
  auto server = ZkServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  UseServer((*server)->ConnectString());
  ReplicaConfig cfg = TestConfig(connect_, root_);
  cfg.zk_session_timeout = milliseconds(3000);
  auto r = StartReplica(cfg);
  auto stub = NewStub(r->address());
  AcquireStream holder(stub.get(), OpenMsg("cut", milliseconds(60000)));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  zk_.reset();
  ASSERT_TRUE((*server)->Stop().ok());
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(holder.Await(AcquireEvent::SUSPENDED));
  auto lost = holder.Await(AcquireEvent::LOST, milliseconds(10000));
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->lost().reason(), v1::Lost::SESSION_EXPIRED);
  EXPECT_LE(std::chrono::steady_clock::now() - start, milliseconds(3500));
  // When ZooKeeper returns, the replica serves again and leaves no node.
  ASSERT_TRUE((*server)->Restart().ok());
  EXPECT_TRUE(WaitFor([&] { return r->engine().serving(); }, milliseconds(30000)));
  zk_ = std::make_unique<SyncZk>(connect_);
  EXPECT_TRUE(ContendersBecome("cut", 0));
  AcquireStream again(stub.get(), OpenMsg("cut", milliseconds(10000)));
  EXPECT_TRUE(again.Await(AcquireEvent::ACQUIRED));
}

// Must-show 9: a create whose reply is lost leaves exactly one node, and the
// contender proceeds with it.
TEST_F(FaultsTest, LostCreateReplyFindsOwnNodeAndNeverCreatesASecond) {
  FaultySession* fs = nullptr;
  auto r = StartFaultyReplica(&fs);  // on the shared server, 6 s session timeout
  auto stub = NewStub(r->address());

  fs->LoseNextCreateReply();
  AcquireStream s(stub.get(), OpenMsg("lost-reply", milliseconds(20000)));
  auto acq = s.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq);
  EXPECT_FALSE(fs->created_but_lost_.empty());
  auto nodes = zk_->Contenders(LockPath("lost-reply"));
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(LockPath("lost-reply") + "/" + nodes[0], fs->created_but_lost_);
  EXPECT_EQ(r->engine().stats().recovered_creates, 1u);
  auto stat = zk_->Exists(LockPath("lost-reply") + "/" + nodes[0]);
  ASSERT_TRUE(stat.ok());
  EXPECT_EQ(acq->acquired().fencing_token(), static_cast<uint64_t>(stat->czxid));
  EXPECT_EQ(fs->contender_creates.load(), 1);  // found, not created again

  // Also when the lost reply belongs to a waiter: it queues with its node.
  fs->LoseNextCreateReply();
  AcquireStream w(stub.get(), OpenMsg("lost-reply", milliseconds(20000)));
  auto q = w.Next();
  ASSERT_TRUE(q);
  EXPECT_EQ(q->type(), AcquireEvent::QUEUED);
  EXPECT_EQ(zk_->Contenders(LockPath("lost-reply")).size(), 2u);
  EXPECT_EQ(fs->contender_creates.load(), 2);
  EXPECT_EQ(r->engine().stats().recovered_creates, 2u);
  s.SendRelease();
  ASSERT_TRUE(w.Await(AcquireEvent::ACQUIRED));
  w.SendRelease();
  ASSERT_TRUE(w.Await(AcquireEvent::RELEASED));
  EXPECT_TRUE(ContendersBecome("lost-reply", 0));
}

// Issue 12 must-show 5: a shared (read) contender whose create reply is
// lost finds its own node by uid (its name carries the kind) and holds
// beside the reader already there; one node each, none left after.
TEST_F(FaultsTest, LostCreateReplyOfAReaderFindsItsSharedNode) {
  FaultySession* fs = nullptr;
  auto r = StartFaultyReplica(&fs);  // on the shared server, 6 s session timeout
  auto stub = NewStub(r->address());
  v1::AcquireOpen open = OpenMsg("lost-reader", milliseconds(20000));
  open.set_kind(v1::LOCK_KIND_SHARED);
  AcquireStream first(stub.get(), open);
  ASSERT_TRUE(first.Await(AcquireEvent::ACQUIRED));
  fs->LoseNextCreateReply();
  AcquireStream second(stub.get(), open);
  ASSERT_TRUE(second.Await(AcquireEvent::ACQUIRED)) << "the reader did not hold beside the other";
  EXPECT_FALSE(fs->created_but_lost_.empty());
  EXPECT_EQ(fs->contender_creates.load(), 2);  // found, not created again
  EXPECT_EQ(r->engine().stats().recovered_creates, 1u);
  auto nodes = zk_->Contenders(LockPath("lost-reader"));
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].rfind("s-", 0), 0u) << nodes[0];
  EXPECT_EQ(nodes[1].rfind("s-", 0), 0u) << nodes[1];
  first.SendRelease();
  second.SendRelease();
  ASSERT_TRUE(first.Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(second.Await(AcquireEvent::RELEASED));
  EXPECT_TRUE(ContendersBecome("lost-reader", 0));
}

// Issue 21 must-show 4: a semaphore contender whose create reply is lost
// finds its own node by uid (its name carries N) and holds beside the
// holder already there; the next waits; one node each, none left after.
TEST_F(FaultsTest, LostCreateReplyOfASemaphoreContenderFindsItsNode) {
  FaultySession* fs = nullptr;
  auto r = StartFaultyReplica(&fs);  // on the shared server, 6 s session timeout
  auto stub = NewStub(r->address());
  v1::AcquireOpen open = OpenMsg("lost-permit", milliseconds(20000));
  open.set_kind(v1::LOCK_KIND_SEMAPHORE);
  open.set_max_holders(2);
  AcquireStream first(stub.get(), open);
  ASSERT_TRUE(first.Await(AcquireEvent::ACQUIRED));
  fs->LoseNextCreateReply();
  AcquireStream second(stub.get(), open);
  ASSERT_TRUE(second.Await(AcquireEvent::ACQUIRED)) << "the second permit was not taken";
  AcquireStream third(stub.get(), open);
  ASSERT_TRUE(third.Await(AcquireEvent::QUEUED));
  EXPECT_FALSE(fs->created_but_lost_.empty());
  EXPECT_EQ(fs->contender_creates.load(), 3);  // found, not created again
  EXPECT_EQ(r->engine().stats().recovered_creates, 1u);
  auto nodes = zk_->Contenders(LockPath("lost-permit"));
  ASSERT_EQ(nodes.size(), 3u);
  for (const std::string& n : nodes) EXPECT_EQ(n.rfind("n2-", 0), 0u) << n;
  second.SendRelease();
  ASSERT_TRUE(second.Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(third.Await(AcquireEvent::ACQUIRED));
  first.SendRelease();
  third.SendRelease();
  ASSERT_TRUE(first.Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(third.Await(AcquireEvent::RELEASED));
  EXPECT_TRUE(ContendersBecome("lost-permit", 0));
}

// Issue 11: a create whose reply was lost, found again by its uid when the
// lock is already full, fails the wait with RESOURCE_EXHAUSTED and deletes
// the adopted node (else everyone behind it waits until the session ends).
TEST_F(FaultsTest, LostCreateReplyOverTheLimitDeletesTheAdoptedNode) {
  UseServer(SharedZkServer().ConnectString());
  auto faulty = std::make_unique<FaultySession>(connect_);
  FaultySession* fs = faulty.get();
  ReplicaConfig cfg = TestConfig(connect_, root_);
  cfg.max_contenders_per_lock = 1;
  auto r = StartReplica(cfg, std::move(faulty));
  auto other = StartReplica(TestConfig(connect_, root_));
  auto stub = NewStub(r->address());
  auto other_stub = NewStub(other->address());
  AcquireStream holder(other_stub.get(), OpenMsg("full", milliseconds(20000)));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));

  fs->LoseNextCreateReply();
  AcquireStream w(stub.get(), OpenMsg("full", milliseconds(20000)));
  auto end = w.AwaitEnd();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << end->error_message();
  EXPECT_FALSE(fs->created_but_lost_.empty());
  EXPECT_EQ(r->engine().stats().recovered_creates, 1u);
  EXPECT_TRUE(ContendersBecome("full", 1)) << "the adopted node was left behind";
  EXPECT_TRUE(WaitFor([&] { return r->engine().stats().contenders == 0; }, milliseconds(10000)));
  holder.SendRelease();
  ASSERT_TRUE(holder.Await(AcquireEvent::RELEASED));
}

// Issue 11: after a reconnect the holder is told RESUMED only once a read
// shows its node is still there. Here its node is deleted (Release by lease
// id through another replica) while its replica is cut off; the deletion's
// watch event arrives only after the reconnect, as with the real client.
// The holder must hear LOST(DELETED), never RESUMED.
TEST_F(FaultsTest, NoResumedForANodeDeletedWhileDisconnected) {
  FaultySession* fs = nullptr;
  auto r = StartFaultyReplica(&fs);  // on the shared server, 6 s session timeout
  auto other = StartReplica(TestConfig(connect_, root_));
  auto stub = NewStub(r->address());
  auto other_stub = NewStub(other->address());
  AcquireStream holder(stub.get(), OpenMsg("resume", milliseconds(20000)));
  auto acq = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq);

  fs->Partition();
  ASSERT_TRUE(holder.Await(AcquireEvent::SUSPENDED));
  grpc::ClientContext ctx;
  v1::ReleaseRequest req;
  req.set_lease_id(acq->acquired().lease_id());
  v1::ReleaseResponse resp;
  ASSERT_TRUE(other_stub->Release(&ctx, req, &resp).ok());
  ASSERT_TRUE(ContendersBecome("resume", 0));
  fs->Reconnect();

  auto next = holder.Next();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->type(), AcquireEvent::LOST) << next->ShortDebugString();
  EXPECT_EQ(next->lost().reason(), v1::Lost::DELETED) << next->ShortDebugString();
}

// Issue 20 (must-show 3): a shard whose session is cut off does not hold up
// grants on another shard. Session 0 of a 2-session replica is partitioned
// (its holder SUSPENDED, heartbeats unanswered); meanwhile 30 handoffs
// between two clients on a lock of session 1 all complete, and the
// partitioned holder hears nothing but SUSPENDED until the reconnect, then
// RESUMED.
TEST_F(FaultsTest, ACutOffSessionDoesNotHoldUpGrantsOnAnotherSession) {
  UseServer(SharedZkServer().ConnectString());
  auto faulty = std::make_unique<FaultySession>(connect_);
  FaultySession* fs = faulty.get();
  ReplicaConfig cfg = TestConfig(connect_, root_);
  cfg.zk_sessions = 2;
  auto r = StartReplica(cfg, std::move(faulty));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->zk_sessions(), 2u);
  std::string on0, on1;
  for (int i = 0; on0.empty() || on1.empty(); ++i) {
    std::string name = absl::StrCat("shard-", i);
    (SessionIndexFor(EncodeLockName(name), 2) == 0 ? on0 : on1) = name;
  }
  auto stub = NewStub(r->address());
  AcquireStream cut(stub.get(), OpenMsg(on0, milliseconds(20000)));
  ASSERT_TRUE(cut.Await(AcquireEvent::ACQUIRED));

  fs->HangSyncs(true);
  fs->Partition();
  ASSERT_TRUE(cut.Await(AcquireEvent::SUSPENDED));

  auto a = std::make_unique<AcquireStream>(stub.get(), OpenMsg(on1, milliseconds(20000), "a"));
  ASSERT_TRUE(a->Await(AcquireEvent::ACQUIRED));
  uint64_t last_token = 0;
  for (int i = 0; i < 30; ++i) {
    auto b = std::make_unique<AcquireStream>(stub.get(), OpenMsg(on1, milliseconds(20000), "b"));
    ASSERT_TRUE(b->Await(AcquireEvent::QUEUED)) << i;
    a->SendRelease();
    ASSERT_TRUE(a->Await(AcquireEvent::RELEASED)) << i;
    auto got = b->Await(AcquireEvent::ACQUIRED);
    ASSERT_TRUE(got) << "handoff " << i << " on session 1 did not complete";
    EXPECT_GT(got->acquired().fencing_token(), last_token);
    last_token = got->acquired().fencing_token();
    a = std::move(b);
  }
  a->SendRelease();
  ASSERT_TRUE(a->Await(AcquireEvent::RELEASED));

  // Session 0's holder heard nothing more meanwhile, and resumes.
  fs->HangSyncs(false);
  fs->Reconnect();
  auto next = cut.Next();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->type(), AcquireEvent::RESUMED) << next->ShortDebugString();
  cut.SendRelease();
  EXPECT_TRUE(cut.Await(AcquireEvent::RELEASED));
}

// Issue 20 (shape): the seam's generic multi against a real ZooKeeper: all
// or nothing, one code per operation (the failing one's error, kOk before
// it, kOther after it).
TEST_F(FaultsTest, MultiAppliesAllOrNothingWithACodePerOperation) {
  UseServer(SharedZkServer().ConnectString());
  ASSERT_EQ(zk_->Create(root_, "", CreateMode::kPersistent), ZkCode::kOk);
  for (const char* n : {"/a", "/b", "/c", "/m"}) {
    ASSERT_EQ(zk_->Create(root_ + n, "", CreateMode::kPersistent), ZkCode::kOk);
  }
  auto run_results = [&](std::vector<ZkMultiOp> ops) {
    auto p = std::make_shared<std::promise<std::vector<ZkMultiResult>>>();
    auto f = p->get_future();
    zk_->session().Multi(std::move(ops),
                         [p](const std::vector<ZkMultiResult>& r) { p->set_value(r); });
    EXPECT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    return f.get();
  };
  auto run = [&](std::vector<ZkMultiOp> ops) {
    std::vector<ZkCode> codes;
    for (const ZkMultiResult& r : run_results(std::move(ops))) codes.push_back(r.code);
    return codes;
  };
  using V = std::vector<ZkCode>;
  // A check that fails: nothing applied.
  EXPECT_EQ(run({ZkMultiOp::Delete(root_ + "/a"), ZkMultiOp::Check(root_ + "/gone")}),
            (V{ZkCode::kOk, ZkCode::kNoNode}));
  EXPECT_TRUE(zk_->Exists(root_ + "/a").ok());
  // A set that fails first: the delete after it is not reached.
  EXPECT_EQ(run({ZkMultiOp::SetData(root_ + "/gone", "x"), ZkMultiOp::Delete(root_ + "/a")}),
            (V{ZkCode::kNoNode, ZkCode::kOther}));
  EXPECT_TRUE(zk_->Exists(root_ + "/a").ok());
  // Applied: the mark is set, the node deleted, the check passed.
  EXPECT_EQ(run({ZkMultiOp::SetData(root_ + "/m", "mark"), ZkMultiOp::Delete(root_ + "/a"),
                 ZkMultiOp::Check(root_ + "/b")}),
            (V{ZkCode::kOk, ZkCode::kOk, ZkCode::kOk}));
  EXPECT_FALSE(zk_->Exists(root_ + "/a").ok());
  auto m = zk_->Exists(root_ + "/m");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->version, 1);
  // A delete of a node already gone.
  EXPECT_EQ(run({ZkMultiOp::Delete(root_ + "/a"), ZkMultiOp::Check(root_ + "/b")}),
            (V{ZkCode::kNoNode, ZkCode::kOther}));
  // A version that does not match.
  EXPECT_EQ(run({ZkMultiOp::Delete(root_ + "/c", 7)}), (V{ZkCode::kBadVersion}));
  EXPECT_TRUE(zk_->Exists(root_ + "/c").ok());

  // Issue 39 (batched creates): creates in a multi report their paths, and
  // a setData in the same multi reports the multi's zxid as its mzxid,
  // which is the czxid of every node the multi created (their fencing
  // tokens).
  auto made = run_results({ZkMultiOp::Create(root_ + "/b/x-", "1", CreateMode::kEphemeralSequential),
                           ZkMultiOp::Create(root_ + "/c/x-", "2", CreateMode::kEphemeralSequential),
                           ZkMultiOp::SetData(root_ + "/m", "clock")});
  ASSERT_EQ(made.size(), 3u);
  for (const ZkMultiResult& r : made) EXPECT_EQ(r.code, ZkCode::kOk);
  EXPECT_EQ(made[0].path, root_ + "/b/x-0000000000");
  EXPECT_EQ(made[1].path, root_ + "/c/x-0000000000");
  EXPECT_GT(made[2].stat.mzxid, 0);
  for (int i = 0; i < 2; ++i) {
    auto st = zk_->Exists(made[i].path);
    ASSERT_TRUE(st.ok()) << made[i].path;
    EXPECT_EQ(st->czxid, made[2].stat.mzxid) << made[i].path;
  }
  // One create failing (its parent is gone): none is made.
  EXPECT_EQ(run({ZkMultiOp::Create(root_ + "/b/x-", "3", CreateMode::kEphemeralSequential),
                 ZkMultiOp::Create(root_ + "/gone/x-", "4", CreateMode::kEphemeralSequential),
                 ZkMultiOp::SetData(root_ + "/m", "clock")}),
            (V{ZkCode::kOk, ZkCode::kNoNode, ZkCode::kOther}));
  auto b_children = zk_->Children(root_ + "/b");
  ASSERT_TRUE(b_children.ok());
  EXPECT_EQ(b_children->size(), 1u);
}

// SPEC §8: the create's reply can arrive after the caller gave up.
TEST_F(FaultsTest, LateCreateReplyAfterCancelLeavesNoNode) {
  FaultySession* fs = nullptr;
  auto r = StartFaultyReplica(&fs);  // on the shared server, 6 s session timeout
  auto stub = NewStub(r->address());
  fs->HoldNextCreateReply();
  {
    AcquireStream s(stub.get(), OpenMsg("late", milliseconds(20000)));
    ASSERT_TRUE(WaitFor([&] { return fs->HasHeldReply(); }, milliseconds(10000)));
    ASSERT_TRUE(ContendersBecome("late", 1));  // applied in ZooKeeper
    s.Cancel();
    ASSERT_TRUE(s.AwaitEnd());
  }
  ASSERT_TRUE(WaitFor([&] { return r->engine().stats().contenders == 1; }, milliseconds(5000)));
  fs->DeliverHeldReply();  // the reply arrives after the caller left
  EXPECT_TRUE(ContendersBecome("late", 0));
  EXPECT_TRUE(WaitFor([&] { return r->engine().stats().contenders == 0; }, milliseconds(5000)));
}

// A release that cannot reach ZooKeeper is retried; if the session expires
// meanwhile the node is gone with it, and the stream is told RELEASED.
TEST_F(FaultsTest, ReleaseStalledUntilSessionExpiryStillEndsReleased) {
  FaultySession* fs = nullptr;
  auto r = StartFaultyReplica(&fs);  // on the shared server, 6 s session timeout
  auto stub = NewStub(r->address());
  AcquireStream holder(stub.get(), OpenMsg("stall", milliseconds(20000)));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  fs->FailDeletes(true);
  uint64_t deletes = fs->call_count(ZkOp::kDelete);
  holder.SendRelease();
  // Retried with a pause, not in a tight loop.
  ASSERT_TRUE(WaitFor([&] { return fs->call_count(ZkOp::kDelete) >= deletes + 3; }, milliseconds(5000)));
  EXPECT_FALSE(holder.Next(milliseconds(0)).has_value());
  EXPECT_EQ(zk_->Contenders(LockPath("stall")).size(), 1u);
  ASSERT_TRUE(ExpireReplicaSession(connect_, *r));
  ASSERT_TRUE(holder.AwaitAfterSuspension(AcquireEvent::RELEASED));
  auto end = holder.AwaitEnd();
  ASSERT_TRUE(end);
  EXPECT_TRUE(end->ok());
  fs->FailDeletes(false);
  EXPECT_TRUE(ContendersBecome("stall", 0));
  EXPECT_TRUE(WaitFor([&] { return r->engine().stats().contenders == 0; }, milliseconds(5000)));
}

// Must-show 12: SIGTERM on a real turnstiled process.
TEST_F(FaultsTest, SigtermDrainsHoldersAndRemovesNodesAtOnce) {
  UseServer(SharedZkServer().ConnectString());
  auto proc = SpawnReplicaProcess({"--zk", connect_, "--zk-root", root_, "--drain-timeout", "2s",
                                    "--zk-session-timeout", "30s"});
  ASSERT_TRUE(proc);
  ChildProcess* child = proc->process.get();
  const std::string address = proc->address;
  auto stub = NewStub(address);
  auto other = StartReplica(TestConfig(connect_, root_));
  auto other_stub = NewStub(other->address());

  AcquireStream holder(stub.get(), OpenMsg("drain", milliseconds(60000)));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  AcquireStream local_waiter(stub.get(), OpenMsg("drain", milliseconds(60000)));
  ASSERT_TRUE(local_waiter.Next());
  AcquireStream remote_waiter(other_stub.get(), OpenMsg("drain", milliseconds(60000)));
  ASSERT_TRUE(remote_waiter.Next());
  ASSERT_TRUE(ContendersBecome("drain", 3));

  auto start = std::chrono::steady_clock::now();
  child->Signal(SIGTERM);
  EXPECT_TRUE(WaitFor([&] { return !IsServing(address); }, milliseconds(1500)));
  auto st = local_waiter.AwaitEnd(milliseconds(5000));
  ASSERT_TRUE(st);
  EXPECT_EQ(st->error_code(), grpc::StatusCode::UNAVAILABLE);
  auto lost = holder.Await(AcquireEvent::LOST, milliseconds(10000));
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->lost().reason(), v1::Lost::SHUTDOWN);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(1900));
  auto exit_code = child->Wait(milliseconds(10000));
  ASSERT_TRUE(exit_code);
  EXPECT_EQ(*exit_code, 0);
  EXPECT_LE(std::chrono::steady_clock::now() - start, milliseconds(6000));
  // Its nodes are gone at once, not after the 30 s session timeout.
  ASSERT_TRUE(remote_waiter.Await(AcquireEvent::ACQUIRED, milliseconds(10000)));
  EXPECT_LE(std::chrono::steady_clock::now() - start, milliseconds(8000));
  EXPECT_TRUE(ContendersBecome("drain", 1));
}

// The drain's log line gives --drain-timeout as it was written ("1m30s",
// not "90000ms"). Nothing is held, so the drain ends at once.
TEST_F(FaultsTest, TheDrainLineShowsTheDrainTimeoutAsFlagsWriteIt) {
  UseServer(SharedZkServer().ConnectString());
  auto proc = SpawnReplicaProcess({"--zk", connect_, "--zk-root", root_, "--drain-timeout", "1m30s"});
  ASSERT_TRUE(proc);
  proc->process->Signal(SIGTERM);
  auto line = proc->process->AwaitLine("turnstiled: signal", milliseconds(10000));
  ASSERT_TRUE(line) << "no drain line";
  EXPECT_EQ(*line, absl::StrCat("turnstiled: signal ", SIGTERM, ", draining (up to 1m30s)"));
  auto exit_code = proc->process->Wait(milliseconds(20000));
  ASSERT_TRUE(exit_code);
  EXPECT_EQ(*exit_code, 0);
}

// Issue 11: a lease renewed on time through another replica while the
// owning replica is cut off from ZooKeeper is not revoked: renewal follows
// the node's version (read again when the ttl runs out), not the delivery
// of one watch event, which reaches a disconnected owner only after it
// reconnects. Without renewals it still expires.
TEST_F(FaultsTest, LeaseRenewedElsewhereWhileTheOwnerIsDisconnectedIsNotRevoked) {
  FaultySession* fs = nullptr;
  auto r = StartFaultyReplica(&fs);  // on the shared server, 6 s session timeout
  auto other = StartReplica(TestConfig(connect_, root_));
  auto stub = NewStub(r->address());
  auto other_stub = NewStub(other->address());
  AcquireStream holder(stub.get(), OpenMsg("renewed", milliseconds(60000), "", milliseconds(1000)));
  auto acquired = holder.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acquired);
  const std::string lease = acquired->acquired().lease_id();
  auto renew = [&] {
    grpc::ClientContext ctx;
    auto rw = other_stub->KeepAlive(&ctx);
    v1::KeepAliveRequest req;
    req.add_lease_ids(lease);
    v1::KeepAliveResponse resp;
    bool ok = rw->Write(req) && rw->Read(&resp);
    rw->WritesDone();
    return rw->Finish().ok() && ok && resp.leases_size() == 1 && resp.leases(0).code() == 0;
  };

  fs->Partition();
  ASSERT_TRUE(holder.Await(AcquireEvent::SUSPENDED));
  // 2.5 ttls of renewals through the other replica, 250 ms apart.
  auto until = std::chrono::steady_clock::now() + milliseconds(2500);
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(renew());
    EXPECT_FALSE(holder.Next(milliseconds(250)));  // no LOST meanwhile
  }
  ASSERT_TRUE(renew());
  fs->Reconnect();
  auto resumed = holder.Await(AcquireEvent::RESUMED, milliseconds(5000));
  ASSERT_TRUE(resumed) << "the lease renewed on time was revoked";
  EXPECT_EQ(zk_->Contenders(LockPath("renewed")).size(), 1u);
  // Nobody renews any more: it expires within its ttl.
  auto lost = holder.Await(AcquireEvent::LOST, milliseconds(5000));
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->lost().reason(), v1::Lost::LEASE_EXPIRED);
  EXPECT_TRUE(ContendersBecome("renewed", 0));
}

// Issue 11: a replica whose ZooKeeper server is cut off from the quorum.
// The follower keeps the connection and answers reads from its own state,
// but a sync needs the leader: heartbeats go unanswered. The holder must be
// told SUSPENDED well before the session could expire (with the safe time
// left from the last heartbeat the leader confirmed), the replica stops
// serving, and the hold is LOST before the leader could have expired the
// session; a heartbeat that gets through in time resumes it.
TEST_F(FaultsTest, UnansweredHeartbeatsSuspendThenLoseBeforeTheSessionCouldExpire) {
  FaultySession* fs = nullptr;
  auto r = StartFaultyReplica(&fs);  // on the shared server, 6 s session timeout
  auto stub = NewStub(r->address());
  AcquireStream holder(stub.get(), OpenMsg("follower", milliseconds(60000)));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  const milliseconds timeout = fs->session_timeout();

  // A short cut: SUSPENDED, then RESUMED when a heartbeat gets through.
  auto cut = std::chrono::steady_clock::now();
  fs->HangSyncs(true);
  auto suspended = holder.Await(AcquireEvent::SUSPENDED, timeout);
  ASSERT_TRUE(suspended) << "no SUSPENDED while heartbeats went unanswered";
  auto took = std::chrono::steady_clock::now() - cut;
  // Early warning: a sync every tenth of the timeout, in doubt once one is
  // unanswered for a tenth (0.6-1.2 s here, 3.0-3.6 s when doubt needed 2.5
  // heartbeat intervals of silence), with the rest as slack for a loaded
  // machine.
  EXPECT_LT(took, timeout * 3 / 10);
  // The safe time counts from the last confirmed heartbeat, before the cut.
  const int64_t safe_ms = suspended->suspended().safe_for().seconds() * 1000 +
                          suspended->suspended().safe_for().nanos() / 1000000;
  EXPECT_LE(safe_ms, (timeout - std::chrono::duration_cast<milliseconds>(took)).count());
  // ... and leaves the holder time to act: about 3.1 s of 6 (timeout -
  // margin - two tenths), 1.1 s or less before.
  EXPECT_GE(safe_ms, (timeout / 3).count());
  EXPECT_TRUE(WaitFor([&] { return !IsServing(r->address()); }, milliseconds(2000)));
  const auto hung_at = fs->FirstHungSyncAt();
  ASSERT_NE(hung_at, std::chrono::steady_clock::time_point{}) << "no heartbeat was left hanging";
  const auto healed = std::chrono::steady_clock::now();
  fs->HangSyncs(false);
  auto resumed = holder.Await(AcquireEvent::RESUMED, timeout);
  ASSERT_TRUE(resumed);
  // The hung sync's answer ends the doubt, but it proves contact only as
  // of its send, before the heal: RESUMED's safe time must come from a
  // fresh sync sent at once (else a second cut right after the heal finds
  // the contact old and loses the hold early; short_outage saw it). Its
  // safe time beats the most the hung sync's contact could leave (timeout
  // - margin - its age at the heal) by most of that age.
  const int64_t resumed_ms = resumed->still_held().safe_for().seconds() * 1000 +
                             resumed->still_held().safe_for().nanos() / 1000000;
  const int64_t from_hung_at_most =
      (timeout - timeout / 4 - std::max(milliseconds(200), timeout / 50) -
       std::chrono::duration_cast<milliseconds>(healed - hung_at))
          .count();
  const int64_t hung_age_ms = std::chrono::duration_cast<milliseconds>(healed - hung_at).count();
  EXPECT_GT(resumed_ms, from_hung_at_most + hung_age_ms / 2)
      << "RESUMED carried the hung sync's contact (" << hung_age_ms << " ms old at the heal)";
  EXPECT_TRUE(WaitFor([&] { return IsServing(r->address()); }, timeout));

  // A long cut: LOST(SESSION_EXPIRED) before the leader could expire the
  // session (last contact + timeout), while the session still looks
  // connected to the replica.
  fs->HangSyncs(true);
  cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(holder.Await(AcquireEvent::SUSPENDED, timeout));
  auto lost = holder.Await(AcquireEvent::LOST, timeout);
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->lost().reason(), v1::Lost::SESSION_EXPIRED) << lost->DebugString();
  EXPECT_LT(std::chrono::steady_clock::now() - cut, timeout);
  EXPECT_TRUE(fs->connected());
  // Its node is deleted (the session is in fact alive here) and the replica
  // serves again once a heartbeat gets through.
  fs->HangSyncs(false);
  EXPECT_TRUE(ContendersBecome("follower", 0));
  EXPECT_TRUE(WaitFor([&] { return IsServing(r->address()); }, timeout));
}

// Issue 11: a replica paused (SIGSTOP, a long GC-like stall) beyond its
// session timeout. ZooKeeper expires the session meanwhile and deletes its
// nodes; the deletion events of its own nodes wait in the socket for the
// replica to resume. Its holder must be told LOST(SESSION_EXPIRED), not
// DELETED (no Release happened), and its waiter must queue again on the new
// session (SPEC §4), not end UNAVAILABLE after being granted internally
// through its own expired session's deletion event.
TEST_F(FaultsTest, PausedBeyondTheSessionTimeoutLosesHoldsAsExpiredAndRequeuesWaiters) {
  UseServer(SharedZkServer().ConnectString());
  auto proc = SpawnReplicaProcess({"--zk", connect_, "--zk-root", root_, "--zk-session-timeout", "2s"});
  ASSERT_TRUE(proc);
  ChildProcess* child = proc->process.get();
  auto stub = NewStub(proc->address);
  auto other = StartReplica(TestConfig(connect_, root_));
  auto other_stub = NewStub(other->address());

  AcquireStream holder(stub.get(), OpenMsg("paused", milliseconds(60000)));
  ASSERT_TRUE(holder.Await(AcquireEvent::ACQUIRED));
  AcquireStream waiter(stub.get(), OpenMsg("paused", milliseconds(60000)));
  ASSERT_TRUE(waiter.Await(AcquireEvent::QUEUED));
  AcquireStream remote(other_stub.get(), OpenMsg("paused", milliseconds(60000)));
  ASSERT_TRUE(remote.Await(AcquireEvent::QUEUED));
  ASSERT_TRUE(ContendersBecome("paused", 3));

  child->Signal(SIGSTOP);
  // ZooKeeper expires the paused replica's session: its two nodes go and
  // the other replica's waiter is granted.
  ASSERT_TRUE(ContendersBecome("paused", 1, milliseconds(15000)));
  ASSERT_TRUE(remote.Await(AcquireEvent::ACQUIRED, milliseconds(10000)));
  child->Signal(SIGCONT);

  auto lost = holder.AwaitAfterSuspension(AcquireEvent::LOST, milliseconds(10000));
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->lost().reason(), v1::Lost::SESSION_EXPIRED) << lost->DebugString();
  // The waiter queues again behind the new holder, and gets the lock after it.
  ASSERT_TRUE(ContendersBecome("paused", 2, milliseconds(15000)));
  EXPECT_FALSE(waiter.ended());
  remote.SendRelease();
  ASSERT_TRUE(remote.Await(AcquireEvent::RELEASED));
  auto got = waiter.Await(AcquireEvent::ACQUIRED, milliseconds(15000));
  ASSERT_TRUE(got) << (waiter.ended() ? "the waiter's stream ended" : "no ACQUIRED");
  EXPECT_GT(got->acquired().fencing_token(), 0u);
  waiter.SendRelease();
  ASSERT_TRUE(waiter.Await(AcquireEvent::RELEASED));
  EXPECT_TRUE(ContendersBecome("paused", 0));
  child->Signal(SIGTERM);
  EXPECT_TRUE(child->Wait(milliseconds(10000)));
}

}  // namespace
}  // namespace turnstile::testing
