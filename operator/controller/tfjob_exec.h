// What the JobController does differently for a kubeflow.org/v1 TFJob
// (--tfjob=managed|all): everything else is the TrainingJob path, the same
// planner and the same executor.
//
// Flow: the served TFJob -> ReadTFJob (api::ConvertTFJob, then the TrainingJob
// it converts to, with the TFJob's identity and the planner's state from the
// annotation kTFJobStateAnnotation) -> ToPlannerNames (the observed children
// under the names the planner gives them) -> PlanJob -> ToV1Children (creates
// and deletes under v1's names, labels, ports, TF_CONFIG and owner) -> the
// executor's writes; status: V1Status to tfjobs/status, then the planner's
// state to the annotation.
//
// Guarantees: a TFJob whose runPolicy.managedBy names another controller is
// never taken (TakesTFJob), whatever the mode; the children of a TFJob carry
// v1.9.3's names, labels, tfjob-port and TF_CONFIG (tfjob_v1.h) besides
// kubetrain's own labels (the executor's caches select on them) and are
// controlled by the TFJob.
// Assumptions: v1's CRD prunes status fields it does not know (counted
// failures, disruptions, backoff), so the planner's state lives in an
// annotation; a TFJob of v1.9.3's CRD has the status subresource.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "operator/api/tfjob.h"
#include "operator/api/types.h"
#include "operator/kube/client.h"
#include "operator/planner/planner.h"
#include "operator/planner/tfjob_v1.h"
#include "operator/runtime/object.h"

namespace kubetrain::controller {

inline const kube::ResourceRef kTFJobs{"kubeflow.org", "v1", "tfjobs", true};

// --tfjob: which TFJobs the operator reconciles. kOff: none (no informer);
// kManaged: those with runPolicy.managedBy kubetrain.io/operator; kAll: every
// TFJob in the watched namespaces but those whose managedBy names another
// controller.
enum class TFJobMode { kOff, kManaged, kAll };
// "off", "managed", "all"; InvalidArgument otherwise.
StatusOr<TFJobMode> ParseTFJobMode(std::string_view text);
std::string_view Name(TFJobMode mode);

// The planner's own status of a TFJob (api::StatusToJson, compact JSON).
inline constexpr std::string_view kTFJobStateAnnotation = "kubetrain.io/tfjob-state";
// training-operator's own managedBy value (v1.9's webhook default).
inline constexpr std::string_view kTrainingOperatorManagedBy = "kubeflow.org/training-operator";

// runPolicy.managedBy of a served TFJob; nullopt when unset, empty or not a
// string. Read from the JSON as served, so a TFJob that does not convert is
// still left to its controller.
std::optional<std::string> TFJobManagedBy(const nlohmann::json& tfjob);
// Whether an operator in `mode` takes a TFJob whose managedBy is `managed_by`.
bool TakesTFJob(TFJobMode mode, const std::optional<std::string>& managed_by);

// A TFJob that finished (Succeeded or Failed True in its status) without the
// planner's state annotation: finished by another controller (training-operator
// before a takeover) or found unrunnable here. Never run again.
bool FinishedElsewhere(const nlohmann::json& tfjob);

// The TFJob informer's transform: runtime::ToCompactObject without kubectl's
// last-applied-configuration annotation (a second copy of the manifest on
// every TFJob a GitOps tool applied; ConvertTFJob does not read it, and the
// status writes send no metadata the apiserver keeps).
StatusOr<runtime::CompactObject> ToCachedTFJob(const nlohmann::json& tfjob);

// Work-queue keys: "tfjob:<ns>/<name>" (a TrainingJob's is "<ns>/<name>"; the
// two kinds may share a name).
inline constexpr std::string_view kTFJobKeyPrefix = "tfjob:";
bool IsTFJobKey(std::string_view key);
std::string TFJobKey(std::string_view ns, std::string_view name);
// "tfjob:ns/name" -> "ns/name"; other keys as they are.
std::string_view StripTFJobKey(std::string_view key);

// A served TFJob as the planner sees it.
struct TFJobView {
  // Its `job` JSON is empty: read into `job` below.
  api::TFJobConversion conversion;
  // The converted job: the TFJob's metadata (uid, resourceVersion, ...),
  // serviceMode PerReplica (v1: one Service per replica), status: the planner's
  // state from kTFJobStateAnnotation (empty when absent or unreadable).
  api::TrainingJob job;
  planner::tfjob_v1::Shape shape;
  // TrainingJob role -> v1 type ("Master" for a Master job's Chief).
  std::map<api::ReplicaType, std::string> type_of;
  // Planner child name -> v1's, and back, where they differ (Master only).
  std::map<std::string, std::string> to_v1;
  std::map<std::string, std::string> to_planner;
};

// InvalidArgument "<TFJob field path>: <what>" for a TFJob that does not
// convert, or that the executor cannot run as v1 does (a Master with more
// than one replica).
StatusOr<TFJobView> ReadTFJob(const nlohmann::json& tfjob);

// The v1 name of the child the planner calls `planner_name` (they differ for
// a Master's: <job>-chief-0 is <job>-master-0); other names as they are.
std::string V1Name(const TFJobView& view, std::string planner_name);
// Observed pods, vanished pods and Services under the planner's names.
void ToPlannerNames(const TFJobView& view, planner::ObservedChildren& observed);
// The plan's children as v1 makes them: Pods and Services renamed, with v1's
// labels beside kubetrain's, the tfjob-port, v1's TF_CONFIG (none for a job
// that is not distributed) and a Service port per tensorflow-container port;
// every child's controller the TFJob; deletes renamed. CLUSTER_CONFIG (Secret,
// ConfigMap) names v1's hosts. `custom_cluster_domain`: v1's
// CUSTOM_CLUSTER_DOMAIN ("": unset).
void ToV1Children(const TFJobView& view, planner::Plan& plan,
                  std::string_view custom_cluster_domain);

// The TFJob's status stanza (v1's shape) for the planner's `status`. Once
// `served_status` (the TFJob's status as served) says Succeeded or Failed, its
// replicaStatuses are kept as they are: v1 stops counting at the end, so the
// pods cleanup deletes afterwards do not lower the counts.
nlohmann::json V1Status(const TFJobView& view, const api::TrainingJobStatus& status,
                        const nlohmann::json& served_status);
// The merge patch that writes the planner's `status` to kTFJobStateAnnotation,
// conditional on resourceVersion `rv` (the one the status write made): the
// apiserver answers Conflict when the TFJob has moved on.
nlohmann::json TFJobStatePatch(const std::string& rv, const api::TrainingJobStatus& status);

// The status stanza of a TFJob that does not convert: Failed (reason
// TFJobFailed, v1's) with `message`, Created before it, on `now`. Unchanged
// (nullopt) when `served_status` already says Failed.
std::optional<nlohmann::json> UnconvertibleStatus(const nlohmann::json& tfjob,
                                                  const std::string& message, api::Time now);

}  // namespace kubetrain::controller
