#include "operator/progress/endpoint.h"

#include <gtest/gtest.h>

namespace kubetrain::progress {
namespace {

using nlohmann::json;

json Pod(const char* containers, const char* ip = "10.244.1.7") {
  json p = {{"spec", {{"containers", json::parse(containers)}}}};
  if (ip != nullptr) p["status"]["podIP"] = ip;
  return p;
}

TEST(PodMetricsUrlTest, MainContainersMetricsPortAtThePodIp) {
  EXPECT_EQ(
      PodMetricsUrl(Pod(R"([{"name": "sidecar", "ports": [{"name": "metrics", "containerPort": 1}]},
                                 {"name": "trainer", "ports": [{"name": "kubetrain", "containerPort": 2222},
                                                               {"name": "metrics", "containerPort": 9090}]}])")),
      "http://10.244.1.7:9090/metrics");
  EXPECT_EQ(PodMetricsUrl(
                Pod(R"([{"name": "main", "ports": [{"name": "metrics", "containerPort": 8000}]}])",
                    "fd00::5")),
            "http://[fd00::5]:8000/metrics");
}

TEST(PodMetricsUrlTest, NoIpOrNoMetricsPortIsNothingToRead) {
  EXPECT_EQ(PodMetricsUrl(Pod(
                R"([{"name": "trainer", "ports": [{"name": "metrics", "containerPort": 9090}]}])",
                nullptr)),
            std::nullopt);
  EXPECT_EQ(PodMetricsUrl(Pod(R"([{"name": "trainer", "ports": [{"containerPort": 9090}]}])")),
            std::nullopt);
  EXPECT_EQ(PodMetricsUrl(Pod(R"([{"name": "trainer"}])")), std::nullopt);
  EXPECT_EQ(PodMetricsUrl(Pod(
                R"([{"name": "trainer", "ports": [{"name": "metrics", "containerPort": "x"}]}])")),
            std::nullopt);
  EXPECT_EQ(
      PodMetricsUrl(
          Pod(R"([{"name": "trainer", "ports": [{"name": "metrics", "containerPort": 70000}]}])")),
      std::nullopt);
  EXPECT_EQ(PodMetricsUrl(json::array()), std::nullopt);
  EXPECT_EQ(PodMetricsUrl(json{{"spec", 3}, {"status", {{"podIP", "1.2.3.4"}}}}), std::nullopt);
}

}  // namespace
}  // namespace kubetrain::progress
