// A replica with a pool of ZooKeeper sessions (--zk-sessions > 1), against a
// real ZooKeeper: each lock lives on one session of the pool, the failure
// rules of SPEC §4 hold per session (one session's expiry loses only the
// holds on its locks), and a replica holding more waiters than one session's
// watch budget allows keeps every one of them, with its watch, across a
// ZooKeeper restart, then drains them in order (issue 10, must-show 3 at a
// size CI can run; `deploy/local/bench.sh` runs it at 20,000).
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/recipe/lock_name.h"
#include "server/engine/session_slot.h"
#include "tests/test_support.h"
#include "tests/wait.h"
#include "tests/zk_fixture.h"

namespace turnstile::testing {
namespace {

using v1::AcquireEvent;

// `dump` on a standalone server: session id -> its ephemeral nodes.
std::map<std::string, std::set<std::string>> EphemeralsBySession(const ZkServer& zk) {
  std::map<std::string, std::set<std::string>> out;
  auto text = zk.FourLetterWord("dump");
  if (!text.ok()) return out;
  std::string current;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (absl::StartsWith(line, "0x")) {
      current = std::string(line.substr(0, line.find(':')));
    } else if (!current.empty() && absl::StartsWith(line, "\t/")) {
      out[current].insert(std::string(line.substr(1)));
    } else if (!absl::StartsWith(line, "\t")) {
      current.clear();
    }
  }
  return out;
}

// Names, in order "<prefix>0", "<prefix>1", ..., whose lock lives on
// session `index` of a pool of `pool`.
std::vector<std::string> NamesOnSession(const std::string& prefix, size_t index, size_t pool,
                                        size_t count) {
  std::vector<std::string> out;
  for (int i = 0; out.size() < count; ++i) {
    std::string name = absl::StrCat(prefix, i);
    if (SessionIndexFor(EncodeLockName(name), pool) == index) out.push_back(name);
  }
  return out;
}

TEST(SessionIndexForTest, StableAndSpread) {
  EXPECT_EQ(SessionIndexFor("anything", 1), 0u);
  EXPECT_EQ(SessionIndexFor("orders", 4), SessionIndexFor("orders", 4));
  std::vector<int> hits(4);
  for (int i = 0; i < 4000; ++i) ++hits[SessionIndexFor(absl::StrCat("lock-", i), 4)];
  for (int h : hits) {
    EXPECT_GT(h, 800);  // 1000 expected each
    EXPECT_LT(h, 1200);
  }
}

// Issue 11: SUSPENDED.safe_for and the suspend timer keep a margin before
// the earliest possible expiry: the follower-to-leader relay lag (a quarter
// of the timeout), the heartbeat's round trip and max(200 ms, 2 % of the
// timeout).
TEST(SafeForTest, KeepsAMarginBeforeTheEarliestExpiry) {
  using std::chrono::milliseconds;
  const auto t = EventLoop::Clock::now();
  EXPECT_EQ(SafeForFrom(t, milliseconds(10000), milliseconds(30), t),
            milliseconds(10000 - 2500 - 30 - 200));
  EXPECT_EQ(SafeForFrom(t, milliseconds(30000), milliseconds(0), t), milliseconds(30000 - 7500 - 600));
  EXPECT_EQ(SafeForFrom(t, milliseconds(6000), milliseconds(10), t + milliseconds(1000)),
            milliseconds(6000 - 1500 - 1000 - 10 - 200));
  EXPECT_EQ(SafeForFrom(t, milliseconds(6000), milliseconds(10), t + milliseconds(7000)),
            milliseconds(0));
}

class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = UniqueRoot("pool"); }
  std::string LockPath(const std::string& name) { return root_ + "/" + EncodeLockName(name); }
  std::string root_;
};

