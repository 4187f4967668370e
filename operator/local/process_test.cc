#include "operator/local/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace kubetrain::local {
namespace {

std::string ReadAll(int fd) {
  std::string out;
  char buf[256];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      return out;
    } else if (errno == EAGAIN || errno == EINTR) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a pipe, not syncing
    } else {
      return out;
    }
  }
}

TEST(SpawnTest, RunsInOwnProcessGroupWithEnvAndMergedOutput) {
  auto sh = ResolveExecutable("sh", "/usr/bin:/bin");
  ASSERT_TRUE(sh);
  auto s = Spawn({*sh, {"sh", "-c", "echo $FOO; echo err >&2; ps -o pgid= -p $$"}, {"FOO=bar"}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::string out = ReadAll(s->output_fd);
  close(s->output_fd);
  int ws;
  ASSERT_EQ(waitpid(s->pid, &ws, 0), s->pid);
  EXPECT_EQ(ExitCodeFromWaitStatus(ws), 0);
  EXPECT_NE(out.find("bar\n"), std::string::npos) << out;
  EXPECT_NE(out.find("err\n"), std::string::npos) << out;
  EXPECT_NE(out.find(std::to_string(s->pid)), std::string::npos) << "pgid != pid: " << out;
}

TEST(SpawnTest, ExecFailureIsAStatus) {
  auto s = Spawn({"/nonexistent/kt-binary", {"kt-binary"}, {}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
}

TEST(KillGroupTest, ReachesGrandchildrenAndSignalGivesExitCode128PlusN) {
  auto sh = ResolveExecutable("sh", "/usr/bin:/bin");
  ASSERT_TRUE(sh);
  auto s = Spawn({*sh, {"sh", "-c", "sleep 300 & echo $!; wait"}, {"PATH=/usr/bin:/bin"}});
  ASSERT_TRUE(s.ok());
  // The first line is the grandchild's pid.
  std::string line;
  char c;
  while (true) {
    ssize_t n = read(s->output_fd, &c, 1);
    if (n == 1 && c == '\n') break;
    if (n == 1) line += c;
    if (n == 0) break;
    if (n < 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const pid_t grandchild = std::stoi(line);
  KillGroup(s->pid, SIGKILL);
  int ws;
  ASSERT_EQ(waitpid(s->pid, &ws, 0), s->pid);
  EXPECT_EQ(ExitCodeFromWaitStatus(ws), 137);
  close(s->output_fd);
  // The grandchild is not ours to reap; it is gone (or a zombie of init) soon.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool gone = false;
  while (!gone && std::chrono::steady_clock::now() < deadline) {
    gone = kill(grandchild, 0) != 0;
    if (!gone) {
      std::string stat_path = "/proc/" + std::to_string(grandchild) + "/stat";
      FILE* f = fopen(stat_path.c_str(), "r");
      if (f) {
        int pid;
        char comm[256], state = 0;
        if (fscanf(f, "%d %255s %c", &pid, comm, &state) == 3 && state == 'Z') gone = true;
        fclose(f);
      }
    }
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "grandchild " << grandchild << " survived the group kill";
}

TEST(ResolveExecutableTest, FindsOnPathAndRejectsMissing) {
  EXPECT_TRUE(ResolveExecutable("sh", "/nonexistent:/usr/bin:/bin"));
  EXPECT_FALSE(ResolveExecutable("no-such-command-kt", "/usr/bin:/bin"));
  EXPECT_FALSE(ResolveExecutable("/nonexistent/x", "/usr/bin"));
}

}  // namespace
}  // namespace kubetrain::local
