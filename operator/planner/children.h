// The child builders: the complete objects the planner asks an executor to
// create for a TrainingJob (its auth Secret holding the key and the cluster, a
// headless Service, a Pod per replica; the cluster ConfigMap of jobs that read
// CLUSTER_CONFIG from one), ready to POST. Pure: no I/O, no clock.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "operator/api/types.h"
#include "operator/planner/env_contract.h"
#include "operator/planner/gang.h"
#include "operator/planner/metrics_ingress.h"

namespace kubetrain::planner {

// FNV-1a over only what the workload sees of a replica's spec (its template and
// `cluster_config`, ClusterConfigJson of the job's cluster), as 16 hex digits:
// the kSpecHashAnnotation. A new operator version building pods slightly
// differently does not change it, so it does not recreate running pods.
std::string SpecHash(const api::ReplicaSpec& spec, std::string_view cluster_config);

// Whether ChildBuilder::Pod can build the role's pods: the template checks it
// makes (InvalidArgument naming the field), without building a pod. Depends on
// the template alone.
Status CheckPodTemplate(api::ReplicaType type, const api::ReplicaSpec& spec);

// Builds one job's children. Holds a reference to the job, which outlives it.
// Every child carries the job's labels and, when the job has a UID, an
// ownerReference to it (a job that never went through an apiserver has none).
class ChildBuilder {
 public:
  // `gang`: the job is gang-scheduled (gang.h); null when it is not. Both
  // outlive the builder. `config_in_secret`: pods read CLUSTER_CONFIG from the
  // auth Secret (key kClusterConfigKey), else from the ConfigMap.
  ChildBuilder(const api::TrainingJob& job, api::ServiceMode mode, const GangSpec* gang = nullptr,
               bool config_in_secret = true)
      : job_(job),
        mode_(mode),
        gang_(gang),
        config_in_secret_(config_in_secret),
        auth_secret_(AuthSecretName(job.metadata.name, job.metadata.uid)) {}
  void set_config_in_secret(bool in_secret) { config_in_secret_ = in_secret; }
  // The auth Secret the pods read and Secret() names: AuthSecretName unless
  // live pods read the legacy one (planner.h).
  void set_auth_secret(std::string name) { auth_secret_ = std::move(name); }
  const std::string& auth_secret() const { return auth_secret_; }

  // The replica's Pod: its template with our labels, the spec-hash annotation,
  // the env contract (our variables replace the template's), the job's port,
  // restartPolicy Never and the scheduling policy (a gang-scheduled job's pods:
  // kPodGroupLabel and the gang's schedulerName). InvalidArgument, naming the
  // field, for a template the CRD could not check (CheckPodTemplate).
  StatusOr<nlohmann::json> Pod(api::ReplicaType type, int32_t index, const api::ReplicaSpec& spec,
                               std::string_view spec_hash) const;
  // The replica's headless Service (PerReplica; publishNotReadyAddresses: peers
  // resolve each other while starting up).
  nlohmann::json Service(api::ReplicaType type, int32_t index) const;
  // The job's headless Service (JobWide), selecting every pod of the job; each
  // pod's hostname/subdomain give it <pod>.<job>.<ns>.svc.<domain>.
  nlohmann::json JobService() const;
  // The job's ConfigMap holding `cluster_config` under kClusterConfigKey.
  nlohmann::json ConfigMap(std::string_view cluster_config) const;
  // The job's auth Secret holding AuthKeyText(key) under kAuthSecretKey and
  // `cluster_config` under kClusterConfigKey (stringData: readable in render).
  nlohmann::json Secret(const std::array<uint8_t, 32>& key, std::string_view cluster_config) const;
  // The job's NetworkPolicy, selecting the job's pods (so, with no other policy
  // on them, they are isolated for ingress): its training port (spec.port, TCP)
  // admits the pods of the same job; the trainer's metrics port (the container
  // port named "metrics", which status.progress reads) admits the operator's
  // pods and every pod of `metrics.namespace_selectors`' namespaces; nothing
  // else. Policies only add: a namespace's default-deny stays whole.
  nlohmann::json NetworkPolicy(const MetricsIngress& metrics) const;
  // The gang-scheduled job's PodGroup (scheduling.x-k8s.io/v1alpha1): minMember,
  // minResources and scheduleTimeoutSeconds from the GangSpec. Only with a gang.
  nlohmann::json PodGroup() const;

 private:
  nlohmann::json OwnerReferences() const;
  nlohmann::json Labels(api::ReplicaType type, int32_t index) const;
  nlohmann::json ChildMetadata(const std::string& name, const nlohmann::json& labels) const;

  const api::TrainingJob& job_;
  const api::ServiceMode mode_;
  const GangSpec* gang_;
  bool config_in_secret_;
  std::string auth_secret_;
};

}  // namespace kubetrain::planner
