// The recipe's handoff rules (server/recipe/handoff_rules.h) over a view,
// without ZooKeeper or an engine.
#include "server/recipe/handoff_rules.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace turnstile {
namespace {

using K = ContenderKind;

// A view from a string of kinds, front first: 'x' exclusive, 's' shared,
// '3' a semaphore of N = 3; entry i has sequence 10 * (i + 1) and node
// "n<seq>".
LockQueue View(const std::string& kinds) {
  LockQueue q;
  int32_t seq = 0;
  for (char k : kinds) {
    seq += 10;
    LockQueue::Entry e;
    e.node = "n" + std::to_string(seq);
    e.kind = k == 'x' ? K::kExclusive : k == 's' ? K::kShared : K::kSemaphore;
    if (e.kind == K::kSemaphore) e.max_holders = k - '0';
    q.Insert(seq, e);
  }
  return q;
}

TEST(WhoDecidesAgain, AReaderOrASemaphoreEntryLeavingConcernsOnlyTheOneBehind) {
  // s s s x: the second reader (20) leaves.
  LockQueue q = View("sssx");
  ASSERT_TRUE(q.Erase(20, "n20"));
  EXPECT_EQ(WhoDecidesAgain(q, 20, K::kShared), (std::vector<int32_t>{30}));
  LockQueue sem = View("3333");
  ASSERT_TRUE(sem.Erase(10, "n10"));
  EXPECT_EQ(WhoDecidesAgain(sem, 10, K::kSemaphore), (std::vector<int32_t>{20}));
}

TEST(WhoDecidesAgain, AWriterLeavingConcernsTheReadersBehindItAndTheWriterAfterThem) {
  // x s s s x s: the front writer leaves; the three readers watched it, and
  // the writer behind them is visited (it decides again only if it watched
  // the departed node); the reader after that writer is not.
  LockQueue q = View("xsssxs");
  ASSERT_TRUE(q.Erase(10, "n10"));
  EXPECT_EQ(WhoDecidesAgain(q, 10, K::kExclusive), (std::vector<int32_t>{20, 30, 40, 50}));
  // x x s: only the writer directly behind.
  LockQueue w = View("xxs");
  ASSERT_TRUE(w.Erase(10, "n10"));
  EXPECT_EQ(WhoDecidesAgain(w, 10, K::kExclusive), (std::vector<int32_t>{20}));
  // The last entry leaving: nobody.
  LockQueue one = View("x");
  ASSERT_TRUE(one.Erase(10, "n10"));
  EXPECT_TRUE(WhoDecidesAgain(one, 10, K::kExclusive).empty());
}

TEST(HandoffSuccessor, OnlyTheFrontHandsToTheOneBehindAndNeverASemaphore) {
  LockQueue q = View("xxx");
  const LockQueue::Entry* next = HandoffSuccessor(q, 10, "n10", K::kExclusive);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->node, "n20");
  // Not the front: its release grants no one.
  EXPECT_EQ(HandoffSuccessor(q, 20, "n20", K::kExclusive), nullptr);
  // Not in the view (another node at that sequence, or none), or no node yet.
  EXPECT_EQ(HandoffSuccessor(q, 10, "other", K::kExclusive), nullptr);
  EXPECT_EQ(HandoffSuccessor(q, 15, "n15", K::kExclusive), nullptr);
  EXPECT_EQ(HandoffSuccessor(q, 10, "", K::kExclusive), nullptr);
  // The last one: nobody behind.
  LockQueue one = View("x");
  EXPECT_EQ(HandoffSuccessor(one, 10, "n10", K::kExclusive), nullptr);
  // A reader at the front hands to the one behind it (a writer waiting on it).
  LockQueue rw = View("sx");
  ASSERT_NE(HandoffSuccessor(rw, 10, "n10", K::kShared), nullptr);
  // A semaphore's holder never does.
  LockQueue sem = View("333");
  EXPECT_EQ(HandoffSuccessor(sem, 10, "n10", K::kSemaphore), nullptr);
}

TEST(RevokeTargets, TheHoldersAheadAndNoOneBehindAWaitingWriter) {
  // An exclusive front holds alone.
  EXPECT_EQ(RevokeTargets(View("xxx"), "n30"), (std::vector<std::string>{"n10"}));
  // A run of readers at the front; the writer waiting behind them asks all.
  EXPECT_EQ(RevokeTargets(View("sssx"), "n40"),
            (std::vector<std::string>{"n10", "n20", "n30"}));
  // A reader behind a waiting writer asks nobody past the writer: only the
  // readers holding before it.
  EXPECT_EQ(RevokeTargets(View("ssxs"), "n40"), (std::vector<std::string>{"n10", "n20"}));
  // Nothing from its own node on.
  EXPECT_EQ(RevokeTargets(View("sss"), "n20"), (std::vector<std::string>{"n10"}));
  EXPECT_TRUE(RevokeTargets(View("x"), "n10").empty());
  // A semaphore: its oldest holder (one permit is all a waiter needs).
  EXPECT_EQ(RevokeTargets(View("3333"), "n40"), (std::vector<std::string>{"n10"}));
}

}  // namespace
}  // namespace turnstile
