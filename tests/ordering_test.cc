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

std::vector<std::string> Names(const std::vector<ContenderName>& q) {
  std::vector<std::string> out;
  for (const auto& n : q) out.push_back(n.node);
  return out;
}

TEST(OrderContenders, SortsByParsedSequenceNotByName) {
  // Lexical order of whole names would put uid "f..." after "0..." regardless
  // of sequence (ZOOKEEPER-2931); the parsed suffix must decide.
  std::vector<std::string> children = {
      Node('x', 3, "0000000000000000"), Node('x', 1, "ffffffffffffffff"),
      Node('x', 2, "8888888888888888")};
  EXPECT_EQ(Names(OrderContenders(children)),
            (std::vector<std::string>{children[1], children[2], children[0]}));
}

TEST(OrderContenders, IgnoresForeignChildren) {
  std::vector<std::string> children = {
      "lock-0000000000", Node('x', 5), "_c_abc-lock-0000000001", "readme",
      "x-0123-0000000002", Node('x', 7, "aaaaaaaaaaaaaaaa"), ""};
  auto q = OrderContenders(children);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].sequence, 5);
  EXPECT_EQ(q[1].sequence, 7);
}

TEST(OrderContenders, NumbersWithDifferentWidthsCompareNumerically) {
  // 10-digit zero-padded positives and 11-char negatives.
  std::vector<std::string> children = {Node('x', 100), Node('x', 99), Node('x', 1000000000)};
  auto q = OrderContenders(children);
  EXPECT_EQ(q[0].sequence, 99);
  EXPECT_EQ(q[1].sequence, 100);
  EXPECT_EQ(q[2].sequence, 1000000000);
}

TEST(OrderContenders, SequencesAcrossTheSigned32BitWrap) {
  // The parent's cversion wrapped: 2147483646, 2147483647, then -2147483648.
  std::vector<std::string> children = {
      Node('x', -2147483647, "cccccccccccccccc"), Node('x', 2147483647, "bbbbbbbbbbbbbbbb"),
      Node('x', -2147483648, "dddddddddddddddd"), Node('x', 2147483646, "aaaaaaaaaaaaaaaa")};
  auto q = OrderContenders(children);
  std::vector<int32_t> seqs;
  for (const auto& n : q) seqs.push_back(n.sequence);
  EXPECT_EQ(seqs, (std::vector<int32_t>{2147483646, 2147483647, -2147483648, -2147483647}));
}

TEST(OrderContenders, NegativeOnlyQueuesSortAscending) {
  // Long after the wrap every sequence is negative: plain numeric order.
  std::vector<std::string> children = {Node('x', -5), Node('x', -1000000000), Node('x', -6)};
  auto q = OrderContenders(children);
  EXPECT_EQ(q[0].sequence, -1000000000);
  EXPECT_EQ(q[1].sequence, -6);
  EXPECT_EQ(q[2].sequence, -5);
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

std::vector<ContenderName> Queue(const std::vector<std::string>& nodes) {
  return OrderContenders(nodes);
}

TEST(Decide, MutexHeadHoldsOthersWatchPredecessor) {
  auto q = Queue({Node('x', 1, "aaaaaaaaaaaaaaaa"), Node('x', 2, "bbbbbbbbbbbbbbbb"),
                  Node('x', 3, "cccccccccccccccc")});
  auto d0 = Decide(q, q[0].node, 1);
  ASSERT_TRUE(d0.ok());
  EXPECT_TRUE(d0->holds);
  EXPECT_EQ(d0->ahead, 0);
  auto d2 = Decide(q, q[2].node, 1);
  ASSERT_TRUE(d2.ok());
  EXPECT_FALSE(d2->holds);
  EXPECT_EQ(d2->watch, q[1].node);  // its predecessor, not the holder
  EXPECT_EQ(d2->ahead, 2);
}

TEST(Decide, SemaphoreWatchesTheNodeLimitPlacesAhead) {
  std::vector<std::string> nodes;
  const char* uids[] = {"aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "cccccccccccccccc",
                        "dddddddddddddddd", "eeeeeeeeeeeeeeee"};
  for (int i = 0; i < 5; ++i) nodes.push_back(Node('x', 10 + i, uids[i]));
  auto q = Queue(nodes);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Decide(q, q[i].node, 3)->holds) << i;
  auto d = Decide(q, q[4].node, 3);
  EXPECT_FALSE(d->holds);
  EXPECT_EQ(d->watch, q[1].node);
}

TEST(Decide, SharedWaitsOnlyForNearestExclusiveAhead) {
  auto q = Queue({Node('s', 1, "aaaaaaaaaaaaaaaa"), Node('x', 2, "bbbbbbbbbbbbbbbb"),
                  Node('s', 3, "cccccccccccccccc"), Node('s', 4, "dddddddddddddddd"),
                  Node('x', 5, "eeeeeeeeeeeeeeee")});
  EXPECT_TRUE(Decide(q, q[0].node, 1)->holds);
  auto x = Decide(q, q[1].node, 1);
  EXPECT_FALSE(x->holds);
  EXPECT_EQ(x->watch, q[0].node);
  auto s = Decide(q, q[3].node, 1);
  EXPECT_FALSE(s->holds);
  EXPECT_EQ(s->watch, q[1].node);  // the exclusive, not the shared just ahead
  auto x2 = Decide(q, q[4].node, 1);
  EXPECT_EQ(x2->watch, q[3].node);
}

TEST(Decide, SelfMissingIsNotFoundAndBadLimitIsInvalid) {
  auto q = Queue({Node('x', 1)});
  EXPECT_EQ(Decide(q, Node('x', 9, "ffffffffffffffff"), 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Decide(q, q[0].node, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Decide, WrapDoesNotLetTheNewestHold) {
  // -2147483648 was created after 2147483647: it must wait.
  auto q = Queue({Node('x', -2147483648, "bbbbbbbbbbbbbbbb"),
                  Node('x', 2147483647, "aaaaaaaaaaaaaaaa")});
  auto newest = Decide(q, Node('x', -2147483648, "bbbbbbbbbbbbbbbb"), 1);
  ASSERT_TRUE(newest.ok());
  EXPECT_FALSE(newest->holds);
  EXPECT_TRUE(Decide(q, Node('x', 2147483647, "aaaaaaaaaaaaaaaa"), 1)->holds);
}

}  // namespace
}  // namespace turnstile
