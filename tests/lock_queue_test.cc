// LockQueue: the per-lock view the engine's contenders share.
#include "server/recipe/lock_queue.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace turnstile {
namespace {

std::string Node(int32_t seq, char uid = 'a') {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%010d", seq);
  return "x-" + std::string(16, uid) + "-" + buf;
}

LockQueue::Entry Local(int32_t seq, uint64_t id) {
  LockQueue::Entry e;
  e.node = Node(seq, 'b');
  e.local_id = id;
  return e;
}

auto NoLocal = [](const std::string&) -> uint64_t { return 0; };
auto KeepNone = [](const LockQueue::Entry&) { return false; };

TEST(LockQueueTest, ListingOrdersBySequenceAndIgnoresForeignChildren) {
  LockQueue q;
  q.ReplaceWith({Node(12), "lock-config", Node(3), Node(7), "x-short-1"}, NoLocal, KeepNone);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q.Ahead(3), nullptr);
  EXPECT_EQ(q.Ahead(7)->node, Node(3));
  EXPECT_EQ(q.Ahead(12)->node, Node(7));
  EXPECT_EQ(q.Behind(7)->node, Node(12));
  EXPECT_EQ(q.Behind(12), nullptr);
  EXPECT_EQ(q.CountAhead(12), 2);
}

TEST(LockQueueTest, OrderSurvivesTheSignedWrap) {
  LockQueue q;
  q.ReplaceWith({Node(-2147483647), Node(2147483646), Node(-2147483648), Node(2147483647)},
                NoLocal, KeepNone);
  std::vector<int32_t> order;
  q.ForFront(10, [&](int64_t, int32_t seq, const LockQueue::Entry&) { order.push_back(seq); });
  EXPECT_EQ(order, (std::vector<int32_t>{2147483646, 2147483647, -2147483648, -2147483647}));
  EXPECT_EQ(q.Ahead(-2147483648)->node, Node(2147483647));
}

// A contender created after the listing was sent is not in it, but is still
// there: the engine keeps it. One the listing should contain is gone.
TEST(LockQueueTest, ReplaceKeepsOnlyWhatTheCallerSaysOutlivedTheListing) {
  LockQueue q;
  q.Insert(5, Local(5, 1));    // covered by the listing, but missing from it: gone
  q.Insert(20, Local(20, 2));  // created after the listing was sent
  q.Insert(9, Local(9, 3));    // in the listing
  q.ReplaceWith({Node(2), Node(9, 'b')},
                [](const std::string& node) -> uint64_t { return node == Node(9, 'b') ? 3 : 0; },
                [](const LockQueue::Entry& e) { return e.local_id == 2; });
  EXPECT_FALSE(q.Contains(5, Node(5, 'b')));
  EXPECT_TRUE(q.Contains(20, Node(20, 'b')));
  ASSERT_TRUE(q.Contains(9, Node(9, 'b')));
  EXPECT_EQ(q.Ahead(9)->local_id, 0u);
  EXPECT_EQ(q.Ahead(20)->local_id, 3u);
}

TEST(LockQueueTest, EraseNeedsTheSameNodeAndEraseRemoteBeforeKeepsLocals) {
  LockQueue q;
  q.ReplaceWith({Node(1), Node(2), Node(4)}, NoLocal, KeepNone);
  q.Insert(3, Local(3, 7));
  q.Insert(6, Local(6, 8));
  EXPECT_FALSE(q.Erase(2, Node(2, 'z')));  // a different node at that sequence
  EXPECT_TRUE(q.Contains(2, Node(2)));
  EXPECT_EQ(q.EraseRemoteBefore(6), 3u);  // 1, 2, 4 go; the local 3 stays
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.Ahead(6)->local_id, 7u);
  EXPECT_TRUE(q.Erase(3, Node(3, 'b')));
  EXPECT_EQ(q.Ahead(6), nullptr);
}

// Issue 12: a shared contender is blocked by the nearest exclusive entry
// ahead (readers in between do not block it); an exclusive one by the entry
// directly ahead. ForBehind walks in queue order until told to stop.
TEST(LockQueueTest, BlockerFollowsTheKind) {
  LockQueue q;
  auto entry = [](int32_t seq, ContenderKind kind) {
    LockQueue::Entry e;
    e.node = Node(seq);
    e.kind = kind;
    return e;
  };
  q.Insert(1, entry(1, ContenderKind::kShared));
  q.Insert(2, entry(2, ContenderKind::kExclusive));
  q.Insert(3, entry(3, ContenderKind::kShared));
  q.Insert(4, entry(4, ContenderKind::kShared));
  q.Insert(5, entry(5, ContenderKind::kExclusive));
  EXPECT_EQ(q.NearestExclusiveAhead(1), nullptr);
  EXPECT_EQ(q.NearestExclusiveAhead(4)->node, Node(2));  // past reader 3
  EXPECT_EQ(q.Ahead(5)->node, Node(4));
  EXPECT_EQ(q.NearestExclusiveAhead(2), nullptr);  // only a reader ahead
  std::vector<int32_t> seen;
  q.ForBehind(2, [&](int32_t seq, const LockQueue::Entry& e) {
    seen.push_back(seq);
    return e.kind == ContenderKind::kShared;
  });
  EXPECT_EQ(seen, (std::vector<int32_t>{3, 4, 5}));  // stops after the writer
}

}  // namespace
}  // namespace turnstile
