#include "operator/progress/progress.h"

#include <gtest/gtest.h>

#include <limits>

namespace kubetrain::progress {
namespace {

using std::chrono::seconds;
using Steady = ProgressTracker::SteadyTime;

const Steady kT0{};
const api::Time kWall0{seconds(1'800'000'000)};

TrainerSample At(int64_t step, int64_t total = 1000) {
  TrainerSample s;
  s.step = step;
  s.total_steps = total;
  s.samples_per_second = 2048.4;
  return s;
}

TEST(TrainerSampleTest, ReadsTheTrainerMetrics) {
  auto s = TrainerSampleFromText(
      "kubetrain_trainer_step 250\nkubetrain_trainer_total_steps 1000\n"
      "kubetrain_trainer_samples_per_second 5120.5\nkubetrain_trainer_steps_per_second 10\n"
      "kubetrain_trainer_loss 0.5\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->step, 250);
  EXPECT_EQ(s->total_steps, 1000);
  EXPECT_EQ(s->samples_per_second, 5120.5);
  EXPECT_EQ(s->steps_per_second, 10);
  EXPECT_EQ(s->loss, 0.5);
}

TEST(TrainerSampleTest, OtherMetricsAreNotFoundAndNonsenseIsInvalid) {
  EXPECT_EQ(TrainerSampleFromText("go_goroutines 7\n").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(TrainerSampleFromText("kubetrain_trainer_step 3\n").status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(TrainerSampleFromText("<html>").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainerSampleFromText("kubetrain_trainer_step -1\nkubetrain_trainer_total_steps 9\n")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainerSampleFromText("kubetrain_trainer_step NaN\nkubetrain_trainer_total_steps 9\n")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainerSampleFromText("kubetrain_trainer_step 1\nkubetrain_trainer_total_steps 1e30\n")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(FormatEtaTest, TwoUnitsAtMost) {
  EXPECT_EQ(FormatEta(seconds(0)), "0s");
  EXPECT_EQ(FormatEta(seconds(-5)), "0s");
  EXPECT_EQ(FormatEta(seconds(45)), "45s");
  EXPECT_EQ(FormatEta(seconds(60)), "1m");
  EXPECT_EQ(FormatEta(seconds(250)), "4m10s");
  EXPECT_EQ(FormatEta(seconds(3600 * 2 + 5 * 60 + 59)), "2h5m");
  EXPECT_EQ(FormatEta(seconds(86400 * 3 + 3600 * 4 + 1)), "3d4h");
}

TEST(ProgressTrackerTest, FirstReadingIsPublishedWithPercentAndNoEtaYet) {
  ProgressTracker t;
  auto p = t.Observe(At(250), "worker-0", kT0, kWall0);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 250);
  EXPECT_EQ(p->total_steps, 1000);
  EXPECT_EQ(p->percent, 25);
  EXPECT_EQ(p->samples_per_second, 2048);
  EXPECT_EQ(p->eta, "");  // one reading says nothing about the rate
  EXPECT_EQ(p->replica, "worker-0");
  EXPECT_EQ(p->update_time, kWall0);
}

TEST(ProgressTrackerTest, EtaFromTheStepRateBetweenReadings) {
  ProgressTracker t;
  t.Observe(At(100), "worker-0", kT0, kWall0);
  // 100 steps in 10 s: 10 steps/s, 800 left -> 80 s.
  auto p = t.Observe(At(200), "worker-0", kT0 + seconds(10), kWall0 + seconds(10));
  ASSERT_TRUE(p);  // the first ETA is worth a write
  EXPECT_EQ(p->eta, "1m20s");
  EXPECT_EQ(t.steps_per_second(), 10.0);
  // Then 200 steps in 10 s: smoothed to 15 steps/s; 600 left -> 40 s.
  t.Observe(At(400), "worker-0", kT0 + seconds(20), kWall0 + seconds(20));
  EXPECT_EQ(t.steps_per_second(), 15.0);
  EXPECT_EQ(t.current()->eta, "40s");
}

TEST(ProgressTrackerTest, TrainerRateGivesAnEtaBeforeASecondReading) {
  ProgressTracker t;
  TrainerSample s = At(500);
  s.steps_per_second = 5;
  auto p = t.Observe(s, "chief-0", kT0, kWall0);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->eta, "1m40s");
}

TEST(ProgressTrackerTest, PublishesOnlyMeaningfulChanges) {
  ProgressTracker t(ProgressTracker::Options{.min_publish_interval = seconds(30)});
  ASSERT_TRUE(t.Observe(At(100), "worker-0", kT0, kWall0));
  ASSERT_TRUE(t.Observe(At(110), "worker-0", kT0 + seconds(10), kWall0));  // first ETA
  // Same percent: no write, however often it is read.
  EXPECT_FALSE(t.Observe(At(115), "worker-0", kT0 + seconds(60), kWall0));
  // Percent changed but too soon after the last write: no write.
  ASSERT_TRUE(t.Observe(At(130), "worker-0", kT0 + seconds(80), kWall0));
  EXPECT_FALSE(t.Observe(At(150), "worker-0", kT0 + seconds(90), kWall0));
  EXPECT_EQ(t.published()->step, 130);
  EXPECT_EQ(t.current()->step, 150);
  // Interval passed and percent changed: write.
  auto p = t.Observe(At(160), "worker-0", kT0 + seconds(110), kWall0 + seconds(110));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->percent, 16);
  // Reaching 100% is written at once.
  EXPECT_TRUE(t.Observe(At(1000), "worker-0", kT0 + seconds(111), kWall0));
  EXPECT_EQ(t.published()->eta, "0s");
}

TEST(ProgressTrackerTest, ARestartIsPublishedAtOnceAndForgetsTheRate) {
  ProgressTracker t;
  t.Observe(At(400), "worker-0", kT0, kWall0);
  t.Observe(At(500), "worker-0", kT0 + seconds(10), kWall0);
  ASSERT_TRUE(t.steps_per_second());
  // Resumed from the checkpoint at 300: published at once, no stale rate.
  auto p = t.Observe(At(300), "worker-0", kT0 + seconds(11), kWall0);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 300);
  EXPECT_EQ(p->eta, "");
  EXPECT_FALSE(t.steps_per_second());
  // Another total (a new spec) is a restart too; one restart per interval is
  // written at once, a second one waits for the interval.
  EXPECT_FALSE(t.Observe(At(301, 2000), "worker-0", kT0 + seconds(12), kWall0));
  auto q = t.Observe(At(302, 2000), "worker-0", kT0 + seconds(41), kWall0);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->total_steps, 2000);
}

// A trainer whose step goes back and forth must not turn
// every read into a status write.
TEST(ProgressTrackerTest, AStepGoingBackAndForthWritesAFewTimesPerIntervalAtMost) {
  ProgressTracker t(ProgressTracker::Options{.min_publish_interval = seconds(30)});
  int writes = 0;
  constexpr int kReads = 300;  // one a second: 10 intervals
  for (int i = 0; i < kReads; ++i) {
    if (t.Observe(At(i % 2 == 0 ? 500 : 100), "worker-0", kT0 + seconds(i), kWall0)) ++writes;
  }
  EXPECT_LE(writes, 3 * (kReads / 30) + 3);
  // The last state is still published within an interval of the last write.
  EXPECT_TRUE(t.Observe(At(100), "worker-0", kT0 + seconds(kReads + 30), kWall0));
}

TEST(ProgressTrackerTest, ARestartWithTheSamePercentIsStillPublishedAfterTheInterval) {
  ProgressTracker t(ProgressTracker::Options{.min_publish_interval = seconds(30)});
  ASSERT_TRUE(t.Observe(At(100), "worker-0", kT0, kWall0));
  ASSERT_TRUE(t.Observe(At(99), "worker-0", kT0 + seconds(1), kWall0));    // at once
  EXPECT_FALSE(t.Observe(At(100), "worker-1", kT0 + seconds(2), kWall0));  // another replica
  auto p = t.Observe(At(100), "worker-1", kT0 + seconds(31), kWall0);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->replica, "worker-1");
}

// A workload's absurd rate used to print as -9223372036854775808.
TEST(ProgressTrackerTest, RatesBeyondInt64AreUnknownNotNegative) {
  for (const char* value : {"1e300", "9.3e18", "+Inf", "NaN", "-5"}) {
    auto s = TrainerSampleFromText(std::string("kubetrain_trainer_step 1\n"
                                               "kubetrain_trainer_total_steps 9\n"
                                               "kubetrain_trainer_samples_per_second ") +
                                   value + "\nkubetrain_trainer_steps_per_second " + value + "\n");
    ASSERT_TRUE(s.ok()) << value << ": " << s.status().ToString();
    ProgressTracker t;
    auto p = t.Observe(*s, "worker-0", kT0, kWall0);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->samples_per_second, 0) << value;
  }
  // A sample built by other code (kubetrain run) is guarded too.
  TrainerSample s = At(1);
  for (double v : {1e300, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN(), -1.0}) {
    s.samples_per_second = v;
    s.steps_per_second = v;
    ProgressTracker t;
    auto p = t.Observe(s, "worker-0", kT0, kWall0);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->samples_per_second, 0) << v;
  }
}

TEST(ProgressTrackerTest, ZeroTotalIsZeroPercentAndStepsBeyondTheTotalAre100) {
  ProgressTracker t;
  EXPECT_EQ(t.Observe(At(5, 0), "worker-0", kT0, kWall0)->percent, 0);
  ProgressTracker u;
  EXPECT_EQ(u.Observe(At(1200, 1000), "worker-0", kT0, kWall0)->percent, 100);
}

}  // namespace
}  // namespace kubetrain::progress

