// TimerQueue (server/engine/timer_queue.h), the engine's timers: deadline
// order, cancellation, and the wake-up rule (the thread is woken only for a
// timer due before it would look anyway), which must never make a timer
// late: one due earlier than the thread's sleep wakes it, and one due after
// a cancelled earliest timer still runs.
#include "server/engine/timer_queue.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace turnstile {
namespace {

using Clock = TimerQueue::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(TimerQueue, RunsInDeadlineOrderAndNeverACancelledOne) {
  TimerQueue q;
  std::mutex mu;
  std::vector<int> order;
  absl::Notification last;
  std::atomic<bool> cancelled_ran{false};
  const auto now = Clock::now();
  q.Schedule(now + milliseconds(60), [&] {
    std::lock_guard<std::mutex> l(mu);
    order.push_back(3);
    last.Notify();
  });
  q.Schedule(now + milliseconds(20), [&] {
    std::lock_guard<std::mutex> l(mu);
    order.push_back(1);
  });
  TimerQueue::TimerId gone = q.Schedule(now + milliseconds(30), [&] { cancelled_ran = true; });
  q.Schedule(now + milliseconds(40), [&] {
    std::lock_guard<std::mutex> l(mu);
    order.push_back(2);
  });
  q.Cancel(gone);
  ASSERT_TRUE(last.WaitForNotificationWithTimeout(absl::Seconds(10)));
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(cancelled_ran.load());
  EXPECT_EQ(q.size(), 0u);
}

TEST(TimerQueue, AnEarlierTimerWakesTheSleepingThread) {
  TimerQueue q;
  absl::Notification far_ran, near_ran;
  // The thread goes to sleep until an hour from now...
  q.ScheduleAfter(std::chrono::hours(1), [&] { far_ran.Notify(); });
  absl::Notification idle;
  // ...(wait until it has looked at it: a timer due now runs first)...
  q.ScheduleAfter(milliseconds(0), [&] { idle.Notify(); });
  ASSERT_TRUE(idle.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // ...and a timer due in 20 ms must wake it, not wait for the hour.
  q.ScheduleAfter(milliseconds(20), [&] { near_ran.Notify(); });
  EXPECT_TRUE(near_ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_FALSE(far_ran.HasBeenNotified());
}

TEST(TimerQueue, ATimerAfterACancelledEarliestOneStillRuns) {
  // The thread sleeps until the cancelled timer's deadline and is not woken
  // for the later one: it must look again then and run it.
  TimerQueue q;
  absl::Notification idle, ran;
  q.ScheduleAfter(milliseconds(0), [&] { idle.Notify(); });
  ASSERT_TRUE(idle.WaitForNotificationWithTimeout(absl::Seconds(10)));
  for (int i = 0; i < 20; ++i) {
    // The W1 pattern: a wait timeout scheduled, cancelled at the grant,
    // the next cycle's a little later.
    TimerQueue::TimerId t = q.ScheduleAfter(milliseconds(50), [] {});
    q.Cancel(t);
  }
  q.ScheduleAfter(milliseconds(80), [&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(q.size(), 0u);
}

}  // namespace
}  // namespace turnstile