// --zk-sessions 0 (the default): one session per core, 2..4; below 0 is
// refused.
TEST_F(PoolTest, TheDefaultPoolIsOneSessionPerCoreFromTwoToFour) {
  const int64_t cores = static_cast<int64_t>(std::thread::hardware_concurrency());
  EXPECT_EQ(AutoZkSessions(), std::min<int64_t>(4, std::max<int64_t>(2, cores)));
  ZkServer& zk = SharedZkServer();
  ReplicaConfig cfg = TestConfig(zk.ConnectString(), root_);
  cfg.zk_sessions = 0;
  auto r = StartReplica(cfg);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(static_cast<int64_t>(r->zk_sessions()), AutoZkSessions());
  EXPECT_GE(r->zk_sessions(), 2u);
  EXPECT_LE(r->zk_sessions(), 4u);
  cfg.zk_sessions = -1;
  auto refused = Replica::Start(cfg);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

TEST_F(PoolTest, EachLockLivesOnItsSessionOfThePool) {
  ZkServer& zk = SharedZkServer();
  ReplicaConfig cfg = TestConfig(zk.ConnectString(), root_);
  cfg.zk_sessions = 3;
  auto r = StartReplica(cfg);
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->zk_sessions(), 3u);
  auto stub = NewStub(r->address());
  std::vector<std::unique_ptr<AcquireStream>> holders;
  std::vector<std::string> names;
  for (size_t i = 0; i < 3; ++i) {
    std::string name = NamesOnSession("spread-", i, 3, 1)[0];
    ASSERT_EQ(r->engine().SessionIndexOf(name), i);
    names.push_back(name);
    holders.push_back(std::make_unique<AcquireStream>(stub.get(), OpenMsg(name, milliseconds(10000))));
    ASSERT_TRUE(holders.back()->Await(AcquireEvent::ACQUIRED)) << name;
  }
  SyncZk check(zk.ConnectString());
  auto by_session = EphemeralsBySession(zk);
  for (size_t i = 0; i < 3; ++i) {
    auto nodes = check.Contenders(LockPath(names[i]));
    ASSERT_EQ(nodes.size(), 1u);
    std::string sid = SessionHex(r->zk(i).credentials().session_id);
    EXPECT_EQ(by_session[sid].count(LockPath(names[i]) + "/" + nodes[0]), 1u)
        << names[i] << " should be an ephemeral of session " << i << " (" << sid << ")";
  }
  for (auto& h : holders) {
    h->SendRelease();
    EXPECT_TRUE(h->Await(AcquireEvent::RELEASED));
  }
}

