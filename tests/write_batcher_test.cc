// WriteBatcher's rules (server/engine/write_batcher.h), without ZooKeeper:
// arrival order, at most one write per lock in a batch, a lock with a multi
// in flight held back until it lands, the size cap, stale writes dropped.
#include "server/engine/write_batcher.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace turnstile {
namespace {

using W = WriteBatcher::Write;

std::vector<uint64_t> Ids(const std::vector<W>& batch) {
  std::vector<uint64_t> out;
  for (const W& w : batch) out.push_back(w.id);
  return out;
}

bool All(const W&) { return true; }

TEST(WriteBatcherTest, ABatchKeepsArrivalOrderWithOneWritePerLock) {
  WriteBatcher b(64);
  b.Add({1, 1, "a"});
  b.Add({2, 1, "b"});
  b.Add({3, 1, "a"});  // a second write of "a": the next batch
  b.Add({4, 1, "c"});
  b.Add({5, 1, "a"});
  EXPECT_EQ(Ids(b.Next(All)), (std::vector<uint64_t>{1, 2, 4}));
  EXPECT_EQ(b.queued(), 2u);
  EXPECT_EQ(Ids(b.Next(All)), (std::vector<uint64_t>{3}));
  EXPECT_EQ(Ids(b.Next(All)), (std::vector<uint64_t>{5}));
  EXPECT_TRUE(b.empty());
  EXPECT_TRUE(b.Next(All).empty());
}

TEST(WriteBatcherTest, ALockWithAMultiInFlightSendsNothingUntilItLands) {
  WriteBatcher b(64);
  b.Add({1, 1, "a"});
  b.Add({2, 1, "b"});
  const std::vector<W> first = b.Next(All);
  ASSERT_EQ(Ids(first), (std::vector<uint64_t>{1, 2}));
  b.InFlight(first);
  EXPECT_TRUE(b.in_flight("a"));
  b.Add({3, 1, "a"});  // held back: "a" is in flight
  b.Add({4, 1, "c"});
  b.Add({5, 1, "a"});
  b.Add({6, 1, "d"});
  EXPECT_EQ(Ids(b.Next(All)), (std::vector<uint64_t>{4, 6}));
  EXPECT_TRUE(b.Next(All).empty()) << "a write of a lock in flight left early";
  b.Landed(first);
  EXPECT_FALSE(b.in_flight("a"));
  // In their order, one per lock per batch.
  EXPECT_EQ(Ids(b.Next(All)), (std::vector<uint64_t>{3}));
  EXPECT_EQ(Ids(b.Next(All)), (std::vector<uint64_t>{5}));
}

TEST(WriteBatcherTest, ABatchIsCappedAndTheRestKeepsItsOrder) {
  WriteBatcher b(3);
  for (uint64_t i = 1; i <= 7; ++i) b.Add({i, 1, "lock-" + std::to_string(i)});
  EXPECT_EQ(Ids(b.Next(All)), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(Ids(b.Next(All)), (std::vector<uint64_t>{4, 5, 6}));
  EXPECT_EQ(Ids(b.Next(All)), (std::vector<uint64_t>{7}));
  WriteBatcher one(0);  // at least one
  one.Add({1, 1, "a"});
  EXPECT_EQ(Ids(one.Next(All)), (std::vector<uint64_t>{1}));
}

TEST(WriteBatcherTest, StaleWritesAreDroppedAndDoNotHoldTheirLockBack) {
  WriteBatcher b(64);
  b.Add({1, 1, "a"});  // stale: its contender moved on (generation 2)
  b.Add({2, 1, "a"});
  b.Add({3, 1, "b"});
  const std::set<uint64_t> stale = {1};
  auto live = [&](const W& w) { return stale.count(w.id) == 0; };
  EXPECT_EQ(Ids(b.Next(live)), (std::vector<uint64_t>{2, 3}));
  EXPECT_TRUE(b.empty());
}

TEST(WriteBatcherTest, ClearForgetsQueuedWritesAndLocksInFlight) {
  WriteBatcher b(64);
  b.Add({1, 1, "a"});
  b.Add({2, 1, "b"});
  b.InFlight(b.Next(All));
  b.Add({3, 1, "a"});
  b.Clear();  // the session expired
  EXPECT_TRUE(b.empty());
  EXPECT_FALSE(b.in_flight("a"));
  b.Add({4, 2, "a"});
  EXPECT_EQ(Ids(b.Next(All)), (std::vector<uint64_t>{4}));
}

}  // namespace
}  // namespace turnstile
