// Child processes for the multi-process C++ tests: started with posix_spawn, output to a
// log file, waited for by polling with a deadline, killed only by their own PID.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kubetrain::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A free TCP port on 127.0.0.1 (released before use: a tiny window for another taker).
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Polls `pred` every 20 ms until it holds or `timeout` passes.
template <typename Pred>
bool PollUntil(Pred pred, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // poll interval
  }
  return true;
}

// One child process; `env` entries replace the inherited ones, `unset` names are dropped.
class Process {
 public:
  // `nofile`, when set, is the child's RLIMIT_NOFILE (soft limit).
  Process(const std::string& binary, const std::vector<std::string>& args,
          const std::map<std::string, std::string>& env, const std::string& log,
          const std::vector<std::string>& unset = {}, rlim_t nofile = 0)
      : log_(log) {
    std::vector<std::string> argv_s = {binary};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const std::string name = kv.substr(0, kv.find('='));
      if (env.count(name) || std::find(unset.begin(), unset.end(), name) != unset.end()) continue;
      env_s.push_back(kv);
    }
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env_s) envp.push_back(s.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    // posix_spawn passes our limits on: lower ours around the spawn (the tests start
    // children from one thread, nothing opens files meanwhile), then restore them.
    rlimit saved{};
    ::getrlimit(RLIMIT_NOFILE, &saved);
    if (nofile > 0) {
      const rlimit low{nofile, saved.rlim_max};
      EXPECT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    }
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data());
    if (nofile > 0) ::setrlimit(RLIMIT_NOFILE, &saved);
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(rc, 0) << "cannot start " << argv[0];
    if (rc != 0) pid_ = -1;
  }
  ~Process() { Kill(); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // The exit code, -1 on timeout (still running), or 128+signal.
  int Wait(std::chrono::seconds timeout) {
    if (exited_) return code_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        signaled_ = WIFSIGNALED(status);
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return code_;
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // poll interval
    }
    return -1;
  }
  // SIGKILL this process (only it) and reap it.
  void Kill() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      int status;
      ::waitpid(pid_, &status, 0);
      exited_ = true;
      signaled_ = true;
      code_ = 128 + SIGKILL;
    }
  }
  // Sends `sig` to this process (only it), if it is still running.
  void Signal(int sig) {
    if (pid_ > 0 && !exited_) ::kill(pid_, sig);
  }
  // After Wait() returned a code: the process was ended by a signal (Wait's 128+signal)
  // rather than calling exit with that code.
  bool signaled() const { return signaled_; }
  std::string Log() const { return ReadFile(log_); }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  bool signaled_ = false;
  int code_ = -1;
  std::string log_;
};

}  // namespace kubetrain::testing
