// Herd-freedom, asserted on what ZooKeeper itself reports (wchc, mntr) and on
// the engine's count of ZooKeeper calls by kind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/recipe/lock_name.h"
#include "tests/two_replicas.h"

namespace turnstile::testing {
namespace {

using v1::AcquireEvent;

struct Calls {
  uint64_t n[static_cast<int>(ZkOp::kCount)];
  static Calls Of(ZkSession& zk) {
    Calls c;
    for (int i = 0; i < static_cast<int>(ZkOp::kCount); ++i) c.n[i] = zk.call_count(static_cast<ZkOp>(i));
    return c;
  }
  uint64_t operator[](ZkOp op) const { return n[static_cast<int>(op)]; }
};

class HerdTest : public TwoReplicaTest {
 protected:
  HerdTest() : TwoReplicaTest("herd") {}
  // Watched paths of one replica's session, as ZooKeeper lists them.
  std::vector<std::string> WatchesOf(Replica& r) {
    auto all = SharedZkServer().WatchesBySession();
    EXPECT_TRUE(all.ok()) << all.status();
    if (!all.ok()) return {};
    auto it = all->find(SessionHex(r.zk().credentials().session_id));
    return it == all->end() ? std::vector<std::string>{} : it->second;
  }

};

TEST_F(HerdTest, OneWatchPerWaiterOnItsPredecessorAndOneWatchFiresPerRelease) {
  constexpr int kWaiters = 50;
  const std::string lock = LockPath("herd");
  auto holder = std::make_unique<AcquireStream>(s1_.get(), OpenMsg("herd", milliseconds(60000)));
  ASSERT_TRUE(holder->Await(AcquireEvent::ACQUIRED));
  std::vector<std::unique_ptr<AcquireStream>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::make_unique<AcquireStream>(s1_.get(), OpenMsg("herd", milliseconds(60000))));
    ASSERT_TRUE(waiters.back()->Next());  // QUEUED: its node exists, so the order is fixed
  }
  std::vector<std::string> queue = zk_->Contenders(lock);
  ASSERT_EQ(queue.size(), static_cast<size_t>(kWaiters + 1));

  // Exactly the nodes 0..49 are watched (each waiter watches its
  // predecessor; the holder's watch on its own node shares node 0's path).
  std::set<std::string> expected;
  for (int i = 0; i < kWaiters; ++i) expected.insert(lock + "/" + queue[i]);
  std::vector<std::string> watched;
  ASSERT_TRUE(WaitFor([&] {
    watched = WatchesOf(*r1_);
    return watched.size() == static_cast<size_t>(kWaiters);
  }, milliseconds(10000))) << "watches: " << watched.size();
  std::set<std::string> distinct(watched.begin(), watched.end());
  EXPECT_EQ(distinct.size(), watched.size()) << "a node is watched twice";
  EXPECT_EQ(distinct, expected);
  EXPECT_EQ(distinct.count(lock), 0u) << "the lock node itself must not be watched";
  EXPECT_EQ(MntrValue("zk_watch_count") >= kWaiters, true);

