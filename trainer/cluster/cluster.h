// Cluster identity for a trainer process: who are my peers, and which one am I.
//
// The operator tells every replica its peers through CLUSTER_CONFIG (JSON object,
// role -> ["host:port", ...]) and POD_NAME (`<role>-<index>`); stock TensorFlow
// images get the same data as TF_CONFIG. This module only parses; it does no I/O
// beyond reading the environment in ClusterFromEnv.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/workload_contract.h"

namespace kubetrain::trainer {

struct HostPort {
  std::string host;
  int port = 0;
};

// A parsed cluster: role -> addresses, plus this process's role and index.
// Roles are "chief", "ps", "worker" (cluster members) and "evaluator" (never a member:
// an evaluator has an identity but no address).
struct ClusterInfo {
  std::map<std::string, std::vector<std::string>> roles;
  std::string role;
  int index = 0;

  const std::vector<std::string>& Members(std::string_view r) const;
  int NumPs() const { return static_cast<int>(Members(contract::kRolePs).size()); }
  // Processes that run the training loop: the chief (if any) then the workers.
  int NumTrainers() const;
  // This process's rank among the trainers: chief-0 is 0, worker-i is i + #chief.
  // -1 for ps/evaluator.
  int TrainerRank() const;
  // The replica that checkpoints and ends the job (common/workload_contract.h:
  // the chief, else worker 0).
  bool IsCoordinator() const {
    return contract::IsCoordinator(role, index, !Members(contract::kRoleChief).empty());
  }
  std::string TaskName() const { return role + "-" + std::to_string(index); }
};

// Splits "host:port" (IPv6 as "[::1]:2222"). Port must be 1..65535.
StatusOr<HostPort> SplitHostPort(std::string_view address);

// Parses CLUSTER_CONFIG and POD_NAME. Errors (InvalidArgument) name what is wrong:
// not JSON, unknown role, a non-list, a bad address, a POD_NAME that is not
// `<role>-<index>`, or a task that is not in the config.
StatusOr<ClusterInfo> ParseClusterConfig(std::string_view cluster_json, std::string_view pod_name);

// Parses TF_CONFIG: {"cluster": {...}, "task": {"type": ..., "index": ...}}.
StatusOr<ClusterInfo> ParseTfConfig(std::string_view tf_config_json);

// Reads CLUSTER_CONFIG + POD_NAME, or else TF_CONFIG, through `getenv` (injectable for
// tests). NotFound if neither is set, so a caller can fall back to single-process mode.
StatusOr<ClusterInfo> ClusterFromEnv(const std::function<const char*(const char*)>& getenv_fn);

}  // namespace kubetrain::trainer
