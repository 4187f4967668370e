#include "trainer/metrics/metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <future>
#include <thread>

#include "common/http_test_client.h"
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
  // The connection counters beside the trainer's own families still parse as the operator reads.
  EXPECT_NE(res->body.find("kubetrain_trainer_http_connections_total{server=\"metrics\""),
            std::string::npos)
      << res->body;
  auto sample = progress::TrainerSampleFromText(res->body);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_EQ(sample->step, 7);
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

// Anyone who reaches the port can connect (a hostile neighbour): a header line that never ends is
// cut off at a few KiB, the connection closed, and the server still answers the next reader.
TEST(MetricsServerTest, EndlessHeaderIsCutOffAndClosed) {
  TrainerMetrics m;
  MetricsServer server(&m);
  auto port = server.Start(0);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  const int fd = http_test::Connect(*port, /*sndbuf=*/16384);
  ASSERT_GE(fd, 0);
  const auto sent =
      http_test::SendEndlessHeader(fd, size_t{64} << 20, http_test::Clock::now() + 10s);
  ::close(fd);
  ASSERT_TRUE(sent.has_value()) << "the server read 64 MiB of one header line and kept going";
  // The server's cap is 8 KiB; the rest is what the kernel buffers on the way.
  EXPECT_LT(*sent, size_t{4} << 20);
  auto res = http_test::Get(*port, "/metrics", 2s);
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->status, 200);
}

// A hostile neighbour: one client that sends half a request does not blind the
// endpoint for the operator's next read.
TEST(MetricsServerTest, HalfARequestDoesNotBlockTheNextReader) {
  TrainerMetrics m;
  m.StartTraining(0, 10);
  MetricsServer server(&m);
  auto port = server.Start(0);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  const int slow = http_test::Connect(*port);
  ASSERT_GE(slow, 0);
  ASSERT_GT(::send(slow, "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL), 0);
  auto res = http_test::Get(*port, "/metrics", 2s);
  ::close(slow);
  ASSERT_TRUE(res.has_value()) << "no answer within 2 s while one request was half sent";
  EXPECT_EQ(res->status, 200);
}

// A hostile neighbour: a client dripping one byte every 200 ms is closed at the
// request deadline (5 s), whatever its rate.
TEST(MetricsServerTest, SlowDripIsClosedAtTheRequestDeadline) {
  TrainerMetrics m;
  MetricsServer server(&m);
  auto port = server.Start(0);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  const int fd = http_test::Connect(*port);
  ASSERT_GE(fd, 0);
  std::string request = "GET /metrics HTTP/1.1\r\n";
  for (int i = 0; i < 20; ++i) request += "X-Drip-" + std::to_string(i) + ": slow\r\n";
  const auto closed_after = http_test::Drip(fd, request, 200ms, http_test::Clock::now() + 12s);
  ::close(fd);
  ASSERT_TRUE(closed_after.has_value()) << "a 1 byte / 200 ms drip kept its connection for 12 s";
  EXPECT_LT(*closed_after, 8s);
}

// The process's exit waits for Stop: stopping the server at any moment returns promptly, also
// right after Start (the listen loop not yet running).
TEST(MetricsServerTest, StartThenStopAtOnceReturnsPromptly1000Times) {
  auto done = std::make_shared<std::promise<std::string>>();
  auto finished = done->get_future();
  // On its own thread so that a hang fails the test instead of hanging it.
  std::thread([done] {
    std::string failure;
    for (int i = 0; i < 1000 && failure.empty(); ++i) {
      MetricsServer server(&TrainerMetrics::Global());
      auto port = server.Start(0);
      if (!port.ok()) failure = port.status().ToString();
      const auto t0 = std::chrono::steady_clock::now();
      server.Stop();
      if (std::chrono::steady_clock::now() - t0 > 2s)
        failure = "Stop took over 2 s at round " + std::to_string(i);
    }
    done->set_value(failure);
  }).detach();
  ASSERT_EQ(finished.wait_for(120s), std::future_status::ready)
      << "a Stop() right after Start() never returned";
  EXPECT_EQ(finished.get(), "");
}

}  // namespace
}  // namespace kubetrain::trainer
