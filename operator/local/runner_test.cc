#include "operator/local/runner.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/clock.h"
#include "operator/api/json.h"

namespace kubetrain::local {
namespace {

const std::string kEuro = "\xE2\x82\xAC";  // 3 bytes
const std::string kFffd = "\xEF\xBF\xBD";

bool Serialises(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

// The kubelet's 4096-byte cut used to fall inside a multi-byte character, and
// `kubetrain run` then died serialising the status.
TEST(TerminationMessageTest, CutAt4096BytesNeverSplitsACharacter) {
  const std::string log = std::string(4095, 'a') + kEuro + kEuro;
  const std::string msg = TerminationMessage(log, {}, false, 1);
  EXPECT_EQ(msg, std::string(4095, 'a'));
  EXPECT_TRUE(Serialises(msg));
}

TEST(TerminationMessageTest, InvalidBytesFromTheWorkloadBecomeReplacementCharacters) {
  const std::string log = std::string(1023, 'a') + kEuro + "\xFF\xC3" + " end\n";
  const std::string msg = TerminationMessage(log, {}, false, 1);
  EXPECT_EQ(msg, std::string(1023, 'a') + kEuro + kFffd + kFffd + " end");
  EXPECT_TRUE(Serialises(msg));
}

TEST(TerminationMessageTest, LogFallbackKeepsTheTailOnACharacterBoundary) {
  // 700 lines of 3 euros: the 2048-byte tail starts inside a character.
  std::deque<std::string> tail(700, kEuro + kEuro + kEuro);
  tail.push_back("bad \xFE!");
  const std::string msg = TerminationMessage("", tail, true, 2);
  EXPECT_EQ(msg.size(), 2046u);  // 2 continuation bytes skipped at the front
  EXPECT_EQ(msg.substr(0, 7), "\xE2\x82\xAC\xE2\x82\xAC\n");
  EXPECT_TRUE(msg.ends_with("bad " + kFffd + "!\n"));
  EXPECT_TRUE(Serialises(msg));
}

TEST(TerminationMessageTest, NoFallbackForASuccessOrWithoutThePolicy) {
  const std::deque<std::string> tail = {"last line"};
  EXPECT_EQ(TerminationMessage(" \n", tail, true, 0), "");
  EXPECT_EQ(TerminationMessage("", tail, false, 1), "");
  EXPECT_EQ(TerminationMessage("", tail, true, 1), "last line\n");
}

// The runner's timers read RunOptions::clock: on a FakeClock, an hour's
// activeDeadlineSeconds and an hour's SIGTERM -> SIGKILL grace pass when the
// test moves the clock, in no real time. The worker ignores SIGTERM, so only
// the grace period's SIGKILL ends it. Bounded: if the runner never asks for
// the grace period, the watcher stops the run with SIGTERM and SIGINT (a
// second signal kills every replica) and the test fails.
TEST(RunLocallyTest, TheDeadlineAndTheGracePeriodFollowTheRunnersClock) {
  auto job = api::ParseTrainingJob(nlohmann::json::parse(R"({
    "apiVersion": "kubetrain.io/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "clocked"},
    "spec": {"runPolicy": {"activeDeadlineSeconds": 3600},
             "replicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {"containers": [
               {"name": "main", "image": "busybox:1.36",
                "command": ["sh", "-c", "trap '' TERM; echo up; while :; do sleep 1; done"]}]}}}}}})"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  char dir[] = "/tmp/kubetrain-runner-clock.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  FILE* out_file = fdopen(out[1], "w");
  ASSERT_NE(out_file, nullptr);
  setvbuf(out_file, nullptr, _IOLBF, 0);

  FakeClock clock;
  RunOptions options;
  options.work_dir = dir;
  options.grace = std::chrono::hours(1);
  options.out = out_file;
  options.clock = &clock;
  // Reads the runner's lines and moves the clock: past the deadline once the
  // worker says it ignores SIGTERM, past the grace period once it got its
  // SIGTERM. RunLocally reads its signals from a signalfd, so this thread
  // blocks them too.
  std::string lines;
  bool stopped_by_watcher = false;
  std::thread watcher([&] {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    bool past_deadline = false;
    bool past_grace = false;
    char buf[4096];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        stopped_by_watcher = true;
        kill(getpid(), SIGTERM);
        kill(getpid(), SIGINT);  // another signal (two SIGTERMs may arrive as one)
        break;
      }
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t n = read(out[0], buf, sizeof buf);
      if (n <= 0) break;  // the runner is done and closed its end
      lines.append(buf, static_cast<size_t>(n));
      if (!past_deadline && lines.find("| up\n") != std::string::npos) {
        past_deadline = true;
        clock.Advance(std::chrono::seconds(3601));
      }
      if (!past_grace && lines.find("stopping worker-0") != std::string::npos) {
        past_grace = true;
        clock.Advance(std::chrono::seconds(3601));
      }
      if (lines.find("SIGKILL") != std::string::npos) break;
    }
  });
  const auto started = std::chrono::steady_clock::now();
  auto result = RunLocally(std::move(*job), options);
  const auto took = std::chrono::steady_clock::now() - started;
  fclose(out_file);  // the watcher reads to the end
  watcher.join();
  close(out[0]);
  std::filesystem::remove_all(dir);

  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_FALSE(stopped_by_watcher) << lines;
  EXPECT_EQ(result->status.state, "Failed") << lines;
  EXPECT_NE(lines.find("DeadlineExceeded"), std::string::npos) << lines;
  EXPECT_NE(lines.find("did not stop within 3600s: SIGKILL"), std::string::npos) << lines;
  // Two hours of the runner's clock in well under a minute of real time.
  EXPECT_LT(took, std::chrono::seconds(30)) << lines;
}

}  // namespace
}  // namespace kubetrain::local
