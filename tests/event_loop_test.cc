// EventLoop (server/zk/event_loop.h), the loop a ZooKeeper session (a
// shard) runs on: posted work in order on the loop thread, timers in
// deadline order with cancellation, set from the loop or any thread, and
// the wake-up rule (a sleeping loop is woken only for a timer due before
// it would look anyway), which must never make a timer late; an outside
// fd polled and dispatched,
// the source's own deadline honoured, and work posted after Stop run once
// by RunQueued.
#include "server/zk/event_loop.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace turnstile {
namespace {

using Clock = EventLoop::Clock;
constexpr absl::Duration kWithin = absl::Seconds(10);

TEST(EventLoop, PostedWorkRunsOnTheLoopThreadInPostOrder) {
  EventLoop loop;
  loop.Start(nullptr);
  constexpr int kThreads = 4, kEach = 500;
  std::mutex mu;
  std::vector<std::vector<int>> seen(kThreads);
  std::atomic<int> off_loop{0}, done{0};
  absl::Notification all;
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        loop.Post([&, t, i] {
          if (!loop.InLoopThread()) off_loop.fetch_add(1);
          {
            std::lock_guard<std::mutex> l(mu);
            seen[t].push_back(i);
          }
          if (done.fetch_add(1) + 1 == kThreads * kEach) all.Notify();
        });
      }
    });
  }
  for (auto& p : posters) p.join();
  ASSERT_TRUE(all.WaitForNotificationWithTimeout(kWithin));
  EXPECT_EQ(off_loop.load(), 0);
  EXPECT_FALSE(loop.InLoopThread());
  std::lock_guard<std::mutex> l(mu);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kEach));
    for (int i = 0; i < kEach; ++i) ASSERT_EQ(seen[t][i], i) << "poster " << t;
  }
}

// Run on the loop's thread (as a gRPC callback run inline there calls it)
// never overtakes work posted before it: an Abandon run in place while its
// stream's Open waits in the queue would leave the contender behind. With
// nothing waiting, it runs in place, before Run returns.
TEST(EventLoop, RunOnTheLoopThreadNeverOvertakesWorkPostedBefore) {
  EventLoop loop;
  loop.Start(nullptr);
  std::mutex mu;
  std::vector<std::string> order;
  auto note = [&](const std::string& what) {
    std::lock_guard<std::mutex> l(mu);
    order.push_back(what);
  };
  absl::Notification open_posted, ran_all;
  // The earlier work waits in the queue.
  loop.Post([&] {
    ASSERT_TRUE(open_posted.WaitForNotificationWithTimeout(kWithin));
    loop.Run([&] { note("abandon 1"); });
  });
  loop.Post([&] {});  // (keeps the next one out of the first batch)
  loop.Post([&] { note("open 1"); });
  open_posted.Notify();
  // The earlier work later in the batch now running.
  absl::Notification batch_posted;
  loop.Post([&] { ASSERT_TRUE(batch_posted.WaitForNotificationWithTimeout(kWithin)); });
  absl::Notification abandoned;
  loop.Post([&] {
    loop.Run([&] {
      note("abandon 2");
      abandoned.Notify();
    });
  });
  loop.Post([&] { note("open 2"); });
  batch_posted.Notify();
  ASSERT_TRUE(abandoned.WaitForNotificationWithTimeout(kWithin));
  // Nothing waiting: in place.
  loop.Post([&] {
    bool ran = false;
    loop.Run([&] { ran = true; });
    note(ran ? "in place" : "deferred");
    ran_all.Notify();
  });
  ASSERT_TRUE(ran_all.WaitForNotificationWithTimeout(kWithin));
  std::lock_guard<std::mutex> l(mu);
  auto at = [&](const std::string& what) {
    return std::find(order.begin(), order.end(), what) - order.begin();
  };
  ASSERT_EQ(order.size(), 5u);
  EXPECT_LT(at("open 1"), at("abandon 1"));
  EXPECT_LT(at("open 2"), at("abandon 2"));
  EXPECT_EQ(order.back(), "in place");
}