  // One release: one watch fires (server side), no getChildren anywhere,
  // and the next waiter needs one read at most: its own-node watch, set
  // once its hold has lasted a moment (LockEngine::DeferOwnWatch).
  Calls before = Calls::Of(r1_->zk());
  const uint64_t in_one = r1_->engine().stats().handoffs_in_one_transaction;
  int64_t deleted_watch_sum = MntrValue("zk_sum_node_deleted_watch_count");
  int64_t changed_watch_sum = MntrValue("zk_sum_node_changed_watch_count");
  holder->SendRelease();
  ASSERT_TRUE(holder->Await(AcquireEvent::RELEASED));
  ASSERT_TRUE(waiters[0]->Await(AcquireEvent::ACQUIRED));
  ASSERT_TRUE(WaitFor([&] { return WatchesOf(*r1_).size() == static_cast<size_t>(kWaiters - 1); },
                      milliseconds(10000)));
  Calls after = Calls::Of(r1_->zk());
  EXPECT_EQ(after[ZkOp::kGetChildren] - before[ZkOp::kGetChildren], 0u);
  EXPECT_EQ(after[ZkOp::kCreate] - before[ZkOp::kCreate], 0u);
  // The handoff is local: the holder's delete and a check of the next
  // waiter's node are one transaction (multi), which confirms the grant; the
  // one read is the new holder's watch on its own node.
  EXPECT_EQ(after[ZkOp::kDelete] - before[ZkOp::kDelete], 0u);
  EXPECT_EQ(after[ZkOp::kMulti] - before[ZkOp::kMulti], 1u);
  // The hold lasts (this test holds it): its watch comes, exactly once.
  EXPECT_TRUE(WaitFor([&] {
    after = Calls::Of(r1_->zk());
    return after[ZkOp::kGetData] - before[ZkOp::kGetData] >= 1u;
  }, milliseconds(5000)));
  EXPECT_EQ(after[ZkOp::kGetData] - before[ZkOp::kGetData], 1u);
  // Granted from the transaction's reply, not from the (earlier) watch
  // event followed by a confirming read.
  EXPECT_EQ(r1_->engine().stats().handoffs_in_one_transaction, in_one + 1);
  EXPECT_EQ(after[ZkOp::kSetData] - before[ZkOp::kSetData], 0u);
  EXPECT_EQ(MntrValue("zk_sum_node_deleted_watch_count") - deleted_watch_sum, 1);
  EXPECT_EQ(MntrValue("zk_sum_node_changed_watch_count") - changed_watch_sum, 0);
  for (int i = 1; i < kWaiters; ++i) {
    auto ev = waiters[i]->Next(milliseconds(0));
    if (ev) EXPECT_EQ(ev->type(), AcquireEvent::QUEUED) << "waiter " << i;
  }

  // Drain the rest: the cost per handoff does not grow with the queue.
  before = Calls::Of(r1_->zk());
  for (int i = 0; i < kWaiters; ++i) {
    if (i > 0) ASSERT_TRUE(waiters[i]->Await(AcquireEvent::ACQUIRED)) << i;
    waiters[i]->SendRelease();
    ASSERT_TRUE(waiters[i]->Await(AcquireEvent::RELEASED)) << i;
  }
  after = Calls::Of(r1_->zk());
  EXPECT_EQ(after[ZkOp::kGetChildren] - before[ZkOp::kGetChildren], 0u);
  // A multi per local handoff, a plain delete for the last one.
  EXPECT_EQ(after[ZkOp::kMulti] - before[ZkOp::kMulti], static_cast<uint64_t>(kWaiters - 1));
  EXPECT_EQ(after[ZkOp::kDelete] - before[ZkOp::kDelete], 1u);
  // Each hold here ends at once: most never read their own node.
  EXPECT_LE(after[ZkOp::kGetData] - before[ZkOp::kGetData], static_cast<uint64_t>(kWaiters - 1));
  EXPECT_TRUE(WaitFor([&] { return zk_->Contenders(lock).empty(); }, milliseconds(10000)));
}

