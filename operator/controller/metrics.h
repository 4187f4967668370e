// Metrics: the operator's counters, kept in the runtime's registry
// (runtime::DefaultMetrics(), where the work queue and the reconcile loop
// already report), plus the reconcile-duration histogram the registry cannot
// hold.
//
// Contract: thread-safe and cheap. Render() returns the Prometheus text
// exposition format (version 0.0.4): the registry's series, then the histogram.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/mutex.h"
#include "operator/runtime/metrics.h"

namespace kubetrain::controller {

class Metrics {
 public:
  explicit Metrics(runtime::Metrics* registry = &runtime::DefaultMetrics());

  void JobCreated() { registry_->Add(kJobsCreated); }
  void JobSucceeded() { registry_->Add(kJobsSucceeded); }
  void JobFailed() { registry_->Add(kJobsFailed); }
  void PodRestarted() { registry_->Add(kPodsRestarted); }
  void ReconcileError() { registry_->Add(kReconcileErrors); }
  // API writes by verb and result ("OK", "AlreadyExists", ...).
  void CountRequest(std::string_view verb, std::string_view code);
  void ObserveReconcile(std::chrono::nanoseconds d);

  // Restart latency (kubetrain_pod_restart_latency_seconds): from the first
  // sign that a replica pod is lost (seen Failed, or seen deleted) to the
  // return of the create of its replacement (a pod of the same name). A later
  // sign for the same pod does not move the start. Pods never replaced (a job
  // that failed) are dropped after kPendingTtl once kMaxPending are pending.
  void PodLost(const std::string& pod_key,
               std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now());
  void PodCreated(const std::string& pod_key,
                  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now());
  size_t PendingRestarts() const;

  std::string Render() const;

 private:
  static constexpr std::string_view kJobsCreated = "kubetrain_jobs_created_total";
  static constexpr std::string_view kJobsSucceeded = "kubetrain_jobs_succeeded_total";
  static constexpr std::string_view kJobsFailed = "kubetrain_jobs_failed_total";
  static constexpr std::string_view kPodsRestarted = "kubetrain_pods_restarted_total";
  static constexpr std::string_view kReconcileErrors = "kubetrain_reconcile_errors_total";
  static constexpr std::array<double, 12> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                      0.05,   0.1,   0.25,   0.5,   1,    2.5};

  static constexpr std::array<double, 16> kRestartBuckets = {
      0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30};
  static constexpr size_t kMaxPending = 10000;
  static constexpr std::chrono::minutes kPendingTtl{10};

  runtime::Metrics* const registry_;
  mutable Mutex mu_;
  std::array<uint64_t, kBuckets.size()> bucket_counts_ GUARDED_BY(mu_){};
  uint64_t reconcile_count_ GUARDED_BY(mu_) = 0;
  double reconcile_sum_ GUARDED_BY(mu_) = 0;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> lost_ GUARDED_BY(mu_);
  std::array<uint64_t, kRestartBuckets.size()> restart_counts_ GUARDED_BY(mu_){};
  uint64_t restart_count_ GUARDED_BY(mu_) = 0;
  double restart_sum_ GUARDED_BY(mu_) = 0;
};

}  // namespace kubetrain::controller
