// TrainingJob (kubetrain.io/v1alpha1) as plain C++ values.
//
// The structs mirror crds/trainingjobs.kubetrain.io.yaml field for field. Default
// member initializers ARE the CRD's defaults, so a job parsed by ParseTrainingJob
// (json.h) is already defaulted the way the apiserver would default it. Fields
// whose absence means something (no deadline, no TTL, ...) are std::optional.
//
// Roles are data: ReplicaType plus one table (RoleInfo) of what differs per role.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/workload_contract.h"

namespace kubetrain::api {

inline constexpr std::string_view kGroup = "kubetrain.io";
inline constexpr std::string_view kVersion = "v1alpha1";
inline constexpr std::string_view kApiVersion = "kubetrain.io/v1alpha1";
inline constexpr std::string_view kKind = "TrainingJob";
inline constexpr int32_t kDefaultPort = 2222;
inline constexpr std::string_view kDefaultClusterDomain = "cluster.local";
// Kubernetes object names that must be DNS-1035 labels (Services) are capped here.
inline constexpr size_t kMaxChildNameLength = 63;
// status.metrics is at most this long as compact JSON (the kubelet's cap on a
// termination message): a workload cannot grow the job's status without bound.
inline constexpr size_t kMaxMetricsBytes = 4096;
// spec.runPolicy.activeDeadlineSeconds at most 10 years (the CRD's maximum): a
// larger value would overflow the deadline's time arithmetic.
inline constexpr int64_t kMaxActiveDeadlineSeconds = 315'360'000;

// Kubernetes timestamps have one-second resolution (metav1.Time).
using Time = std::chrono::sys_seconds;

// The clock's calendar time, to the second: every timestamp the operator writes.
Time Now(const Clock& clock = RealClock());
// "2026-11-21T13:45:21Z".
std::string FormatTime(Time t);
// Accepts RFC 3339 with 'Z' or a numeric offset, and optional fractional seconds
// (truncated). InvalidArgument otherwise.
StatusOr<Time> ParseTime(std::string_view text);

enum class ReplicaType { kChief, kPS, kWorker, kEvaluator };

// What differs per role. One row per ReplicaType, in kRoles order.
struct RoleInfo {
  ReplicaType type;
  std::string_view key;    // key in spec.replicaSpecs and status.replicaStatuses: "PS"
  std::string_view lower;  // in child names, labels, CLUSTER_CONFIG, POD_NAME: "ps"
  bool in_cluster;         // listed in CLUSTER_CONFIG / TF_CONFIG (evaluators are not)
};
inline constexpr std::array<RoleInfo, 4> kRoles = {{
    {ReplicaType::kChief, "Chief", contract::kRoleChief, true},
    {ReplicaType::kPS, "PS", contract::kRolePs, true},
    {ReplicaType::kWorker, "Worker", contract::kRoleWorker, true},
    {ReplicaType::kEvaluator, "Evaluator", contract::kRoleEvaluator, false},
}};
const RoleInfo& Role(ReplicaType type);
// "PS" -> kPS. nullopt for anything else (keys are case-sensitive, like the CRD).
std::optional<ReplicaType> ReplicaTypeFromKey(std::string_view key);
// "ps" -> kPS (the label / child-name spelling).
std::optional<ReplicaType> ReplicaTypeFromLower(std::string_view lower);

enum class RestartPolicy { kNever, kOnFailure, kAlways, kExitCode };
enum class CleanPodPolicy { kNone, kRunning, kAll };
enum class SuccessPolicy { kChiefOrWorker0, kAllWorkers };
// How replicas find each other: one headless Service per replica (host
// <job>-<role>-<i>.<ns>.svc.<domain>), or one headless Service for the job
// with each pod's hostname/subdomain set (host <job>-<role>-<i>.<job>.<ns>.svc.<domain>):
// one Service and its EndpointSlice per job instead of one per replica.
enum class ServiceMode { kPerReplica, kJobWide };
// What a disruption (a pod ended by the cluster, not the workload: preempted,
// evicted, deleted by someone else, lost with its node) costs the job. Ignore:
// the replica is replaced whatever its restartPolicy, no restart counted, no
// crash-loop backoff. Count: handled like a failure of the pod.
enum class DisruptionPolicy { kIgnore, kCount };

std::string_view Name(RestartPolicy p);
std::string_view Name(CleanPodPolicy p);
std::string_view Name(SuccessPolicy p);
std::string_view Name(ServiceMode m);
std::string_view Name(DisruptionPolicy p);

struct ReplicaSpec {
  int32_t replicas = 1;
  RestartPolicy restart_policy = RestartPolicy::kNever;
  // A PodTemplateSpec, kept as JSON: the operator only edits a few fields of it
  // and must pass everything else through untouched.
  nlohmann::json pod_template = nlohmann::json::object();

