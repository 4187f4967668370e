#include "operator/sweep/median_stop.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace kubetrain::sweep {
namespace {

using api::CurvePoint;
using api::Direction;

using Curve = std::vector<CurvePoint>;

api::EarlyStopping Rule(int32_t min_trials, int64_t start_step) {
  api::EarlyStopping r;
  r.min_trials_required = min_trials;
  r.start_step = start_step;
  return r;
}

std::optional<api::EarlyStopRecord> Judge(const api::EarlyStopping& rule, Direction d,
                                          const std::vector<Curve>& completed, int64_t step,
                                          double value, const Curve& trial = {}) {
  std::vector<std::span<const CurvePoint>> spans(completed.begin(), completed.end());
  return MedianStop(rule, d, spans, trial, step, value);
}

TEST(RunningAverageAt, AveragesThePointsAtOrBeforeTheStep) {
  const Curve c = {{10, 0.9}, {20, 0.7}, {40, 0.2}};
  EXPECT_DOUBLE_EQ(*RunningAverageAt(c, 10), 0.9);
  EXPECT_DOUBLE_EQ(*RunningAverageAt(c, 39), 0.8);
  EXPECT_DOUBLE_EQ(*RunningAverageAt(c, 40), 0.6);
  EXPECT_EQ(RunningAverageAt(c, 9), std::nullopt);
}

TEST(MedianStop, StopsALossWorseThanTheMedianOfCompletedTrials) {
  const std::vector<Curve> done = {{{10, 0.5}}, {{10, 0.6}}, {{10, 0.7}}};
  auto r = Judge(Rule(3, 10), Direction::kMinimize, done, 10, 2.0);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, (api::EarlyStopRecord{10, 2.0, 0.6, 3}));
  EXPECT_FALSE(Judge(Rule(3, 10), Direction::kMinimize, done, 10, 0.55).has_value());
}

TEST(MedianStop, ATieWithTheMedianKeepsTheTrial) {
  const std::vector<Curve> done = {{{10, 0.5}}, {{10, 0.6}}, {{10, 0.7}}};
  EXPECT_FALSE(Judge(Rule(1, 1), Direction::kMinimize, done, 10, 0.6).has_value());
  EXPECT_FALSE(Judge(Rule(1, 1), Direction::kMaximize, done, 10, 0.6).has_value());
}

TEST(MedianStop, TheMedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  const std::vector<Curve> done = {{{5, 1.0}}, {{5, 2.0}}, {{5, 4.0}}, {{5, 8.0}}};
  auto r = Judge(Rule(4, 1), Direction::kMinimize, done, 5, 3.5);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->median, 3.0);
  EXPECT_FALSE(Judge(Rule(4, 1), Direction::kMinimize, done, 5, 3.0).has_value());
}

TEST(MedianStop, WaitsForMinTrialsRequired) {
  const std::vector<Curve> done = {{{10, 0.5}}, {{10, 0.6}}};
  EXPECT_FALSE(Judge(Rule(3, 1), Direction::kMinimize, done, 10, 9.0).has_value());
  EXPECT_TRUE(Judge(Rule(2, 1), Direction::kMinimize, done, 10, 9.0).has_value());
}

TEST(MedianStop, WaitsForStartStep) {
  const std::vector<Curve> done = {{{1, 0.5}}, {{1, 0.6}}, {{1, 0.7}}};
  EXPECT_FALSE(Judge(Rule(3, 50), Direction::kMinimize, done, 49, 9.0).has_value());
  EXPECT_TRUE(Judge(Rule(3, 50), Direction::kMinimize, done, 50, 9.0).has_value());
}

TEST(MedianStop, FollowsTheDirection) {
  const std::vector<Curve> done = {{{10, 0.70}}, {{10, 0.75}}, {{10, 0.80}}};
  // Maximize (an AUC): lower is worse.
  EXPECT_TRUE(Judge(Rule(3, 1), Direction::kMaximize, done, 10, 0.6).has_value());
  EXPECT_FALSE(Judge(Rule(3, 1), Direction::kMaximize, done, 10, 0.9).has_value());
  // Minimize (a loss): higher is worse.
  EXPECT_FALSE(Judge(Rule(3, 1), Direction::kMinimize, done, 10, 0.6).has_value());
  EXPECT_TRUE(Judge(Rule(3, 1), Direction::kMinimize, done, 10, 0.9).has_value());
  // The best value so far is judged: an earlier 0.85 keeps a maximizing trial now at 0.6.
  EXPECT_FALSE(
      Judge(Rule(3, 1), Direction::kMaximize, done, 10, 0.6, Curve{{5, 0.85}}).has_value());
  EXPECT_FALSE(
      Judge(Rule(3, 1), Direction::kMinimize, done, 10, 0.9, Curve{{5, 0.65}}).has_value());
}

