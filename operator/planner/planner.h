// The TrainingJob planner: what to create, delete and report, as a pure function.
//
// PlanJob(job, observed children, input) -> Plan. No I/O, no clock reads, no
// randomness, no globals: the time and the Secret's key bytes come in through
// PlanInput, so the same input always gives the same Plan. Both backends use it:
// the Kubernetes executor (observed children from informers, plan applied with
// REST calls) and the local runner of `kubetrain run` (children are processes).
//
// Every lifecycle rule lives here (see PlanJob's comment; planner.cc) and is
// unit-tested as data in, data out in planner_test.cc. The objects a plan
// creates come from the child builders (children.h), which apply the workload
// contract (env_contract.h).
//
// Safe under a lagging cache, by construction:
//  - children have deterministic names <job>-<role>-<index>, so a repeated create
//    fails with AlreadyExists (the executor treats that as success) and never
//    makes a second pod for a replica;
//  - a replica gets a new pod only when no pod of that name is observed at all:
//    a failed pod is first deleted, and recreated only once it is gone;
//  - a failed pod's UID is recorded in status.countedFailures when its restart
//    is counted, so seeing the same failed pod again never counts it twice.
//    The executor must therefore write the status before it issues the deletes,
//    and must not plan from a job whose status is older than the one it last
//    wrote (wait until its cache shows that resourceVersion, or plan from the
//    written object): the planner's memory of counted failures is the status.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "operator/api/types.h"
#include "operator/planner/env_contract.h"
#include "operator/planner/metrics_ingress.h"

namespace kubetrain::planner {

enum class PodPhase { kPending, kRunning, kSucceeded, kFailed, kUnknown };

// A child Pod as the planner needs to see it. Feed only pods controlled by this
// job (ownerReference UID == job UID, or the local runner's own processes).
struct ObservedPod {
  std::string name;
  std::string uid;
  std::map<std::string, std::string> labels;
  api::ReplicaType role = api::ReplicaType::kWorker;
  int32_t index = 0;
  PodPhase phase = PodPhase::kPending;
  // The main container's termination, once it has terminated. For a pod that
  // failed without a container exit (eviction), reason/message are the pod's.
  std::optional<int32_t> exit_code;
  std::string reason;
  std::string message;  // the termination message (the trainer writes metrics there)
  std::optional<api::Time> deletion_timestamp;
  // metadata.deletionGracePeriodSeconds: the deletion was requested this long before
  // deletion_timestamp. Unset: unknown (taken as 0).
  std::optional<int64_t> deletion_grace_seconds;
  std::optional<api::Time> creation_timestamp;
  // When its main container started running (state.running.startedAt);
  // unset while it has not, or once it has terminated.
  std::optional<api::Time> running_since;
  std::string spec_hash;  // the kubetrain.io/spec-hash annotation; empty: unknown, keep
  // Its CLUSTER_CONFIG comes from the job's auth Secret (ClusterConfigInSecret),
  // not from the ConfigMap; false when unknown.
  bool cluster_config_in_secret = false;
  // Its KUBETRAIN_AUTH_KEY comes from the Secret "<job>-auth" of an operator
  // before the UID-named one (LegacyAuthSecret); false when unknown.
  bool legacy_auth_secret = false;
  // The scheduler's reason while the pod cannot be scheduled (its PodScheduled
  // condition False with reason Unschedulable); empty otherwise.
  std::string unschedulable;
  // "<reason>: <message>" of the first container the kubelet cannot start
  // while the pod is Pending (image pull errors, a missing Secret or
  // ConfigMap); empty otherwise.
  std::string cannot_start;
  // Why the cluster, not the workload, ends it: the reason of its
  // DisruptionTarget condition when True (PreemptionByScheduler,
  // EvictionByEvictionAPI, DeletionByTaintManager, TerminationByKubelet,
  // DeletionByPodGC, ...), else "Evicted" for a pod the kubelet evicted for
  // node pressure (status.reason); empty otherwise.
  std::string disruption;
  // The executor deleted it (this process issued the delete): its deletion
  // is not a disruption. The planner also knows its own reasons to delete
  // (outdated spec, counted failure, suspend), which survive a restart.
  bool deleted_by_operator = false;

