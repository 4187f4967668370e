#include "trainer/metrics/metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "operator/progress/progress.h"
#include "operator/progress/prometheus_text.h"

namespace kubetrain::trainer {
namespace {

using namespace std::chrono_literals;

TEST(TrainerMetricsTest, NoStepBeforeTrainingStarts) {
  TrainerMetrics m;
  const std::string text = m.Render(TrainerMetrics::WallClock::now());
  EXPECT_EQ(text.find("kubetrain_trainer_step "), std::string::npos) << text;
  // What the operator makes of it: not a trainer (yet), no progress.
  EXPECT_EQ(progress::TrainerSampleFromText(text).status().code(), StatusCode::kNotFound);
}

TEST(TrainerMetricsTest, RendersWhatTheOperatorReads) {
  TrainerMetrics m;
  m.StartTraining(100, 1000);
  m.SetStep(250, 0.4375);
  m.SetRates(5120, 10);
  m.AddPsBytes(1000, 3000);
  m.AddPsBytes(24, 0);
  const auto t0 = std::chrono::floor<std::chrono::milliseconds>(TrainerMetrics::WallClock::now());
  m.CheckpointCommitted(200, t0);
  const std::string text = m.Render(t0 + 90s);
  auto samples = progress::ParsePrometheusText(text);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString() << "\n" << text;
  EXPECT_EQ(progress::FindValue(*samples, "kubetrain_trainer_step"), 250);
  EXPECT_EQ(progress::FindValue(*samples, "kubetrain_trainer_total_steps"), 1000);
  EXPECT_EQ(progress::FindValue(*samples, "kubetrain_trainer_loss"), 0.4375);
  EXPECT_EQ(progress::FindValue(*samples, "kubetrain_trainer_samples_per_second"), 5120);
  EXPECT_EQ(progress::FindValue(*samples, "kubetrain_trainer_steps_per_second"), 10);
  EXPECT_EQ(progress::FindValue(*samples, "kubetrain_trainer_ps_sent_bytes_total"), 1024);
  EXPECT_EQ(progress::FindValue(*samples, "kubetrain_trainer_ps_received_bytes_total"), 3000);
  EXPECT_EQ(progress::FindValue(*samples, "kubetrain_trainer_checkpoint_step"), 200);
  // A worker has no push counters; a PS has both once it got a push.
  EXPECT_EQ(text.find("pushes"), std::string::npos) << text;
  EXPECT_EQ(progress::FindValue(*samples, "kubetrain_trainer_checkpoint_age_seconds"), 90);
  auto s = progress::TrainerSampleFromText(text);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->step, 250);
}

TEST(TrainerMetricsTest, PsCountsAppliedAndDuplicatePushes) {
  TrainerMetrics m;
  m.AddPsPushes(true);
  m.AddPsPushes(true);
  m.AddPsPushes(false);
  auto samples = progress::ParsePrometheusText(m.Render(TrainerMetrics::WallClock::now()));
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  EXPECT_EQ(progress::FindValue(*samples, "kubetrain_trainer_ps_pushes_applied_total"), 2);
  EXPECT_EQ(progress::FindValue(*samples, "kubetrain_trainer_ps_pushes_duplicate_total"), 1);
}

TEST(MetricsServerTest, ServesMetricsOverHttp) {
  TrainerMetrics m;
  m.StartTraining(0, 50);
  m.SetStep(7, 0.5);
  MetricsServer server(&m);
  auto port = server.Start(0);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  httplib::Client client("127.0.0.1", *port);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("kubetrain_trainer_step 7\n"), std::string::npos) << res->body;
  EXPECT_EQ(client.Get("/other")->status, 404);
  // A second server cannot take the same port: an error, not a crash.
  MetricsServer second(&m);
  EXPECT_EQ(second.Start(*port).status().code(), StatusCode::kUnavailable);
  server.Stop();
}

TEST(MetricsServerTest, WaitUntilServedReturnsOnceTheLastStepWasRead) {
  TrainerMetrics m;
  m.StartTraining(0, 50);
  m.SetStep(49, 0.5);
  MetricsServer server(&m);
  // Not serving: nothing to wait for.
  EXPECT_FALSE(server.WaitUntilServed(m.version(), std::chrono::steady_clock::now()));
  auto port = server.Start(0);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  httplib::Client client("127.0.0.1", *port);
  ASSERT_TRUE(client.Get("/metrics"));
  m.SetStep(50, 0.4);
  const uint64_t last = m.version();
  // The read above showed step 49, not the last step.
  EXPECT_FALSE(server.WaitUntilServed(last, std::chrono::steady_clock::now()));
  // A reader that comes while the trainer waits ends the wait.
  std::thread reader([&] {
    auto res = httplib::Client("127.0.0.1", *port).Get("/metrics");
    ASSERT_TRUE(res);
    EXPECT_NE(res->body.find("kubetrain_trainer_step 50\n"), std::string::npos) << res->body;
  });
  EXPECT_TRUE(
      server.WaitUntilServed(last, std::chrono::steady_clock::now() + std::chrono::minutes(5)));
  reader.join();
  server.Stop();
}

}  // namespace
}  // namespace kubetrain::trainer
