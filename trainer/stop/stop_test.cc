#include "trainer/stop/stop.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>

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

// Forks a child that runs `body`; returns its wait status and how long it lived. A child
// still alive after 20 s is killed (SIGKILL in the status), so a missing watchdog fails the
// test instead of hanging it.
template <typename Body>
std::pair<int, std::chrono::steady_clock::duration> RunChild(Body body) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(99);
  }
  if (pid < 0) return {-1, {}};
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // poll interval
  }
  return {status, std::chrono::steady_clock::now() - start};
}

// A teardown that never ends (a join on a thread that never returns, a stuck mount) ends at
// the deadline with the outcome's code, not later and not with another code.
TEST(StopTest, ExitWatchdogEndsAStuckTeardownWithTheOutcomesCode) {
  const auto [status, took] = RunChild([] {
    ExitWithin(7, std::chrono::milliseconds(300));
    while (true) ::pause();  // stuck: only the watchdog ends this
  });
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 7);
  EXPECT_GE(took, std::chrono::milliseconds(300));
  EXPECT_LT(took, std::chrono::seconds(10));
}

// A process that finishes its teardown in time exits with its own code, at once: the armed
// watchdog neither delays nor changes it. A second call does not move the deadline.
TEST(StopTest, ExitWatchdogLeavesATimelyExitAloneAndIsArmedOnce) {
  const auto [status, took] = RunChild([] {
    ExitWithin(7, std::chrono::minutes(10));
    std::exit(3);  // a normal exit (static destructors run) while the watchdog sleeps
  });
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_LT(took, std::chrono::seconds(10));

  const auto [status2, took2] = RunChild([] {
    ExitWithin(5, std::chrono::milliseconds(200));
    ExitWithin(6, std::chrono::minutes(10));  // changes nothing
    while (true) ::pause();
  });
  ASSERT_TRUE(WIFEXITED(status2)) << "status " << status2;
  EXPECT_EQ(WEXITSTATUS(status2), 5);
  EXPECT_LT(took2, std::chrono::seconds(10));
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
