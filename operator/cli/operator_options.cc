#include "operator/cli/operator_options.h"

#include <CLI/CLI.hpp>

#include "operator/runtime/http_endpoints.h"

namespace kubetrain::operator_cli {

void AddOperatorFlags(CLI::App& app, OperatorOptions* o) {
  app.add_option("--kubeconfig", o->kubeconfig,
                 "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)");
  app.add_option("--context", o->context, "kubeconfig context (default: the current one)");
  app.add_option("--namespace", o->namespaces,
                 "namespace to watch; repeat for several (default: all namespaces)");
  app.add_option("--workers", o->workers, "reconcile worker threads")->check(CLI::Range(1, 256));
  app.add_option("--create-parallelism", o->create_parallelism,
                 "API calls in flight per reconcile creating a job's Services and Pods")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--qps", o->qps, "client-side API rate limit, requests/s")
      ->check(CLI::PositiveNumber);
  app.add_option("--burst", o->burst, "client-side API burst")->check(CLI::Range(1, 100000));
  app.add_flag("--leader-elect", o->leader_elect, "run leader election (for several replicas)");
  app.add_option("--leader-elect-namespace", o->lease_namespace, "namespace of the Lease");
  app.add_option("--leader-elect-name", o->lease_name, "name of the Lease");
  app.add_option("--leader-elect-identity", o->lease_identity,
                 "this replica's identity in the Lease (default: $POD_NAME, else "
                 "<hostname>_<random>)");
  app.add_option("--leader-elect-lease-duration", o->lease_duration_s, "seconds");
  app.add_option("--leader-elect-renew-deadline", o->renew_deadline_s, "seconds");
  app.add_option("--leader-elect-retry-period", o->retry_period_s, "seconds");
  app.add_option("--cluster-domain", o->cluster_domain,
                 "cluster DNS domain for CLUSTER_CONFIG hosts (a job's spec.clusterDomain wins)");
  app.add_option("--network-policy", o->network_policy,
                 "create a NetworkPolicy per job: only its own pods reach its training port, "
                 "only the operator (and --network-policy-metrics-from) its metrics port")
      ->capture_default_str();
  app.add_option("--operator-namespace", o->operator_namespace,
                 "the operator's namespace, whose pods (--operator-pod-labels) the job's "
                 "NetworkPolicy admits to the metrics port (default: $POD_NAMESPACE, else "
                 "kubetrain-system)");
  app.add_option("--operator-pod-labels", o->operator_pod_labels,
                 "the operator pods' labels, key=value[,key=value]")
      ->capture_default_str();
  app.add_option("--network-policy-metrics-from", o->metrics_from,
                 "a namespace selector, key=value[,key=value], whose pods the job's "
                 "NetworkPolicy also admits to the metrics port (a monitoring stack); repeat "
                 "for several");
  app.add_flag("--kueue", o->kueue,
               "queue jobs labelled kueue.x-k8s.io/queue-name through Kueue's Workloads "
               "(off if the Workload CRD is not installed)");
  app.add_option("--tfjob", o->tfjob,
                 "reconcile Kubeflow TFJobs (kubeflow.org/v1): off; managed (only those with "
                 "runPolicy.managedBy kubetrain.io/operator); all (every TFJob in the watched "
                 "namespaces but those whose managedBy names another controller). Needs the "
                 "TFJob CRD (without it the operator logs that TFJobs are off)")
      ->check(CLI::IsMember({"off", "managed", "all"}))
      ->capture_default_str();
  app.add_option("--gang-scheduler-name", o->gang_scheduler_name,
                 "gang-schedule every job: a PodGroup per job (scheduling.x-k8s.io/v1alpha1) and "
                 "its pods sent to this scheduler (one with the Coscheduling plugin); empty: only "
                 "jobs that set schedulingPolicy.schedulerName and minAvailable");
  app.add_option("--metrics-addr", o->metrics_addr, "host:port for /metrics (port 0: off)");
  app.add_option("--health-addr", o->health_addr, "host:port for /healthz and /readyz (0: off)");
  app.add_option("--log-format", o->log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--log-level", o->log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_option("--cache-sync-timeout", o->sync_timeout_s, "seconds to wait for caches");
  app.add_option("--lost-pod-grace", o->lost_pod_grace_s,
                 "seconds after a job pod's deletion was requested (and at least min(15, "
                 "this) past its deletionTimestamp) after which a pod no kubelet confirmed "
                 "gone (its node is lost) is force-deleted, so its replica can be recreated "
                 "(0: never)")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}))
      ->capture_default_str();
  app.add_option("--status-coalesce", o->status_coalesce_s,
                 "seconds a job's live pod counts may wait to share one status write (0: off)")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  app.add_option("--progress-qps", o->progress_qps,
                 "status.progress: reads of trainers' metrics per second, all jobs together "
                 "(0: do not read; status.progress is left alone)")
      ->check(CLI::Range(0.0, 10000.0))
      ->capture_default_str();
  app.add_option("--progress-burst", o->progress_burst, "status.progress: read burst")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--progress-interval", o->progress_interval_s,
                 "status.progress: seconds between reads of one job")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--progress-backoff", o->progress_backoff_s,
                 "status.progress: seconds before reading a pod that failed to answer again, "
                 "doubling per failure in a row")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--progress-backoff-max", o->progress_backoff_max_s,
                 "status.progress: the longest backoff, seconds")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
}

Status ValidateOperatorOptions(const OperatorOptions& o) {
  auto metrics = runtime::ParseListenAddress(o.metrics_addr);
  auto health = runtime::ParseListenAddress(o.health_addr);
  if (metrics.ok() && health.ok() && metrics->second != 0 && metrics->second == health->second) {
    return InvalidArgument("--metrics-addr " + o.metrics_addr + " and --health-addr " +
                           o.health_addr +
                           " share a port: /healthz and /readyz get a server of their own, so "
                           "that metrics scrapes cannot starve them");
  }
  if (o.leader_elect && o.renew_deadline_s >= o.lease_duration_s) {
    return InvalidArgument("--leader-elect-renew-deadline must be shorter than the lease duration");
  }
  return Status::Ok();
}

void ResolveFromEnvironment(OperatorOptions* o,
                            const std::function<const char*(const char*)>& getenv) {
  if (o->operator_namespace.empty()) {
    if (const char* ns = getenv("POD_NAMESPACE"); ns != nullptr) o->operator_namespace = ns;
  }
  if (o->lease_identity.empty()) {
    if (const char* pod = getenv("POD_NAME"); pod != nullptr && *pod != '\0') {
      o->lease_identity = pod;
    }
  }
}

}  // namespace kubetrain::operator_cli
