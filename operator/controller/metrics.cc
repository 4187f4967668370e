#include "operator/controller/metrics.h"

#include <sstream>

namespace kubetrain::controller {

void Metrics::ObserveReconcile(std::chrono::nanoseconds d) {
  const double seconds = std::chrono::duration<double>(d).count();
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++bucket_counts_[i];
  }
  ++reconcile_count_;
  reconcile_sum_ += seconds;
}

void Metrics::CountRequest(const std::string& verb, const std::string& code) {
  std::lock_guard lock(mu_);
  ++requests_[{verb, code}];
}

void Metrics::SetQueueDepthFunc(std::function<size_t()> fn) {
  std::lock_guard lock(mu_);
  queue_depth_ = std::move(fn);
}

std::string Metrics::Render() const {
  std::ostringstream out;
  auto counter = [&out](const char* name, const char* help, uint64_t v) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " counter\n"
        << name << ' ' << v << '\n';
  };
  counter("kubetrain_jobs_created_total", "TrainingJobs first seen by this operator.",
          jobs_created.load());
  counter("kubetrain_jobs_succeeded_total", "TrainingJobs that succeeded.", jobs_succeeded.load());
  counter("kubetrain_jobs_failed_total", "TrainingJobs that failed.", jobs_failed.load());
  counter("kubetrain_pods_restarted_total", "Replica pods recreated after a failure.",
          pods_restarted.load());
  counter("kubetrain_reconcile_errors_total", "Reconciles that returned an error.",
          reconcile_errors.load());

  std::lock_guard lock(mu_);
  out << "# HELP kubetrain_reconcile_duration_seconds Time spent in one reconcile.\n"
         "# TYPE kubetrain_reconcile_duration_seconds histogram\n";
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    out << "kubetrain_reconcile_duration_seconds_bucket{le=\"" << kBuckets[i] << "\"} "
        << bucket_counts_[i] << '\n';
  }
  out << "kubetrain_reconcile_duration_seconds_bucket{le=\"+Inf\"} " << reconcile_count_ << '\n'
      << "kubetrain_reconcile_duration_seconds_sum " << reconcile_sum_ << '\n'
      << "kubetrain_reconcile_duration_seconds_count " << reconcile_count_ << '\n';
  out << "# HELP kubetrain_workqueue_depth Job keys waiting in the work queue.\n"
         "# TYPE kubetrain_workqueue_depth gauge\n"
      << "kubetrain_workqueue_depth " << (queue_depth_ ? queue_depth_() : 0) << '\n';
  out << "# HELP kubetrain_api_requests_total API requests by verb and result.\n"
         "# TYPE kubetrain_api_requests_total counter\n";
  for (const auto& [key, v] : requests_) {
    out << "kubetrain_api_requests_total{verb=\"" << key.first << "\",code=\"" << key.second
        << "\"} " << v << '\n';
  }
  return out.str();
}

}  // namespace kubetrain::controller
