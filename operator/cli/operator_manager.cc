#include "operator/cli/operator_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "kubetrain/version.h"
#include "operator/planner/metrics_ingress.h"
#include "operator/progress/scrape_scheduler.h"

namespace kubetrain::operator_cli {
namespace {

// Kueue's API must be served, or the workloads cache would never sync.
bool KueueServed(kube::Client& client) {
  auto found = client.Do("GET", "/apis/kueue.x-k8s.io/v1beta1");
  const bool served =
      found.ok() && found->status == 200 && found->body.find("\"workloads\"") != std::string::npos;
  if (!served) {
    spdlog::warn(
        "--kueue: kueue.x-k8s.io/v1beta1 workloads are not served ({}); the Kueue "
        "integration is off and jobs asking for a queue run unqueued, with a warning "
        "event",
        found.ok() ? "HTTP " + std::to_string(found->status) : found.status().ToString());
    return false;
  }
  spdlog::info("--kueue: jobs labelled kueue.x-k8s.io/queue-name are admitted by Kueue");
  return true;
}

// The TFJob CRD must be served, or the TFJob cache would never sync and the
// operator would never turn ready: without it TFJobs are off, said once here.
bool TFJobsServed(kube::Client& client, std::string_view mode) {
  auto found = client.Do("GET", "/apis/kubeflow.org/v1");
  const bool served =
      found.ok() && found->status == 200 && found->body.find("\"tfjobs\"") != std::string::npos;
  if (!served) {
    spdlog::warn(
        "--tfjob={}: kubeflow.org/v1 tfjobs are not served ({}); TFJobs are off until the "
        "operator restarts with the TFJob CRD installed (crds/tfjob, or Kubeflow's own)",
        mode, found.ok() ? "HTTP " + std::to_string(found->status) : found.status().ToString());
    return false;
  }
  spdlog::info("--tfjob={}: reconciling kubeflow.org/v1 TFJobs", mode);
  return true;
}

progress::ScrapeScheduler::Options ProgressSchedule(const OperatorOptions& f) {
  using Dur = progress::ScrapeScheduler::Clock::duration;
  auto secs = [](double s) {
    return std::chrono::duration_cast<Dur>(std::chrono::duration<double>(s));
  };
  return {.qps = f.progress_qps,
          .burst = f.progress_burst,
          .interval = secs(f.progress_interval_s),
          .backoff_base = secs(f.progress_backoff_s),
          .backoff_max = secs(std::max(f.progress_backoff_s, f.progress_backoff_max_s))};
}

}  // namespace

StatusOr<Manager> BuildManager(const OperatorOptions& f) {
  Manager m;
  KT_ASSIGN_OR_RETURN(m.jobs.metrics_ingress,
                      planner::MetricsIngressFromFlags(f.operator_namespace, f.operator_pod_labels,
                                                       f.metrics_from));
  KT_ASSIGN_OR_RETURN(m.config, kube::LoadDefaultConfig(f.kubeconfig, f.context));
  m.config.qps = f.qps;
  m.config.burst = f.burst;
  m.fenced = std::make_shared<std::atomic<bool>>(false);
  if (f.leader_elect) m.config.may_write = [fenced = m.fenced] { return !fenced->load(); };
  m.config.on_credential_error = [](const Status& error) {
    spdlog::warn("kube client: refreshing the exec credential failed: {}", error.ToString());
  };
  KT_ASSIGN_OR_RETURN(m.client, kube::Client::Create(m.config));
  spdlog::info("kubetrain-operator {} talking to {}", kubetrain::kVersion,
               m.client->config().server);

  m.jobs.namespaces = f.namespaces;
  m.jobs.cluster_domain = f.cluster_domain;
  m.jobs.network_policy = f.network_policy;
  m.jobs.kueue = f.kueue && KueueServed(*m.client);
  m.jobs.gang_scheduler_name = f.gang_scheduler_name;
  KT_ASSIGN_OR_RETURN(m.jobs.tfjob, controller::ParseTFJobMode(f.tfjob));
  if (m.jobs.tfjob != controller::TFJobMode::kOff && !TFJobsServed(*m.client, f.tfjob)) {
    m.jobs.tfjob = controller::TFJobMode::kOff;
  }
  // v1's rule for TF_CONFIG hosts: <pod>.<ns>.svc[.$CUSTOM_CLUSTER_DOMAIN].
  if (const char* domain = std::getenv("CUSTOM_CLUSTER_DOMAIN"); domain != nullptr) {
    m.jobs.tfjob_custom_cluster_domain = domain;
  }
  m.jobs.workers = f.workers;
  m.jobs.create_parallelism = f.create_parallelism;
  m.jobs.lost_pod_grace = std::chrono::seconds(f.lost_pod_grace_s);
  m.jobs.status_coalesce =
      std::chrono::milliseconds(static_cast<int64_t>(f.status_coalesce_s * 1000));
  m.jobs.read_progress = f.progress_qps > 0;
  m.jobs.progress.schedule = ProgressSchedule(f);
  m.jobs.progress.tracker.min_publish_interval = std::chrono::milliseconds(
      static_cast<int64_t>(std::llround(f.progress_write_interval_s * 1000)));
  m.sweeps = {.namespaces = f.namespaces, .workers = 2};

  if (f.leader_elect) {
    m.election.lease_namespace = f.lease_namespace;
    m.election.lease_name = f.lease_name;
    m.election.identity = f.lease_identity;
    m.election.lease_duration = std::chrono::seconds(f.lease_duration_s);
    m.election.renew_deadline = std::chrono::seconds(f.renew_deadline_s);
    m.election.retry_period = std::chrono::seconds(f.retry_period_s);
    m.election.on_lost = [fenced = m.fenced] { fenced->store(true); };
    KT_ASSIGN_OR_RETURN(m.election_client, kube::Client::Create(runtime::LeaderElectionClientConfig(
                                               m.config, m.election)));
  }
  return m;
}

}  // namespace kubetrain::operator_cli
