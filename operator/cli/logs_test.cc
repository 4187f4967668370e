#include "operator/cli/logs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kubetrain::cli {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::Pair;

TEST(LogsTest, ReplicaOfPodFromItsLabels) {
  EXPECT_EQ(ReplicaOfPod(json::parse(R"({"metadata": {"labels": {
      "kubetrain.io/job-name": "tj", "kubetrain.io/replica-type": "worker",
      "kubetrain.io/replica-index": "1"}}})")),
            "worker-1");
  EXPECT_EQ(ReplicaOfPod(json::parse(R"({"metadata": {"labels": {"app": "x"}}})")), "");
  EXPECT_EQ(ReplicaOfPod(json::parse(R"({"metadata": {}})")), "");
  EXPECT_EQ(ReplicaOfPod(json("not a pod")), "");
}

TEST(LogsTest, ReplicasOfJobInRoleOrder) {
  const json job = json::parse(R"({"spec": {"replicaSpecs": {
      "Worker": {"replicas": 2}, "PS": {"replicas": 1}, "Evaluator": {}, "Chief": {"replicas": 0}}}})");
  EXPECT_THAT(ReplicasOfJob(job), ElementsAre("ps-0", "worker-0", "worker-1", "evaluator-0"));
  EXPECT_TRUE(ReplicasOfJob(json::object()).empty());
}

json JobWithArgs(const json& worker_args, const json& ps_args = json::array()) {
  json job;
  job["spec"]["replicaSpecs"]["PS"]["template"]["spec"]["containers"] =
      json::array({{{"name", "trainer"}, {"args", ps_args}}});
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] =
      json::array({{{"name", "trainer"}, {"args", worker_args}}});
  return job;
}

TEST(LogsTest, OutputOfJobReadsTheTrainersFlag) {
  EXPECT_EQ(OutputOfJob(JobWithArgs({"--model=mlp", "--output=s3://b/run1"})), "s3://b/run1");
  EXPECT_EQ(OutputOfJob(JobWithArgs({"--output", "/data/out", "--x"})), "/data/out");
  EXPECT_EQ(OutputOfJob(JobWithArgs({"--model=mlp"}, {"--output=/ps"})), "/ps");
  // The worker's is taken before the PS's.
  EXPECT_EQ(OutputOfJob(JobWithArgs({"--output=/w"}, {"--output=/ps"})), "/w");
  EXPECT_EQ(OutputOfJob(JobWithArgs({"--output-format=x", "--output"})), "");
  EXPECT_EQ(OutputOfJob(json::object()), "");
  json spec, container;
  EXPECT_EQ(OutputOfJob(JobWithArgs({"--output=/w"}), &spec, &container), "/w");
  EXPECT_EQ(container["args"], json({"--output=/w"}));
  EXPECT_TRUE(spec.contains("containers"));
}

TEST(LogsTest, LinePrefixerJoinsChunksIntoPrefixedLines) {
  LinePrefixer p("ps-0", 8);
  EXPECT_EQ(p.Add("hel"), "");
  EXPECT_EQ(p.Add("lo\nwor"), "ps-0     | hello\n");
  EXPECT_EQ(p.Add("ld\n\nlast"), "ps-0     | world\nps-0     | \n");
  EXPECT_EQ(p.Flush(), "ps-0     | last\n");
  EXPECT_EQ(p.Flush(), "");
}

TEST(LogsTest, LinePrefixerCutsOverlongLines) {
  LinePrefixer p("w", 1);
  const std::string longer(kMaxLineBytes + 10, 'x');
  const std::string out = p.Add(longer + "\n");
  EXPECT_EQ(out, "w | " + std::string(kMaxLineBytes, 'x') + "\nw | " + std::string(10, 'x') + "\n");
  // Exactly the limit, then its newline: one line, no empty one after it.
  EXPECT_EQ(p.Add(std::string(kMaxLineBytes, 'y') + "\n"),
            "w | " + std::string(kMaxLineBytes, 'y') + "\n");
  EXPECT_EQ(p.Flush(), "");
}

class SavedLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kt-logs-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "logs" / "nested");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / "logs" / name, std::ios::binary) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(SavedLogsTest, ReadsEachReplicasTailAndNothingElse) {
  Write("worker-0.log", "w0 line\n");
  Write("ps-1.log", "p1 line\n");
  Write("worker-0.log.tmp.abc123", "a writer's temp file");
  Write("notes.txt", "x");
  Write("nested/worker-9.log", "below logs/");
  auto saved = ReadSavedLogs(dir_.string());
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_THAT(*saved, ElementsAre(Pair("ps-1", "p1 line\n"), Pair("worker-0", "w0 line\n")));
}

TEST_F(SavedLogsTest, KeepsTheLastBytesOfAnOversizedTail) {
  Write("worker-0.log", std::string(100, 'a') + std::string(kMaxSavedLogBytes, 'b'));
  auto saved = ReadSavedLogs(dir_.string());
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->at("worker-0"), std::string(kMaxSavedLogBytes, 'b'));
}

TEST_F(SavedLogsTest, AMissingDirectoryHasNone) {
  auto saved = ReadSavedLogs((dir_ / "absent").string());
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_TRUE(saved->empty());
}

}  // namespace
}  // namespace kubetrain::cli
