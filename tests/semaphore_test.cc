// N-holder semaphores (issue 21) through gRPC against a real ZooKeeper, on
// two replicas: the first N contenders hold; the first waiter watches every
// holder, so a release out of queue order frees a permit at once; a new
// holder's grant mark wakes the waiter behind it; a departure costs at most
// two watch notifications and no children watch; a disagreeing N (or an
// exclusive contender on a semaphore's name) is refused without disturbing
// anyone; faults free permits to the first waiter. The rule alone (every
// order of events) is tested in semaphore_model_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include <csignal>

#include "tests/two_replicas.h"

namespace turnstile::testing {
namespace {

using v1::AcquireEvent;
using Clock = std::chrono::steady_clock;

// ZooKeeper's count of watch notifications sent (node deleted + changed).
int64_t Notifications() {
  return MntrValue("zk_sum_node_deleted_watch_count") +
         MntrValue("zk_sum_node_changed_watch_count");
}

v1::AcquireOpen SemOpen(const std::string& name, int n, const std::string& owner,
                        milliseconds wait = milliseconds(60000)) {
  v1::AcquireOpen o = OpenMsg(name, wait, owner);
  o.set_kind(v1::LOCK_KIND_SEMAPHORE);
  o.set_max_holders(n);
  return o;
}

class SemaphoreTest : public TwoReplicaTest {
 protected:
  SemaphoreTest() : TwoReplicaTest("sem") {}
  // Joins and waits for the first event (its node exists: the queue order
  // is the order of these calls). `held`: whether that event is ACQUIRED.
  std::unique_ptr<AcquireStream> Join(v1::LockService::Stub* stub, const v1::AcquireOpen& open,
                                      bool* held = nullptr) {
    auto s = std::make_unique<AcquireStream>(stub, open);
    auto ev = s->Next();
    EXPECT_TRUE(ev) << open.owner() << " got no first event";
    if (held != nullptr) *held = ev && ev->type() == AcquireEvent::ACQUIRED;
    if (ev && ev->type() == AcquireEvent::ACQUIRED) tokens_[open.owner()] = ev->acquired().fencing_token();
    return s;
  }
  uint64_t OwnWatchFires() {
    return r1_->engine().stats().own_watch_fired_on_release +
           r2_->engine().stats().own_watch_fired_on_release;
  }

