#include "operator/runtime/health_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

namespace kubetrain::runtime {
namespace {

TEST(MetricsTest, RendersCountersAndGaugesInPrometheusFormat) {
  Metrics m;
  m.Help("kt_requests_total", "counter", "Requests.");
  m.Add("kt_requests_total", "code=\"200\"");
  m.Add("kt_requests_total", "code=\"200\"");
  m.Set("kt_queue_depth", "", 7);
  EXPECT_EQ(m.Get("kt_requests_total", "code=\"200\""), 2);
  std::string text = m.Render();
  EXPECT_NE(text.find("# HELP kt_requests_total Requests.\n# TYPE kt_requests_total counter\n"
                      "kt_requests_total{code=\"200\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE kt_queue_depth gauge\nkt_queue_depth 7\n"), std::string::npos)
      << text;
}

TEST(HealthServerTest, ServesHealthReadinessAndMetrics) {
  Metrics m;
  m.Add("kt_x_total");
  std::atomic<bool> ready{false};
  HealthServer server(&m, [&] { return ready.load(); });
  auto port = server.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  httplib::Client c("127.0.0.1", *port);
  auto waited = [&](const char* path) {
    for (int i = 0; i < 500; ++i) {  // the listener starts on its own thread
      if (auto r = c.Get(path)) return r->status;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
  };
  EXPECT_EQ(waited("/healthz"), 200);
  EXPECT_EQ(waited("/readyz"), 503);
  ready = true;
  EXPECT_EQ(waited("/readyz"), 200);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("kt_x_total 1"), std::string::npos) << metrics->body;
  server.Stop();
}

}  // namespace
}  // namespace kubetrain::runtime
