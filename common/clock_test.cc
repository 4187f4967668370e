#include "common/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace kubetrain {
namespace {

using namespace std::chrono_literals;

TEST(FakeClockTest, StandsStillUntilAdvanced) {
  FakeClock clock;
  const auto t0 = clock.Now();
  const auto w0 = clock.WallNow();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(1500ms);
  EXPECT_EQ(clock.Now() - t0, 1500ms);
  EXPECT_EQ(clock.WallNow() - w0, 1500ms);
  clock.Advance(-1s);  // time never goes back
  EXPECT_EQ(clock.Now() - t0, 1500ms);
}

TEST(FakeClockTest, SleepEndsWhenTheClockReachesItsDeadlineNotBefore) {
  FakeClock clock;
  std::atomic<bool> woke{false};
  std::jthread sleeper([&] {
    EXPECT_TRUE(clock.SleepFor(10s));
    woke = true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1, 10s));
  clock.Advance(9999ms);
  // Not due: Advance notified nobody, and a waiter leaves only when notified
  // (a spurious wakeup looks at the time and waits again).
  EXPECT_EQ(clock.Waiters(), 1);
  EXPECT_FALSE(woke.load());
  clock.Advance(1ms);
  sleeper.join();
  EXPECT_TRUE(woke.load());
  EXPECT_EQ(clock.Waiters(), 0);
}

TEST(FakeClockTest, WaitEndsOnTheWaitersOwnNotifyWithoutTimePassing) {
  FakeClock clock;
  std::mutex mu;
  std::condition_variable_any cv;
  bool ready = false;
  std::jthread waiter([&] {
    std::unique_lock lock(mu);
    EXPECT_TRUE(clock.WaitUntil(lock, cv, {}, clock.Now() + 1h, [&] { return ready; }));
  });
  ASSERT_TRUE(clock.AwaitWaiters(1, 10s));
  {
    std::lock_guard lock(mu);
    ready = true;
  }
  cv.notify_all();
  waiter.join();
  EXPECT_EQ(clock.Waiters(), 0);
}

TEST(FakeClockTest, StopEndsASleep) {
  FakeClock clock;
  std::jthread sleeper([&](std::stop_token stop) { EXPECT_FALSE(clock.SleepFor(1h, stop)); });
  ASSERT_TRUE(clock.AwaitWaiters(1, 10s));
  sleeper.request_stop();
  sleeper.join();
}

TEST(FakeClockTest, ADeadlineAlreadyPastDoesNotWait) {
  FakeClock clock;
  EXPECT_TRUE(clock.SleepUntil(clock.Now()));
  EXPECT_EQ(clock.Waiters(), 0);
}

// Many waiters and many small advances: every waiter ends (no wakeup is lost
// between a waiter's look at the time and its wait), each no earlier than its
// deadline.
TEST(FakeClockTest, NoWakeupIsLostUnderManyAdvances) {
  FakeClock clock;
  const auto t0 = clock.Now();
  std::atomic<int> early{0}, done{0};
  std::vector<std::jthread> sleepers;
  for (int i = 0; i < 8; ++i) {
    sleepers.emplace_back([&, i] {
      for (int round = 1; round <= 50; ++round) {
        const auto deadline = t0 + std::chrono::milliseconds(round * 10 + i);
        (void)clock.SleepUntil(deadline);
        if (clock.Now() < deadline) ++early;
      }
      ++done;
    });
  }
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  while (done.load() < 8 && std::chrono::steady_clock::now() < give_up) clock.Advance(1ms);
  EXPECT_EQ(done.load(), 8);
  EXPECT_EQ(early.load(), 0);
  sleepers.clear();
}

TEST(RealClockTest, SleepForWaitsAtLeastItsDurationAndStopEndsIt) {
  Clock& clock = RealClock();
  const auto t0 = clock.Now();
  EXPECT_TRUE(clock.SleepFor(20ms));
  EXPECT_GE(clock.Now() - t0, 20ms);
  std::stop_source stop;
  stop.request_stop();
  EXPECT_FALSE(clock.SleepFor(1h, stop.get_token()));
}

}  // namespace
}  // namespace kubetrain
