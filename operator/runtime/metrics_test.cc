#include "operator/runtime/metrics.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kubetrain::runtime
