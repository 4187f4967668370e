#include "operator/kube/rate_limiter.h"

#include <gtest/gtest.h>

namespace kubetrain::kube {
namespace {

using std::chrono::milliseconds;

TEST(TokenBucketTest, BurstIsFreeThenPacedAtQps) {
  TokenBucket b(10, 3);
  auto t0 = TokenBucket::Clock::time_point{} + std::chrono::hours(1);
  EXPECT_EQ(b.Reserve(t0).count(), 0);
  EXPECT_EQ(b.Reserve(t0).count(), 0);
  EXPECT_EQ(b.Reserve(t0).count(), 0);
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(b.Reserve(t0)).count(), 100);
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(b.Reserve(t0)).count(), 200);
}

TEST(TokenBucketTest, RefillsOverTimeUpToBurst) {
  TokenBucket b(10, 2);
  auto t0 = TokenBucket::Clock::time_point{} + std::chrono::hours(1);
  (void)b.Reserve(t0);
  (void)b.Reserve(t0);
  auto later = t0 + std::chrono::seconds(10);  // would be 100 tokens, capped at 2
  EXPECT_EQ(b.Reserve(later).count(), 0);
  EXPECT_EQ(b.Reserve(later).count(), 0);
  EXPECT_GT(b.Reserve(later).count(), 0);
}

TEST(TokenBucketTest, NonPositiveQpsIsUnlimited) {
  TokenBucket b(0, 1);
  auto t0 = TokenBucket::Clock::now();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(b.Reserve(t0).count(), 0);
}

}  // namespace
}  // namespace kubetrain::kube