TEST(MedianStop, ComparesTheBestSoFarWithRunningAveragesUpToTheStep) {
  // Running averages at step 25: (1.0+0.8)/2 = 0.9, (0.9+0.4)/2 = 0.65, 0.6 (step 40 not yet):
  // median 0.65. Their last values at 25 (0.8, 0.4, 0.6) would have had a median of 0.6.
  const std::vector<Curve> done = {
      {{10, 1.0}, {20, 0.8}, {30, 0.1}}, {{10, 0.9}, {25, 0.4}}, {{10, 0.6}, {40, 0.2}}};
  auto r = Judge(Rule(3, 1), Direction::kMinimize, done, 25, 0.7);
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->median, 0.65);
  EXPECT_FALSE(Judge(Rule(3, 1), Direction::kMinimize, done, 25, 0.62).has_value());
  // A noisy reading above the median with a best (0.5 at step 20) below it keeps the trial.
  EXPECT_FALSE(Judge(Rule(3, 1), Direction::kMinimize, done, 25, 0.7, Curve{{10, 0.8}, {20, 0.5}}));
  // Readings after the step are not the trial's best by then.
  EXPECT_TRUE(Judge(Rule(3, 1), Direction::kMinimize, done, 25, 0.7, Curve{{30, 0.1}}));
}

TEST(MedianStop, ATrialWithNoReadingYetAtTheStepIsNotCounted) {
  // The third completed trial was first read at step 50: it says nothing about step 20.
  const std::vector<Curve> done = {{{10, 0.5}}, {{10, 0.6}}, {{50, 0.1}}};
  EXPECT_FALSE(Judge(Rule(3, 1), Direction::kMinimize, done, 20, 9.0).has_value());
  auto r = Judge(Rule(2, 1), Direction::kMinimize, done, 20, 9.0);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->trials, 2);
  EXPECT_EQ(r->median, 0.55);
  EXPECT_FALSE(Judge(Rule(1, 1), Direction::kMinimize, std::vector<Curve>{{}}, 20, 9.0));
}

TEST(MedianStop, ADivergedLossIsWorseThanAnyMedian) {
  const std::vector<Curve> done = {{{10, 0.5}}, {{10, 0.6}}, {{10, 0.7}}};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(Judge(Rule(3, 1), Direction::kMinimize, done, 10, api::kLossNotFinite));
  EXPECT_TRUE(Judge(Rule(3, 1), Direction::kMinimize, done, 10, nan));
  EXPECT_TRUE(Judge(Rule(3, 1), Direction::kMaximize, done, 10, nan));
  // A NaN reading does not hide a better earlier one, nor is it ever the best.
  EXPECT_FALSE(Judge(Rule(3, 1), Direction::kMinimize, done, 10, nan, Curve{{5, 0.1}}));
}

TEST(RecordCurvePoint, KeepsTheFirstReadingOfEachTenthOfTheRunTo6Digits) {
  Curve c;
  EXPECT_TRUE(RecordCurvePoint(c, 1, 1000, 0.9));
  EXPECT_FALSE(RecordCurvePoint(c, 60, 1000, 0.8));  // same 100-step bucket as step 1
  EXPECT_TRUE(RecordCurvePoint(c, 100, 1000, 0.123456789));
  EXPECT_EQ(c.back().loss, 0.123457);
  EXPECT_FALSE(RecordCurvePoint(c, 40, 1000, 0.6));  // a restart went back: not recorded
  for (int64_t s = 51; s <= 5000; ++s) RecordCurvePoint(c, s, 1000, 0.5);
  EXPECT_LE(c.size(), api::kMaxCurvePoints);
  EXPECT_EQ(c.size(), api::kMaxCurvePoints);
  for (size_t i = 1; i < c.size(); ++i) EXPECT_LT(c[i - 1].step, c[i].step);
}

TEST(RecordCurvePoint, StepZeroIsNotAReading) {
  // A trial read before its first step (the gauge says 0) would keep a best loss of 0.
  Curve c;
  EXPECT_FALSE(RecordCurvePoint(c, 0, 1000, 0.0));
  EXPECT_TRUE(c.empty());
}

TEST(RecordCurvePoint, WithoutATotalEveryNewStepUntilFull) {
  Curve c;
  for (int64_t s = 1; s <= 100; ++s) RecordCurvePoint(c, s, 0, 1.0);
  EXPECT_EQ(c.size(), api::kMaxCurvePoints);
  EXPECT_EQ(c.back().step, static_cast<int64_t>(api::kMaxCurvePoints));
}

}  // namespace
}  // namespace kubetrain::sweep
