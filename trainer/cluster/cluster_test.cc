#include "trainer/cluster/cluster.h"

#include <gtest/gtest.h>

#include <map>

namespace kubetrain::trainer {
namespace {

constexpr char kCluster[] =
    R"({"chief":["j-chief-0.ns.svc.cluster.local:2222"],
        "ps":["j-ps-0.ns.svc.cluster.local:2222","j-ps-1.ns.svc.cluster.local:2222"],
        "worker":["j-worker-0.ns.svc.cluster.local:2222","j-worker-1.ns.svc.cluster.local:2222"]})";

TEST(ClusterConfigTest, ParsesRolesAndFindsOwnTask) {
  auto info = ParseClusterConfig(kCluster, "worker-1");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->role, "worker");
  EXPECT_EQ(info->index, 1);
  EXPECT_EQ(info->NumPs(), 2);
  EXPECT_EQ(info->NumTrainers(), 3);
  EXPECT_EQ(info->TrainerRank(), 2);  // chief is rank 0
  EXPECT_FALSE(info->IsCoordinator());
  EXPECT_EQ(info->Members("ps")[1], "j-ps-1.ns.svc.cluster.local:2222");
}

TEST(ClusterConfigTest, ChiefIsCoordinator) {
  auto info = ParseClusterConfig(kCluster, "chief-0");
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->IsCoordinator());
}

TEST(ClusterConfigTest, WorkerZeroIsCoordinatorWithoutChief) {
  auto info = ParseClusterConfig(R"({"ps":["a:1"],"worker":["b:2","c:3"]})", "worker-0");
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->IsCoordinator());
  EXPECT_EQ(info->TrainerRank(), 0);
}

TEST(ClusterConfigTest, PsHasNoTrainerRank) {
  auto info = ParseClusterConfig(kCluster, "ps-1");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->TrainerRank(), -1);
}

TEST(ClusterConfigTest, PodNameNotInConfigIsPreciseError) {
  auto info = ParseClusterConfig(kCluster, "worker-2");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find("worker-2 is not in the cluster"), std::string::npos)
      << info.status().message();
  EXPECT_NE(info.status().message().find("has 2 member(s)"), std::string::npos);
}

TEST(ClusterConfigTest, RejectsMalformedInputs) {
  struct Case {
    const char* cluster;
    const char* pod;
    const char* expect;
  };
  const Case cases[] = {
      {"{not json", "worker-0", "not valid JSON"},
      {R"({"ps":["a:1"],})", "ps-0", "not valid JSON"},  // strict: no trailing commas
      {R"(["a:1"])", "ps-0", "must be a JSON object"},
      {R"({"gpu":["a:1"]})", "ps-0", "unknown role \"gpu\""},
      {R"({"ps":"a:1"})", "ps-0", "must be a list"},
      {R"({"ps":[1]})", "ps-0", "ps[0] is not a string"},
      {R"({"ps":["a"]})", "ps-0", "is not \"host:port\""},
      {R"({"ps":["a:0"]})", "ps-0", "invalid port"},
      {R"({"ps":["a:99999"]})", "ps-0", "invalid port"},
      {R"({"ps":["a:1"]})", "ps0", "is not \"<role>-<index>\""},
      {R"({"ps":["a:1"]})", "ps-x", "index is not a non-negative integer"},
      {R"({"ps":["a:1"]})", "ps--1", "unknown role"},
      {R"({"ps":["a:1"]})", "ps-01", "index is not"},
      {R"({"ps":["a:1"]})", "trainer-0", "unknown role \"trainer\""},
      {R"({"ps":["a:1"]})", "worker-0", "worker-0 is not in the cluster"},
      {R"({"chief":["a:1","b:2"]})", "chief-0", "at most one chief"},
  };
  for (const Case& c : cases) {
    auto info = ParseClusterConfig(c.cluster, c.pod);
    ASSERT_FALSE(info.ok()) << c.cluster << " " << c.pod;
    EXPECT_NE(info.status().message().find(c.expect), std::string::npos)
        << "for " << c.cluster << " / " << c.pod << ": " << info.status().message();
  }
}

TEST(ClusterConfigTest, EvaluatorNeedsNoAddress) {
  auto info = ParseClusterConfig(R"({"ps":["a:1"],"worker":["b:2"]})", "evaluator-0");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->role, "evaluator");
  EXPECT_EQ(info->TrainerRank(), -1);
}

TEST(SplitHostPortTest, HandlesNamesAndIpv6) {
  auto a = SplitHostPort("j-ps-0.ns.svc.cluster.local:2222");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "j-ps-0.ns.svc.cluster.local");
  EXPECT_EQ(a->port, 2222);
  auto b = SplitHostPort("[::1]:7000");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 7000);
  EXPECT_FALSE(SplitHostPort("::1:7000").ok());
  EXPECT_FALSE(SplitHostPort(":7000").ok());
  EXPECT_FALSE(SplitHostPort("host:7000x").ok());
}

TEST(TfConfigTest, ParsesTask) {
  auto info = ParseTfConfig(
      R"({"cluster":{"ps":["a:1"],"worker":["b:2","c:3"]},"task":{"type":"worker","index":1},
          "environment":"cloud"})");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->TaskName(), "worker-1");
  EXPECT_EQ(info->TrainerRank(), 1);
}

TEST(TfConfigTest, RejectsBadTask) {
  EXPECT_FALSE(ParseTfConfig(R"({"cluster":{"ps":["a:1"]}})").ok());
  EXPECT_FALSE(ParseTfConfig(R"({"cluster":{"ps":["a:1"]},"task":{"type":"ps","index":-1}})").ok());
  EXPECT_FALSE(
      ParseTfConfig(R"({"cluster":{"ps":["a:1"]},"task":{"type":"ps","index":"0"}})").ok());
  auto missing = ParseTfConfig(R"({"cluster":{"ps":["a:1"]},"task":{"type":"ps","index":3}})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("ps-3 is not in the cluster"), std::string::npos);
}

TEST(ClusterFromEnvTest, PrefersClusterConfigThenTfConfig) {
  std::map<std::string, std::string> env = {
      {"CLUSTER_CONFIG", R"({"ps":["a:1"],"worker":["b:2"]})"},
      {"POD_NAME", "ps-0"},
      {"TF_CONFIG", R"({"cluster":{"worker":["b:2"]},"task":{"type":"worker","index":0}})"}};
  auto getenv_fn = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto info = ClusterFromEnv(getenv_fn);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->role, "ps");
  env.erase("CLUSTER_CONFIG");
  info = ClusterFromEnv(getenv_fn);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->role, "worker");
  env.erase("TF_CONFIG");
  info = ClusterFromEnv(getenv_fn);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kNotFound);
}

TEST(ClusterFromEnvTest, ClusterConfigWithoutPodNameIsError) {
  auto info = ClusterFromEnv([](const char* name) -> const char* {
    return std::string(name) == "CLUSTER_CONFIG" ? R"({"ps":["a:1"]})" : nullptr;
  });
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubetrain::trainer