  friend bool operator==(const ObservedPod&, const ObservedPod&) = default;
};

struct ObservedService {
  std::string name;
  std::optional<api::Time> deletion_timestamp;
};

struct ObservedChildren {
  std::vector<ObservedPod> pods;
  std::vector<ObservedService> services;
  bool secret_exists = false;
  // The job's NetworkPolicy is known to exist (the executor created it, or its
  // create answered AlreadyExists, recently): a plan creating pods leaves it out.
  bool network_policy_exists = false;
  // Pods of the job gone while not terminal, or failed with a disruption (the
  // last state the executor saw of each: deleted with a node, by pod GC, which
  // marks a pod Failed with DisruptionTarget first, force-deleted by someone else),
  // which this process did not delete. The planner counts each as a
  // disruption once (status.countedDisruptions); the executor may report one
  // again until a status with its UID is written.
  std::vector<ObservedPod> vanished;
};

// The job's spec.serviceMode; unset: PerReplica when the job already has a
// Service other than the job-wide one (a job started by an operator that made
// one Service per replica keeps its pods' host names, so its running pods are
// not recreated), else JobWide.
api::ServiceMode EffectiveServiceMode(const api::TrainingJob& job,
                                      const ObservedChildren& observed);

// Where the pods a plan creates read CLUSTER_CONFIG: the job's auth Secret
// (key "cluster", written once when the Secret is created, never updated: the
// operator neither reads nor patches Secrets) when it is known to hold this
// cluster, else the ConfigMap <job>-cluster (created, and replaced when it may
// hold another cluster). Known to hold it when the job never ran before
// (status.startTime unset: the Secret this plan creates holds it), or when an
// observed pod built from the current spec (kSpecHashAnnotation, which covers
// the cluster) reads it from the Secret. So a job whose pods an earlier
// operator made (CLUSTER_CONFIG from the ConfigMap, a Secret without
// "cluster") keeps its ConfigMap, a job reshaped while suspended gets the new
// cluster through the ConfigMap, and a job whose pods are all gone since
// (suspended, or every replica failed) uses the ConfigMap too: one more write,
// never a wrong cluster. `spec_hashes`: SpecHash of each role's spec.
bool ClusterConfigInSecret(const api::TrainingJob& job, const ObservedChildren& observed,
                           const std::map<api::ReplicaType, std::string>& spec_hashes);

// True when `a` and `b` differ in live pod counts only (replicaStatuses.*.active
// and running, and the message of an Unschedulable condition that stays True
// for the same reason: it counts the waiting pods): what the executor may delay
// to write fewer statuses.
bool OnlyLiveCountsDiffer(const api::TrainingJobStatus& a, const api::TrainingJobStatus& b);
// True when `a` and `b` differ in replicaStatuses.*.active only (pods created
// or gone while none started or stopped running).
bool OnlyPendingCountsDiffer(const api::TrainingJobStatus& a, const api::TrainingJobStatus& b);

// The Kubernetes executor's PlanInput::max_pod_creates: a plan's size (and the
// operator's memory) stays bounded whatever the job's size.
inline constexpr size_t kMaxPodCreatesPerPlan = 500;

// PlanInput::services_when_running: how long the job-wide Service may wait for
// a job's last pod once its first runs.
inline constexpr std::chrono::seconds kServiceGrace{10};

struct PlanInput {
  api::Time now{};
  // The Secret's key, used only when the Secret must be created. The caller
  // draws it from a CSPRNG (libsodium randombytes_buf).
  std::array<uint8_t, 32> auth_key{};
  std::string default_cluster_domain = std::string(api::kDefaultClusterDomain);
  // When set, CLUSTER_CONFIG/TF_CONFIG use these addresses instead of DNS names
  // (the local runner: 127.0.0.1:<free port>). Must list every in-cluster replica.
  std::optional<ClusterSpec> cluster_override;
  // Set when the apiserver rejected a child of an earlier plan as invalid (422:
  // a template field the CRD passes through unchecked). The job then fails with
  // reason InvalidSpec and this message, like any other spec error.
  std::optional<std::string> rejected_child;
  // Set when the executor had to create the job's auth Secret while pods built
  // with an earlier one were still live (the Secret was deleted behind the
  // job's back: those pods hold a key no new replica gets). The job fails with
  // reason AuthSecretDeleted instead of failing later for a misleading reason.
  bool auth_secret_replaced = false;
  // Set when the job's auth Secret already existed while no pod of the job
  // lived and this process had not created it: a same-named earlier job's
  // Secret the garbage collector has not removed yet, whose host list may be
  // another shape's (the operator cannot read Secrets to tell). The pods then
  // read CLUSTER_CONFIG from the ConfigMap, whose content the operator keeps.
  bool secret_not_ours = false;
  // Set when the executor cannot create the job's PodGroup (the PodGroup API
  // is not installed, or the operator may not create PodGroups): an active job
  // fails with reason GangSchedulingUnavailable and this message, rather than
  // waiting for a group that never comes.
  std::optional<std::string> gang_unavailable;
  // Set while the apiserver refuses to create the job's children (the
  // executor's per-job probe, operator/controller/refusal.h): condition
  // CreateRefused True with this reason and message while the job is active;
  // unset, the condition is removed. The executor records the Warning event
  // (FailedCreate) itself, with the apiserver's words at the time.
  struct Refusal {
    std::string reason;
    std::string message;
  };
  std::optional<Refusal> create_refused;
  // Create a job's Services once its pods run, not with them (the Kubernetes
  // executor): the endpoint controllers then write each Service's Endpoints
  // and EndpointSlice once, with every address, instead of again as each pod
  // gets its IP and turns ready. The job-wide Service comes once every replica
  // has a pod past Pending, or kServiceGrace after the first one started
  // running (a pod stuck Pending keeps its running peers from resolving one
  // another that long at most); a per-replica Service once its pod is past
  // Pending. No DNS record is lost: a pod's record needs its IP, which it gets
  // only on its node. Unset: with the pods (render, the local runner).
  bool services_when_running = false;
  // Create the job's NetworkPolicy (ChildBuilder::NetworkPolicy) with its pods
  // (the operator's --network-policy; the local runner has no network to police).
  bool network_policy = false;
  // Who the NetworkPolicy admits to the trainers' metrics port (the operator's
  // --operator-namespace, --operator-pod-labels, --network-policy-metrics-from).
  MetricsIngress metrics_ingress;
  // The operator's gang scheduler (--gang-scheduler-name); empty: only jobs
  // that name a scheduler and set minAvailable are gang-scheduled (gang.h).
  std::string gang_scheduler_name;
  // When > 0, at most this many pods per plan; the rest follow in the next
  // plans (requeue_after 1 s). 0: all of them (render, the local runner).
  size_t max_pod_creates = 0;
  // The coordinator's progress as the executor last read it
  // (operator/progress); it replaces status.progress. Unset: status.progress is
  // kept. Once the job is finished the planner clears the ETA, and a success
  // shows every step done.
  std::optional<api::Progress> progress;
  // Set while a queue (Kueue, operator/kueue) holds the job: it is suspended
  // as with spec.runPolicy.suspend (every pod deleted, condition Suspended,
  // no restart counted) with this reason and message, its spec untouched.
  struct Hold {
    std::string reason;
    std::string message;
  };
  std::optional<Hold> hold;
};

// The reason of the Running condition while a job whose training succeeded waits
// for its evaluators (see PlanJob).
inline constexpr std::string_view kWaitingForEvaluator = "WaitingForEvaluator";

// Crash-loop backoff (like the Job controller's pod failure backoff): a replica
// restarted after a failure gets its next pod kRestartBackoffBase after the
// failure, doubling with every failure in a row up to kRestartBackoffMax. A
// replica whose pod ran for kRestartBackoffReset starts again from the base.
inline constexpr std::chrono::seconds kRestartBackoffBase{10};
inline constexpr std::chrono::seconds kRestartBackoffMax{300};
inline constexpr std::chrono::seconds kRestartBackoffReset{600};

enum class EventType { kNormal, kWarning };

// An event about the job itself.
struct Event {
  EventType type = EventType::kNormal;
  std::string reason;
  std::string message;

