// Metrics: the operator's Prometheus counters, gauges and one histogram.
//
// Contract: a fixed set of metrics known at compile time plus per-label
// counters created on first use; every method is thread-safe and cheap
// (atomics, or a mutex for the labelled maps). Render() returns the Prometheus
// text exposition format (version 0.0.4).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace kubetrain::controller {

class Metrics {
 public:
  std::atomic<uint64_t> jobs_created{0};
  std::atomic<uint64_t> jobs_succeeded{0};
  std::atomic<uint64_t> jobs_failed{0};
  std::atomic<uint64_t> pods_restarted{0};
  std::atomic<uint64_t> reconcile_errors{0};

  void ObserveReconcile(std::chrono::nanoseconds d);
  // API requests by verb and result ("201", "AlreadyExists", ...).
  void CountRequest(const std::string& verb, const std::string& code);
  // Set by the operator so Render can report the current queue depth.
  void SetQueueDepthFunc(std::function<size_t()> fn);

  std::string Render() const;

 private:
  static constexpr std::array<double, 12> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                      0.05,   0.1,   0.25,   0.5,   1,    2.5};
  mutable std::mutex mu_;
  std::array<uint64_t, kBuckets.size()> bucket_counts_{};             // guarded by mu_
  uint64_t reconcile_count_ = 0;                                      // guarded by mu_
  double reconcile_sum_ = 0;                                          // guarded by mu_
  std::map<std::pair<std::string, std::string>, uint64_t> requests_;  // guarded by mu_
  std::function<size_t()> queue_depth_;                               // guarded by mu_
};

}  // namespace kubetrain::controller
