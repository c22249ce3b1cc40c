// Gather (server/engine/gather.h): a fan-out's answers in their slots; the
// last answer, from whichever thread, completes the call exactly once.
#include "server/engine/gather.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace turnstile {
namespace {

TEST(Gather, TheLastAnswerCompletesWithEverySlotInOrder) {
  int calls = 0;
  std::vector<std::string> got;
  auto g = Gather<std::string>::New(3, [&](std::vector<std::string> answers) {
    ++calls;
    got = std::move(answers);
  });
  g->Answer(2, "c");
  g->Answer(0, "a");
  EXPECT_EQ(calls, 0) << "completed before the last answer";
  g->Answer(1, "b");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c"}));
}

// Answers from several threads at once (several shards' loops): done runs
// once, on the thread of the last answer, and sees every slot.
TEST(Gather, AnswersFromManyThreadsCompleteOnceWithAllOfThem) {
  constexpr int kThreads = 4;
  constexpr int kEach = 500;
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> calls{0};
    std::vector<int> got;
    auto g = Gather<int>::New(kThreads * kEach, [&](std::vector<int> answers) {
      ++calls;
      got = std::move(answers);
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([g, t] {
        for (int i = 0; i < kEach; ++i) {
          const int slot = i * kThreads + t;
          g->Answer(static_cast<size_t>(slot), slot + 1);
        }
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(calls.load(), 1);
    ASSERT_EQ(got.size(), static_cast<size_t>(kThreads * kEach));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<int>(i) + 1) << i;
  }
}

TEST(GatherDeathTest, MoreAnswersThanTheFanOutAbort) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(
      {
        auto g = Gather<int>::New(1, [](std::vector<int>) {});
        g->Answer(0, 1);
        g->Answer(0, 2);
      },
      "more answers than the fan-out");
  EXPECT_DEATH({ Gather<int>::New(0, [](std::vector<int>) {}); }, "a fan-out of no answers");
  EXPECT_DEATH(
      {
        auto g = Gather<int>::New(1, [](std::vector<int>) {});
        g->Answer(1, 1);
      },
      "beyond the fan-out");
}

}  // namespace
}  // namespace turnstile
