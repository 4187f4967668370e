#include "trainer/stop/stop.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace kubetrain::trainer {
namespace {

// A real SIGTERM sets the flag and nothing else: the process carries on until it polls.
TEST(StopTest, SigtermSetsTheFlagAndDoesNotEndTheProcess) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    InstallStopHandler(std::chrono::minutes(10));
    if (StopRequested()) ::_exit(10);
    ::kill(::getpid(), SIGTERM);  // to the process, as the kubelet sends it
    // The watchdog sets the flag on its own thread: poll it, with a deadline.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!StopRequested() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // poll interval
    }
    ::_exit(StopRequested() ? 0 : 11);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The watchdog ends a process that does not stop by itself within the stop timeout, with
// the documented code, and not before the timeout.
TEST(StopTest, WatchdogExits143AfterTheStopTimeout) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    InstallStopHandler(std::chrono::milliseconds(300));
    ::kill(::getpid(), SIGTERM);
    while (true) ::pause();  // stuck: only the watchdog ends this
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), kExitStopped);
  EXPECT_GE(took, std::chrono::milliseconds(300));
}

TEST(StopTest, RequestStopIsWhatTheWatchdogDoes) {
  ResetStopForTest();
  EXPECT_FALSE(StopRequested());
  RequestStop();
  EXPECT_TRUE(StopRequested());
  ResetStopForTest();
}

}  // namespace
}  // namespace kubetrain::trainer
