// kubetrain-operator's command line: every flag as one options struct, parsed
// by CLI11 (per-flag checks there) and then validated as a whole (flags that
// must agree with each other). The flag names and defaults are the operator's
// interface (deploy/ passes them; tests/deploy checks the args): keep them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace kubetrain::operator_cli {

struct OperatorOptions {
  std::string kubeconfig;
  std::string context;
  std::vector<std::string> namespaces;
  int workers = 4;
  int create_parallelism = 4;
  double qps = 50;
  int burst = 100;
  bool leader_elect = false;
  std::string lease_namespace = "kubetrain-system";
  std::string lease_name = "kubetrain-operator";
  std::string lease_identity;  // empty: $POD_NAME, else generated (ResolveFromEnvironment)
  int lease_duration_s = 15;
  int renew_deadline_s = 10;
  int retry_period_s = 2;
  std::string cluster_domain = "cluster.local";
  bool network_policy = true;
  std::string operator_namespace;  // empty: $POD_NAMESPACE, else kubetrain-system
  std::string operator_pod_labels = "app.kubernetes.io/name=kubetrain-operator";
  std::vector<std::string> metrics_from;
  bool kueue = false;
  // --tfjob: off, managed or all (controller::ParseTFJobMode).
  std::string tfjob = "off";
  std::string gang_scheduler_name;
  std::string metrics_addr = "0.0.0.0:8080";
  std::string health_addr = "0.0.0.0:8081";
  std::string log_format = "text";
  std::string log_level = "info";
  int sync_timeout_s = 120;
  double status_coalesce_s = 30;
  int64_t lost_pod_grace_s = 60;
  // status.progress: reads of trainers' /metrics, for the whole operator.
  double progress_qps = 10;
  int progress_burst = 10;
  double progress_interval_s = 15;
  double progress_backoff_s = 30;
  double progress_backoff_max_s = 600;
};

// Registers every flag on `app`, writing into `*options` (which must outlive
// `app`'s parse).
void AddOperatorFlags(CLI::App& app, OperatorOptions* options);

// What CLI11's per-flag checks cannot see: /metrics and the probes on one port
// (the probes get a server of their own, so scrapes cannot starve them), a
// renew deadline not shorter than the lease. InvalidArgument naming the flags.
[[nodiscard]] Status ValidateOperatorOptions(const OperatorOptions& options);

// Fills what the flags left to the environment, through `getenv` (injectable
// for tests): the operator's namespace from POD_NAMESPACE, the Lease identity
// from POD_NAME.
void ResolveFromEnvironment(OperatorOptions* options,
                            const std::function<const char*(const char*)>& getenv);

}  // namespace kubetrain::operator_cli
