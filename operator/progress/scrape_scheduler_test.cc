#include "operator/progress/scrape_scheduler.h"

#include <gtest/gtest.h>

#include <map>

namespace kubetrain::progress {
namespace {

using namespace std::chrono_literals;
using Clock = ScrapeScheduler::Clock;

const Clock::time_point kT0 = Clock::time_point{} + 1000s;

ScrapeTarget Target(int i, std::string uid = "uid") {
  return {"http://10.0.0." + std::to_string(i) + ":9090/metrics", uid, "worker-0"};
}

// Drives the scheduler with a simulated clock: every due read completes after
// `read_time` with `ok`. Returns the reads per job key.
std::map<std::string, int> Simulate(ScrapeScheduler& s, Clock::duration length, bool ok,
                                    Clock::duration step = 10ms) {
  std::map<std::string, int> reads;
  for (auto now = kT0; now < kT0 + length; now += step) {
    Clock::duration wait{};
    while (auto due = s.Next(now, &wait)) {
      ++reads[due->key];
      EXPECT_TRUE(s.Done(*due, ok, now));
    }
  }
  return reads;
}

int Total(const std::map<std::string, int>& reads) {
  int n = 0;
  for (const auto& [k, v] : reads) n += v;
  return n;
}

TEST(ScrapeSchedulerTest, ManyJobsShareABoundedRate) {
  ScrapeScheduler s({.qps = 5, .burst = 5, .interval = 10s});
  for (int i = 0; i < 500; ++i) s.Set("ns/job-" + std::to_string(i), Target(i), kT0);
  auto reads = Simulate(s, 60s, /*ok=*/true);
  // 5/s over 60 s plus the burst, whatever the number of jobs.
  EXPECT_LE(Total(reads), 5 * 60 + 5);
  EXPECT_GE(Total(reads), 5 * 60 - 5);
  // Earliest first: nobody is read twice before everybody was read once.
  for (const auto& [key, n] : reads) EXPECT_LE(n, 1) << key;
}

TEST(ScrapeSchedulerTest, AJobIsReadAtMostOncePerInterval) {
  ScrapeScheduler s({.qps = 100, .burst = 100, .interval = 10s});
  s.Set("ns/a", Target(1), kT0);
  s.Set("ns/b", Target(2), kT0);
  auto reads = Simulate(s, 60s, /*ok=*/true);
  EXPECT_EQ(reads["ns/a"], 6);
  EXPECT_EQ(reads["ns/b"], 6);
}

TEST(ScrapeSchedulerTest, AFailingTargetBacksOffExponentiallyToTheCap) {
  ScrapeScheduler s(
      {.qps = 100, .burst = 100, .interval = 1s, .backoff_base = 10s, .backoff_max = 80s});
  s.Set("ns/other-image", Target(1), kT0);
  // Reads at 0, 10, 30, 70, 150, 230, 310, ... (10, 20, 40, 80, 80, ...).
  auto reads = Simulate(s, 300s, /*ok=*/false);
  EXPECT_EQ(reads["ns/other-image"], 6);
  EXPECT_EQ(s.failures("ns/other-image"), 6);
  // Without backoff the same 300 s would have been 300 reads.
}

TEST(ScrapeSchedulerTest, SuccessResetsTheBackoff) {
  ScrapeScheduler s({.qps = 100, .burst = 100, .interval = 1s, .backoff_base = 10s});
  s.Set("ns/a", Target(1), kT0);
  Clock::duration wait{};
  auto due = s.Next(kT0, &wait);
  ASSERT_TRUE(due);
  s.Done(*due, false, kT0);
  EXPECT_FALSE(s.Next(kT0 + 9s, &wait));
  EXPECT_EQ(wait, 1s);
  due = s.Next(kT0 + 10s, &wait);
  ASSERT_TRUE(due);
  s.Done(*due, true, kT0 + 10s);
  EXPECT_EQ(s.failures("ns/a"), 0);
  EXPECT_FALSE(s.Next(kT0 + 10s + 999ms, &wait));
  EXPECT_TRUE(s.Next(kT0 + 11s, &wait));
}

TEST(ScrapeSchedulerTest, ANewPodStartsAfreshAndAStaleReadIsIgnored) {
  ScrapeScheduler s({.qps = 100, .burst = 100, .interval = 1s, .backoff_base = 60s});
  s.Set("ns/a", Target(1, "pod-1"), kT0);
  Clock::duration wait{};
  auto first = s.Next(kT0, &wait);
  ASSERT_TRUE(first);
  s.Done(*first, false, kT0);
  EXPECT_FALSE(s.Next(kT0 + 1s, &wait));  // backing off
  // The same target again changes nothing.
  s.Set("ns/a", Target(1, "pod-1"), kT0 + 1s);
  EXPECT_FALSE(s.Next(kT0 + 1s, &wait));
  // The pod was replaced: due at once, failures forgotten.
  s.Set("ns/a", Target(2, "pod-2"), kT0 + 2s);
  EXPECT_EQ(s.failures("ns/a"), 0);
  auto second = s.Next(kT0 + 2s, &wait);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->target.pod_uid, "pod-2");
  // A read of the old pod that finishes late is ignored.
  EXPECT_FALSE(s.Done(*first, true, kT0 + 3s));
  EXPECT_TRUE(s.Done(*second, true, kT0 + 3s));
}

TEST(ScrapeSchedulerTest, InFlightJobIsNotHandedOutTwice) {
  ScrapeScheduler s({.qps = 100, .burst = 100, .interval = 1s});
  s.Set("ns/a", Target(1), kT0);
  Clock::duration wait{};
  ASSERT_TRUE(s.Next(kT0, &wait));
  EXPECT_FALSE(s.Next(kT0 + 5s, &wait));
  EXPECT_EQ(wait, Clock::duration::max());
}

TEST(ScrapeSchedulerTest, ACancelledReadIsDueAgainWithoutAFailure) {
  ScrapeScheduler s({.qps = 100, .burst = 100, .interval = 1s});
  s.Set("ns/a", Target(1), kT0);
  Clock::duration wait{};
  auto due = s.Next(kT0, &wait);
  ASSERT_TRUE(due);
  s.Cancel(*due);
  EXPECT_EQ(s.failures("ns/a"), 0);
  EXPECT_TRUE(s.Next(kT0, &wait));
}

TEST(ScrapeSchedulerTest, RemovedJobIsNotReadAndItsReadIsIgnored) {
  ScrapeScheduler s({});
  s.Set("ns/a", Target(1), kT0);
  Clock::duration wait{};
  auto due = s.Next(kT0, &wait);
  ASSERT_TRUE(due);
  s.Remove("ns/a");
  EXPECT_FALSE(s.Done(*due, true, kT0));
  EXPECT_FALSE(s.Next(kT0 + 1h, &wait));
  EXPECT_EQ(s.size(), 0u);
}

TEST(ScrapeSchedulerTest, WaitsForATokenWhenTheBucketIsEmpty) {
  ScrapeScheduler s({.qps = 2, .burst = 1, .interval = 1s});
  s.Set("ns/a", Target(1), kT0);
  s.Set("ns/b", Target(2), kT0);
  Clock::duration wait{};
  ASSERT_TRUE(s.Next(kT0, &wait));
  EXPECT_FALSE(s.Next(kT0, &wait));
  EXPECT_EQ(wait, 500ms);
  EXPECT_TRUE(s.Next(kT0 + 500ms, &wait));
}

}  // namespace
}  // namespace kubetrain::progress