  std::map<std::string, uint64_t> tokens_;
};

// N = 3, [A B C | D E] over two replicas. B (a holder in the middle) leaves:
// D, the first waiter, watches every holder, so it holds at once (the
// "watch the node N places ahead" rule would leave the permit free until A
// left). D's grant mark wakes E, which becomes the first waiter; A leaves
// and E holds. Each departure costs ZooKeeper at most two notifications.
TEST_F(SemaphoreTest, AnOutOfOrderReleaseWakesTheFirstWaiterWhichHolds) {
  bool held = false;
  auto a = Join(s1_.get(), SemOpen("sem", 3, "A"), &held);
  ASSERT_TRUE(held);
  auto b = Join(s2_.get(), SemOpen("sem", 3, "B"), &held);
  ASSERT_TRUE(held);
  auto c = Join(s1_.get(), SemOpen("sem", 3, "C"), &held);
  ASSERT_TRUE(held);
  auto d = Join(s2_.get(), SemOpen("sem", 3, "D"), &held);
  ASSERT_FALSE(held);
  auto e = Join(s1_.get(), SemOpen("sem", 3, "E"), &held);
  ASSERT_FALSE(held);
  ASSERT_TRUE(ContendersBecome("sem", 5));

  // Describe, from either replica: N, three holders with grant times (the
  // grant mark), two waiters.
  for (auto* stub : {s1_.get(), s2_.get()}) {
    v1::DescribeResponse resp;
    ASSERT_TRUE(WaitFor([&] {
      resp.Clear();
      if (!Describe(stub, "sem", &resp).ok() || resp.holders_size() != 3) return false;
      for (const auto& h : resp.holders()) {
        if (!h.has_granted()) return false;  // marks still being written
      }
      return true;
    }, milliseconds(10000))) << resp.ShortDebugString();
    EXPECT_EQ(resp.max_holders(), 3);
    ASSERT_EQ(resp.waiters_size(), 2);
    EXPECT_EQ(resp.holders(0).owner(), "A");
    EXPECT_EQ(resp.holders(1).owner(), "B");
    EXPECT_EQ(resp.holders(2).owner(), "C");
    EXPECT_EQ(resp.waiters(0).owner(), "D");
    EXPECT_EQ(resp.waiters(1).owner(), "E");
    for (const auto& h : resp.holders()) {
      EXPECT_EQ(h.kind(), v1::LOCK_KIND_SEMAPHORE);
      EXPECT_EQ(h.max_holders(), 3);
    }
    EXPECT_FALSE(resp.waiters(0).has_granted());
  }

  const int64_t before = Notifications();
  const uint64_t own_before = OwnWatchFires();
  b->SendRelease();
  ASSERT_TRUE(b->Await(AcquireEvent::RELEASED));
  auto dg = d->Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(dg) << "the first waiter was not woken by a holder's out-of-order release";
  EXPECT_GT(dg->acquired().fencing_token(), tokens_["C"]);
  // D's mark reaches E, which lists once more and watches A, C and D:
  // visible as E's QUEUED position 1 (next in line), and no grant.
  bool next_in_line = false;
  while (auto ev = e->Next(milliseconds(10000))) {
    ASSERT_EQ(ev->type(), AcquireEvent::QUEUED) << ev->ShortDebugString();
    if (ev->queued().position() == 1) {
      next_in_line = true;
      break;
    }
  }
  ASSERT_TRUE(next_in_line) << "E did not become the first waiter";
  EXPECT_TRUE(StillWaiting(*e));
  // ZooKeeper sent at most two notifications that woke contenders (D by
  // B's delete, E by D's mark); besides those, B's own-node watch may
  // have fired on its own delete (it wakes only B's replica).
  const int64_t sent = Notifications() - before;
  const int64_t own = static_cast<int64_t>(OwnWatchFires() - own_before);
  EXPECT_LE(sent, 2 + own) << "one departure woke more than two contenders";
  EXPECT_GE(sent, 2);

  // A (the front holder) leaves: E, the first waiter now, holds.
  a->SendRelease();
  ASSERT_TRUE(a->Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(e->Await(AcquireEvent::ACQUIRED));
  // Three hold: C, D, E; nobody waits.
  v1::DescribeResponse resp;
  ASSERT_TRUE(Describe(s2_.get(), "sem", &resp).ok());
  EXPECT_EQ(resp.holders_size(), 3);
  EXPECT_EQ(resp.waiters_size(), 0);
  for (auto* s : {c.get(), d.get(), e.get()}) {
    s->SendRelease();
    EXPECT_TRUE(s->Await(AcquireEvent::RELEASED));
  }
  EXPECT_TRUE(ContendersBecome("sem", 0));
}

// Must-show 2: N = 3, 24 contenders over 2 replicas, 300 grants with random
// hold times (releases come out of order). Checked from the clients' log
// of hold intervals (ACQUIRED received .. release sent, inside the real
// hold): never more than 3 at once; no grant out of turn (when one is
// received, fewer than 3 contenders with smaller tokens are still there);
// tokens distinct. ZooKeeper's counters: at most 2 notifications per
// departure, no children watch.
TEST_F(SemaphoreTest, ThreePermitsTwentyFourContendersThreeHundredGrants) {
  constexpr int kN = 3, kContenders = 24, kGrants = 300;
  struct Hold {
    int contender;
    uint64_t token;
    Clock::time_point opened, acquired, release_sent;
  };
  std::mutex mu;
  std::vector<Hold> holds;
  std::atomic<int> grants{0};
  std::atomic<int> failures{0};
  std::string first_failure;
  const int64_t notifications_before = Notifications();
  const uint64_t own_before = OwnWatchFires();
  const int64_t child_watches_before = MntrValue("zk_sum_node_children_watch_count");
  const uint64_t listings_before = r1_->zk().call_count(ZkOp::kGetChildren) +
                                   r2_->zk().call_count(ZkOp::kGetChildren);
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  std::vector<std::thread> threads;
  for (int i = 0; i < kContenders; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937 rng(1000 + i);
      v1::LockService::Stub* stub = i % 2 == 0 ? s1_.get() : s2_.get();
      while (grants.load() < kGrants && Clock::now() < deadline && failures.load() == 0) {
        Hold h{i, 0, Clock::now(), {}, {}};
        AcquireStream s(stub, SemOpen("many", kN, "c" + std::to_string(i)));
        auto ev = s.Await(AcquireEvent::ACQUIRED, milliseconds(60000));
        if (!ev) {
          std::lock_guard<std::mutex> l(mu);
          if (failures++ == 0) first_failure = "contender " + std::to_string(i) + " not granted";
          return;
        }
        h.acquired = Clock::now();
        h.token = ev->acquired().fencing_token();
        ++grants;
        // The hold: 0..15 ms of "work" (a duration, not a wait for an event).
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 15000));
        h.release_sent = Clock::now();
        s.SendRelease();
        if (!s.Await(AcquireEvent::RELEASED)) {
          std::lock_guard<std::mutex> l(mu);
          if (failures++ == 0) first_failure = "contender " + std::to_string(i) + " not released";
          return;
        }
        std::lock_guard<std::mutex> l(mu);
        holds.push_back(h);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0) << first_failure;
  ASSERT_GE(static_cast<int>(holds.size()), kGrants);
  ASSERT_TRUE(ContendersBecome("many", 0));

  // Never more than N holders at once.
  std::vector<std::pair<Clock::time_point, int>> edges;
  for (const Hold& h : holds) {
    edges.emplace_back(h.acquired, +1);
    edges.emplace_back(h.release_sent, -1);
  }
  std::sort(edges.begin(), edges.end());  // at a tie the release (-1) sorts first
  int now = 0, most = 0;
  for (const auto& [t, delta] : edges) most = std::max(most, now += delta);
  EXPECT_LE(most, kN);
  EXPECT_EQ(most, kN) << "24 contenders on 3 permits should have kept all 3 busy at times";

  // Tokens distinct; no grant out of turn.
  std::set<uint64_t> tokens;
  for (const Hold& h : holds) tokens.insert(h.token);
  EXPECT_EQ(tokens.size(), holds.size());
  int out_of_turn = 0;
  for (const Hold& b : holds) {
    int ahead = 0;
    for (const Hold& a : holds) {
      if (a.token < b.token && a.release_sent > b.acquired) ++ahead;
    }
    if (ahead >= kN) ++out_of_turn;
  }
  EXPECT_EQ(out_of_turn, 0) << "grants received while " << kN
                            << " contenders queued earlier were still there";

  // Departure -> next grant: the latest release before each grant that
  // came while all permits were busy.
  std::vector<double> handoff_ms;
  for (const Hold& b : holds) {
    Clock::time_point latest{};
    bool busy = false;
    for (const Hold& a : holds) {
      if (a.release_sent <= b.acquired && a.release_sent > latest && b.opened < a.release_sent) {
        latest = a.release_sent;
        busy = true;
      }
    }
    if (busy) {
      handoff_ms.push_back(std::chrono::duration<double, std::milli>(b.acquired - latest).count());
    }
  }
  std::sort(handoff_ms.begin(), handoff_ms.end());
  ASSERT_FALSE(handoff_ms.empty());
  std::printf("%zu grants; departure -> next grant p50 %.2f ms, p99 %.2f ms (%zu handoffs)\n",
              holds.size(), handoff_ms[handoff_ms.size() / 2],
              handoff_ms[handoff_ms.size() * 99 / 100], handoff_ms.size());

  // ZooKeeper's own counters: notifications per departure, without the
  // holders' own-node watches that their own deletes fire (they wake only
  // their own replica); and no children watch fired (with hundreds of
  // creates and deletes under the lock, any children watch would have).
  const int64_t notifications =
      Notifications() - notifications_before - static_cast<int64_t>(OwnWatchFires() - own_before);
  std::printf("watch notifications: %lld for %zu departures (%.2f each)\n",
              static_cast<long long>(notifications), holds.size(),
              static_cast<double>(notifications) / holds.size());
  EXPECT_LE(notifications, 2 * static_cast<int64_t>(holds.size()));
  EXPECT_LE(notifications + static_cast<int64_t>(OwnWatchFires() - own_before),
            3 * static_cast<int64_t>(holds.size()));
  EXPECT_EQ(MntrValue("zk_sum_node_children_watch_count"), child_watches_before);
  // Listings: at most two per contender (when it joins, when it becomes the
  // first waiter); the replicas coalesce concurrent ones per lock.
  const uint64_t listings = r1_->zk().call_count(ZkOp::kGetChildren) +
                            r2_->zk().call_count(ZkOp::kGetChildren) - listings_before;
  std::printf("listings: %llu for %zu contenders\n", static_cast<unsigned long long>(listings),
              holds.size());
  EXPECT_LE(listings, 2 * holds.size());
  // Nothing left behind: no contender, and no watch of either replica's
  // session (the first waiters' watches on every holder were removed).
  auto watches = [&] {
    size_t n = 0;
    auto all = SharedZkServer().WatchesBySession();
    EXPECT_TRUE(all.ok()) << all.status();
    if (!all.ok()) return n;
    for (Replica* r : {r1_.get(), r2_.get()}) {
      auto it = all->find(SessionHex(r->zk().credentials().session_id));
      if (it != all->end()) n += it->second.size();
    }
    return n;
  };
  EXPECT_TRUE(WaitFor([&] {
    return r1_->engine().stats().contenders == 0 && r2_->engine().stats().contenders == 0 &&
           watches() == 0;
  }, milliseconds(10000))) << "watches left: " << watches();
}

// Must-show 3: a contender asking another N, and an exclusive one on the
// semaphore's name, are refused (FAILED_PRECONDITION naming both) without
// disturbing anyone: the holders keep their tokens, no event reaches their
// streams, no node is left. And a semaphore contender on a mutex's name.
TEST_F(SemaphoreTest, ADisagreeingContenderIsRefusedAndDisturbsNobody) {
  bool held = false;
  auto a = Join(s1_.get(), SemOpen("agree", 2, "A"), &held);
  ASSERT_TRUE(held);
  auto b = Join(s2_.get(), SemOpen("agree", 2, "B"), &held);
  ASSERT_TRUE(held);
  auto w = Join(s1_.get(), SemOpen("agree", 2, "W"), &held);
  ASSERT_FALSE(held);
  ASSERT_TRUE(ContendersBecome("agree", 3));
  const std::vector<std::string> nodes = zk_->Contenders(LockPath("agree"));

  struct Case {
    v1::AcquireOpen open;
    std::string says;
  };
  v1::AcquireOpen exclusive = OpenMsg("agree", milliseconds(60000), "X");
  for (const Case& c : {Case{SemOpen("agree", 3, "N3"), "a semaphore of max_holders 3"},
                        Case{exclusive, "an exclusive lock"}}) {
    for (auto* stub : {s1_.get(), s2_.get()}) {
      AcquireStream s(stub, c.open);
      auto end = s.AwaitEnd();
      ASSERT_TRUE(end);
      EXPECT_EQ(end->error_code(), grpc::StatusCode::FAILED_PRECONDITION) << end->error_message();
      EXPECT_NE(end->error_message().find("a semaphore of max_holders 2"), std::string::npos)
          << end->error_message();
      EXPECT_NE(end->error_message().find(c.says), std::string::npos) << end->error_message();
    }
  }
  EXPECT_TRUE(ContendersBecome("agree", 3));
  EXPECT_EQ(zk_->Contenders(LockPath("agree")), nodes);
  EXPECT_TRUE(StillWaiting(*w));
  for (auto* s : {a.get(), b.get()}) {
    auto ev = s->Next(milliseconds(0));
    EXPECT_FALSE(ev) << ev->ShortDebugString();
  }
  // The semaphore still works: A leaves, W holds.
  a->SendRelease();
  ASSERT_TRUE(a->Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(w->Await(AcquireEvent::ACQUIRED));

  // A semaphore contender on a mutex's name.
  auto m = Join(s2_.get(), OpenMsg("mutex", milliseconds(60000), "M"), &held);
  ASSERT_TRUE(held);
  AcquireStream s(s1_.get(), SemOpen("mutex", 2, "S"));
  auto end = s.AwaitEnd();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(end->error_message().find("is an exclusive lock"), std::string::npos)
      << end->error_message();
  EXPECT_TRUE(ContendersBecome("mutex", 1));
  EXPECT_FALSE(m->Next(milliseconds(0)));
}

// Bad input: INVALID_ARGUMENT naming the field, nothing created.
TEST_F(SemaphoreTest, OutOfRangeNAndUnsupportedOptionsAreInvalid) {
  struct Case {
    v1::AcquireOpen open;
    std::string says;
  };
  v1::AcquireOpen zero = SemOpen("bad", 0, "o");
  v1::AcquireOpen big = SemOpen("bad", 1001, "o");
  v1::AcquireOpen shared = SemOpen("bad", 2, "o");
  shared.set_kind(v1::LOCK_KIND_SHARED);
  v1::AcquireOpen delay = SemOpen("bad", 2, "o");
  delay.mutable_lock_delay()->set_seconds(1);
  v1::AcquireOpen revoke = SemOpen("bad", 2, "o");
  revoke.set_revoke_holders(true);
  for (const Case& c : {Case{zero, "max_holders is 0"}, Case{big, "max_holders is 1001"},
                        Case{shared, "only for semaphores"}, Case{delay, "lock_delay"},
                        Case{revoke, "revoke_holders"}}) {
    AcquireStream s(s1_.get(), c.open);
    auto end = s.AwaitEnd();
    ASSERT_TRUE(end);
    EXPECT_EQ(end->error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.says;
    EXPECT_NE(end->error_message().find(c.says), std::string::npos) << end->error_message();
  }
  // kind UNSPECIFIED with max_holders > 0 is a semaphore.
  v1::AcquireOpen unspecified = OpenMsg("implied", milliseconds(60000), "o");
  unspecified.set_max_holders(2);
  bool held = false;
  auto one = Join(s1_.get(), unspecified, &held);
  ASSERT_TRUE(held);
  auto two = Join(s2_.get(), unspecified, &held);
  EXPECT_TRUE(held) << "two holders of a semaphore of 2";
  EXPECT_TRUE(ContendersBecome("bad", 0));
}

// Must-show 4 (part): the replica of a holder stops without releasing (its
// session closes: its nodes go); its permit goes to the first waiter, on
// the other replica. Nothing is left behind.
TEST_F(SemaphoreTest, AHolderReplicaGoneFreesItsPermitToTheFirstWaiter) {
  auto r3 = StartReplica(TestConfig(connect_, root_));
  ASSERT_TRUE(r3);
  auto s3 = NewStub(r3->address());
  bool held = false;
  auto a = Join(s1_.get(), SemOpen("fault", 2, "A"), &held);
  ASSERT_TRUE(held);
  auto b = Join(s3.get(), SemOpen("fault", 2, "B"), &held);
  ASSERT_TRUE(held);
  auto c = Join(s2_.get(), SemOpen("fault", 2, "C"), &held);
  ASSERT_FALSE(held);
  auto d = Join(s2_.get(), SemOpen("fault", 2, "D"), &held);
  ASSERT_FALSE(held);
  ASSERT_TRUE(ContendersBecome("fault", 4));
  r3.reset();  // B's replica gone (its session closed: B's node deleted)
  ASSERT_TRUE(c->Await(AcquireEvent::ACQUIRED)) << "the first waiter did not get the permit";
  EXPECT_TRUE(StillWaiting(*d));
  ASSERT_TRUE(ContendersBecome("fault", 3));
  // The first waiter's replica's waiter leaves: D becomes first waiter and
  // holds when A leaves.
  a->SendRelease();
  ASSERT_TRUE(a->Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(d->Await(AcquireEvent::ACQUIRED));
  for (auto* s : {c.get(), d.get()}) {
    s->SendRelease();
    EXPECT_TRUE(s->Await(AcquireEvent::RELEASED));
  }
  EXPECT_TRUE(ContendersBecome("fault", 0));
}

// Must-show 4: replicas killed (kill -9: their nodes go only when ZooKeeper
// expires their sessions, 2 s here). A holder's replica killed: its permit
// goes to the first waiter. The first waiter's replica killed: the waiter
// behind it takes the role (its predecessor is gone; it lists once more
// and watches the holders) and holds when a holder leaves. Nothing is left
// behind and never more than N hold.
TEST_F(SemaphoreTest, KilledReplicasFreeTheirPermitsAndPassOnTheFirstWaitersRole) {
  auto holder_proc = SpawnReplicaProcess(
      {"--zk", connect_, "--zk-root", root_, "--zk-session-timeout", "2s"});
  auto waiter_proc = SpawnReplicaProcess(
      {"--zk", connect_, "--zk-root", root_, "--zk-session-timeout", "2s"});
  ASSERT_TRUE(holder_proc && waiter_proc);
  auto hs = NewStub(holder_proc->address);
  auto ws = NewStub(waiter_proc->address);
  bool held = false;
  auto a = Join(s1_.get(), SemOpen("killed", 2, "A"), &held);
  ASSERT_TRUE(held);
  auto b = Join(hs.get(), SemOpen("killed", 2, "B"), &held);  // on the replica killed first
  ASSERT_TRUE(held);
  auto c = Join(s2_.get(), SemOpen("killed", 2, "C"), &held);  // the first waiter
  ASSERT_FALSE(held);
  auto d = Join(ws.get(), SemOpen("killed", 2, "D"), &held);  // on the replica killed next
  ASSERT_FALSE(held);
  auto e = Join(s1_.get(), SemOpen("killed", 2, "E"), &held);
  ASSERT_FALSE(held);
  ASSERT_TRUE(ContendersBecome("killed", 5));

  holder_proc->process->Signal(SIGKILL);
  ASSERT_TRUE(c->Await(AcquireEvent::ACQUIRED, milliseconds(20000)))
      << "the first waiter did not get the killed holder's permit";
  ASSERT_TRUE(ContendersBecome("killed", 4));
  EXPECT_TRUE(StillWaiting(*e));

  // D is the first waiter now (C's grant mark woke it); its replica dies.
  waiter_proc->process->Signal(SIGKILL);
  ASSERT_TRUE(ContendersBecome("killed", 3, milliseconds(20000)));
  EXPECT_TRUE(StillWaiting(*e));
  v1::DescribeResponse resp;
  ASSERT_TRUE(Describe(s2_.get(), "killed", &resp).ok());
  ASSERT_EQ(resp.holders_size(), 2);
  EXPECT_EQ(resp.holders(0).owner(), "A");
  EXPECT_EQ(resp.holders(1).owner(), "C");
  ASSERT_EQ(resp.waiters_size(), 1);
  EXPECT_EQ(resp.waiters(0).owner(), "E");
  // E took over D's role: A's release reaches it.
  a->SendRelease();
  ASSERT_TRUE(a->Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(e->Await(AcquireEvent::ACQUIRED)) << "the next waiter did not take the role";
  for (auto* s : {c.get(), e.get()}) {
    s->SendRelease();
    EXPECT_TRUE(s->Await(AcquireEvent::RELEASED));
  }
  EXPECT_TRUE(ContendersBecome("killed", 0));
  EXPECT_TRUE(holder_proc->process->Wait(milliseconds(10000)));
  EXPECT_TRUE(waiter_proc->process->Wait(milliseconds(10000)));
}

// Must-show 4: ZooKeeper restarted (within the session timeout) with
// holders and waiters in place: holders SUSPENDED then RESUMED, waiters
// keep their places and watches, and the permits move on as before.
TEST_F(SemaphoreTest, ZooKeeperRestartKeepsHoldersAndWaitersInPlace) {
  auto server = ZkServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string connect = (*server)->ConnectString();
  const std::string root = UniqueRoot("sem-restart");
  ReplicaConfig cfg = TestConfig(connect, root);
  cfg.zk_session_timeout = milliseconds(20000);
  auto x = StartReplica(cfg);
  auto y = StartReplica(cfg);
  ASSERT_TRUE(x && y);
  auto xs = NewStub(x->address());
  auto ys = NewStub(y->address());
  bool held = false;
  auto a = Join(xs.get(), SemOpen("restart", 2, "A"), &held);
  ASSERT_TRUE(held);
  auto b = Join(ys.get(), SemOpen("restart", 2, "B"), &held);
  ASSERT_TRUE(held);
  auto c = Join(ys.get(), SemOpen("restart", 2, "C"), &held);
  ASSERT_FALSE(held);
  auto d = Join(xs.get(), SemOpen("restart", 2, "D"), &held);
  ASSERT_FALSE(held);

  ASSERT_TRUE((*server)->Stop().ok());
  ASSERT_TRUE(a->Await(AcquireEvent::SUSPENDED));
  ASSERT_TRUE(b->Await(AcquireEvent::SUSPENDED));
  ASSERT_TRUE((*server)->Restart().ok());
  ASSERT_TRUE(a->Await(AcquireEvent::RESUMED, milliseconds(30000)));
  ASSERT_TRUE(b->Await(AcquireEvent::RESUMED, milliseconds(30000)));
  EXPECT_TRUE(StillWaiting(*c));
  EXPECT_TRUE(StillWaiting(*d));
  SyncZk check(connect);
  ASSERT_EQ(check.Contenders(root + "/" + EncodeLockName("restart")).size(), 4u);

  // B leaves (out of order): C, the first waiter, holds; then A leaves: D.
  b->SendRelease();
  ASSERT_TRUE(b->Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(c->Await(AcquireEvent::ACQUIRED, milliseconds(20000)));
  EXPECT_TRUE(StillWaiting(*d));
  a->SendRelease();
  ASSERT_TRUE(a->Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(d->Await(AcquireEvent::ACQUIRED, milliseconds(20000)));
  for (auto* s : {c.get(), d.get()}) {
    s->SendRelease();
    EXPECT_TRUE(s->Await(AcquireEvent::RELEASED));
  }
  EXPECT_TRUE(WaitFor([&] { return check.Contenders(root + "/" + EncodeLockName("restart")).empty(); },
                      milliseconds(20000)));
}

// Describe's grant times: a semaphore holder's from its mark, on any
// replica; an exclusive holder's only on the replica that granted it.
TEST_F(SemaphoreTest, DescribeShowsGrantTimesWhereKnown) {
  bool held = false;
  auto x = Join(s1_.get(), OpenMsg("mutex-granted", milliseconds(60000), "X"), &held);
  ASSERT_TRUE(held);
  v1::DescribeResponse here, there;
  ASSERT_TRUE(Describe(s1_.get(), "mutex-granted", &here).ok());
  ASSERT_TRUE(Describe(s2_.get(), "mutex-granted", &there).ok());
  ASSERT_EQ(here.holders_size(), 1);
  ASSERT_EQ(there.holders_size(), 1);
  EXPECT_TRUE(here.holders(0).has_granted());
  EXPECT_GE(here.holders(0).granted().seconds(), here.holders(0).since().seconds());
  EXPECT_FALSE(there.holders(0).has_granted());
  EXPECT_EQ(here.max_holders(), 0);
}

}  // namespace
}  // namespace turnstile::testing
