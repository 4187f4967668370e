#include "operator/local/pod_command.h"

#include <gtest/gtest.h>

namespace kubetrain::local {
namespace {

using nlohmann::json;

json Pod(json container) {
  return {{"metadata", {{"name", "j-worker-0"}, {"namespace", "ns1"}}},
          {"spec", {{"containers", json::array({container})}}}};
}

CommandContext Ctx() {
  return {"/opt/bin/kubetrain-trainer",
          "j-auth-local",
          std::string(64, 'a'),
          "/tmp/w0.log",
          "/nonexistent:/usr/bin:/bin",
          "/tmp/vol",
          "j-cluster",
          R"({"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]})"};
}

// The main container's command (the last one).
StatusOr<LocalCommand> LocalCommandFor(const json& pod, const CommandContext& ctx) {
  auto all = LocalCommandsFor(pod, ctx);
  if (!all.ok()) return all.status();
  return all->back();
}

TEST(IsTrainerImageTest, AcceptsRegistryTagAndDigestRejectsOthers) {
  EXPECT_TRUE(IsTrainerImage("kubetrain-trainer"));
  EXPECT_TRUE(IsTrainerImage("ghcr.io/acme/kubetrain-trainer:0.3"));
  EXPECT_TRUE(IsTrainerImage("localhost:5000/kubetrain-trainer@sha256:abc"));
  EXPECT_FALSE(IsTrainerImage("busybox:1.36"));
  EXPECT_FALSE(IsTrainerImage("kubetrain-trainer-old"));
  EXPECT_FALSE(IsTrainerImage("kubetrain-trainer/other"));
}

TEST(ExpandVarsTest, ExpandsKnownKeepsUnknownAndEscapes) {
  std::map<std::string, std::string> env = {{"A", "1"}};
  EXPECT_EQ(ExpandVars("x$(A)y$(B)$$(A)", env), "x1y$(B)$(A)");
}

// Like the kubelet: CLUSTER_CONFIG from the job's ConfigMap, TF_CONFIG expanded
// from it.
TEST(LocalCommandForTest, ClusterConfigComesFromTheConfigMapAndExpandsIntoTfConfig) {
  json c = {{"name", "trainer"},
            {"image", "busybox"},
            {"command", {"env"}},
            {"env",
             {{{"name", "CLUSTER_CONFIG"},
               {"valueFrom", {{"configMapKeyRef", {{"name", "j-cluster"}, {"key", "cluster"}}}}}},
              {{"name", "TF_CONFIG"}, {"value", R"({"cluster":$(CLUSTER_CONFIG),"x":1})"}}}}};
  auto cmd = LocalCommandFor(Pod(c), Ctx());
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_EQ(cmd->env.at("CLUSTER_CONFIG"), R"({"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]})");
  EXPECT_EQ(cmd->env.at("TF_CONFIG"),
            R"({"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]},"x":1})");
  EXPECT_TRUE(cmd->warnings.empty());
}

// The operator's pods read it from the job's auth Secret (key "cluster").
TEST(LocalCommandForTest, ClusterConfigComesFromTheAuthSecretLikeFromTheConfigMap) {
  json c = {{"name", "trainer"},
            {"image", "busybox"},
            {"command", {"env"}},
            {"env",
             {{{"name", "CLUSTER_CONFIG"},
               {"valueFrom", {{"secretKeyRef", {{"name", "j-auth-local"}, {"key", "cluster"}}}}}},
              {{"name", "TF_CONFIG"}, {"value", R"({"cluster":$(CLUSTER_CONFIG),"x":1})"}}}}};
  auto cmd = LocalCommandFor(Pod(c), Ctx());
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_EQ(cmd->env.at("CLUSTER_CONFIG"), R"({"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]})");
  EXPECT_EQ(cmd->env.at("TF_CONFIG"),
            R"({"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]},"x":1})");
}