  friend bool operator==(const ReplicaSpec&, const ReplicaSpec&) = default;
};

struct SchedulingPolicy {
  std::optional<int32_t> min_available;
  std::optional<std::string> queue;
  std::optional<std::string> priority_class_name;
  std::optional<std::string> scheduler_name;
  // Gang scheduling: how long the scheduler waits for the whole gang (the
  // PodGroup's scheduleTimeoutSeconds); unset: the scheduler's default.
  std::optional<int32_t> schedule_timeout_seconds;

  friend bool operator==(const SchedulingPolicy&, const SchedulingPolicy&) = default;
};

struct RunPolicy {
  CleanPodPolicy clean_pod_policy = CleanPodPolicy::kRunning;
  std::optional<int32_t> ttl_seconds_after_finished;
  std::optional<int64_t> active_deadline_seconds;
  // How long pods may stay unable to start (condition CannotStart) before the
  // job fails (StartDeadlineExceeded); unset: no limit.
  std::optional<int64_t> start_deadline_seconds;
  std::optional<int32_t> backoff_limit;  // unset: no limit
  bool suspend = false;
  std::optional<SchedulingPolicy> scheduling_policy;
  DisruptionPolicy disruption_policy = DisruptionPolicy::kIgnore;

  friend bool operator==(const RunPolicy&, const RunPolicy&) = default;
};

struct TrainingJobSpec {
  std::map<ReplicaType, ReplicaSpec> replica_specs;
  RunPolicy run_policy;
  SuccessPolicy success_policy = SuccessPolicy::kChiefOrWorker0;
  int32_t port = kDefaultPort;
  std::optional<std::string> cluster_domain;  // unset: the operator's flag
  // Unset: JobWide for a new job; a job that already has per-replica Services
  // (started by an operator before this field) keeps PerReplica.
  std::optional<ServiceMode> service_mode;

  friend bool operator==(const TrainingJobSpec&, const TrainingJobSpec&) = default;

  // Replicas of `type`, 0 if the role is absent.
  int32_t Replicas(ReplicaType type) const;
};

// The coordinator's role (common/workload_contract.h): kChief when the job has a
// chief, else kWorker; its index is contract::kCoordinatorIndex.
ReplicaType CoordinatorRole(const TrainingJobSpec& spec);

// The part of ObjectMeta the operator reads or writes; the rest is ignored.
struct ObjectMeta {
  std::string name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::optional<Time> creation_timestamp;
  std::optional<Time> deletion_timestamp;

  friend bool operator==(const ObjectMeta&, const ObjectMeta&) = default;
};

// kUnschedulable: some pods cannot be scheduled (the scheduler's reason in the
// message); False again once every pod is.
// kCannotStart: some scheduled pods cannot start their containers (image pull,
// missing Secret or ConfigMap: the kubelet's reason and message); False again
// once none is stuck so.
// kCreateRefused: the apiserver refuses to create a child of the job (a 403:
// ResourceQuota, Pod Security admission, a priority class the namespace may
// not use, RBAC), or a same-named object the job does not own is in the way.
// Reason QuotaExceeded, <Kind>CreateForbidden (PodCreateForbidden, ...) or
// ChildNameConflict; the message names the child and quotes the apiserver.
// Removed (not set False) once a create of that kind goes through, like the
// ReplicaSet controller's ReplicaFailure, so `kubectl get`'s REFUSED column is
// empty unless the job is refused now.
enum class ConditionType {
  kCreated,
  kRunning,
  kRestarting,
  kSucceeded,
  kFailed,
  kSuspended,
  kUnschedulable,
  kCannotStart,
  kCreateRefused,
  // kstatus's summary conditions (sigs.k8s.io/cli-utils/pkg/kstatus, what Flux,
  // kpt and `kubectl wait --for=condition=Ready` read), derived from the ones
  // above by SetSummaryConditions; see it for their meaning.
  kReady,
  kReconciling,
  kStalled
};
std::string_view Name(ConditionType t);
std::optional<ConditionType> ConditionTypeFromName(std::string_view name);

struct Condition {
  ConditionType type = ConditionType::kCreated;
  bool status = false;  // "True" / "False" on the wire
  std::string reason;
  std::string message;
  Time last_transition_time{};

  friend bool operator==(const Condition&, const Condition&) = default;
};

// Sets kstatus's Ready, Reconciling and Stalled in `conditions` (a TrainingJob's
// or a TrainingSweep's) from the others, so that kstatus computes
//   Succeeded True                        -> Current:    Ready True
//   Failed True, or CreateRefused True    -> Failed:     Ready False, Stalled True
//     with a reason other than QuotaExceeded (nothing changes until someone acts)
//   otherwise (created, running, restarting, waiting to be scheduled, to start,
//     for quota, suspended)               -> InProgress: Ready False, Reconciling True
// Ready is always present and carries the reason and message of the condition
// that decided it (Created, Running, Failed...; "Pending" before any), so it
// reads as why a job waits, restarts or failed (the REASON column). Reconciling
// and Stalled are "abnormal-true": present only while True, as kstatus asks.
// lastTransitionTime = now only when a condition's value changes. Idempotent;
// observedGeneration, the other half of kstatus's contract, is the planners'.
void SetSummaryConditions(std::vector<Condition>& conditions, Time now);

// The last failure of a role's replica that the planner acted on.
struct FailureInfo {
  std::string pod;
  std::optional<int32_t> exit_code;
  std::string reason;
  std::string message;
  Time time{};