TEST(EventLoop, TimersRunInDeadlineOrderAndACancelledOneNever) {
  EventLoop loop;
  loop.Start(nullptr);
  std::vector<int> order;  // the loop's own
  std::atomic<bool> cancelled_ran{false};
  absl::Notification last;
  loop.Post([&] {
    const auto now = Clock::now();
    loop.Schedule(now + std::chrono::milliseconds(60), [&] {
      order.push_back(3);
      last.Notify();
    });
    loop.Schedule(now + std::chrono::milliseconds(20), [&] { order.push_back(1); });
    const EventLoop::TimerId gone =
        loop.Schedule(now + std::chrono::milliseconds(30), [&] { cancelled_ran = true; });
    loop.Schedule(now + std::chrono::milliseconds(40), [&] {
      order.push_back(2);
      // A timer may schedule another: due at once, it runs before "3".
      loop.Schedule(Clock::now(), [&] { order.push_back(25); });
    });
    loop.Cancel(gone);
    loop.Cancel(gone);  // twice: a no-op
    loop.Cancel(12345);  // never was: a no-op
  });
  ASSERT_TRUE(last.WaitForNotificationWithTimeout(kWithin));
  absl::Notification read;
  std::vector<int> got;
  loop.Post([&] {
    got = order;
    read.Notify();
  });
  ASSERT_TRUE(read.WaitForNotificationWithTimeout(kWithin));
  EXPECT_EQ(got, (std::vector<int>{1, 2, 25, 3}));
  EXPECT_FALSE(cancelled_ran.load());
}

// A pipe as the outside fd: the loop polls it with the source's interest
// and hands the readiness to Dispatch.
class PipeSource : public EventLoop::Source {
 public:
  PipeSource() { EXPECT_EQ(pipe(fds_), 0); }
  ~PipeSource() override {
    close(fds_[0]);
    close(fds_[1]);
  }
  EventLoop::Interest Prepare() override {
    ++prepares;
    EventLoop::Interest in;
    in.fd = fds_[0];
    in.events = POLLIN;
    in.timeout_ms = tick_ms.load();
    return in;
  }
  void Dispatch(short revents) override {
    if (revents & POLLIN) {
      char c;
      if (read(fds_[0], &c, 1) == 1) {
        got.push_back(c);
        if (got.size() == 3) three.Notify();
      }
    } else if (++idle == 5) {
      five_idle.Notify();
    }
  }
  void Write(char c) { ASSERT_EQ(write(fds_[1], &c, 1), 1); }

  std::atomic<int> tick_ms{-1};
  std::atomic<int> prepares{0};
  std::vector<char> got;  // the loop's
  int idle = 0;           // the loop's
  absl::Notification three, five_idle;

 private:
  int fds_[2] = {-1, -1};
};

TEST(EventLoop, TheSourcesFdIsPolledAndDispatched) {
  PipeSource src;
  EventLoop loop;
  loop.Start(&src);
  src.Write('a');
  src.Write('b');
  src.Write('c');
  ASSERT_TRUE(src.three.WaitForNotificationWithTimeout(kWithin));
  loop.Stop();
  EXPECT_EQ(src.got, (std::vector<char>{'a', 'b', 'c'}));
}

TEST(EventLoop, TheSourcesDeadlineWakesTheLoopWithoutInput) {
  // Without its deadline an idle loop would sleep in poll for ever: the C
  // client's pings and connect timeouts depend on it.
  PipeSource src;
  src.tick_ms = 5;
  EventLoop loop;
  loop.Start(&src);
  ASSERT_TRUE(src.five_idle.WaitForNotificationWithTimeout(kWithin));
  loop.Stop();
  EXPECT_TRUE(src.got.empty());
}

TEST(EventLoop, WorkPostedAfterStopRunsOnceInRunQueued) {
  EventLoop loop;
  loop.Start(nullptr);
  absl::Notification ran;
  loop.Post([&] { ran.Notify(); });
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(kWithin));
  loop.Stop();
  loop.Stop();  // idempotent
  int runs = 0, chained = 0;
  loop.Post([&] {
    ++runs;
    loop.Post([&] { ++chained; });  // queued by queued work: still run
  });
  loop.RunQueued();
  loop.RunQueued();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(chained, 1);
}

// After Stop and RunQueued, work posted to the loop still runs exactly
// once, in order and one at a time: on the posting thread, or on the thread
// already running the loop's queue. What is the loop's alone (an engine
// shard's state) stays single-threaded through a shutdown, and a late call
// is answered instead of lost.
TEST(EventLoop, AfterRunQueuedWorkRunsInPlaceOneAtATime) {
  EventLoop loop;
  loop.Start(nullptr);
  EXPECT_FALSE(loop.OwnedHere()) << "a running loop is owned by its thread";
  loop.Stop();
  EXPECT_TRUE(loop.OwnedHere()) << "a stopped loop's work may run here";
  loop.RunQueued();
  EXPECT_FALSE(loop.OwnedHere()) << "after RunQueued, work runs in place through Post only";
  int ran = 0;
  bool on_loop = false;
  loop.Post([&] {
    ++ran;
    on_loop = loop.InLoopThread() && loop.OwnedHere();
  });
  EXPECT_EQ(ran, 1) << "posted after RunQueued: runs in place";
  EXPECT_TRUE(on_loop) << "the thread running the loop's work is its loop thread";
  EXPECT_FALSE(loop.InLoopThread());

  // Work posted by work runs after it, not inside it.
  std::vector<int> order;
  loop.Post([&] {
    order.push_back(1);
    loop.Post([&] { order.push_back(3); });
    order.push_back(2);
  });
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));

  // Two threads posting at once: never two pieces of work at the same time.
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  std::atomic<int> done{0};
  constexpr int kEach = 2000;
  auto poster = [&] {
    for (int i = 0; i < kEach; ++i) {
      loop.Post([&] {
        if (inside.fetch_add(1) != 0) overlapped = true;
        done.fetch_add(1);
        inside.fetch_sub(1);
      });
    }
  };
  std::thread a(poster), b(poster);
  a.join();
  b.join();
  EXPECT_EQ(done.load(), 2 * kEach) << "every posted function runs, once";
  EXPECT_FALSE(overlapped.load()) << "two pieces of the loop's work ran at once";
}

