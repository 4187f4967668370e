#include "operator/runtime/http_endpoints.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "common/http_test_client.h"

namespace kubetrain::runtime {
namespace {

using std::chrono::seconds;

// A port that was free a moment ago (the kernel's choice for port 0).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

TEST(ParseListenAddressTest, SplitsHostAndPort) {
  auto a = ParseListenAddress("0.0.0.0:8080");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->first, "0.0.0.0");
  EXPECT_EQ(a->second, 8080);
  auto v6 = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->first, "[::1]");
  EXPECT_EQ(v6->second, 0);
}

TEST(ParseListenAddressTest, RefusesWhatIsNotHostPort) {
  for (const char* bad : {"8080", "host:", "host:http", "host:65536", "host:-1"}) {
    EXPECT_EQ(ParseListenAddress(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(OperatorEndpointsTest, ServesMetricsAndProbesOnTheirOwnPorts) {
  Readiness readiness;
  OperatorEndpoints endpoints([] { return std::string("kubetrain_up 1\n"); }, &readiness);
  const int metrics_port = FreePort();
  const int health_port = FreePort();
  ASSERT_NE(metrics_port, health_port);
  ASSERT_TRUE(endpoints
                  .Start("127.0.0.1:" + std::to_string(metrics_port),
                         "127.0.0.1:" + std::to_string(health_port))
                  .ok());

  auto metrics = http_test::Get(metrics_port, "/metrics", seconds(5));
  ASSERT_TRUE(metrics.has_value());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("kubetrain_up 1"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("kubetrain_operator_http_connections_total"), std::string::npos);
  // Each server serves only its own paths.
  auto wrong = http_test::Get(metrics_port, "/healthz", seconds(5));
  ASSERT_TRUE(wrong.has_value());
  EXPECT_EQ(wrong->status, 404);

  auto healthz = http_test::Get(health_port, "/healthz", seconds(5));
  ASSERT_TRUE(healthz.has_value());
  EXPECT_EQ(healthz->status, 200);
  EXPECT_EQ(healthz->body, "ok\n");
}

TEST(OperatorEndpointsTest, ReadyzFollowsReadiness) {
  Readiness readiness;
  OperatorEndpoints endpoints([] { return std::string(); }, &readiness);
  const int health_port = FreePort();
  ASSERT_TRUE(endpoints.Start("127.0.0.1:0", "127.0.0.1:" + std::to_string(health_port)).ok());
  readiness.Set(Readiness::State::kSyncing);
  auto syncing = http_test::Get(health_port, "/readyz", seconds(5));
  ASSERT_TRUE(syncing.has_value());
  EXPECT_EQ(syncing->status, 503);
  readiness.Set(Readiness::State::kSynced);
  auto synced = http_test::Get(health_port, "/readyz", seconds(5));
  ASSERT_TRUE(synced.has_value());
  EXPECT_EQ(synced->status, 200);
}

TEST(OperatorEndpointsTest, BadAddressIsInvalidArgumentNamingIt) {
  Readiness readiness;
  OperatorEndpoints endpoints([] { return std::string(); }, &readiness);
  const Status s = endpoints.Start("nonsense", "127.0.0.1:0");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("invalid /metrics address 'nonsense'"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace kubetrain::runtime
