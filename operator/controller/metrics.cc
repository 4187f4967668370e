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
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++bucket_counts_[i];
  }
  ++reconcile_count_;
  reconcile_sum_ += seconds;
}

std::string Metrics::Render() const {
  std::ostringstream out;
  out << registry_->Render();
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
  return out.str();
}

}  // namespace kubetrain::controller
