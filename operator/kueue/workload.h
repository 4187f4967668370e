// Kueue's Workload protocol for the TrainingJob, as pure functions.
//
// Kueue (sigs.k8s.io/kueue) admits jobs through Workload objects. For a job
// kind Kueue does not know (an "external framework", configured in Kueue as
// integrations.externalFrameworks: "TrainingJob.v1alpha1.kubetrain.io"), the
// job's own controller plays the part of Kueue's jobframework reconciler. This
// module decides what that part is, following jobframework.ReconcileGenericJob
// (Kueue v0.15) and its GenericJob semantics:
//   Suspend            -> Decision.hold: the job runs no pods (the planner
//                         deletes them) and its Suspended condition says why;
//                         the spec is not changed.
//   RunWithPodSetsInfo -> Decision.run: the pods are created with the
//                         admission's pod-set info merged in (ApplyPodSetInfo).
//   RestorePodSetsInfo -> nothing to do: the info is merged into pods only,
//                         never into the job's templates, and evicted pods are
//                         deleted, so the next admission starts from the spec.
//   PodSets            -> BuildWorkload: one pod set per role (name = the
//                         role's lower-case name, count = replicas, template
//                         = the role's pod template).
//   Finished           -> kFinishWorkload with the job's success and message.
//   IsActive           -> `pods_active` in Decide: a pod not yet terminated.
//
// Flow (Decide), in Kueue's order:
//   job finished          -> mark the Workload Finished (Succeeded/Failed), then
//                            drop its resource-in-use finalizer.
//   queue label removed   -> a job that has a Workload stays Kueue's: it runs
//   (no Workload)            only while that Workload is admitted, in the
//                            Workload's queue (Kueue's webhook forbids the
//                            removal instead; this operator has no webhook, so
//                            the label cannot unlock a job). Without a
//                            Workload the job is not Kueue's and runs.
//   job suspended         -> (runPolicy.suspend; the planner stops the pods and
//                            says why) deactivate the Workload (spec.active
//                            false, marked as ours) so Kueue evicts it, and
//                            clear its admission once no pod is active: a
//                            suspended job holds no quota. No Workload yet:
//                            none is created while suspended.
//   resumed               -> reactivate a Workload we deactivated; it queues
//                            again (WaitingForAdmission). One an admin
//                            deactivated stays so, and the job says why.
//   no Workload           -> hold; create it once no pod is active.
//   Workload being deleted-> hold; drop its finalizer once no pod is active.
//   pod sets differ       -> hold; delete the Workload (a new one follows).
//   queue label changed   -> a Workload that holds no quota (QuotaReserved not
//                            True) moves to the new queue (spec.queueName),
//                            as jobframework's QueueNameChange does for a
//                            suspended job; one that holds quota stays in its
//                            queue until it gives the quota back (eviction,
//                            suspend), then moves.
//   Evicted=True          -> hold (reason Evicted, Kueue's message); once no pod
//                            is active, clear the admission (QuotaReserved
//                            False/Pending, Requeued, admission removed) so
//                            Kueue can queue it again. Eviction does not spend
//                            the job's restart budget: suspending is not failing.
//   Admitted=True         -> run.
//   otherwise             -> hold (reason WaitingForAdmission, with the message
//                            of Kueue's QuotaReserved condition when it has one).
//
// Assumptions: the Workload is kueue.x-k8s.io/v1beta1 (Kueue's stored version);
// Kueue writes status.admission and the QuotaReserved/Admitted/Evicted
// conditions; this module writes only what jobframework writes (Finished, and
// the admission clearing after an eviction).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "operator/api/types.h"

