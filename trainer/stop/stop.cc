#include "trainer/stop/stop.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <thread>

namespace kubetrain::trainer {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_pipe_write{-1};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the SIGTERM handler may only touch lock-free atomics");

extern "C" void OnSigterm(int) {
  const int saved = errno;
  if (!g_stop.exchange(true)) {
    const int fd = g_pipe_write.load();
    const char b = 1;
    if (fd >= 0) (void)!::write(fd, &b, 1);
  }
  errno = saved;
}

}  // namespace

void InstallStopHandler(std::chrono::milliseconds stop_timeout) {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) == 0) {
    g_pipe_write.store(fds[1]);
    // The watchdog: the only place that acts on the signal outside the role loops.
    std::thread([read_fd = fds[0], stop_timeout] {
      char b;
      while (::read(read_fd, &b, 1) < 0 && errno == EINTR) {
      }
      std::this_thread::sleep_for(stop_timeout);  // the deadline itself, not synchronisation
      // Not spdlog: another thread may hold its lock mid-save. One write(2) is enough.
      static constexpr char kMsg[] =
          "[stop] still running --stop-timeout after SIGTERM: exiting 143 without finishing "
          "(the last committed checkpoint stays the one to resume from)\n";
      (void)!::write(2, kMsg, sizeof(kMsg) - 1);
      ::_exit(kExitStopped);
    }).detach();
  }
  struct sigaction sa {};
  sa.sa_handler = OnSigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, nullptr);
}

bool StopRequested() {
  return g_stop.load(std::memory_order_relaxed);
}

void RequestStop() {
  OnSigterm(SIGTERM);
}

void ResetStopForTest() {
  g_stop.store(false);
}

}  // namespace kubetrain::trainer