TEST(EventLoop, TimersSetFromAnotherThreadRunInDeadlineOrderOnTheLoop) {
  // The engine's entry points schedule and cancel from gRPC's thread.
  EventLoop loop;
  loop.Start(nullptr);
  std::mutex mu;
  std::vector<int> order;
  absl::Notification last;
  std::atomic<bool> cancelled_ran{false}, off_loop{false};
  const auto now = Clock::now();
  auto note = [&](int i) {
    if (!loop.InLoopThread()) off_loop = true;
    std::lock_guard<std::mutex> l(mu);
    order.push_back(i);
  };
  loop.Schedule(now + std::chrono::milliseconds(60), [&] {
    note(3);
    last.Notify();
  });
  loop.Schedule(now + std::chrono::milliseconds(20), [&] { note(1); });
  const EventLoop::TimerId gone =
      loop.Schedule(now + std::chrono::milliseconds(30), [&] { cancelled_ran = true; });
  loop.ScheduleAfter(std::chrono::milliseconds(40), [&] { note(2); });
  loop.Cancel(gone);
  ASSERT_TRUE(last.WaitForNotificationWithTimeout(kWithin));
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(cancelled_ran.load());
  EXPECT_FALSE(off_loop.load());
  EXPECT_EQ(loop.timers(), 0u);
}

TEST(EventLoop, AnEarlierTimerFromAnotherThreadWakesTheSleepingLoop) {
  EventLoop loop;
  loop.Start(nullptr);
  absl::Notification far_ran, near_ran, idle;
  // The loop goes to sleep until an hour from now...
  loop.ScheduleAfter(std::chrono::hours(1), [&] { far_ran.Notify(); });
  // ...(wait until it has looked at it: a timer due now runs first)...
  loop.ScheduleAfter(std::chrono::milliseconds(0), [&] { idle.Notify(); });
  ASSERT_TRUE(idle.WaitForNotificationWithTimeout(kWithin));
  // ...and a timer due in 20 ms must wake it, not wait for the hour.
  loop.ScheduleAfter(std::chrono::milliseconds(20), [&] { near_ran.Notify(); });
  EXPECT_TRUE(near_ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_FALSE(far_ran.HasBeenNotified());
}

TEST(EventLoop, ATimerAfterACancelledEarliestOneStillRuns) {
  // The loop sleeps until the cancelled timer's deadline and is not woken
  // for the later one: it must look again then and run it.
  EventLoop loop;
  loop.Start(nullptr);
  absl::Notification idle, ran;
  loop.ScheduleAfter(std::chrono::milliseconds(0), [&] { idle.Notify(); });
  ASSERT_TRUE(idle.WaitForNotificationWithTimeout(kWithin));
  for (int i = 0; i < 20; ++i) {
    // The W1 pattern: a wait timeout scheduled, cancelled at the grant,
    // the next cycle's a little later.
    EventLoop::TimerId t = loop.ScheduleAfter(std::chrono::milliseconds(50), [] {});
    loop.Cancel(t);
  }
  loop.ScheduleAfter(std::chrono::milliseconds(80), [&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(loop.timers(), 0u);
}

TEST(EventLoop, NoTimerRunsAfterStop) {
  EventLoop loop;
  loop.Start(nullptr);
  std::atomic<bool> ran{false};
  loop.ScheduleAfter(std::chrono::milliseconds(30), [&] { ran = true; });
  loop.Stop();
  EXPECT_EQ(loop.timers(), 0u);
  loop.ScheduleAfter(std::chrono::milliseconds(0), [&] { ran = true; });  // dropped
  loop.RunQueued();
  EXPECT_EQ(loop.timers(), 0u);
  EXPECT_FALSE(ran.load());
}

}  // namespace
}  // namespace turnstile
