#include "operator/controller/metrics.h"

#include <gtest/gtest.h>

namespace kubetrain::controller {
namespace {

using std::chrono::milliseconds;

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

// The restart latency is measured from the first sign a pod is lost
// to the create of its replacement, once per loss.
TEST(MetricsTest, RestartLatencyFromTheFirstSignToTheReplacementsCreate) {
  runtime::Metrics registry;
  Metrics m(&registry);
  const auto t0 = std::chrono::steady_clock::now();
  m.PodCreated("ns/a-worker-0", t0);  // a first create: no loss pending, nothing observed
  m.PodLost("ns/a-worker-0", t0);     // seen Failed
  m.PodLost("ns/a-worker-0", t0 + milliseconds(100));  // then seen deleted: the start stays
  m.PodLost("ns/b-ps-0", t0 + milliseconds(50));
  EXPECT_EQ(m.PendingRestarts(), 2u);
  m.PodCreated("ns/a-worker-0", t0 + milliseconds(400));
  m.PodCreated("ns/a-worker-0", t0 + milliseconds(900));  // no second observation
  m.PodCreated("ns/b-ps-0", t0 + milliseconds(1550));
  EXPECT_EQ(m.PendingRestarts(), 0u);
  const std::string text = m.Render();
  EXPECT_TRUE(Has(text, "kubetrain_pod_restart_latency_seconds_bucket{le=\"0.3\"} 0")) << text;
  EXPECT_TRUE(Has(text, "kubetrain_pod_restart_latency_seconds_bucket{le=\"0.5\"} 1")) << text;
  EXPECT_TRUE(Has(text, "kubetrain_pod_restart_latency_seconds_bucket{le=\"1.5\"} 2")) << text;
  EXPECT_TRUE(Has(text, "kubetrain_pod_restart_latency_seconds_bucket{le=\"+Inf\"} 2")) << text;
  EXPECT_TRUE(Has(text, "kubetrain_pod_restart_latency_seconds_count 2")) << text;
  EXPECT_TRUE(Has(text, "kubetrain_pod_restart_latency_seconds_sum 1.9")) << text;
}

TEST(MetricsTest, LossesNeverReplacedAreBounded) {
  runtime::Metrics registry;
  Metrics m(&registry);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) m.PodLost("ns/p-" + std::to_string(i), t0);
  m.PodLost("ns/full", t0 + std::chrono::minutes(1));  // full, none stale: not kept
  EXPECT_EQ(m.PendingRestarts(), 10000u);
  m.PodLost("ns/later", t0 + std::chrono::minutes(11));  // the stale ones go
  EXPECT_EQ(m.PendingRestarts(), 1u);
}

}  // namespace
}  // namespace kubetrain::controller
