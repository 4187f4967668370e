// What Kubeflow training-operator v1.9.3 gives a TFJob's children and status,
// as pure functions: the rules a TFJob executor must follow so that tools
// written against v1 (selectors on its labels, code reading TF_CONFIG, SDKs and
// dashboards reading status) keep working. Read from v1.9.3's
// pkg/controller.v1/tensorflow (tensorflow.go, tfjob_controller.go, util.go)
// and pkg/controller.v1/common (util.go GenGeneralName, job_controller.go
// GenLabels, pod.go createNewPod, job.go, pkg/util/status.go).
//
// Names: Pod and Service <job>-<type lower>-<index> ("/" -> "-"), the type as
// v1 knows it ("master" stays "master"). Labels: training.kubeflow.org/
// operator-name "tfjob-controller", job-name, replica-type (lower case),
// replica-index, and job-role "master" on the master role (the Chief or Master
// if the job has one, else worker 0; Services do not get job-role).
// TF_CONFIG: only for a distributed job (replicas over all types != 1); the
// cluster map holds every type, the evaluator included, keyed in lower case,
// hosts <job>-<type>-<i>.<namespace>.svc[.<CUSTOM_CLUSTER_DOMAIN>]:<port>, the
// port being the type's own tfjob-port; marshalled as Go's encoding/json does
// (map keys sorted, struct fields in declaration order), so the bytes are v1's.
// Status: v1's condition rules (Running and Restarting exclude each other,
// Succeeded/Failed turn Running False, the newest condition is last: the State
// column reads conditions[-1:]) and reasons (TFJobCreated, TFJobRunning, ...).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "operator/api/tfjob.h"
#include "operator/api/types.h"

namespace kubetrain::planner::tfjob_v1 {

inline constexpr std::string_view kOperatorNameLabel = "training.kubeflow.org/operator-name";
inline constexpr std::string_view kJobNameLabel = "training.kubeflow.org/job-name";
inline constexpr std::string_view kReplicaTypeLabel = "training.kubeflow.org/replica-type";
inline constexpr std::string_view kReplicaIndexLabel = "training.kubeflow.org/replica-index";
inline constexpr std::string_view kJobRoleLabel = "training.kubeflow.org/job-role";
inline constexpr std::string_view kOperatorName = "tfjob-controller";
// The operator's environment variable v1 appends to "<ns>.svc" in TF_CONFIG.
inline constexpr std::string_view kCustomClusterDomainEnv = "CUSTOM_CLUSTER_DOMAIN";

// One tfReplicaSpecs entry: its type as v1 canonicalises it ("PS", "Worker",
// "Chief", "Master", "Evaluator"), replicas and tfjob-port.
struct Replica {
  std::string type;
  int32_t replicas = 1;
  int32_t port = 2222;

  friend bool operator==(const Replica&, const Replica&) = default;
};

// What the rules need of a TFJob.
struct Shape {
  std::string name;
  std::string namespace_;
  std::vector<Replica> replicas;
  bool enable_dynamic_worker = false;

  bool HasChiefOrMaster() const;
};

// The shape of a converted TFJob (api::ConvertTFJob, then ParseTrainingJob of
// its `job`): types as v1 canonicalised them, replicas, the job's port.
Shape ShapeOf(const api::TFJobConversion& conversion, const api::TrainingJob& job);

// <job>-<type lower>-<index>, "/" replaced by "-" (GenGeneralName).
std::string ChildName(std::string_view job, std::string_view type, int32_t index);
// The master role: Chief or Master when the job has one, else Worker 0.
bool IsMasterRole(const Shape& shape, std::string_view type, int32_t index);
// A Pod's labels (job-role only on the master role); a Service's are these
// without job-role (`for_pod` false).
std::map<std::string, std::string> Labels(const Shape& shape, std::string_view type, int32_t index,
                                          bool for_pod);
// More than one replica in all: only such a job gets TF_CONFIG.
bool IsDistributed(const Shape& shape);
// TF_CONFIG of a replica, byte for byte v1's; nullopt for a job that is not
// distributed. `custom_cluster_domain`: v1's CUSTOM_CLUSTER_DOMAIN ("" unset).
std::optional<std::string> TfConfig(const Shape& shape, std::string_view type, int32_t index,
                                    std::string_view custom_cluster_domain);

// The Pod v1 creates for a replica, without ownerReferences (the executor's):
// `pod_template` (the TFJob's, as written) with v1's defaulting (a port
// tfjob-port 2222 on the "tensorflow" container, else the first, unless it has
// one of that name), its name, v1's labels over the template's, TF_CONFIG
// appended to the "tensorflow" container's env (distributed jobs only) and the
// pod restartPolicy from the replica's (ExitCode: Never). Never throws; a
// template without containers gets no port or TF_CONFIG.
nlohmann::json Pod(const Shape& shape, std::string_view type, int32_t index,
                   const nlohmann::json& pod_template, std::string_view restart_policy,
                   std::string_view custom_cluster_domain);
// The headless Service v1 creates for a replica, without ownerReferences: its
// name, labels (no job-role), clusterIP None, the selector, and a port per
// port of the "tensorflow" container (name and number, sorted by name;
// `pod_template` already defaulted as by Pod(), else its ports as written).
nlohmann::json Service(const Shape& shape, std::string_view type, int32_t index,
                       const nlohmann::json& pod_template);

// v1's JobStatus for a TFJob, from the status kubetrain's planner computed for
// the TrainingJob it converts to: conditions Created, Running, Restarting,
// Suspended, Succeeded, Failed with v1's reasons and rules (others, such as
// Ready or Unschedulable, are kubetrain's and left out), replicaStatuses per v1
// type (active: pods pending or running, v1 counts running ones only;
// succeeded; failed), startTime, completionTime.
// Messages: v1's for Created, Running, Succeeded, Suspended and Resumed;
// kubetrain's (which name the failed pod or the limit) for Restarting and
// Failed, whose v1 text ("... because 1 Worker replica(s) failed.") says less.
// `type_of`: TrainingJob role -> v1 type (Chief -> "Master" for a Master job).
nlohmann::json Status(const api::TrainingJobStatus& status, const Shape& shape,
                      const std::map<api::ReplicaType, std::string>& type_of);

}  // namespace kubetrain::planner::tfjob_v1