namespace kubetrain::kueue {

inline constexpr std::string_view kGroup = "kueue.x-k8s.io";
inline constexpr std::string_view kApiVersion = "kueue.x-k8s.io/v1beta1";
inline constexpr std::string_view kQueueNameLabel = "kueue.x-k8s.io/queue-name";
inline constexpr std::string_view kPriorityClassLabel = "kueue.x-k8s.io/priority-class";
inline constexpr std::string_view kJobUidLabel = "kueue.x-k8s.io/job-uid";
// On every Workload this operator creates: the job's name. The operator's
// Workload cache selects on it (so Workloads of other job kinds are never
// listed), and indexes by it. The same key as the pods' job label
// (planner::kJobNameLabel); a job's name fits a label value (63 characters:
// validation refuses longer names).
inline constexpr std::string_view kJobNameLabel = "kubetrain.io/job-name";
// The label selector of the operator's Workload cache.
inline constexpr std::string_view kOwnWorkloadsSelector =
    "kueue.x-k8s.io/job-uid,kubetrain.io/job-name";
// Workloads an operator before kJobNameLabel created (migration: they get the
// label when the operator starts; see LabelForCache).
inline constexpr std::string_view kUnlabelledWorkloadsSelector =
    "kueue.x-k8s.io/job-uid,!kubetrain.io/job-name";
inline constexpr std::string_view kPodSetLabel = "kueue.x-k8s.io/podset";
inline constexpr std::string_view kResourceInUseFinalizer = "kueue.x-k8s.io/resource-in-use";
inline constexpr std::string_view kWorkloadPriorityClassSource =
    "kueue.x-k8s.io/workloadpriorityclass";
// A Workload whose priority comes from the pods' PriorityClass (scheduling.k8s.io).
inline constexpr std::string_view kPodPriorityClassSource = "scheduling.k8s.io/priorityclass";
// On a Workload the operator deactivated because its job was suspended: only
// such a Workload is reactivated when the job resumes.
inline constexpr std::string_view kDeactivatedForSuspendAnnotation =
    "kubetrain.io/deactivated-for-suspend";

// Reasons of the job's Suspended condition while Kueue holds it.
inline constexpr std::string_view kReasonWaitingForAdmission = "WaitingForAdmission";
inline constexpr std::string_view kReasonEvicted = "Evicted";
inline constexpr std::string_view kReasonKueueDisabled = "KueueIntegrationDisabled";

// The queue the job asks for (its kueue.x-k8s.io/queue-name label), if any.
std::optional<std::string> QueueName(const api::TrainingJob& job);

// Kueue's name for the Workload of an owner ("trainingjob-<name>-<hash>", the
// hash being the first 5 hex digits of SHA-1 over kind, group, name and UID;
// jobframework.GetWorkloadNameForOwnerWithGVK), so the name is the same
// whichever of the two would make it.
std::string WorkloadName(const api::TrainingJob& job);

struct Priority {
  std::string class_name;  // a WorkloadPriorityClass, or a PriorityClass
  int32_t value = 0;
  std::string_view source = kWorkloadPriorityClassSource;  // or kPodPriorityClassSource
};

// The PriorityClass the job's pods run with, as Kueue's integrations read it
// for a job without a WorkloadPriorityClass label: the scheduling policy's
// priorityClassName (the planner puts it on every pod), else the first role's
// template (kRoles order) that names one. Unset: none named.
std::optional<std::string> PodPriorityClassName(const api::TrainingJob& job);

// The Workload to create for `job` in `queue`: owned (controller) by the job,
// labelled with its UID and name (kJobNameLabel), carrying the resource-in-use finalizer, one pod
// set per role in kRoles order.
nlohmann::json BuildWorkload(const api::TrainingJob& job, const std::string& queue,
                             const std::optional<Priority>& priority);

// Whether the Workload still describes the job: the same pod sets (names and
// counts, in order) with the same container resource requests. Other template
// fields are not compared: the apiserver defaults the stored template.
bool PodSetsMatch(const nlohmann::json& workload, const api::TrainingJob& job);

// One pod set of an admission: the flavor each resource was assigned.
struct PodSetAssignment {
  std::string name;
  std::vector<std::string> flavors;  // distinct flavor names, in resource order
};

// What a pod of a role gets on admission (podset.PodSetInfo).
struct PodSetInfo {
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> node_selector;
  nlohmann::json tolerations = nlohmann::json::array();
};

// The pod-set assignments of an admitted Workload (empty when not admitted).
std::vector<PodSetAssignment> Assignments(const nlohmann::json& workload);

// The info for one assignment from its ResourceFlavors (kueue.x-k8s.io
// ResourceFlavor objects, by name): their spec.nodeLabels become node
// selectors and their spec.tolerations tolerations; the pod also gets the
// kueue.x-k8s.io/podset label. A missing flavor is an error (NotFound).
StatusOr<PodSetInfo> InfoFromFlavors(const PodSetAssignment& assignment,
                                     const std::map<std::string, nlohmann::json>& flavors);

// Merges `info` into a Pod object (metadata.labels/annotations, spec.nodeSelector,
// spec.tolerations), like podset.Merge: a key the pod already has with another
// value is a conflict (FailedPrecondition, naming it); tolerations are added
// unless present.
Status ApplyPodSetInfo(nlohmann::json& pod, const PodSetInfo& info);

struct Hold {
  std::string reason;
  std::string message;

