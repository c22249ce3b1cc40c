// The ordering rule (server/ordering.h) over the lock's ordered view
// (server/lock_queue.h), exactly as the engine and Describe call it: the
// queue order of parsed sequences, foreign children ignored, the signed
// 32-bit wrap, and who holds / what blocks for each kind.
#include "server/ordering.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace turnstile {
namespace {

const char* kUid = "0123456789abcdef";

std::string Node(char kind, int32_t seq, const char* uid = kUid) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%c-%s-%010d", kind, uid, seq);
  return buf;
}

// The view a listing of `children` gives (no local contenders).
LockQueue View(const std::vector<std::string>& children) {
  LockQueue q;
  q.ReplaceWith(children, [](const std::string&) { return uint64_t{0}; },
                [](const LockQueue::Entry&) { return false; });
  return q;
}

std::vector<std::string> Order(const LockQueue& q) {
  std::vector<std::string> out;
  q.ForFront(q.size(), [&](int64_t, int32_t, const LockQueue::Entry& e) { out.push_back(e.node); });
  return out;
}

std::vector<int32_t> Seqs(const LockQueue& q) {
  std::vector<int32_t> out;
  q.ForFront(q.size(), [&](int64_t, int32_t seq, const LockQueue::Entry&) { out.push_back(seq); });
  return out;
}

TEST(QueueOrder, SortsByParsedSequenceNotByName) {
  // Lexical order of whole names would put uid "f..." after "0..." regardless
  // of sequence (ZOOKEEPER-2931); the parsed suffix must decide.
  auto q = View({Node('x', 3, "0000000000000000"), Node('x', 1, "ffffffffffffffff"),
                 Node('x', 2, "8888888888888888")});
  EXPECT_EQ(Order(q), (std::vector<std::string>{Node('x', 1, "ffffffffffffffff"),
                                                Node('x', 2, "8888888888888888"),
                                                Node('x', 3, "0000000000000000")}));
}

TEST(QueueOrder, IgnoresForeignChildren) {
  // kazoo #309: foreign children in the lock node must not take part.
  auto q = View({"lock", "x-short-1", Node('x', 5), "readme", Node('q', 4), "x-" + std::string(16, 'g') + "-0000000001"});
  EXPECT_EQ(Order(q), (std::vector<std::string>{Node('x', 5)}));
}

TEST(QueueOrder, NumbersWithDifferentWidthsCompareNumerically) {
  auto q = View({Node('x', 100), Node('x', 99, "aaaaaaaaaaaaaaaa"), Node('x', -3, "bbbbbbbbbbbbbbbb")});
  EXPECT_EQ(Seqs(q), (std::vector<int32_t>{-3, 99, 100}));
}

TEST(QueueOrder, SequencesAcrossTheSigned32BitWrap) {
  // The cversion wrapped: the negative sequences were created after.
  auto q = View({Node('x', -2147483647, "cccccccccccccccc"), Node('x', 2147483646, "aaaaaaaaaaaaaaaa"),
                 Node('x', -2147483648, "bbbbbbbbbbbbbbbb"), Node('x', 2147483647, "dddddddddddddddd")});
  EXPECT_EQ(Seqs(q), (std::vector<int32_t>{2147483646, 2147483647, -2147483648, -2147483647}));
}

TEST(QueueOrder, NegativeOnlyQueuesSortAscending) {
  auto q = View({Node('x', -5, "aaaaaaaaaaaaaaaa"), Node('x', -1000000000, "bbbbbbbbbbbbbbbb"),
                 Node('x', -6, "cccccccccccccccc")});
  EXPECT_EQ(Seqs(q), (std::vector<int32_t>{-1000000000, -6, -5}));
}

TEST(SequenceBefore, SerialArithmetic) {
  EXPECT_TRUE(SequenceBefore(1, 2));
  EXPECT_FALSE(SequenceBefore(2, 1));
  EXPECT_FALSE(SequenceBefore(3, 3));
  EXPECT_TRUE(SequenceBefore(2147483647, -2147483648));
  EXPECT_TRUE(SequenceBefore(2147483600, -2147483600));
  EXPECT_FALSE(SequenceBefore(-2147483648, 2147483647));
  EXPECT_TRUE(SequenceBefore(-10, 5));
}