  friend bool operator==(const FailureInfo&, const FailureInfo&) = default;
};

// Crash-loop backoff of one replica: its failures in a row, and the time before
// which it is not recreated.
struct RestartBackoff {
  int32_t index = 0;
  int32_t failures = 0;
  Time not_before{};

  friend bool operator==(const RestartBackoff&, const RestartBackoff&) = default;
};

struct ReplicaStatus {
  int32_t active = 0;     // pods pending or running
  int32_t succeeded = 0;  // pods that exited 0
  int32_t failed = 0;     // failed pods still present
  int32_t restarts = 0;   // cumulative pod recreations after a failure
  // Cumulative pods ended by the cluster, not the workload (DisruptionPolicy).
  int32_t disruptions = 0;
  std::optional<FailureInfo> last_failure;
  // The last disruption: its pod, cause (reason) and what it cost (message: the
  // trainer's own account when it stopped on SIGTERM, e.g. the checkpoint it saved, or
  // that the job starts over for want of a checkpoint directory).
  std::optional<FailureInfo> last_disruption;
  // Replicas that failed recently, by index (sorted): the planner delays their
  // next pod (10 s doubling to 5 min) and drops an entry once its replica ran
  // cleanly for a while.
  std::vector<RestartBackoff> backoff;

  friend bool operator==(const ReplicaStatus&, const ReplicaStatus&) = default;
};

// How far the job is, as the coordinator (the chief, else worker 0) reports
// it on its metrics endpoint (docs/api.md, "Metrics"). Written by the operator
// when it changed meaningfully, not at every read.
// status.progress.loss of a trainer whose loss is NaN or infinite (JSON has no such
// numbers): the largest double, worse than any finite loss.
inline constexpr double kLossNotFinite = 1.7976931348623157e308;

struct Progress {
  int64_t step = 0;                // the replica's last completed step
  int64_t total_steps = 0;         // the step it stops at
  int32_t percent = 0;             // 100 * step / total_steps, rounded down
  int64_t samples_per_second = 0;  // the replica's recent throughput, rounded
  std::string eta;                 // time left as of update_time ("1h2m", "4m10s"); empty: unknown
  std::string replica;             // whose metrics these are: "worker-0"
  Time update_time{};
  // The replica's training loss at `step` (kubetrain_trainer_loss), what a sweep's early
  // stopping compares; a loss that is not finite (diverged) is kLossNotFinite.
  std::optional<double> loss;

  friend bool operator==(const Progress&, const Progress&) = default;
};

struct TrainingJobStatus {
  // The single condition that best describes the job, for `kubectl get`:
  // Created, Running, Restarting, Suspended, Succeeded or Failed.
  std::string state;
  std::vector<Condition> conditions;
  std::map<ReplicaType, ReplicaStatus> replica_statuses;
  std::optional<Time> start_time;
  std::optional<Time> completion_time;
  int64_t observed_generation = 0;
  // UIDs of failed pods already counted as restarts (see the CRD's description).
  std::vector<std::string> counted_failures;
  // UIDs of disrupted pods already counted (replicaStatuses.*.disruptions),
  // kept while those pods exist or the executor still reports them gone.
  std::vector<std::string> counted_disruptions;
  // The final metrics of the replica that decided success, from its termination
  // message: a JSON object such as {"steps":400,"eval":{"auc":0.757}}, at most
  // kMaxMetricsBytes long. Set when the job succeeds, then kept.
  std::optional<nlohmann::json> metrics;
  // Pods in phase Running (all roles, not being deleted), and restarts summed
  // over roles: the RUNNING and RESTARTS columns of `kubectl get tj`.
  int32_t running = 0;
  int32_t restarts = 0;
  // Disruptions summed over roles (replicaStatuses.*.disruptions).
  int32_t disruptions = 0;
  // Absent until the coordinator's metrics have been read once; kept when
  // the job finishes (then eta is empty).
  std::optional<Progress> progress;

  friend bool operator==(const TrainingJobStatus&, const TrainingJobStatus&) = default;

  const Condition* Find(ConditionType type) const;
  bool IsTrue(ConditionType type) const;
  // Succeeded or Failed is True: the job is finished for good.
  bool Finished() const;
};

struct TrainingJob {
  ObjectMeta metadata;
  TrainingJobSpec spec;
  TrainingJobStatus status;

  friend bool operator==(const TrainingJob&, const TrainingJob&) = default;
};

}  // namespace kubetrain::api