  friend bool operator==(const Hold&, const Hold&) = default;
};

struct Decision {
  // Hold the job suspended (no pods) with this reason; unset: let it run (or
  // finish) as its spec says.
  std::optional<Hold> hold;
  enum class Action {
    kNone,
    kCreateWorkload,
    kDeleteWorkload,   // stale pod sets: a new one is created after
    kClearAdmission,   // after an eviction, once no pod is active
    kFinishWorkload,   // the job finished
    kRemoveFinalizer,  // Workload finished or being deleted, no pod active
    kDeactivate,       // the job is suspended: Kueue evicts it and frees the quota
    kActivate,         // the job resumed: queue its Workload again
    kMoveQueue,        // the job's queue label changed: spec.queueName = queue
    // Admitted: the job's pods all came up (PodsReady True), or one failed
    // after that (False, WaitForRecovery). Kueue's waitForPodsReady evicts an
    // admitted Workload that is not PodsReady in time.
    kSetPodsReady,
  };
  Action action = Action::kNone;
};

// What to do for a job that asks for `queue` (see the Flow above): its
// kueue.x-k8s.io/queue-name label, empty when it has none. `workload` is the
// job's Workload from the cache (null: none); `pods_active` whether any of the
// job's pods is not yet terminated. A job with neither a queue nor a Workload
// is not Kueue's: nothing to do, no hold.
Decision Decide(const api::TrainingJob& job, const std::string& queue,
                const nlohmann::json* workload, bool pods_active);

// The Workload's status after an eviction's admission is cleared
// (UnsetQuotaReservationWithCondition + SetRequeuedCondition): QuotaReserved
// False (Pending), Admitted False (NoReservation), Requeued True when evicted
// by preemption or node failure (else False), status.admission removed.
nlohmann::json ClearedAdmissionStatus(const nlohmann::json& workload, api::Time now);

// The Workload's status with its PodsReady condition for `ready` (the job's
// Running condition), as Kueue's job reconciler writes it
// (generatePodsReadyCondition): True with reason Started, or Recovered after a
// WaitForRecovery; False with WaitForRecovery once it had been True, else
// WaitForStart. The clearing of an admission sets it False (WaitForStart).
nlohmann::json PodsReadyStatus(const nlohmann::json& workload, bool ready, api::Time now);

// The Workload's status once the job finished (setFinish): Finished True
// (Succeeded or Failed, with `message`), QuotaReserved False (Finished),
// Admitted False (Finished), status.admission removed.
nlohmann::json FinishedStatus(const nlohmann::json& workload, bool succeeded,
                              const std::string& message, api::Time now);

// The Workload with spec.active set: deactivated with
// kDeactivatedForSuspendAnnotation, activated without it.
nlohmann::json WithActive(const nlohmann::json& workload, bool active);

// The Workload with spec.queueName set to `queue`.
nlohmann::json WithQueue(const nlohmann::json& workload, const std::string& queue);

// The queue a Workload is in (spec.queueName; empty if none).
std::string QueueOf(const nlohmann::json& workload);

// Whether a Workload (as listed with kUnlabelledWorkloadsSelector) was made by
// this operator for a TrainingJob: its controller owner is a kubetrain.io
// TrainingJob. Then LabelForCache gives it the label the cache selects on.
bool OwnedByATrainingJob(const nlohmann::json& workload);
nlohmann::json LabelForCache(const nlohmann::json& workload);

// The Workload's finalizers without kResourceInUseFinalizer.
nlohmann::json FinalizersWithoutOurs(const nlohmann::json& workload);
bool HasOurFinalizer(const nlohmann::json& workload);

}  // namespace kubetrain::kueue