namespace kubetrain::progress {
namespace {

// The loss reaches status.progress.loss for a sweep's early stopping.
TEST(ProgressTrackerTest, CarriesTheLossFromTheFirstStepAndMarksADivergedOne) {
  auto text = [](const char* step, const char* loss) {
    return std::string("kubetrain_trainer_step ") + step +
           "\nkubetrain_trainer_total_steps 1000\nkubetrain_trainer_loss " + loss + "\n";
  };
  ProgressTracker t;
  const api::Time wall{std::chrono::seconds(1'800'000'000)};
  auto sample = TrainerSampleFromText(text("0", "0"));
  ASSERT_TRUE(sample.ok());
  // Step 0: the gauge holds no loss yet.
  ASSERT_TRUE(t.Observe(*sample, "worker-0", ProgressTracker::SteadyTime{}, wall));
  EXPECT_EQ(t.current()->loss, std::nullopt);
  sample = TrainerSampleFromText(text("10", "0.69"));
  ASSERT_TRUE(sample.ok());
  t.Observe(*sample, "worker-0", ProgressTracker::SteadyTime{} + std::chrono::seconds(1), wall);
  EXPECT_EQ(t.current()->loss, 0.69);
  sample = TrainerSampleFromText(text("20", "NaN"));
  ASSERT_TRUE(sample.ok()) << "a diverged loss still gives the step";
  EXPECT_TRUE(sample->loss_not_finite);
  t.Observe(*sample, "worker-0", ProgressTracker::SteadyTime{} + std::chrono::seconds(2), wall);
  EXPECT_EQ(t.current()->loss, api::kLossNotFinite);
  sample = TrainerSampleFromText(text("30", "+Inf"));
  ASSERT_TRUE(sample.ok());
  EXPECT_TRUE(sample->loss_not_finite);
}

}  // namespace
}  // namespace kubetrain::progress