  friend bool operator==(const Event&, const Event&) = default;
};

// A child of the job, as the planner knows it: an executor acts on these
// fields and never parses them back out of the object.
struct ChildRef {
  enum class Kind { kPod, kService, kSecret, kConfigMap, kNetworkPolicy, kPodGroup };
  Kind kind = Kind::kPod;
  std::string name;
  // The replica a Pod or Service stands for. None for the Secret and the
  // ConfigMap, and for a Service deleted without its replica being known (the
  // planner observes Services by name only).
  std::optional<api::ReplicaType> role = std::nullopt;
  int32_t index = 0;

  friend bool operator==(const ChildRef&, const ChildRef&) = default;
};

// A child to create: what it is, and the complete object to POST.
struct ChildCreate {
  ChildRef ref;
  nlohmann::json object;

  friend bool operator==(const ChildCreate&, const ChildCreate&) = default;
};

struct Plan {
  // Children to create, each with the complete object ready to POST to
  // /api/v1/namespaces/<ns>/<kind>s, in this
  // order: the Secret, the NetworkPolicy, the ConfigMap (only when the pods
  // read CLUSTER_CONFIG from it: ClusterConfigInSecret), the PodGroup,
  // Services, Pods (so a pod's secretKeyRef and configMapKeyRef resolve, no pod
  // runs before its policy, and no gang member is scheduled before its group
  // exists).
  // A gang-scheduled job's PodGroup is in every plan that creates pods, like
  // the ConfigMap: an existing one must be updated to this spec (it changes
  // when the spec was reshaped or minAvailable changed).
  // The NetworkPolicy (with input.network_policy) is in every plan that creates
  // pods unless observed.network_policy_exists, and alone in a plan of a job
  // whose pods live while it is not known to exist; AlreadyExists means it is
  // there (the executor brings an existing one's spec to the plan's). The Secret is in the plan
  // only when pods are (and observed.secret_exists is false): an executor that cannot observe
  // Secrets creates it before any pod, and AlreadyExists tells it the Secret is
  // there; it holds the cluster as well as the key, and an existing one is left
  // as it is. The ConfigMap, when the pods read it, is in every plan that
  // creates pods; an existing one must be replaced with this content (it
  // changes only when the spec was reshaped, while no pod ran). At most
  // input.max_pod_creates pods.
  std::vector<ChildCreate> creates;
  std::vector<ChildRef> deletes;
  // The whole new status; write it (status subresource) when status_changed.
  api::TrainingJobStatus status;
  bool status_changed = false;
  // Plan again after this long even if nothing changes (deadline, TTL). A timer,
  // not a hint: behaviours depend on it.
  std::optional<std::chrono::seconds> requeue_after;
  // The TTL after finishing has passed: delete the TrainingJob (its children go
  // with it through garbage collection).
  bool delete_job = false;
  std::vector<Event> events;
};

// Computes what to do next for `job` given what exists. The rules:
//  - Finished jobs (Succeeded/Failed) never get new pods. Their still-running pods
//    are deleted per cleanPodPolicy (Running: pods not terminated; All: every pod;
//    None: none), and after ttlSecondsAfterFinished the job is deleted.
//  - Anything the CRD cannot catch (a template without containers, ...) fails the
//    job with reason InvalidSpec; being finished, it is not retried.
//  - suspend: every pod is deleted, condition Suspended. Resuming sets
//    startTime = now, which restarts the activeDeadlineSeconds clock.
//    input.hold (a queue holds the job) suspends the same way, with its reason.
//  - activeDeadlineSeconds after startTime: Failed/DeadlineExceeded; before it,
//    requeue_after is the time left.
//  - Success per successPolicy (checked before failures): ChiefOrWorker0 = the
//    chief, or worker 0 when there is no chief, succeeded; AllWorkers = every
//    worker (and the chief, if any) succeeded. The termination message of the
//    coordinator (the chief, else worker 0) becomes status.metrics if it is a
//    JSON object of at most api::kMaxMetricsBytes; anything else is ignored.
//    Once set, status.metrics is kept.
//  - With Evaluator replicas, success of the training is not yet the job's: the
//    job stays Running (condition reason kWaitingForEvaluator, which also records
//    that training succeeded) until every evaluator has exited 0, having
//    evaluated the final checkpoint. Meanwhile only evaluators run: a failed one
//    is restarted per its restartPolicy and the backoffLimit (a permanent
//    failure fails the job), a missing one is created, an exit 0 is final even
//    under Always; training replicas are neither restarted nor recreated, and
//    the running ones are deleted per cleanPodPolicy. Evaluator 0's termination
//    message, if a JSON object, joins status.metrics as "evaluator" when the
//    whole fits api::kMaxMetricsBytes. activeDeadlineSeconds still applies.
//  - A failed job's running evaluators are deleted whatever the cleanPodPolicy:
//    they would wait for a final checkpoint that never comes.
//  - A failed pod (not one being deleted: deletion is not failure) under Never
//    fails the job (ReplicaFailed); under ExitCode too when its exit code is
//    1-127; otherwise (OnFailure, Always, ExitCode with 128-255 or no exit code)
//    it is deleted and recreated. Each restart counts toward backoffLimit, summed
//    over roles; the failure that would exceed it fails the job
//    (BackoffLimitExceeded). Always also recreates PS/Evaluator pods that exit 0.
//    The new pod waits out the replica's crash-loop backoff (kRestartBackoff*,
//    status.replicaStatuses.<Role>.backoff, a timed requeue, and the delay in
//    the RestartingReplica event).
//  - input.auth_secret_replaced fails an active job with AuthSecretDeleted.
//  - Gang scheduling (gang.h): a PodGroup before the pods, each pod labelled
//    with it and sent to the gang scheduler; a gang that cannot be formed
//    (minAvailable above the replicas) is InvalidSpec.
//  - Pods the scheduler cannot place: condition Unschedulable True with the
//    count and the first such pod's reason (and a Warning event when it turns
//    True); False once every pod is placed, or when the job stops running.
//  - input.create_refused (the apiserver refuses the job's children): condition
//    CreateRefused True with its reason and message while the job is active;
//    otherwise the condition is removed.
//  - Pods the kubelet cannot start (ObservedPod.cannot_start): condition
//    CannotStart True, reason the kubelet's (ImagePullBackOff, ...), with the
//    count and the first pod's message, and a Warning event when it turns True.
//    With runPolicy.startDeadlineSeconds, still True that long after it turned
//    True: Failed/StartDeadlineExceeded (the pods go per cleanPodPolicy, which
//    frees what they hold); before it, a requeue for then.
//  - Pods and Services of roles or indexes no longer in the spec are deleted, and
//    live pods built from an older spec (kSpecHashAnnotation) are recreated;
//    neither counts as a restart.
// Plan.status.observedGeneration is always metadata.generation.
Plan PlanJob(const api::TrainingJob& job, const ObservedChildren& observed, const PlanInput& input);

// The planner's status rules, for the one failure an executor records itself
// (a job the API types cannot read, which never reaches PlanJob).
//
// Sets condition `type`: reason and message always, lastTransitionTime = now
// only when the value changes. An absent condition reads as False, so a False
// one is never added.
void SetCondition(api::TrainingJobStatus& status, api::ConditionType type, bool value,
                  std::string reason, std::string message, api::Time now);
// Finishes the job as PlanJob does: Running and Restarting False, Succeeded or
// Failed True (all with `reason` and `message`), completionTime = now.
void SetFinished(api::TrainingJobStatus& status, bool succeeded, std::string reason,
                 std::string message, api::Time now);
// status.state from the conditions: Succeeded, Failed, Suspended, Restarting,
// Running (the first True one), else Created; and kstatus's Ready, Reconciling
// and Stalled (api::SetSummaryConditions).
void UpdateState(api::TrainingJobStatus& status, api::Time now);

}  // namespace kubetrain::planner