// Issue 20: an uncontended hold costs ZooKeeper create, listing and delete;
// the holder's read and watch of its own node come only once the hold has
// lasted a moment (LockEngine::DeferOwnWatch). What the watch is for still
// holds: a hold whose node someone else deletes is told LOST(DELETED),
// never RELEASED, whether it had its watch yet or not.
TEST_F(HerdTest, ShortHoldsReadNothingAndADeletedHoldIsNeverReleased) {
  constexpr int kCycles = 20;
  Calls before;
  for (int i = -1; i < kCycles; ++i) {
    // Cycle -1 also creates the lock node: not counted.
    if (i == 0) before = Calls::Of(r1_->zk());
    AcquireStream s(s1_.get(), OpenMsg("short", milliseconds(10000)));
    ASSERT_TRUE(s.Await(AcquireEvent::ACQUIRED)) << i;
    s.SendRelease();
    ASSERT_TRUE(s.Await(AcquireEvent::RELEASED)) << i;
  }
  Calls after = Calls::Of(r1_->zk());
  EXPECT_EQ(after[ZkOp::kCreate] - before[ZkOp::kCreate], static_cast<uint64_t>(kCycles));
  EXPECT_EQ(after[ZkOp::kGetChildren] - before[ZkOp::kGetChildren], static_cast<uint64_t>(kCycles));
  EXPECT_EQ(after[ZkOp::kDelete] - before[ZkOp::kDelete], static_cast<uint64_t>(kCycles));
  // A hold outlasts the delay only on a badly loaded machine.
  EXPECT_LE(after[ZkOp::kGetData] - before[ZkOp::kGetData], static_cast<uint64_t>(kCycles / 2));

  auto release_by_lease = [&](const std::string& lease) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ReleaseRequest req;
    req.set_lease_id(lease);
    v1::ReleaseResponse resp;
    return s2_->Release(&ctx, req, &resp);
  };
  // A hold that lasts reads and watches its node; a deletion through the
  // other replica reaches it as LOST(DELETED).
  {
    before = Calls::Of(r1_->zk());
    AcquireStream s(s1_.get(), OpenMsg("long", milliseconds(10000)));
    auto got = s.Await(AcquireEvent::ACQUIRED);
    ASSERT_TRUE(got);
    ASSERT_TRUE(WaitFor([&] {
      return Calls::Of(r1_->zk())[ZkOp::kGetData] - before[ZkOp::kGetData] == 1u;
    }, milliseconds(5000))) << "the lasting hold never watched its node";
    ASSERT_TRUE(release_by_lease(got->acquired().lease_id()).ok());
    auto lost = s.Await(AcquireEvent::LOST);
    ASSERT_TRUE(lost);
    EXPECT_EQ(lost->lost().reason(), v1::Lost::DELETED) << lost->ShortDebugString();
  }
  // Deleted through the other replica, then released by its holder at once:
  // LOST(DELETED), whether its watch was not set yet (even rounds) or was
  // set and its notification may still be on the way (odd rounds).
  for (int i = 0; i < 10; ++i) {
    before = Calls::Of(r1_->zk());
    AcquireStream s(s1_.get(), OpenMsg("deleted", milliseconds(10000)));
    auto got = s.Await(AcquireEvent::ACQUIRED);
    ASSERT_TRUE(got);
    if (i % 2 == 1) {
      ASSERT_TRUE(WaitFor([&] {
        return Calls::Of(r1_->zk())[ZkOp::kGetData] - before[ZkOp::kGetData] == 1u;
      }, milliseconds(5000))) << "the hold never watched its node";
    }
    ASSERT_TRUE(release_by_lease(got->acquired().lease_id()).ok());
    s.SendRelease();
    std::optional<AcquireEvent> end;
    while ((end = s.Next()) && end->type() != AcquireEvent::LOST &&
           end->type() != AcquireEvent::RELEASED) {
    }
    ASSERT_TRUE(end) << i;
    EXPECT_EQ(end->type(), AcquireEvent::LOST) << i << ": " << end->ShortDebugString();
    EXPECT_EQ(end->lost().reason(), v1::Lost::DELETED) << i;
  }
}

// Waiters alternate between two replicas: a handoff across replicas is
// still O(1): the next waiter reads nothing but the node it must watch.
TEST_F(HerdTest, CrossReplicaHandoffsDoNotRelist) {
  constexpr int kWaiters = 30;
  auto holder = std::make_unique<AcquireStream>(s1_.get(), OpenMsg("x", milliseconds(60000)));
  ASSERT_TRUE(holder->Await(AcquireEvent::ACQUIRED));
  std::vector<std::unique_ptr<AcquireStream>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    auto* stub = (i % 2 == 0) ? s2_.get() : s1_.get();
    waiters.push_back(std::make_unique<AcquireStream>(stub, OpenMsg("x", milliseconds(60000))));
    ASSERT_TRUE(waiters.back()->Next());  // QUEUED, so the order is fixed
  }
  Calls b1 = Calls::Of(r1_->zk()), b2 = Calls::Of(r2_->zk());
  holder->SendRelease();
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_TRUE(waiters[i]->Await(AcquireEvent::ACQUIRED)) << i;
    waiters[i]->SendRelease();
    ASSERT_TRUE(waiters[i]->Await(AcquireEvent::RELEASED)) << i;
  }
  Calls a1 = Calls::Of(r1_->zk()), a2 = Calls::Of(r2_->zk());
  EXPECT_EQ(a1[ZkOp::kGetChildren] - b1[ZkOp::kGetChildren], 0u);
  EXPECT_EQ(a2[ZkOp::kGetChildren] - b2[ZkOp::kGetChildren], 0u);
  uint64_t reads = (a1[ZkOp::kGetData] - b1[ZkOp::kGetData]) + (a2[ZkOp::kGetData] - b2[ZkOp::kGetData]);
  // Per handoff: the new holder's own-node watch, plus at most one re-check.
  EXPECT_LE(reads, static_cast<uint64_t>(2 * kWaiters));
}