TEST(Decide, MutexHeadHoldsOthersWatchPredecessor) {
  auto q = View({Node('x', 1, "aaaaaaaaaaaaaaaa"), Node('x', 2, "bbbbbbbbbbbbbbbb"),
                 Node('x', 3, "cccccccccccccccc")});
  EXPECT_TRUE(Decide(q, 1, ContenderKind::kExclusive).holds);
  auto d2 = Decide(q, 3, ContenderKind::kExclusive);
  EXPECT_FALSE(d2.holds);
  ASSERT_EQ(d2.blockers.size(), 1u);
  EXPECT_EQ(d2.blockers[0]->node, Node('x', 2, "bbbbbbbbbbbbbbbb"));  // its predecessor, not the holder
}

TEST(Decide, NodesAheadOnlyLeaveSoTheNextDecisionUsesTheSameView) {
  // The predecessor leaves: the waiter re-decides from the view it holds
  // and now watches the holder; when that leaves too, it holds.
  auto q = View({Node('x', 1, "aaaaaaaaaaaaaaaa"), Node('x', 2, "bbbbbbbbbbbbbbbb"),
                 Node('x', 3, "cccccccccccccccc")});
  ASSERT_TRUE(q.Erase(2, Node('x', 2, "bbbbbbbbbbbbbbbb")));
  auto d = Decide(q, 3, ContenderKind::kExclusive);
  ASSERT_EQ(d.blockers.size(), 1u);
  EXPECT_EQ(d.blockers[0]->node, Node('x', 1, "aaaaaaaaaaaaaaaa"));
  ASSERT_TRUE(q.Erase(1, Node('x', 1, "aaaaaaaaaaaaaaaa")));
  EXPECT_TRUE(Decide(q, 3, ContenderKind::kExclusive).holds);
}

TEST(Decide, SharedWaitsOnlyForNearestExclusiveAhead) {
  auto q = View({Node('s', 1, "aaaaaaaaaaaaaaaa"), Node('x', 2, "bbbbbbbbbbbbbbbb"),
                 Node('s', 3, "cccccccccccccccc"), Node('s', 4, "dddddddddddddddd"),
                 Node('x', 5, "eeeeeeeeeeeeeeee")});
  EXPECT_TRUE(Decide(q, 1, ContenderKind::kShared).holds);
  auto x = Decide(q, 2, ContenderKind::kExclusive);
  EXPECT_FALSE(x.holds);
  EXPECT_EQ(x.blockers[0]->node, Node('s', 1, "aaaaaaaaaaaaaaaa"));
  auto s = Decide(q, 4, ContenderKind::kShared);
  EXPECT_FALSE(s.holds);
  EXPECT_EQ(s.blockers[0]->node, Node('x', 2, "bbbbbbbbbbbbbbbb"));  // the exclusive, not the shared just ahead
  auto x2 = Decide(q, 5, ContenderKind::kExclusive);
  EXPECT_EQ(x2.blockers[0]->node, Node('s', 4, "dddddddddddddddd"));
}

TEST(Decide, ReadersAtTheFrontHoldTogether) {
  auto q = View({Node('s', 1, "aaaaaaaaaaaaaaaa"), Node('s', 2, "bbbbbbbbbbbbbbbb"),
                 Node('s', 3, "cccccccccccccccc")});
  for (int32_t seq : {1, 2, 3}) EXPECT_TRUE(Decide(q, seq, ContenderKind::kShared).holds) << seq;
}

TEST(Decide, WrapDoesNotLetTheNewestHold) {
  // -2147483648 was created after 2147483647: it must wait.
  auto q = View({Node('x', -2147483648, "bbbbbbbbbbbbbbbb"),
                 Node('x', 2147483647, "aaaaaaaaaaaaaaaa")});
  auto newest = Decide(q, -2147483648, ContenderKind::kExclusive);
  EXPECT_FALSE(newest.holds);
  EXPECT_EQ(newest.blockers[0]->node, Node('x', 2147483647, "aaaaaaaaaaaaaaaa"));
  EXPECT_TRUE(Decide(q, 2147483647, ContenderKind::kExclusive).holds);
}

TEST(Decide, AContenderNotInTheViewDecidesWhereItWouldStand) {
  auto q = View({Node('x', 1, "aaaaaaaaaaaaaaaa")});
  auto d = Decide(q, 9, ContenderKind::kExclusive);
  EXPECT_FALSE(d.holds);
  EXPECT_EQ(d.blockers[0]->node, Node('x', 1, "aaaaaaaaaaaaaaaa"));
  EXPECT_TRUE(Decide(q, 0, ContenderKind::kExclusive).holds);
}

}  // namespace
}  // namespace turnstile
