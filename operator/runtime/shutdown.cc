#include "operator/runtime/shutdown.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace kubetrain::runtime {
namespace {

int g_pipe[2] = {-1, -1};
std::atomic<int> g_signals{0};

void OnSignal(int) {
  if (g_signals.fetch_add(1) >= 1) _exit(1);
  char c = 1;
  [[maybe_unused]] ssize_t n = write(g_pipe[1], &c, 1);
}

}  // namespace

std::stop_token InstallShutdownHandler() {
  static std::stop_source source;
  static std::once_flag once;
  std::call_once(once, [] {
    if (pipe(g_pipe) != 0) return;
    fcntl(g_pipe[1], F_SETFL, O_NONBLOCK);
    std::thread([] {
      char c;
      while (read(g_pipe[0], &c, 1) < 0) {
      }
      source.request_stop();
    }).detach();
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
  });
  return source.get_token();
}

void SleepFor(std::stop_token stop, std::chrono::milliseconds d) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_for(lock, stop, d, [] { return false; });
}

}  // namespace kubetrain::runtime
