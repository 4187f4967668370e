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
  return {"/opt/bin/kubetrain-trainer", "j-auth", std::string(64, 'a'), "/tmp/w0.log",
          "/nonexistent:/usr/bin:/bin"};
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

TEST(LocalCommandForTest, TrainerImageRunsLocalBinaryWithTerminationLog) {
  json c = {
      {"name", "trainer"},
      {"image", "kubetrain-trainer:1"},
      {"args", {"--steps=5", "--termination-log=/dev/termination-log"}},
      {"env",
       {{{"name", "POD_NAME"}, {"value", "worker-0"}},
        {{"name", "KUBETRAIN_AUTH_KEY"},
         {"valueFrom", {{"secretKeyRef", {{"name", "j-auth"}, {"key", "key"}}}}}},
        {{"name", "NS"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.namespace"}}}}}},
        {{"name", "X"}, {"value", "$(POD_NAME)!"}}}}};
  auto cmd = LocalCommandFor(Pod(c), Ctx());
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_TRUE(cmd->is_trainer);
  EXPECT_EQ(cmd->path, "/opt/bin/kubetrain-trainer");
  EXPECT_EQ(cmd->argv, (std::vector<std::string>{"kubetrain-trainer", "--steps=5",
                                                 "--termination-log=/tmp/w0.log"}));
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

}  // namespace
}  // namespace kubetrain::local
