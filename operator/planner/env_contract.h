// The operator's side of the workload contract (common/workload_contract.h
// holds what the trainer shares: the variables' names, roles, the coordinator
// rule, exit codes and metrics): what every child carries so that replicas find
// each other and their role, in one place for the planner's child builders, the
// Kubernetes executor and the local runner.
//
// Names: children are <job>-<role>-<index> (api::ChildName), labelled with the
// job name, role and index; the job's auth Secret is <job>-auth-<uid>. Environment of
// the main container (named "trainer", else the first): CLUSTER_CONFIG (from the
// Secret's key "cluster"; from the ConfigMap <job>-cluster for jobs whose pods
// an earlier operator made, see planner.h), POD_NAME ("<role>-<index>"),
// TF_CONFIG (expanded from CLUSTER_CONFIG) and KUBETRAIN_AUTH_KEY (from the
// Secret's key "key"). Pure functions, no I/O.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "operator/api/types.h"

namespace kubetrain::planner {

// Labels on every Pod and Service (and the job-name label on the Secret).
inline constexpr std::string_view kJobNameLabel = "kubetrain.io/job-name";
inline constexpr std::string_view kReplicaTypeLabel = "kubetrain.io/replica-type";    // "worker"
inline constexpr std::string_view kReplicaIndexLabel = "kubetrain.io/replica-index";  // "0"
// The Secret's data key holding the job's auth key (64 lower-case hex characters
// encoding 32 bytes: env values cannot carry arbitrary bytes).
inline constexpr std::string_view kAuthSecretKey = "key";
inline constexpr std::string_view kPortName = "kubetrain";
inline constexpr std::string_view kMainContainerName = "trainer";
// On every Pod: a hash of what the pod was built from (its replica's template
// and CLUSTER_CONFIG, which holds the port). A live pod whose hash differs from the current
// spec's is deleted and recreated: the spec was reshaped while the job was
// suspended, and the suspension may never have been observed (a lagging cache
// can coalesce suspend, edit and resume into one update).
inline constexpr std::string_view kSpecHashAnnotation = "kubetrain.io/spec-hash";

// The role and index in kubetrain.io/replica-{type,index} labels, if well formed.
std::optional<std::pair<api::ReplicaType, int32_t>> ReplicaFromLabels(
    const std::map<std::string, std::string>& labels);

// Index of the container that gets the env contract: "trainer", else the first.
size_t MainContainerIndex(const nlohmann::json& containers);
// The contract variables a template's main container sets itself ("A, B").
std::string TemplateContractEnv(const nlohmann::json& pod_template);

// In-cluster roles -> "host:port" per index. Evaluators never appear.
using ClusterSpec = std::map<api::ReplicaType, std::vector<std::string>>;

// <job>-<role>-<index>.<namespace>.svc.<domain>:<port> (PerReplica) or
// <job>-<role>-<index>.<job>.<namespace>.svc.<domain>:<port> (JobWide: the pod's
// hostname under the job's Service as its subdomain) for every in-cluster
// replica; domain = spec.clusterDomain, else `default_domain`; namespace
// "default" when the job has none.
ClusterSpec BuildClusterSpec(const api::TrainingJob& job, std::string_view default_domain,
                             api::ServiceMode mode);
// The job-wide headless Service's name (JobWide): the job's name.
std::string JobServiceName(std::string_view job_name);
// {"chief":[...],"ps":[...],"worker":[...]}: roles in lower case, compact JSON.
std::string ClusterConfigJson(const ClusterSpec& cluster);
// {"cluster":<same>,"task":{"type":<role>,"index":<i>},"environment":"cloud"}.
std::string TfConfigJson(const ClusterSpec& cluster, api::ReplicaType role, int32_t index);
// TF_CONFIG as the pod carries it: TfConfigJson with the cluster map replaced by
// "$(CLUSTER_CONFIG)", which Kubernetes (and the local runner) expands from the
// CLUSTER_CONFIG variable defined before it. Expanded, it is byte for byte
// TfConfigJson(cluster, role, index); the pod stays O(1) in the job's size.
std::string TfConfigTemplate(api::ReplicaType role, int32_t index);
// The key holding ClusterConfigJson in the job's auth Secret (and in the
// ConfigMap of the jobs that have one), which every pod's CLUSTER_CONFIG
// references.
inline constexpr std::string_view kClusterConfigKey = "cluster";
// "<job>-cluster": the job's ConfigMap, for jobs whose pods read CLUSTER_CONFIG
// from it (made by an operator before the Secret held it, or when the Secret
// may hold an earlier spec's cluster; planner.h).
std::string ClusterConfigMapName(std::string_view job_name);
// Whether the pod's main container reads CLUSTER_CONFIG from a Secret (the
// job's auth Secret) rather than a ConfigMap. Never throws.
bool ClusterConfigInSecret(const nlohmann::json& pod);
// "<role>-<index>".
std::string PodNameEnv(api::ReplicaType role, int32_t index);
// The job's auth Secret: "<job>-auth-<uid>". Named by the job's UID because the
// operator may not read Secrets: a job deleted and re-created under its name
// would otherwise meet the earlier job's Secret until the garbage collector
// removes it, and its pods would read a key that then disappears. Without a UID
// (kubetrain render of a file): "<job>-auth".
std::string AuthSecretName(std::string_view job_name, std::string_view job_uid);
// "<job>-auth": the Secret of jobs whose pods an operator before the UID-named
// Secret made; their replacement pods keep reading it (LegacyAuthSecret).
std::string LegacyAuthSecretName(std::string_view job_name);
// Whether the pod's main container reads KUBETRAIN_AUTH_KEY from a Secret named
// "<job>-auth" (LegacyAuthSecretName) rather than the UID-named one. Never throws.
bool LegacyAuthSecret(const nlohmann::json& pod);
// The job's NetworkPolicy: "<job>-training-<uid>". Named by the job's UID like
// the auth Secret: the operator does not watch NetworkPolicies and takes
// AlreadyExists for "the job has its policy", so a job re-created under its
// name must not meet the earlier job's policy, which the garbage collector
// removes soon after. Without a UID (kubetrain render of a file):
// "<job>-training".
std::string NetworkPolicyName(std::string_view job_name, std::string_view job_uid);
// The key as the Secret stores it and KUBETRAIN_AUTH_KEY carries it: 64
// lower-case hex characters. The local runner, which has no Secret, sets the
// variable to this.
std::string AuthKeyText(const std::array<uint8_t, 32>& key);

}  // namespace kubetrain::planner