// Issue 20 (must-show 3): a burst of 2,000 opens and cancels spread over the
// pool's sessions leaves no contender, timer, watch or node behind: the
// engine's tables, the timer queue and each session's watches are back to
// what the holders alone need, and then to nothing.
TEST_F(PoolTest, ABurstOfOpensAndCancelsLeavesNothingBehind) {
  ZkServer& zk = SharedZkServer();
  ReplicaConfig cfg = TestConfig(zk.ConnectString(), root_);
  cfg.zk_sessions = 4;
  auto r = StartReplica(cfg);
  ASSERT_NE(r, nullptr);
  std::vector<std::unique_ptr<v1::LockService::Stub>> stubs;
  for (int i = 0; i < 4; ++i) stubs.push_back(NewStub(r->address()));
  constexpr int kLocks = 40, kRounds = 4, kPerRound = 500;
  std::vector<std::string> names;
  std::set<size_t> sessions_used;
  for (int i = 0; i < kLocks; ++i) {
    names.push_back(absl::StrCat("burst-", i));
    sessions_used.insert(r->engine().SessionIndexOf(names.back()));
  }
  ASSERT_EQ(sessions_used.size(), 4u) << "the locks must spread over every session";
  std::vector<std::unique_ptr<AcquireStream>> holders;
  for (const auto& n : names) {
    holders.push_back(std::make_unique<AcquireStream>(stubs[0].get(), OpenMsg(n, milliseconds(10000))));
    ASSERT_TRUE(holders.back()->Await(AcquireEvent::ACQUIRED)) << n;
  }
  auto watches = [&] {
    size_t n = 0;
    auto all = zk.WatchesBySession();
    EXPECT_TRUE(all.ok()) << all.status();
    if (!all.ok()) return n;
    for (size_t i = 0; i < r->zk_sessions(); ++i) {
      auto it = all->find(SessionHex(r->zk(i).credentials().session_id));
      if (it != all->end()) n += it->second.size();
    }
    return n;
  };
  // The holders' own-node watches are set once their holds have lasted.
  ASSERT_TRUE(WaitFor([&] { return watches() == static_cast<size_t>(kLocks); }, milliseconds(10000)))
      << watches();
  const size_t timers = r->pending_timers();
  SyncZk check(zk.ConnectString());
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::unique_ptr<AcquireStream>> waiters;
    for (int i = 0; i < kPerRound; ++i) {
      waiters.push_back(std::make_unique<AcquireStream>(
          stubs[i % stubs.size()].get(), OpenMsg(names[i % kLocks], milliseconds(60000))));
    }
    for (auto& w : waiters) ASSERT_TRUE(w->Await(AcquireEvent::QUEUED)) << "round " << round;
    EXPECT_EQ(r->engine().stats().contenders, static_cast<size_t>(kLocks + kPerRound));
    waiters.clear();  // each cancels its stream
    ASSERT_TRUE(WaitFor([&] {
      return r->engine().stats().contenders == static_cast<size_t>(kLocks) &&
             r->pending_timers() == timers && watches() == static_cast<size_t>(kLocks);
    }, milliseconds(20000)))
        << "round " << round << ": contenders " << r->engine().stats().contenders << ", timers "
        << r->pending_timers() << " (" << timers << " before), watches " << watches();
  }
  for (const auto& n : names) EXPECT_EQ(check.Contenders(LockPath(n)).size(), 1u) << n;
  for (auto& h : holders) {
    h->SendRelease();
    ASSERT_TRUE(h->Await(AcquireEvent::RELEASED));
  }
  EXPECT_TRUE(WaitFor([&] {
    return r->engine().stats().contenders == 0 && watches() == 0;
  }, milliseconds(10000)));
  for (const auto& n : names) EXPECT_TRUE(check.Contenders(LockPath(n)).empty()) << n;
}

// SPEC §4 per session: the expiry of one session of the pool loses the
// holds on its locks (and re-queues its waiters); holders and waiters on the
// other sessions hear nothing and keep working.
TEST_F(PoolTest, ExpiryOfOneSessionLosesOnlyTheHoldsOnIt) {
  ZkServer& zk = SharedZkServer();
  ReplicaConfig cfg = TestConfig(zk.ConnectString(), root_);
  cfg.zk_sessions = 2;
  auto r = StartReplica(cfg);
  ASSERT_NE(r, nullptr);
  auto other = StartReplica(TestConfig(zk.ConnectString(), root_));
  ASSERT_NE(other, nullptr);
  auto stub = NewStub(r->address());
  auto other_stub = NewStub(other->address());
  const std::string a = NamesOnSession("expire-", 0, 2, 1)[0];  // on session 0
  const std::string b = NamesOnSession("expire-", 1, 2, 1)[0];  // on session 1

  AcquireStream hold_a(stub.get(), OpenMsg(a, milliseconds(60000), "hold-a"));
  auto acq_a = hold_a.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq_a);
  AcquireStream wait_a(other_stub.get(), OpenMsg(a, milliseconds(60000), "wait-a"));
  ASSERT_TRUE(wait_a.Next());  // QUEUED
  AcquireStream hold_b(stub.get(), OpenMsg(b, milliseconds(60000), "hold-b"));
  auto acq_b = hold_b.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acq_b);
  AcquireStream wait_b(stub.get(), OpenMsg(b, milliseconds(60000), "wait-b"));
  ASSERT_TRUE(wait_b.Next());  // QUEUED
  const int64_t session1 = r->zk(1).credentials().session_id;

  ASSERT_TRUE(ExpireReplicaSession(zk.ConnectString(), *r, 0));

  // a's holder is told, and a's waiter (other replica) gets a's lock with a
  // larger fencing token.
  auto lost = hold_a.AwaitAfterSuspension(AcquireEvent::LOST);
  ASSERT_TRUE(lost);
  EXPECT_TRUE(lost->lost().reason() == v1::Lost::SESSION_EXPIRED ||
              lost->lost().reason() == v1::Lost::DELETED)
      << lost->ShortDebugString();
  auto next_a = wait_a.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(next_a);
  EXPECT_GT(next_a->acquired().fencing_token(), acq_a->acquired().fencing_token());
  ASSERT_TRUE(WaitFor([&] { return r->engine().serving(); }, milliseconds(20000)));

  // Session 1 was never touched: same session, b's holder heard nothing, its
  // node is still there, and b hands over normally.
  EXPECT_EQ(r->zk(1).credentials().session_id, session1);
  EXPECT_FALSE(hold_b.Next(milliseconds(200)));  // no SUSPENDED, no LOST
  SyncZk check(zk.ConnectString());
  ASSERT_EQ(check.Contenders(LockPath(b)).size(), 2u);
  hold_b.SendRelease();
  ASSERT_TRUE(hold_b.Await(AcquireEvent::RELEASED));
  auto next_b = wait_b.Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(next_b);
  EXPECT_GT(next_b->acquired().fencing_token(), acq_b->acquired().fencing_token());
  wait_a.SendRelease();
  wait_b.SendRelease();
  EXPECT_TRUE(wait_a.Await(AcquireEvent::RELEASED));
  EXPECT_TRUE(wait_b.Await(AcquireEvent::RELEASED));
}