TEST(LocalCommandForTest, TrainerImageRunsLocalBinaryWithTerminationLog) {
  json c = {
      {"name", "trainer"},
      {"image", "kubetrain-trainer:1"},
      {"args", {"--steps=5", "--termination-log=/dev/termination-log", "--metrics-port=9090"}},
      {"env",
       {{{"name", "POD_NAME"}, {"value", "worker-0"}},
        {{"name", "KUBETRAIN_AUTH_KEY"},
         {"valueFrom", {{"secretKeyRef", {{"name", "j-auth-local"}, {"key", "key"}}}}}},
        {{"name", "NS"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.namespace"}}}}}},
        {{"name", "X"}, {"value", "$(POD_NAME)!"}}}}};
  CommandContext ctx = Ctx();
  ctx.metrics_port = 41234;
  auto cmd = LocalCommandFor(Pod(c), ctx);
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_TRUE(cmd->is_trainer);
  EXPECT_EQ(cmd->path, "/opt/bin/kubetrain-trainer");
  // Ours win: the runner's termination log and metrics port (locally, several
  // trainers cannot all serve on 9090).
  EXPECT_EQ(cmd->argv,
            (std::vector<std::string>{"kubetrain-trainer", "--steps=5", "--metrics-port=41234",
                                      "--metrics-final-wait=10", "--termination-log=/tmp/w0.log"}));
  EXPECT_EQ(cmd->env.at("KUBETRAIN_AUTH_KEY"), std::string(64, 'a'));
  EXPECT_EQ(cmd->env.at("NS"), "ns1");
  EXPECT_EQ(cmd->env.at("X"), "worker-0!");
}

TEST(LocalCommandForTest, OtherImageRunsItsCommandFromPath) {
  json c = {
      {"name", "main"}, {"image", "busybox"}, {"command", {"sh", "-c"}}, {"args", {"exit 0"}}};
  auto cmd = LocalCommandFor(Pod(c), Ctx());
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_FALSE(cmd->is_trainer);
  EXPECT_EQ(cmd->argv, (std::vector<std::string>{"sh", "-c", "exit 0"}));
  EXPECT_TRUE(cmd->path == "/usr/bin/sh" || cmd->path == "/bin/sh") << cmd->path;
}

TEST(LocalCommandForTest, MissingCommandIsNotFoundAndNoCommandIsInvalid) {
  auto missing = LocalCommandFor(
      Pod({{"name", "main"}, {"image", "busybox"}, {"command", {"no-such-command-kt"}}}), Ctx());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such-command-kt"), std::string::npos);
  auto none = LocalCommandFor(Pod({{"name", "main"}, {"image", "busybox"}}), Ctx());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
}

TEST(LocalCommandForTest, MainContainerIsTheOneNamedTrainer) {
  json pod = Pod({{"name", "sidecar"}, {"image", "busybox"}, {"command", {"true"}}});
  pod["spec"]["containers"].push_back({{"name", "trainer"}, {"image", "kubetrain-trainer"}});
  auto cmd = LocalCommandFor(pod, Ctx());
  ASSERT_TRUE(cmd.ok());
  EXPECT_TRUE(cmd->is_trainer);
  EXPECT_EQ(cmd->warnings.size(), 1u);
}

TEST(MapPathsTest, ReplacesWholeMountPathsOnly) {
  std::vector<LocalMount> m = {{"/data", "/tmp/v/data"}, {"/data/sub", "/tmp/other"}};
  EXPECT_EQ(MapPaths("--data-dir=/data", m), "--data-dir=/tmp/v/data");
  EXPECT_EQ(MapPaths("cat /data/x > /data/\"$1\".csv", m),
            "cat /tmp/v/data/x > /tmp/v/data/\"$1\".csv");
  EXPECT_EQ(MapPaths("/data/sub/f", m), "/tmp/other/f");  // the longest mount wins
  EXPECT_EQ(MapPaths("/database /x/data data", m), "/database /x/data data");
}

TEST(LocalCommandsForTest, InitContainersFirstAndEmptyDirMapped) {
  json pod = {{"metadata", {{"name", "j-worker-0"}}},
              {"spec",
               {{"volumes", {{{"name", "data"}, {"emptyDir", json::object()}}}},
                {"initContainers",
                 {{{"name", "gen"},
                   {"image", "busybox"},
                   {"command", {"sh", "-c", "echo 1 > /data/x"}},
                   {"volumeMounts", {{{"name", "data"}, {"mountPath", "/data"}}}}}}},
                {"containers",
                 {{{"name", "trainer"},
                   {"image", "kubetrain-trainer"},
                   {"args", {"--data-dir=/data"}},
                   {"volumeMounts", {{{"name", "data"}, {"mountPath", "/data"}}}}}}}}}};
  auto cmds = LocalCommandsFor(pod, Ctx());
  ASSERT_TRUE(cmds.ok()) << cmds.status().ToString();
  ASSERT_EQ(cmds->size(), 2u);
  EXPECT_TRUE((*cmds)[0].init);
  EXPECT_EQ((*cmds)[0].argv.back(), "echo 1 > /tmp/vol/data/x");
  EXPECT_FALSE((*cmds)[1].init);
  EXPECT_EQ((*cmds)[1].argv[1], "--data-dir=/tmp/vol/data");
  EXPECT_EQ(EmptyDirsOf(pod, Ctx()), std::vector<std::string>{"/tmp/vol/data"});
}

// Secrets and ConfigMaps defined in the job file resolve like in Kubernetes: envFrom
// first (with its prefix), env after it and over it; a missing one is an error unless
// optional.
TEST(LocalCommandForTest, SecretsAndConfigMapsFromTheJobFileResolve) {
  LocalObjects objects;
  objects.secrets["s3"] = {{"AWS_ACCESS_KEY_ID", "ak"}, {"AWS_SECRET_ACCESS_KEY", "sk"}};
  objects.config_maps["settings"] = {{"region", "eu-west-1"}};
  CommandContext ctx = Ctx();
  ctx.objects = &objects;
  json c = {
      {"name", "trainer"},
      {"image", "kubetrain-trainer"},
      {"envFrom",
       {{{"secretRef", {{"name", "s3"}}}},
        {{"configMapRef", {{"name", "settings"}}}, {"prefix", "CM_"}},
        {{"secretRef", {{"name", "absent"}, {"optional", true}}}}}},
      {"env",
       {{{"name", "AWS_ACCESS_KEY_ID"}, {"value", "overridden"}},
        {{"name", "REGION"},
         {"valueFrom", {{"configMapKeyRef", {{"name", "settings"}, {"key", "region"}}}}}},
        {{"name", "SECRET"},
         {"valueFrom", {{"secretKeyRef", {{"name", "s3"}, {"key", "AWS_SECRET_ACCESS_KEY"}}}}}}}}};
  auto cmd = LocalCommandFor(Pod(c), ctx);
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_EQ(cmd->env["AWS_ACCESS_KEY_ID"], "overridden");
  EXPECT_EQ(cmd->env["AWS_SECRET_ACCESS_KEY"], "sk");
  EXPECT_EQ(cmd->env["CM_region"], "eu-west-1");
  EXPECT_EQ(cmd->env["REGION"], "eu-west-1");
  EXPECT_EQ(cmd->env["SECRET"], "sk");
  EXPECT_TRUE(cmd->warnings.empty()) << cmd->warnings.front();

  json missing = {{"name", "trainer"},
                  {"image", "kubetrain-trainer"},
                  {"envFrom", {{{"secretRef", {{"name", "nope"}}}}}}};
  auto m = LocalCommandFor(Pod(missing), ctx);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("Secret nope is not defined in the job file"),
            std::string::npos)
      << m.status().message();
  json no_key = {
      {"name", "trainer"},
      {"image", "kubetrain-trainer"},
      {"env",
       {{{"name", "X"}, {"valueFrom", {{"secretKeyRef", {{"name", "s3"}, {"key", "nokey"}}}}}}}}};
  auto k = LocalCommandFor(Pod(no_key), ctx);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("Secret s3 has no key nokey"), std::string::npos)
      << k.status().message();
}

}  // namespace
}  // namespace kubetrain::local