// SPEC section 2, "Handoff cost in ZooKeeper operations is O(1) in queue
// length" and "getChildren at most once per contender", across replicas
// (the in-memory ZooKeeper's HandoffCostIsConstantAcrossReplicas, which
// also counts round trips, here on the real one). r2's waiter queues
// behind a holder and 10 waiters of r1, which hand over among themselves
// (local transactions that r2 does not see), and it watches only the last.
// r2's view still holds the 10 departed nodes: its handoff reads one of
// them (NO_NODE), then probes the 9 others and its own node in one
// pipelined round trip (reads without a watch), and the probe confirms the
// grant; no listing. Before, it read them one by one, in series: 11 reads,
// 11 round trips.
TEST_F(HerdTest, CrossReplicaHandoffAfterUnseenDeparturesReadsEachOnceAndDoesNotRelist) {
  constexpr int kBetween = 10;
  auto holder = std::make_unique<AcquireStream>(s1_.get(), OpenMsg("unseen", milliseconds(60000)));
  auto held = holder->Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(held);
  std::vector<std::unique_ptr<AcquireStream>> between;
  for (int i = 0; i < kBetween; ++i) {
    between.push_back(
        std::make_unique<AcquireStream>(s1_.get(), OpenMsg("unseen", milliseconds(60000))));
    ASSERT_TRUE(between.back()->Next());  // QUEUED: its node exists, so the order is fixed
  }
  const Calls at_start = Calls::Of(r2_->zk());
  auto last = std::make_unique<AcquireStream>(s2_.get(), OpenMsg("unseen", milliseconds(60000)));
  ASSERT_TRUE(last->Next());
  holder->SendRelease();
  ASSERT_TRUE(holder->Await(AcquireEvent::RELEASED));
  uint64_t token = held->acquired().fencing_token();
  for (int i = 0; i < kBetween; ++i) {
    auto acquired = between[i]->Await(AcquireEvent::ACQUIRED);
    ASSERT_TRUE(acquired) << i;
    EXPECT_GT(acquired->acquired().fencing_token(), token) << i;
    token = acquired->acquired().fencing_token();
    if (i + 1 == kBetween) break;
    between[i]->SendRelease();
    ASSERT_TRUE(between[i]->Await(AcquireEvent::RELEASED)) << i;
  }
  ASSERT_TRUE(StillWaiting(*last));
  const Calls before = Calls::Of(r2_->zk());
  between.back()->SendRelease();
  ASSERT_TRUE(between.back()->Await(AcquireEvent::RELEASED));
  auto acquired = last->Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acquired);
  EXPECT_GT(acquired->acquired().fencing_token(), token);
  // The hold lasts (this test holds it): its own-node watch comes once
  // (LockEngine::DeferOwnWatch), the one read with a watch that is not the
  // handoff's.
  Calls after = before;
  EXPECT_TRUE(WaitFor([&] {
    after = Calls::Of(r2_->zk());
    return after[ZkOp::kGetData] - before[ZkOp::kGetData] >= 2u;
  }, milliseconds(5000)));
  EXPECT_EQ(after[ZkOp::kGetData] - before[ZkOp::kGetData], 2u);
  // The probe: the 9 other departed nodes and the own node.
  EXPECT_EQ(after[ZkOp::kExists] - before[ZkOp::kExists], static_cast<uint64_t>(kBetween));
  EXPECT_EQ(after[ZkOp::kGetChildren] - before[ZkOp::kGetChildren], 0u);
  // r2 listed once in all, for its one contender (SPEC section 2).
  EXPECT_EQ(after[ZkOp::kGetChildren] - at_start[ZkOp::kGetChildren], 1u);
  EXPECT_EQ(after[ZkOp::kCreate] - before[ZkOp::kCreate], 0u);
  EXPECT_EQ(after[ZkOp::kSetData] - before[ZkOp::kSetData], 0u);
  last->SendRelease();
  ASSERT_TRUE(last->Await(AcquireEvent::RELEASED));
  EXPECT_TRUE(WaitFor([&] { return zk_->Contenders(LockPath("unseen")).empty(); },
                      milliseconds(10000)));
}

