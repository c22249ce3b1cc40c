// The ordering rule (server/recipe/ordering.h) over the lock's ordered view
// (server/recipe/lock_queue.h), exactly as the engine and Describe call it: the
// queue order of parsed sequences, foreign children ignored, the signed
// 32-bit wrap, and who holds / what blocks for each kind.
#include "server/recipe/ordering.h"

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

// A semaphore contender's node name: "n<N>-<uid>-<seq>".
std::string SemNode(int32_t n, int32_t seq, char uid_letter) {
  char buf[80];
  std::snprintf(buf, sizeof(buf), "n%d-%s-%010d", n, std::string(16, uid_letter).c_str(), seq);
  return buf;
}

// N = 3, [A B C | D E F]: the first three hold; D (exactly 3 ahead) is the
// first waiter, blocked by every holder ahead; E and F by their
// predecessors only.
TEST(Decide, SemaphoreFirstNHoldFirstWaiterWatchesEveryHolderOthersTheirPredecessor) {
  std::vector<std::string> nodes;
  for (int i = 0; i < 6; ++i) nodes.push_back(SemNode(3, 10 + i, static_cast<char>('a' + i)));
  auto q = View(nodes);
  for (int32_t seq : {10, 11, 12}) {
    EXPECT_TRUE(Decide(q, seq, ContenderKind::kSemaphore, 3).holds) << seq;
  }
  auto d = Decide(q, 13, ContenderKind::kSemaphore, 3);
  EXPECT_FALSE(d.holds);
  EXPECT_TRUE(d.first_waiter);
  ASSERT_EQ(d.blockers.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(d.blockers[i]->node, nodes[i]) << i;  // queue order
  // It watches its predecessor, and the other holders besides.
  WaiterWatches dw = WatchesOf(d);
  EXPECT_EQ(dw.nearest, nodes[2]);
  EXPECT_EQ(dw.others, (std::vector<std::string>{nodes[0], nodes[1]}));
  EXPECT_TRUE(WatchesOf(Decide(q, 10, ContenderKind::kSemaphore, 3)).nearest.empty());  // holds
  for (int32_t seq : {14, 15}) {
    auto w = Decide(q, seq, ContenderKind::kSemaphore, 3);
    EXPECT_FALSE(w.holds);
    EXPECT_FALSE(w.first_waiter);
    ASSERT_EQ(w.blockers.size(), 1u);
    EXPECT_EQ(w.blockers[0]->node, nodes[seq - 10 - 1]);
    EXPECT_EQ(WatchesOf(w).nearest, nodes[seq - 10 - 1]);
    EXPECT_TRUE(WatchesOf(w).others.empty());
  }
}

// Holders leaving out of order: B leaves; D, the first waiter, now holds
// (the rule is work-conserving), and E (2 + D = 3 ahead) becomes the first
// waiter, blocked by A, C and D.
TEST(Decide, SemaphoreHolderLeavingOutOfOrderLetsTheFirstWaiterHold) {
  std::vector<std::string> nodes;
  for (int i = 0; i < 5; ++i) nodes.push_back(SemNode(3, 10 + i, static_cast<char>('a' + i)));
  auto q = View(nodes);
  ASSERT_TRUE(q.Erase(11, nodes[1]));
  EXPECT_TRUE(Decide(q, 13, ContenderKind::kSemaphore, 3).holds);
  auto e = Decide(q, 14, ContenderKind::kSemaphore, 3);
  ASSERT_EQ(e.blockers.size(), 3u);
  EXPECT_EQ(e.blockers[0]->node, nodes[0]);
  EXPECT_EQ(e.blockers[1]->node, nodes[2]);
  EXPECT_EQ(e.blockers[2]->node, nodes[3]);
}

TEST(Decide, SemaphoreOfOneIsAMutex) {
  auto q = View({SemNode(1, 1, 'a'), SemNode(1, 2, 'b'), SemNode(1, 3, 'c')});
  EXPECT_TRUE(Decide(q, 1, ContenderKind::kSemaphore, 1).holds);
  for (int32_t seq : {2, 3}) {
    auto d = Decide(q, seq, ContenderKind::kSemaphore, 1);
    EXPECT_FALSE(d.holds);
    EXPECT_EQ(d.first_waiter, seq == 2);  // the one right behind the holder
    ASSERT_EQ(d.blockers.size(), 1u);
    EXPECT_EQ(d.blockers[0]->node, SemNode(1, seq - 1, static_cast<char>('a' + seq - 2)));
  }
}

// Kinds do not mix, nor Ns: a contender is refused for a disagreeing entry
// AHEAD of it only (the earliest keeps the lock; nobody queued is disturbed).
TEST(FirstDisagreeingAhead, RefusesOnlyForADisagreeingEntryAhead) {
  auto q = View({SemNode(3, 1, 'a'), SemNode(3, 2, 'b'), SemNode(2, 3, 'c'), Node('x', 4, "dddddddddddddddd"),
                 Node('s', 5, "eeeeeeeeeeeeeeee")});
  EXPECT_EQ(FirstDisagreeingAhead(q, 1, ContenderKind::kSemaphore, 3), nullptr);
  EXPECT_EQ(FirstDisagreeingAhead(q, 2, ContenderKind::kSemaphore, 3), nullptr);
  // N = 2 behind two N = 3 entries: refused, naming the nearest.
  const LockQueue::Entry* c = FirstDisagreeingAhead(q, 3, ContenderKind::kSemaphore, 2);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->node, SemNode(3, 2, 'b'));
  EXPECT_EQ(c->max_holders, 3);
  // An exclusive and a shared contender behind semaphore entries: refused.
  const LockQueue::Entry* x = FirstDisagreeingAhead(q, 4, ContenderKind::kExclusive);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->node, SemNode(2, 3, 'c'));
  ASSERT_NE(FirstDisagreeingAhead(q, 5, ContenderKind::kShared), nullptr);
  // A semaphore contender behind an exclusive one: refused.
  auto m = View({Node('x', 1, "aaaaaaaaaaaaaaaa"), Node('s', 2, "bbbbbbbbbbbbbbbb"), SemNode(2, 3, 'c')});
  ASSERT_NE(FirstDisagreeingAhead(m, 3, ContenderKind::kSemaphore, 2), nullptr);
  EXPECT_EQ(FirstDisagreeingAhead(m, 3, ContenderKind::kSemaphore, 2)->node,
            Node('s', 2, "bbbbbbbbbbbbbbbb"));
  // Mutex and read/write contenders mix as before.
  EXPECT_EQ(FirstDisagreeingAhead(m, 2, ContenderKind::kShared), nullptr);
  // The view keeps its counts through erases: once the disagreeing entries
  // are gone, nothing disagrees.
  ASSERT_TRUE(m.Erase(1, Node('x', 1, "aaaaaaaaaaaaaaaa")));
  ASSERT_TRUE(m.Erase(2, Node('s', 2, "bbbbbbbbbbbbbbbb")));
  EXPECT_FALSE(m.AnyDisagreeing(ContenderKind::kSemaphore, 2));
  EXPECT_TRUE(m.AnyDisagreeing(ContenderKind::kSemaphore, 3));
  EXPECT_TRUE(m.AnyDisagreeing(ContenderKind::kExclusive, 0));
}

// A reader never passes a semaphore's entry (it would be refused, but until
// then it counts as a blocker, not as a fellow reader).
TEST(Decide, AReaderIsBlockedByASemaphoreEntryAhead) {
  auto q = View({SemNode(2, 1, 'a'), Node('s', 2, "bbbbbbbbbbbbbbbb")});
  auto d = Decide(q, 2, ContenderKind::kShared);
  EXPECT_FALSE(d.holds);
  EXPECT_EQ(d.blockers[0]->node, SemNode(2, 1, 'a'));
}

}  // namespace
}  // namespace turnstile
