#include "operator/controller/metrics.h"

#include <sstream>

namespace kubetrain::controller {

Metrics::Metrics(runtime::Metrics* registry) : registry_(registry) {
  registry_->Help(kJobsCreated, "counter", "TrainingJobs first seen by this operator.");
  registry_->Help(kJobsSucceeded, "counter", "TrainingJobs that succeeded.");
  registry_->Help(kJobsFailed, "counter", "TrainingJobs that failed.");
  registry_->Help(kPodsRestarted, "counter", "Replica pods recreated after a failure.");
  registry_->Help(kReconcileErrors, "counter", "Reconciles that returned an error.");
  registry_->Help("kubetrain_api_requests_total", "counter",
                  "API writes of the controller by verb and result.");
}

void Metrics::CountRequest(std::string_view verb, std::string_view code) {
  std::string labels = "verb=\"";
  labels.append(verb).append("\",code=\"").append(code).append("\"");
  registry_->Add("kubetrain_api_requests_total", labels);
}

void Metrics::ObserveReconcile(std::chrono::nanoseconds d) {
  const double seconds = std::chrono::duration<double>(d).count();
  MutexLock lock(mu_);
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++bucket_counts_[i];
  }
  ++reconcile_count_;
  reconcile_sum_ += seconds;
}

void Metrics::PodLost(const std::string& pod_key, std::chrono::steady_clock::time_point at) {
  MutexLock lock(mu_);
  if (lost_.size() >= kMaxPending) {
    std::erase_if(lost_, [&](const auto& e) { return at - e.second > kPendingTtl; });
    if (lost_.size() >= kMaxPending) return;
  }
  lost_.emplace(pod_key, at);  // keeps the first sighting
}

void Metrics::PodCreated(const std::string& pod_key, std::chrono::steady_clock::time_point at) {
  MutexLock lock(mu_);
  auto it = lost_.find(pod_key);
  if (it == lost_.end()) return;
  const double seconds = std::chrono::duration<double>(at - it->second).count();
  lost_.erase(it);
  for (size_t i = 0; i < kRestartBuckets.size(); ++i) {
    if (seconds <= kRestartBuckets[i]) ++restart_counts_[i];
  }
  ++restart_count_;
  restart_sum_ += seconds;
}

size_t Metrics::PendingRestarts() const {
  MutexLock lock(mu_);
  return lost_.size();
}

std::string Metrics::Render() const {
  std::ostringstream out;
  out << registry_->Render();
  MutexLock lock(mu_);
  out << "# HELP kubetrain_reconcile_duration_seconds Time spent in one reconcile.\n"
         "# TYPE kubetrain_reconcile_duration_seconds histogram\n";
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    out << "kubetrain_reconcile_duration_seconds_bucket{le=\"" << kBuckets[i] << "\"} "
        << bucket_counts_[i] << '\n';
  }
  out << "kubetrain_reconcile_duration_seconds_bucket{le=\"+Inf\"} " << reconcile_count_ << '\n'
      << "kubetrain_reconcile_duration_seconds_sum " << reconcile_sum_ << '\n'
      << "kubetrain_reconcile_duration_seconds_count " << reconcile_count_ << '\n';
  out << "# HELP kubetrain_pod_restart_latency_seconds From a replica pod seen failed or deleted "
         "to the create of its replacement.\n"
         "# TYPE kubetrain_pod_restart_latency_seconds histogram\n";
  for (size_t i = 0; i < kRestartBuckets.size(); ++i) {
    out << "kubetrain_pod_restart_latency_seconds_bucket{le=\"" << kRestartBuckets[i] << "\"} "
        << restart_counts_[i] << '\n';
  }
  out << "kubetrain_pod_restart_latency_seconds_bucket{le=\"+Inf\"} " << restart_count_ << '\n'
      << "kubetrain_pod_restart_latency_seconds_sum " << restart_sum_ << '\n'
      << "kubetrain_pod_restart_latency_seconds_count " << restart_count_ << '\n';
  return out.str();
}

}  // namespace kubetrain::controller
