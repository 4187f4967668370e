// FakeMetricsServers: loopback HTTP servers standing in for trainers' metrics
// endpoints, well-behaved or hostile, for the progress reader's tests and
// benchmark. One thread serves every server (poll), so a benchmark can run
// hundreds of them on a 2-core machine.
//
// Modes (what a server does once a request's headers arrived):
//  - kMetrics: answers 200 with the body set for it, then closes;
//  - kCounting: like kMetrics, a trainer whose step is its request count
//    modulo 100, of 100 (each read shows new progress);
//  - kEndlessHeaders: a status line, then header lines as fast as the client
//    takes them, forever;
//  - kEndlessHeaderLine: a status line, then one header line that never ends;
//  - kDrip: a valid 200 answer with a large Content-Length, one byte every
//    `drip_interval`, forever;
//  - kSilent: never answers.
// Contract: thread-safe. The destructor (or Stop) closes every socket and
// joins the thread. Not for production: no limits of its own beyond closing
// connections whose client went.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace kubetrain::progress {

class FakeMetricsServers {
 public:
  enum class Mode { kMetrics, kCounting, kEndlessHeaders, kEndlessHeaderLine, kDrip, kSilent };

  explicit FakeMetricsServers(
      std::chrono::milliseconds drip_interval = std::chrono::milliseconds(200));
  ~FakeMetricsServers();
  FakeMetricsServers(const FakeMetricsServers&) = delete;
  FakeMetricsServers& operator=(const FakeMetricsServers&) = delete;

  // A new server on 127.0.0.1 (a free port): its URL, http://127.0.0.1:<port>/metrics.
  StatusOr<std::string> Add(Mode mode, std::string body = {});
  // The body a kMetrics server answers with from now on.
  void SetBody(const std::string& url, std::string body);
  // Requests whose headers `url`'s server received.
  int64_t requests(const std::string& url) const;
  // Bytes written by every server together.
  int64_t bytes_sent() const { return bytes_sent_.load(); }
  void Stop();

 private:
  struct Server {
    int listen_fd = -1;
    Mode mode = Mode::kMetrics;
    std::string body;  // under the outer mu_ (a nested struct: not annotatable)
    std::atomic<int64_t> requests{0};
  };
  struct Connection;
  void Loop();
  void Wake();

  const std::chrono::milliseconds drip_interval_;
  int wake_fd_ = -1;  // eventfd: a server was added or Stop() was called
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<bool> stopping_{false};

  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<Server>> servers_ GUARDED_BY(mu_);  // by URL
  std::thread thread_;
};

}  // namespace kubetrain::progress