// The local handoff shortcut (the successor's own-node read sent right
// behind the holder's delete) must not grant a successor whose node is gone:
// it queues again with a new node, and its token is the new node's.
TEST_F(HerdTest, LocalHandoffToAWaiterWhoseNodeIsGoneRequeuesIt) {
  const std::string lock = LockPath("gone");
  auto holder = std::make_unique<AcquireStream>(s1_.get(), OpenMsg("gone", milliseconds(60000)));
  ASSERT_TRUE(holder->Await(AcquireEvent::ACQUIRED));
  auto waiter = std::make_unique<AcquireStream>(s1_.get(), OpenMsg("gone", milliseconds(60000)));
  ASSERT_TRUE(waiter->Await(AcquireEvent::QUEUED));
  std::vector<std::string> queue = zk_->Contenders(lock);
  ASSERT_EQ(queue.size(), 2u);
  const std::string old_node = lock + "/" + queue[1];
  auto old_stat = zk_->Exists(old_node);
  ASSERT_TRUE(old_stat.ok());
  ASSERT_EQ(zk_->Delete(old_node), ZkCode::kOk);  // nobody watches it: the replica cannot know

  const uint64_t requeued = r1_->engine().stats().requeued_lost_node;
  Calls before = Calls::Of(r1_->zk());
  holder->SendRelease();
  ASSERT_TRUE(holder->Await(AcquireEvent::RELEASED));
  auto acquired = waiter->Await(AcquireEvent::ACQUIRED);
  ASSERT_TRUE(acquired);
  Calls after = Calls::Of(r1_->zk());
  EXPECT_EQ(r1_->engine().stats().requeued_lost_node, requeued + 1);
  EXPECT_EQ(after[ZkOp::kCreate] - before[ZkOp::kCreate], 1u) << "queued again with a new node";
  // The handoff transaction (delete + check of the waiter's node) was refused
  // as a whole, so the holder's node was deleted alone: a grant from the
  // transaction's reply would have granted through a node that is gone.
  EXPECT_EQ(after[ZkOp::kMulti] - before[ZkOp::kMulti], 1u);
  EXPECT_EQ(after[ZkOp::kDelete] - before[ZkOp::kDelete], 1u);
  std::vector<std::string> now = zk_->Contenders(lock);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(lock + "/" + now[0], old_node);
  auto new_stat = zk_->Exists(lock + "/" + now[0]);
  ASSERT_TRUE(new_stat.ok());
  EXPECT_EQ(acquired->acquired().fencing_token(), static_cast<uint64_t>(new_stat->czxid));
  EXPECT_GT(acquired->acquired().fencing_token(), static_cast<uint64_t>(old_stat->czxid));
  waiter->SendRelease();
  ASSERT_TRUE(waiter->Await(AcquireEvent::RELEASED));
}

// A waiter that ends (here: its wait times out) takes its watch with it: the
// node it watched (another replica's holder) is no longer watched by its
// replica's session, on the server too.
TEST_F(HerdTest, AnEndedWaiterRemovesItsWatch) {
  const std::string lock = LockPath("unwatch");
  auto holder = std::make_unique<AcquireStream>(s2_.get(), OpenMsg("unwatch", milliseconds(60000)));
  ASSERT_TRUE(holder->Await(AcquireEvent::ACQUIRED));
  std::vector<std::string> queue = zk_->Contenders(lock);
  ASSERT_EQ(queue.size(), 1u);
  const std::string held = lock + "/" + queue[0];
  auto waiter = std::make_unique<AcquireStream>(s1_.get(), OpenMsg("unwatch", milliseconds(1500)));
  ASSERT_TRUE(waiter->Await(AcquireEvent::QUEUED));
  ASSERT_TRUE(WaitFor([&] {
    auto w = WatchesOf(*r1_);
    return std::find(w.begin(), w.end(), held) != w.end();
  }, milliseconds(5000))) << "the waiter should watch the holder's node";
  auto end = waiter->AwaitEnd();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(WaitFor([&] {
    auto w = WatchesOf(*r1_);
    return std::find(w.begin(), w.end(), held) == w.end();
  }, milliseconds(5000))) << "the ended waiter's watch is still registered";
  holder->SendRelease();
  ASSERT_TRUE(holder->Await(AcquireEvent::RELEASED));
}

}  // namespace
}  // namespace turnstile::testing
