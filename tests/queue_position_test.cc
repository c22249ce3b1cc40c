// The queue-position policy (server/recipe/queue_position.h): what a waiter
// is told and when, without ZooKeeper or an engine.
#include "server/recipe/queue_position.h"

#include <chrono>

#include "gtest/gtest.h"

namespace turnstile {
namespace {

using std::chrono::milliseconds;

TEST(QueuePosition, CountsFromNextInLine) {
  // Mutex and read/write: the entries ahead (1 = only the holder ahead).
  EXPECT_EQ(QueuePosition(ContenderKind::kExclusive, 0, 1), 1);
  EXPECT_EQ(QueuePosition(ContenderKind::kExclusive, 0, 7), 7);
  EXPECT_EQ(QueuePosition(ContenderKind::kShared, 0, 3), 3);
  // A semaphore of N: the N holders ahead make it next in line.
  EXPECT_EQ(QueuePosition(ContenderKind::kSemaphore, 3, 3), 1);
  EXPECT_EQ(QueuePosition(ContenderKind::kSemaphore, 3, 5), 3);
  // Fewer than N ahead (a stale view while it is being granted): never 0.
  EXPECT_EQ(QueuePosition(ContenderKind::kSemaphore, 3, 1), 1);
}

TEST(QueuePosition, TheFirstReportAndEveryStepBackAreAlwaysSent) {
  EXPECT_TRUE(ShouldReportPosition(5000, -1, milliseconds(0)));
  EXPECT_TRUE(ShouldReportPosition(1, -1, milliseconds(0)));
  // Further back than told: at once, however far and however soon.
  EXPECT_TRUE(ShouldReportPosition(5001, 5000, milliseconds(0)));
  EXPECT_TRUE(ShouldReportPosition(3, 2, milliseconds(0)));
  // The same position is never sent twice.
  EXPECT_FALSE(ShouldReportPosition(7, 7, std::chrono::hours(1)));
}

TEST(QueuePosition, NearTheFrontEveryStepForwardIsSent) {
  for (int64_t p = 1; p <= kEveryChangeWithin; ++p) {
    EXPECT_TRUE(ShouldReportPosition(p, p + 1, milliseconds(0))) << p;
  }
  EXPECT_FALSE(ShouldReportPosition(kEveryChangeWithin + 1, kEveryChangeWithin + 2,
                                    milliseconds(0)));
}

TEST(QueuePosition, FurtherBackOnlyAHalvingOrASecondIsSent) {
  EXPECT_FALSE(ShouldReportPosition(999, 1000, milliseconds(10)));
  EXPECT_FALSE(ShouldReportPosition(501, 1000, milliseconds(999)));
  EXPECT_TRUE(ShouldReportPosition(500, 1000, milliseconds(0)));  // halved
  EXPECT_TRUE(ShouldReportPosition(999, 1000, kPositionRefresh));  // a second on
  // A long queue draining one handoff at a time: from 1000 to 1, every
  // step forward without time passing sends only the halvings and the last
  // kEveryChangeWithin places.
  int sent = 0;
  int64_t last = 1000;
  for (int64_t p = 999; p >= 1; --p) {
    if (ShouldReportPosition(p, last, milliseconds(0))) {
      ++sent;
      last = p;
    }
  }
  EXPECT_EQ(last, 1);
  // 1000 -> 500 -> 250 -> 125 -> 62 -> 31 -> 15, then 10, 9, ..., 1.
  EXPECT_EQ(sent, 6 + static_cast<int>(kEveryChangeWithin));
}

}  // namespace
}  // namespace turnstile