// Records one engine contender's events; releases as soon as it is granted
// once `release_on_grant` is set.
class RecordingSink final : public ContenderSink {
 public:
  RecordingSink(LockEngine* engine, const std::string& lock) : engine_(engine), lock_(lock) {}
  void set_id(uint64_t id) {
    std::lock_guard<std::mutex> l(mu_);
    id_ = id;
  }
  void OnEvent(const LockEvent& e) override {
    uint64_t release = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      events_.push_back(e.type);
      if (e.type == LockEvent::Type::kAcquired) {
        token_ = e.fencing_token;
        ++grants_;
        if (release_on_grant_) release = id_;
      }
    }
    if (release != 0) engine_->Release(release);
  }
  void OnFinish(const absl::Status& s) override {
    std::lock_guard<std::mutex> l(mu_);
    finish_ = s;
  }
  void ReleaseOnGrant() {
    uint64_t release = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      release_on_grant_ = true;
      if (grants_ > 0) release = id_;
    }
    if (release != 0) engine_->Release(release);
  }
  std::vector<LockEvent::Type> events() const {
    std::lock_guard<std::mutex> l(mu_);
    return events_;
  }
  bool Has(LockEvent::Type t) const {
    std::lock_guard<std::mutex> l(mu_);
    return std::count(events_.begin(), events_.end(), t) > 0;
  }
  bool finished() const {
    std::lock_guard<std::mutex> l(mu_);
    return finish_.has_value();
  }
  std::optional<absl::Status> finish() const {
    std::lock_guard<std::mutex> l(mu_);
    return finish_;
  }
  uint64_t token() const {
    std::lock_guard<std::mutex> l(mu_);
    return token_;
  }
  int grants() const {
    std::lock_guard<std::mutex> l(mu_);
    return grants_;
  }
  const std::string& lock() const { return lock_; }

 private:
  LockEngine* const engine_;
  const std::string lock_;
  mutable std::mutex mu_;
  uint64_t id_ = 0;
  bool release_on_grant_ = false;
  std::vector<LockEvent::Type> events_;
  std::optional<absl::Status> finish_;
  uint64_t token_ = 0;
  int grants_ = 0;
};

int64_t WatchCount(const ZkServer& zk) {
  auto m = zk.Mntr();
  if (!m.ok()) return -1;
  int64_t n = -1;
  if (!absl::SimpleAtoi((*m)["zk_watch_count"], &n)) return -1;
  return n;
}

// Must-show 3 of issue 10 at CI size: more waiters than one session's watch
// budget admits, spread over a pool of 4 sessions, survive a ZooKeeper
// restart within the session timeout: none is told anything, holders see
// SUSPENDED then RESUMED, every watch is re-established (one per waiter,
// counted by ZooKeeper), and then every queue drains in order, each waiter
// granted exactly once, with no node left behind.
TEST_F(PoolTest, WaitersBeyondOneSessionsBudgetSurviveAZooKeeperRestart) {
  auto server = ZkServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ZkServer& zk = **server;
  constexpr size_t kPool = 4;
  constexpr size_t kBigWaiters = 1000;   // one lock, on session 0
  constexpr size_t kSmallLocks = 12;     // 4 on each of sessions 1..3
  constexpr size_t kSmallWaiters = 250;  // per small lock
  const size_t total_waiters = kBigWaiters + kSmallLocks * kSmallWaiters;

  std::vector<std::string> locks{NamesOnSession("big-", 0, kPool, 1)[0]};
  for (size_t s = 1; s < kPool; ++s) {
    for (const auto& n : NamesOnSession("small-", s, kPool, kSmallLocks / (kPool - 1))) {
      locks.push_back(n);
    }
  }
  size_t longest_segment = 0;
  for (const auto& n : locks) longest_segment = std::max(longest_segment, EncodeLockName(n).size());

  ReplicaConfig cfg = TestConfig(zk.ConnectString(), root_);
  cfg.zk_sessions = kPool;
  cfg.zk_session_timeout = milliseconds(30000);
  cfg.max_contenders_per_lock = 2000;
  cfg.max_streams = 10;  // engine-level contenders: no streams needed
  // ~1,100 contenders per session: the 4,000 waiters need the whole pool.
  const size_t per_contender = root_.size() + longest_segment + 40;
  cfg.max_watch_bytes = static_cast<int64_t>(1100 * per_contender);
  ASSERT_GT(total_waiters, 1100u);
  auto r = StartReplica(cfg);
  ASSERT_NE(r, nullptr);
  LockEngine& engine = r->engine();

  std::vector<std::shared_ptr<RecordingSink>> holders, waiters;
  auto open = [&](const std::string& lock, std::vector<std::shared_ptr<RecordingSink>>* into) {
    auto sink = std::make_shared<RecordingSink>(&engine, lock);
    AcquireParams p;
    p.name = lock;
    p.owner = "pool-test";
    p.wait_timeout = milliseconds(600000);
    auto id = engine.Open(p, sink);
    if (!id.ok()) {
      ADD_FAILURE() << lock << ": " << id.status();
      return false;
    }
    sink->set_id(*id);
    into->push_back(sink);
    return true;
  };
  for (const auto& lock : locks) ASSERT_TRUE(open(lock, &holders));
  ASSERT_TRUE(WaitFor([&] {
    return std::all_of(holders.begin(), holders.end(),
                       [](const auto& s) { return s->Has(LockEvent::Type::kAcquired); });
  }, milliseconds(30000)));
  for (size_t i = 0; i < kBigWaiters; ++i) ASSERT_TRUE(open(locks[0], &waiters));
  for (size_t l = 1; l < locks.size(); ++l) {
    for (size_t i = 0; i < kSmallWaiters; ++i) ASSERT_TRUE(open(locks[l], &waiters));
  }
  // One session alone could not have taken them: its budget is nearly
  // full, and fills with a few more contenders. The refusal comes through
  // the sink (the shard decides on its loop). Each probe holds a lock of
  // its own on session 0, so that it leaves no watch behind when abandoned
  // (a holder watches only its own node, which goes with it).
  {
    const std::vector<std::string> probe_locks = NamesOnSession("probe-", 0, kPool, 200);
    // Kept until the probe ends: each one abandoned at once would free its
    // budget, which then might never fill.
    std::vector<uint64_t> probes;
    bool refused = false;
    for (size_t i = 0; i < probe_locks.size() && !refused; ++i) {
      AcquireParams p;
      p.name = probe_locks[i];
      p.wait_timeout = milliseconds(600000);
      auto extra = std::make_shared<RecordingSink>(&engine, p.name);
      auto id = engine.Open(p, extra);
      ASSERT_TRUE(id.ok()) << id.status();
      probes.push_back(*id);
      ASSERT_TRUE(WaitFor([&] { return extra->Has(LockEvent::Type::kAcquired) || extra->finished(); },
                          milliseconds(30000)));
      if (extra->finished()) {
        EXPECT_EQ(extra->finish()->code(), absl::StatusCode::kResourceExhausted)
            << *extra->finish();
        refused = true;
      }
    }
    EXPECT_TRUE(refused) << "session 0 kept accepting contenders beyond its budget";
    for (uint64_t id : probes) engine.Abandon(id);
  }
  auto all_queued = [&] {
    return std::all_of(waiters.begin(), waiters.end(),
                       [](const auto& s) { return s->Has(LockEvent::Type::kQueued); });
  };
  ASSERT_TRUE(WaitFor(all_queued, milliseconds(120000)));
  // One watch per waiter: each watches its predecessor, and the first one's
  // watch on the holder's node is shared with the holder's own watch (same
  // session, same path: one watch on the server).
  ASSERT_TRUE(WaitFor([&] { return WatchCount(zk) == static_cast<int64_t>(total_waiters); },
                      milliseconds(30000)))
      << "zk_watch_count " << WatchCount(zk) << ", expected " << total_waiters;
  std::vector<int64_t> sessions_before;
  for (size_t i = 0; i < kPool; ++i) sessions_before.push_back(r->zk(i).credentials().session_id);

  ASSERT_TRUE(zk.Restart().ok());

  // Every session comes back (the same sessions: nothing expired) ...
  ASSERT_TRUE(WaitFor([&] { return engine.serving(); }, milliseconds(30000)));
  for (size_t i = 0; i < kPool; ++i) {
    EXPECT_EQ(r->zk(i).credentials().session_id, sessions_before[i]) << "session " << i;
  }
  // ... holders were suspended and resumed, not lost ...
  ASSERT_TRUE(WaitFor([&] {
    return std::all_of(holders.begin(), holders.end(),
                       [](const auto& s) { return s->Has(LockEvent::Type::kResumed); });
  }, milliseconds(30000)));
  // ... and every watch is back, one per waiter.
  ASSERT_TRUE(WaitFor([&] { return WatchCount(zk) == static_cast<int64_t>(total_waiters); },
                      milliseconds(30000)))
      << "zk_watch_count " << WatchCount(zk) << " after the restart, expected " << total_waiters;
  for (const auto& s : holders) {
    EXPECT_FALSE(s->Has(LockEvent::Type::kLost)) << s->lock();
  }
  for (const auto& s : waiters) {
    for (auto t : s->events()) {
      ASSERT_EQ(t, LockEvent::Type::kQueued) << s->lock() << ": a waiter was told something "
                                                "other than QUEUED across the restart";
    }
  }
  EXPECT_EQ(engine.stats().requeued_after_expiry, 0u);

  // Drain: every contender releases as soon as it is granted.
  for (auto& s : waiters) s->ReleaseOnGrant();
  for (auto& s : holders) s->ReleaseOnGrant();
  ASSERT_TRUE(WaitFor([&] {
    return std::all_of(waiters.begin(), waiters.end(), [](const auto& s) { return s->finished(); });
  }, milliseconds(180000)));
  // In order: per lock, waiters opened in order were granted in that order
  // (fencing tokens increase with queue order), each exactly once.
  std::map<std::string, uint64_t> last_token;
  for (const auto& h : holders) last_token[h->lock()] = h->token();
  for (const auto& s : waiters) {
    ASSERT_EQ(s->grants(), 1) << s->lock();
    EXPECT_GT(s->token(), last_token[s->lock()]) << s->lock() << ": granted out of order";
    last_token[s->lock()] = s->token();
    auto f = s->finish();
    ASSERT_TRUE(f.has_value());
    EXPECT_TRUE(f->ok()) << *f;
    EXPECT_TRUE(s->Has(LockEvent::Type::kReleased));
  }
  SyncZk check(zk.ConnectString());
  for (const auto& lock : locks) {
    EXPECT_TRUE(WaitFor([&] { return check.Contenders(LockPath(lock)).empty(); },
                        milliseconds(10000)))
        << lock << " has nodes left after the drain";
  }
}

}  // namespace
}  // namespace turnstile::testing
