#include "operator/planner/planner.h"

#include <algorithm>
#include <set>

#include "common/utf8.h"
#include "common/workload_contract.h"
#include "operator/api/json.h"
#include "operator/api/validation.h"
#include "operator/planner/children.h"
#include "operator/planner/gang.h"

namespace kubetrain::planner {

using api::ConditionType;
using api::ReplicaType;
using api::RestartPolicy;
using nlohmann::json;

namespace {

ChildCreate Child(ChildRef::Kind kind, std::string name, json object,
                  std::optional<ReplicaType> role = std::nullopt, int32_t index = 0) {
  ChildCreate c;
  c.ref.kind = kind;
  c.ref.name = std::move(name);
  c.ref.role = role;
  c.ref.index = index;
  c.object = std::move(object);
  return c;
}

bool Terminated(PodPhase p) {
  return p == PodPhase::kSucceeded || p == PodPhase::kFailed;
}

// A live pod past Pending: Running, or terminated.
bool PastPending(const ObservedPod* pod) {
  return pod != nullptr && !pod->deletion_timestamp &&
         (pod->phase == PodPhase::kRunning || Terminated(pod->phase));
}

std::string ExitText(const ObservedPod& pod) {
  std::string text = pod.exit_code ? "exit code " + std::to_string(*pod.exit_code) : "no exit code";
  if (!pod.reason.empty()) text += " (" + pod.reason + ")";
  if (!pod.message.empty()) text += ": " + pod.message;
  return text;
}

// A termination message as status.metrics: a JSON object of at most
// api::kMaxMetricsBytes as compact JSON (measured after parsing: "1e9" grows
// to "1000000000.0"), else nothing. Workload output is untrusted: anything
// else (invalid JSON, an array, too long) is ignored, and this never throws.
std::optional<json> MetricsFromMessage(std::string_view message) {
  if (message.empty() || message.size() > api::kMaxMetricsBytes) return std::nullopt;
  try {
    json parsed = json::parse(message, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) return std::nullopt;  // a parse error is "discarded", not an object
    if (parsed.dump().size() > api::kMaxMetricsBytes) return std::nullopt;
    return parsed;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

// What a disruption cost, in the workload's words: the "stopped" string of the pod's
// termination message (the trainer writes it when SIGTERM stops it: the checkpoint it
// saved, or that its progress is lost); empty when it said nothing.
std::string DisruptionCost(const ObservedPod& pod) {
  std::optional<json> m = MetricsFromMessage(pod.message);
  if (!m) return {};
  auto it = m->find(std::string(contract::kTerminationStopped));
  if (it == m->end() || !it->is_string()) return {};
  return it->get<std::string>();
}

// The job's gang (gang.h), nullopt when it is not gang-scheduled. Live pods
// that an operator before the UID-named PodGroup made are in the group named
// after the job: their replacements join them there, not a second group that
// could never gather minMember pods.
StatusOr<std::optional<GangSpec>> JobGang(const api::TrainingJob& job,
                                          const ObservedChildren& observed,
                                          const PlanInput& input) {
  std::optional<std::string> scheduler = GangSchedulerName(job, input.gang_scheduler_name);
  if (!scheduler) return std::optional<GangSpec>();
  KT_ASSIGN_OR_RETURN(GangSpec gang, PlanGang(job, std::move(*scheduler)));
  for (const ObservedPod& pod : observed.pods) {
    auto label = pod.labels.find(std::string(kPodGroupLabel));
    if (label != pod.labels.end() && label->second == job.metadata.name &&
        !pod.deletion_timestamp && pod.phase != PodPhase::kFailed &&
        pod.phase != PodPhase::kSucceeded) {
      gang.group_name = job.metadata.name;
      break;
    }
  }
  return std::optional<GangSpec>(std::move(gang));
}

// UIDs of counted disruptions kept after their pods are gone (Run).
constexpr size_t kKeptGoneDisruptions = 64;

// At most this much of a scheduler's message goes into the job's condition.
constexpr size_t kMaxSchedulerMessageBytes = 1024;

// One replica: its deterministic name and the pod observed under it, if any.
struct Slot {
  ReplicaType type;
  int32_t index;
  std::string name;
  const api::ReplicaSpec* spec;
  const ObservedPod* pod;
};

// One PlanJob call. Holds references to the inputs, which outlive it.
class Planner {
 public:
  Planner(const api::TrainingJob& job, const ObservedChildren& observed, const PlanInput& input)
      : job_(job),
        observed_(observed),
        input_(input),
        mode_(EffectiveServiceMode(job, observed)),
        gang_(JobGang(job, observed, input)),
        builder_(job_, mode_, gang_.ok() && gang_->has_value() ? &**gang_ : nullptr) {}

  Plan Run();

 private:
  // Child construction.
  StatusOr<json> BuildPod(const Slot& slot) const {
    StatusOr<json> pod =
        builder_.Pod(slot.type, slot.index, *slot.spec, spec_hashes_.at(slot.type));
    if (pod.ok() && outside_gang_) (*pod)["metadata"]["labels"].erase(std::string(kPodGroupLabel));
    return pod;
  }
  Status CheckTemplates() const;

  // Status edits.
  void SetCondition(ConditionType type, bool value, std::string reason, std::string message);
  void RecountReplicas();
  void UpdateState();
  void Summarize();
  void Requeue(std::chrono::seconds after);
  void AddEvent(EventType type, std::string reason, std::string message);

  // Lifecycle steps.
  void Finish(bool succeeded, std::string reason, std::string message);
  void CleanUpFinished();
  void ScheduleTtl();
  void DeletePod(const ObservedPod& pod);
  void Suspend(const std::string& reason, const std::string& message);
  // Whether the job succeeded per its successPolicy: the condition's message,
  // and the pod whose termination message holds the job's final metrics.
  struct Success {
    std::string message;
    const ObservedPod* reporter;  // never null
  };
  std::optional<Success> DecideSuccess() const;
  // Acts on a terminated pod per its restartPolicy and the backoffLimit: keep it,
  // or delete it to be recreated (restarted = true). Returns the reason and
  // message that fail the job, if it must.
  std::optional<std::pair<std::string, std::string>> HandleTerminated(const Slot& slot,
                                                                      bool& restarted);
  // Whether the job-wide Service may be created (PlanInput::services_when_running);
  // if it must wait for kServiceGrace, a requeue for then.
  bool JobServiceDue(std::optional<ReplicaType> only);
  // Creates the missing Services and Pods (of `only` this role, if set).
  void CreateMissing(std::optional<ReplicaType> only = std::nullopt);
  // The job's NetworkPolicy, as a create.
  ChildCreate NetworkPolicyChild() const;
  void UpdateRunning(bool restarted);
  // Live Pending pods whose `why` (ObservedPod::unschedulable or
  // cannot_start) is set: how many, and the first in slot order.
  struct StuckPods {
    int32_t count = 0;
    const ObservedPod* first = nullptr;
  };
  StuckPods PendingPodsWith(std::string ObservedPod::*why) const;
  // The Unschedulable condition from the pods' PodScheduled conditions;
  // `active`: the job runs (not finished, suspended or being deleted).
  void UpdateSchedulable(bool active);
  // The CannotStart condition; and whether startDeadlineSeconds failed the job.
  void UpdateStartable(bool active);
  // The CreateRefused condition from input.create_refused.
  void UpdateRefused(bool active);
  bool StartDeadlineExceeded();
  // Training succeeded (`success`, unless its pods are gone since) and the job has
  // evaluators: they alone run on, and the job succeeds once every one has exited 0.
  void RunEvaluatorsAfterTraining(const std::optional<Success>& success);
  bool WaitingForEvaluators() const;
  // The job is admitted, not suspended, not finished: deadline, success,
  // failures and restarts, then what is missing.
  void RunActive();
  // Crash-loop backoff: drops entries of replicas gone from the spec or that ran
  // cleanly for kRestartBackoffReset; records a counted failure; tells whether a
  // replica must still wait (and requeues for when it may go).
  void PruneBackoff();
  std::chrono::seconds RecordBackoff(const Slot& slot, const ObservedPod& pod);
  // Why the cluster, not the workload, ends `pod` of `slot` (observed, or
  // last seen before it vanished): ObservedPod::disruption, "Deleted" (a
  // deletion the operator had no reason to make), "Vanished"; nullopt when it
  // is not a disruption.
  std::optional<std::string> DisruptionOf(const Slot& slot, const ObservedPod& pod,
                                          bool vanished) const;
  // Counts a disruption once (status.countedDisruptions) with a PodDisrupted
  // event; under disruptionPolicy Count, handles it as a failure instead.
  // Returns the reason and message that fail the job, if it must.
  std::optional<std::pair<std::string, std::string>> HandleDisruption(const Slot& slot,
                                                                      const ObservedPod& pod,
                                                                      const std::string& cause,
                                                                      bool& restarted);
  bool InBackoff(const Slot& slot);

  bool Counted(const std::string& uid) const {
    return std::find(status_.counted_failures.begin(), status_.counted_failures.end(), uid) !=
           status_.counted_failures.end();
  }
  bool CountedDisruption(const std::string& uid) const {
    return std::find(status_.counted_disruptions.begin(), status_.counted_disruptions.end(), uid) !=
           status_.counted_disruptions.end();
  }
  int32_t TotalRestarts() const {
    int32_t total = 0;
    for (const auto& [type, r] : status_.replica_statuses) total += r.restarts;
    return total;
  }

  // Constant for the call.
  const api::TrainingJob& job_;
  const ObservedChildren& observed_;
  const PlanInput& input_;
  const api::ServiceMode mode_;
  const StatusOr<std::optional<GangSpec>> gang_;  // an error fails the job (InvalidSpec)
  // Pods created from here on join no gang: training is over and an evaluator
  // recreated alone could never make the gang's minMember.
  bool outside_gang_ = false;
  ChildBuilder builder_;  // set_config_in_secret once the spec hashes are known
  std::vector<Slot> slots_;
  std::vector<const ObservedPod*> orphan_pods_;

  // Set by Run once the cluster is known, for the active job's pods:
  // ClusterConfigJson of the cluster, and SpecHash of each role's spec.
  std::string cluster_config_;
  std::map<ReplicaType, std::string> spec_hashes_;
  bool config_in_secret_ = true;  // ClusterConfigInSecret

  // Built up by Run.
  Plan plan_;
  api::TrainingJobStatus status_;
};

// Checked on every plan, so without building the pods: CheckPodTemplate.
Status Planner::CheckTemplates() const {
  for (const auto& [type, spec] : job_.spec.replica_specs) {
    KT_RETURN_IF_ERROR(CheckPodTemplate(type, spec));
  }
  return Status::Ok();
}

void Planner::SetCondition(ConditionType type, bool value, std::string reason,
                           std::string message) {
  planner::SetCondition(status_, type, value, std::move(reason), std::move(message), input_.now);
}

void Planner::RecountReplicas() {
  for (auto& [type, r] : status_.replica_statuses) r.active = r.succeeded = r.failed = 0;
  for (const auto& [type, spec] : job_.spec.replica_specs) status_.replica_statuses[type];
  for (const ObservedPod& pod : observed_.pods) {
    if (pod.deletion_timestamp) continue;
    auto it = status_.replica_statuses.find(pod.role);
    if (it == status_.replica_statuses.end()) continue;
    if (pod.phase == PodPhase::kSucceeded) {
      ++it->second.succeeded;
    } else if (pod.phase == PodPhase::kFailed) {
      ++it->second.failed;
    } else {
      ++it->second.active;
    }
  }
}

void Planner::UpdateState() {
  planner::UpdateState(status_, input_.now);
}

// status.running, status.restarts (the kubectl columns) and status.progress.
void Planner::Summarize() {
  status_.running = 0;
  for (const ObservedPod& pod : observed_.pods) {
    if (!pod.deletion_timestamp && pod.phase == PodPhase::kRunning) ++status_.running;
  }
  status_.restarts = 0;
  status_.disruptions = 0;
  for (const auto& [type, r] : status_.replica_statuses) {
    status_.restarts += r.restarts;
    status_.disruptions += r.disruptions;
  }
  if (input_.progress) status_.progress = input_.progress;
  if (!status_.progress && status_.IsTrue(ConditionType::kSucceeded) && status_.metrics) {
    // Succeeded before its coordinator's metrics were read once (a job shorter than
    // the reading interval): the steps its final metrics report, every one done.
    const auto steps = status_.metrics->find("steps");
    if (steps != status_.metrics->end() && steps->is_number_integer() &&
        steps->get<int64_t>() > 0) {
      api::Progress p;
      p.step = p.total_steps = steps->get<int64_t>();
      const auto task = status_.metrics->find("task");
      p.replica = task != status_.metrics->end() && task->is_string()
                      ? task->get<std::string>()
                      : std::string(api::Role(api::CoordinatorRole(job_.spec)).lower) + "-0";
      p.update_time = input_.now;
      status_.progress = std::move(p);
    }
  }
  if (status_.progress && status_.Finished()) {
    // Done: no time left. A success completed every step, whatever the last
    // reading (taken before the end) said.
    if (status_.IsTrue(ConditionType::kSucceeded)) {
      status_.progress->step = std::max(status_.progress->step, status_.progress->total_steps);
      status_.progress->percent = 100;
    }
    status_.progress->eta.clear();
  }
}

void Planner::Requeue(std::chrono::seconds after) {
  after = std::max(after, std::chrono::seconds(1));
  if (!plan_.requeue_after || after < *plan_.requeue_after) plan_.requeue_after = after;
}

void Planner::AddEvent(EventType type, std::string reason, std::string message) {
  plan_.events.push_back({type, std::move(reason), std::move(message)});
}

void Planner::DeletePod(const ObservedPod& pod) {
  if (pod.deletion_timestamp) return;  // already going
  plan_.deletes.push_back({ChildRef::Kind::kPod, pod.name, pod.role, pod.index});
}

void Planner::CleanUpFinished() {
  const api::CleanPodPolicy policy = job_.spec.run_policy.clean_pod_policy;
  const bool failed = status_.IsTrue(ConditionType::kFailed);
  for (const ObservedPod& pod : observed_.pods) {
    // A failed job's evaluator would wait for a final checkpoint that never comes:
    // it is stopped whatever the policy.
    if (failed && pod.role == ReplicaType::kEvaluator && !Terminated(pod.phase)) {
      DeletePod(pod);
    } else if (policy == api::CleanPodPolicy::kAll ||
               (policy == api::CleanPodPolicy::kRunning && !Terminated(pod.phase))) {
      DeletePod(pod);
    }
  }
}

void Planner::ScheduleTtl() {
  const auto& ttl = job_.spec.run_policy.ttl_seconds_after_finished;
  if (!ttl || !status_.completion_time) return;
  api::Time expiry = *status_.completion_time + std::chrono::seconds(*ttl);
  if (input_.now >= expiry) {
    plan_.delete_job = true;
  } else {
    Requeue(expiry - input_.now);
  }
}

void Planner::Finish(bool succeeded, std::string reason, std::string message) {
  AddEvent(succeeded ? EventType::kNormal : EventType::kWarning, reason, message);
  SetFinished(status_, succeeded, std::move(reason), std::move(message), input_.now);
  CleanUpFinished();
  ScheduleTtl();
}

void Planner::Suspend(const std::string& reason, const std::string& message) {
  for (const ObservedPod& pod : observed_.pods) DeletePod(pod);
  for (auto& [type, rs] : status_.replica_statuses) rs.backoff.clear();
  const api::Condition* now = status_.Find(ConditionType::kSuspended);
  if (now == nullptr || !now->status || now->reason != reason || now->message != message) {
    SetCondition(ConditionType::kRunning, false, reason, message);
    SetCondition(ConditionType::kRestarting, false, reason, message);
    SetCondition(ConditionType::kSuspended, true, reason, message);
    AddEvent(EventType::kNormal, "Suspended", message);
  }
}

std::optional<Planner::Success> Planner::DecideSuccess() const {
  // The pod of a replica if it succeeded, else nullptr.
  auto succeeded = [&](ReplicaType type, int32_t index) -> const ObservedPod* {
    std::string name = api::ChildName(job_.metadata.name, type, index);
    for (const Slot& s : slots_) {
      if (s.name == name)
        return s.pod != nullptr && s.pod->phase == PodPhase::kSucceeded ? s.pod : nullptr;
    }
    return nullptr;
  };
  const api::TrainingJobSpec& spec = job_.spec;
  const bool has_chief = spec.Replicas(ReplicaType::kChief) > 0;
  // The chief, else worker 0, coordinates: it evaluates and reports the job's
  // metrics, and under ChiefOrWorker0 its exit decides.
  const ReplicaType coordinator = api::CoordinatorRole(spec);
  if (spec.success_policy == api::SuccessPolicy::kChiefOrWorker0) {
    if (spec.Replicas(coordinator) == 0) return std::nullopt;
    const ObservedPod* pod = succeeded(coordinator, 0);
    if (pod == nullptr) return std::nullopt;
    return Success{std::string(api::Role(coordinator).key) + " 0 succeeded", pod};
  }
  const int32_t workers = spec.Replicas(ReplicaType::kWorker);
  if (workers == 0 && !has_chief) return std::nullopt;
  for (int32_t i = 0; i < workers; ++i) {
    if (succeeded(ReplicaType::kWorker, i) == nullptr) return std::nullopt;
  }
  if (has_chief && succeeded(ReplicaType::kChief, 0) == nullptr) return std::nullopt;
  return Success{"all " + std::to_string(workers) + " workers" +
                     (has_chief ? " and the chief" : "") + " succeeded",
                 succeeded(coordinator, 0)};
}

std::optional<std::pair<std::string, std::string>> Planner::HandleTerminated(const Slot& slot,
                                                                             bool& restarted) {
  const ObservedPod& pod = *slot.pod;
  const RestartPolicy policy = slot.spec->restart_policy;
  const bool failed = pod.phase == PodPhase::kFailed;
  if (!failed) {
    // Always: a PS or evaluator that exits 0 is restarted like a failed one. A
    // chief or worker that exits 0 is done: success is decided by them.
    const bool decides_success =
        slot.type == ReplicaType::kChief || slot.type == ReplicaType::kWorker;
    if (pod.phase != PodPhase::kSucceeded || decides_success || policy != RestartPolicy::kAlways) {
      return std::nullopt;
    }
  }
  if (Counted(pod.uid)) {
    DeletePod(pod);  // its restart is already counted; the delete may not be visible yet
    return std::nullopt;
  }
  api::ReplicaStatus& rs = status_.replica_statuses[slot.type];
  const std::string what = std::string(api::Role(slot.type).key) + " " +
                           std::to_string(slot.index) + " (pod " + pod.name + ") " +
                           (failed ? "failed with " + ExitText(pod) : "exited 0");
  if (failed) {
    rs.last_failure =
        api::FailureInfo{pod.name, pod.exit_code, pod.reason, pod.message, input_.now};
    if (policy == RestartPolicy::kNever) {
      return std::make_pair("ReplicaFailed", what + "; restartPolicy is Never");
    }
    if (policy == RestartPolicy::kExitCode && pod.exit_code &&
        contract::ClassifyExit(*pod.exit_code) == contract::ExitClass::kPermanent) {
      return std::make_pair("ReplicaFailed",
                            what + "; exit codes 1-127 are permanent under restartPolicy ExitCode");
    }
  }
  const auto& limit = job_.spec.run_policy.backoff_limit;
  if (limit && TotalRestarts() >= *limit) {
    return std::make_pair("BackoffLimitExceeded", "backoffLimit " + std::to_string(*limit) +
                                                      " exceeded; last failure: " + what);
  }
  ++rs.restarts;
  status_.counted_failures.push_back(pod.uid);
  DeletePod(pod);
  const std::chrono::seconds delay = RecordBackoff(slot, pod);
  AddEvent(EventType::kWarning, "RestartingReplica",
           what + "; recreating it in " + std::to_string(delay.count()) + "s (crash-loop backoff)");
  restarted = true;
  return std::nullopt;
}

void Planner::PruneBackoff() {
  for (auto& [role, rs] : status_.replica_statuses) {
    // A copy: clang before 16 cannot capture a structured binding (the fuzz build).
    const ReplicaType type = role;
    const int32_t replicas = job_.spec.Replicas(type);
    std::erase_if(rs.backoff, [&](const api::RestartBackoff& b) {
      if (b.index >= replicas) return true;
      for (const Slot& slot : slots_) {
        if (slot.type != type || slot.index != b.index) continue;
        const ObservedPod* pod = slot.pod;
        if (pod == nullptr || pod->deletion_timestamp) return false;
        if (pod->phase == PodPhase::kSucceeded) return true;
        return pod->phase == PodPhase::kRunning && pod->creation_timestamp &&
               input_.now - *pod->creation_timestamp >= kRestartBackoffReset;
      }
      return true;
    });
  }
}

std::optional<std::string> Planner::DisruptionOf(const Slot& slot, const ObservedPod& pod,
                                                 bool vanished) const {
  if (pod.phase == PodPhase::kSucceeded) return std::nullopt;
  // Deleted or gone by the operator's own doing: this process deleted it, or
  // the planner had a reason to (a counted failure; a pod of an earlier spec).
  const bool operators_doing =
      pod.deleted_by_operator || Counted(pod.uid) ||
      (!pod.spec_hash.empty() && pod.spec_hash != spec_hashes_.at(slot.type));
  if (!pod.disruption.empty()) {
    // The cluster said so (DisruptionTarget, Evicted); a pod the operator
    // itself deleted keeps its own story.
    if (operators_doing && (pod.deletion_timestamp || vanished)) return std::nullopt;
    return pod.disruption;
  }
  if (operators_doing) return std::nullopt;
  if (vanished)
    return Terminated(pod.phase) ? std::nullopt : std::optional<std::string>("Vanished");
  if (!pod.deletion_timestamp) return std::nullopt;
  if (!Terminated(pod.phase)) return "Deleted";
  // Failed while being deleted: the SIGTERM of the deletion (143: the trainer
  // saved and exited; 137: killed after the grace period), or no exit at all.
  if (!pod.exit_code || *pod.exit_code == 143 || *pod.exit_code == 137) return "Deleted";
  return std::nullopt;
}

std::optional<std::pair<std::string, std::string>> Planner::HandleDisruption(
    const Slot& slot, const ObservedPod& pod, const std::string& cause, bool& restarted) {
  // Once disrupted, a terminated pod still present goes, so its replica is recreated.
  auto remove = [&] {
    if (!pod.deletion_timestamp && Terminated(pod.phase) && slot.pod == &pod) DeletePod(pod);
  };
  if (CountedDisruption(pod.uid)) {
    // Counted when its deletion began; its account of what the stop cost comes with its
    // exit: recorded once, on the disruption it belongs to.
    auto& last = status_.replica_statuses[slot.type].last_disruption;
    if (last && last->pod == pod.name && last->message.empty()) {
      const std::string cost = DisruptionCost(pod);
      if (!cost.empty()) {
        last->message = cost;
        if (pod.exit_code) last->exit_code = pod.exit_code;
        AddEvent(EventType::kNormal, "DisruptedPodStopped",
                 std::string(api::Role(slot.type).key) + " " + std::to_string(slot.index) +
                     " (pod " + pod.name + "): " + cost);
      }
    }
    remove();
    return std::nullopt;
  }
  api::ReplicaStatus& rs = status_.replica_statuses[slot.type];
  ++rs.disruptions;
  status_.counted_disruptions.push_back(pod.uid);
  std::string what = std::string(api::Role(slot.type).key) + " " + std::to_string(slot.index) +
                     " (pod " + pod.name + ") disrupted: " + cause;
  if (pod.exit_code) what += ", exit code " + std::to_string(*pod.exit_code);
  const std::string cost = DisruptionCost(pod);
  if (!cost.empty()) what.append(" (").append(cost).append(")");
  rs.last_disruption = api::FailureInfo{pod.name, pod.exit_code, cause, cost, input_.now};
  if (job_.spec.run_policy.disruption_policy == api::DisruptionPolicy::kIgnore) {
    AddEvent(
        EventType::kNormal, "PodDisrupted",
        what + "; its replica is replaced, not counted as a restart (disruptionPolicy Ignore)");
    remove();
    return std::nullopt;
  }
  // disruptionPolicy Count: a failure like any other.
  rs.last_failure = api::FailureInfo{pod.name, pod.exit_code, cause, pod.message, input_.now};
  AddEvent(EventType::kWarning, "PodDisrupted",
           what + "; counted as a failure (disruptionPolicy Count)");
  if (slot.spec->restart_policy == RestartPolicy::kNever) {
    return std::make_pair("ReplicaFailed",
                          what + "; restartPolicy is Never and disruptionPolicy is Count");
  }
  const auto& limit = job_.spec.run_policy.backoff_limit;
  if (limit && TotalRestarts() >= *limit) {
    return std::make_pair("BackoffLimitExceeded", "backoffLimit " + std::to_string(*limit) +
                                                      " exceeded; last failure: " + what);
  }
  ++rs.restarts;
  if (slot.pod == &pod) status_.counted_failures.push_back(pod.uid);
  remove();
  const std::chrono::seconds delay = RecordBackoff(slot, pod);
  AddEvent(EventType::kWarning, "RestartingReplica",
           what + "; recreating it in " + std::to_string(delay.count()) + "s (crash-loop backoff)");
  restarted = true;
  return std::nullopt;
}

std::chrono::seconds Planner::RecordBackoff(const Slot& slot, const ObservedPod& pod) {
  std::vector<api::RestartBackoff>& entries = status_.replica_statuses[slot.type].backoff;
  auto it = std::find_if(entries.begin(), entries.end(),
                         [&](const api::RestartBackoff& b) { return b.index == slot.index; });
  if (it == entries.end()) {
    it = entries.insert(
        std::upper_bound(entries.begin(), entries.end(), slot.index,
                         [](int32_t i, const api::RestartBackoff& b) { return i < b.index; }),
        api::RestartBackoff{slot.index, 0, {}});
  }
  const bool ran_cleanly =
      pod.creation_timestamp && input_.now - *pod.creation_timestamp >= kRestartBackoffReset;
  it->failures = ran_cleanly ? 1 : std::min(it->failures + 1, 30);
  std::chrono::seconds delay = kRestartBackoffBase;
  for (int32_t i = 1; i < it->failures && delay < kRestartBackoffMax; ++i) delay *= 2;
  delay = std::min(delay, kRestartBackoffMax);
  it->not_before = input_.now + delay;
  return delay;
}

bool Planner::InBackoff(const Slot& slot) {
  auto it = status_.replica_statuses.find(slot.type);
  if (it == status_.replica_statuses.end()) return false;
  for (const api::RestartBackoff& b : it->second.backoff) {
    if (b.index != slot.index || input_.now >= b.not_before) continue;
    Requeue(std::chrono::duration_cast<std::chrono::seconds>(b.not_before - input_.now));
    return true;
  }
  return false;
}

bool Planner::JobServiceDue(std::optional<ReplicaType> only) {
  if (!input_.services_when_running) return true;
  bool all_up = true;
  std::optional<api::Time> first_run;
  for (const Slot& slot : slots_) {
    if (only && slot.type != *only) continue;
    const ObservedPod* pod = slot.pod;
    if (!PastPending(pod)) {
      all_up = false;
      continue;
    }
    // Running without a start time (not reported yet): since its creation.
    std::optional<api::Time> since =
        pod->running_since ? pod->running_since : pod->creation_timestamp;
    if (pod->phase == PodPhase::kRunning && since && (!first_run || *since < *first_run)) {
      first_run = since;
    }
  }
  if (all_up) return true;
  if (!first_run) return false;  // nothing runs: no pod to resolve a peer
  // A start after now is a node clock ahead of ours: waiting on it could last
  // as long as the skew.
  if (*first_run > input_.now || input_.now >= *first_run + kServiceGrace) return true;
  Requeue(*first_run + kServiceGrace - input_.now);
  return false;
}

ChildCreate Planner::NetworkPolicyChild() const {
  return Child(ChildRef::Kind::kNetworkPolicy,
               NetworkPolicyName(job_.metadata.name, job_.metadata.uid),
               builder_.NetworkPolicy(input_.metrics_ingress));
}

void Planner::CreateMissing(std::optional<ReplicaType> only) {
  std::set<std::string> services;
  for (const ObservedService& s : observed_.services) services.insert(s.name);
  if (mode_ == api::ServiceMode::kJobWide) {
    const std::string name = JobServiceName(job_.metadata.name);
    if (!services.count(name) && JobServiceDue(only)) {
      plan_.creates.push_back(Child(ChildRef::Kind::kService, name, builder_.JobService()));
    }
  }
  for (const Slot& slot : slots_) {
    if (only && slot.type != *only) continue;
    if (mode_ == api::ServiceMode::kPerReplica && !services.count(slot.name) &&
        (!input_.services_when_running || PastPending(slot.pod))) {
      plan_.creates.push_back(Child(ChildRef::Kind::kService, slot.name,
                                    builder_.Service(slot.type, slot.index), slot.type,
                                    slot.index));
    }
  }
  std::set<ReplicaType> warned, env_warned;
  size_t pods_created = 0;
  for (const Slot& slot : slots_) {
    if ((only && slot.type != *only) || slot.pod != nullptr || InBackoff(slot)) continue;
    if (input_.max_pod_creates > 0 && pods_created == input_.max_pod_creates) {
      Requeue(std::chrono::seconds(1));  // the rest in the next plan
      break;
    }
    if (pods_created == 0) {
      // Before the Services: the Secret, the NetworkPolicy, then the ConfigMap
      // when the pods read CLUSTER_CONFIG from it.
      const std::string& job = job_.metadata.name;
      std::vector<ChildCreate> first;
      if (!observed_.secret_exists) {
        first.push_back(Child(ChildRef::Kind::kSecret, builder_.auth_secret(),
                              builder_.Secret(input_.auth_key, cluster_config_)));
      }
      if (input_.network_policy && !observed_.network_policy_exists) {
        first.push_back(NetworkPolicyChild());
      }
      if (!config_in_secret_) {
        first.push_back(Child(ChildRef::Kind::kConfigMap, ClusterConfigMapName(job),
                              builder_.ConfigMap(cluster_config_)));
      }
      if (gang_.ok() && gang_->has_value()) {
        first.push_back(
            Child(ChildRef::Kind::kPodGroup, (*gang_)->group_name, builder_.PodGroup()));
      }
      plan_.creates.insert(plan_.creates.begin(), std::make_move_iterator(first.begin()),
                           std::make_move_iterator(first.end()));
    }
    ++pods_created;
    StatusOr<json> pod = BuildPod(slot);
    if (!pod.ok()) continue;  // unreachable: CheckTemplates vetted every template
    plan_.creates.push_back(
        Child(ChildRef::Kind::kPod, slot.name, std::move(*pod), slot.type, slot.index));
    if (env_warned.insert(slot.type).second) {
      const std::string names = TemplateContractEnv(slot.spec->pod_template);
      if (!names.empty()) {
        AddEvent(EventType::kWarning, "EnvOverridden",
                 "spec.replicaSpecs." + std::string(api::Role(slot.type).key) + ".template sets " +
                     names + ": replaced by the operator's values (the workload contract)");
      }
    }
    const json& tmpl_spec = slot.spec->pod_template["spec"];
    std::string policy = api::StringField(tmpl_spec, "restartPolicy");
    if (!policy.empty() && policy != "Never" && warned.insert(slot.type).second) {
      AddEvent(EventType::kWarning, "RestartPolicyOverridden",
               "spec.replicaSpecs." + std::string(api::Role(slot.type).key) +
                   ".template.spec.restartPolicy " + policy +
                   " replaced by Never: the operator restarts pods per the replica's "
                   "restartPolicy");
    }
  }
  // No pod to create, but pods live and the policy is not known to be there (a new operator
  // process, or the recheck is due): sent alone, so a policy deleted behind the job's back
  // comes back, and one an older operator wrote is brought to this one's spec (the executor
  // replaces an existing policy's spec), without waiting for a pod to be replaced.
  if (pods_created == 0 && !only && input_.network_policy && !observed_.network_policy_exists &&
      std::any_of(slots_.begin(), slots_.end(), [](const Slot& slot) {
        return slot.pod != nullptr && !slot.pod->deletion_timestamp &&
               slot.pod->phase != PodPhase::kSucceeded && slot.pod->phase != PodPhase::kFailed;
      })) {
    plan_.creates.insert(plan_.creates.begin(), NetworkPolicyChild());
  }
}

void Planner::UpdateRunning(bool restarted) {
  bool all_up = !slots_.empty();
  for (const Slot& slot : slots_) {
    all_up = all_up && slot.pod != nullptr && !slot.pod->deletion_timestamp &&
             (slot.pod->phase == PodPhase::kRunning || slot.pod->phase == PodPhase::kSucceeded);
  }
  if (restarted) {
    const std::string message = "failed replicas are being recreated";
    SetCondition(ConditionType::kRunning, false, "ReplicaRestarting", message);
    SetCondition(ConditionType::kRestarting, true, "ReplicaRestarting", message);
  } else if (all_up) {
    const std::string message = "every replica is running";
    SetCondition(ConditionType::kRestarting, false, "TrainingJobRunning", message);
    SetCondition(ConditionType::kRunning, true, "TrainingJobRunning", message);
  } else if (status_.IsTrue(ConditionType::kRunning)) {
    SetCondition(ConditionType::kRunning, false, "ReplicasNotRunning",
                 "some replicas are not running");
  }
}

void Planner::UpdateSchedulable(bool active) {
  const StuckPods stuck = active ? PendingPodsWith(&ObservedPod::unschedulable) : StuckPods{};
  const int32_t waiting = stuck.count;
  const ObservedPod* first = stuck.first;
  if (waiting > 0) {
    std::string message = std::to_string(waiting) + " of " + std::to_string(slots_.size()) +
                          " pods cannot be scheduled";
    if (gang_.ok() && gang_->has_value()) {
      message += " (gang of " + std::to_string((*gang_)->min_member) + " for scheduler " +
                 (*gang_)->scheduler_name + ": no pod is placed until all can be)";
    }
    message +=
        "; " + first->name + ": " + TruncateUtf8(first->unschedulable, kMaxSchedulerMessageBytes);
    if (!status_.IsTrue(ConditionType::kUnschedulable)) {
      AddEvent(EventType::kWarning, "Unschedulable", message);
    }
    SetCondition(ConditionType::kUnschedulable, true, "Unschedulable", std::move(message));
  } else if (status_.IsTrue(ConditionType::kUnschedulable)) {
    SetCondition(ConditionType::kUnschedulable, false, active ? "PodsScheduled" : "NotRunning",
                 active ? "no pod is waiting to be scheduled" : "the job is not running");
  }
}

Planner::StuckPods Planner::PendingPodsWith(std::string ObservedPod::*why) const {
  StuckPods out;
  for (const Slot& slot : slots_) {
    const ObservedPod* pod = slot.pod;
    if (pod == nullptr || pod->deletion_timestamp || pod->phase != PodPhase::kPending ||
        (pod->*why).empty()) {
      continue;
    }
    ++out.count;
    if (out.first == nullptr) out.first = pod;
  }
  return out;
}

bool Planner::StartDeadlineExceeded() {
  const auto& limit = job_.spec.run_policy.start_deadline_seconds;
  const api::Condition* c = status_.Find(ConditionType::kCannotStart);
  if (!limit || c == nullptr || !c->status) return false;
  // None stuck any more: UpdateStartable turns the condition False.
  if (PendingPodsWith(&ObservedPod::cannot_start).count == 0) return false;
  const api::Time deadline = c->last_transition_time + std::chrono::seconds(*limit);
  if (input_.now < deadline) {
    Requeue(deadline - input_.now);
    return false;
  }
  Finish(false, "StartDeadlineExceeded",
         "pods could not start for startDeadlineSeconds (" + std::to_string(*limit) +
             "s): " + c->message);
  return true;
}

void Planner::UpdateStartable(bool active) {
  const StuckPods pods = active ? PendingPodsWith(&ObservedPod::cannot_start) : StuckPods{};
  const int32_t stuck = pods.count;
  const ObservedPod* first = pods.first;
  if (stuck > 0) {
    const std::string& why = first->cannot_start;
    const std::string reason = why.substr(0, why.find(':'));
    std::string message = std::to_string(stuck) + " of " + std::to_string(slots_.size()) +
                          " pods cannot start; " + first->name + ": " + why;
    const api::Condition* now = status_.Find(ConditionType::kCannotStart);
    if (now == nullptr || !now->status) AddEvent(EventType::kWarning, "CannotStart", message);
    SetCondition(ConditionType::kCannotStart, true, reason, std::move(message));
  } else if (status_.IsTrue(ConditionType::kCannotStart)) {
    SetCondition(ConditionType::kCannotStart, false, active ? "PodsStarted" : "NotRunning",
                 active ? "no pod is stuck before its containers start" : "the job is not running");
  }
}

void Planner::UpdateRefused(bool active) {
  if (active && input_.create_refused) {
    SetCondition(ConditionType::kCreateRefused, true, input_.create_refused->reason,
                 input_.create_refused->message);
    return;
  }
  // Removed rather than False: the REFUSED column (crds/) reads its reason.
  std::erase_if(status_.conditions,
                [](const api::Condition& c) { return c.type == ConditionType::kCreateRefused; });
}

void Planner::RunActive() {
  if (StartDeadlineExceeded()) return;
  if (const auto& limit = job_.spec.run_policy.active_deadline_seconds) {
    const api::Time deadline = *status_.start_time + std::chrono::seconds(*limit);
    if (input_.now >= deadline) {
      Finish(false, "DeadlineExceeded",
             "the job ran longer than activeDeadlineSeconds (" + std::to_string(*limit) +
                 "s) since " + api::FormatTime(*status_.start_time));
      return;
    }
    Requeue(deadline - input_.now);
  }
  const std::optional<Success> success = DecideSuccess();
  if (job_.spec.Replicas(ReplicaType::kEvaluator) > 0 && (success || WaitingForEvaluators())) {
    RunEvaluatorsAfterTraining(success);
    return;
  }
  if (success) {
    // Set once here; a finished job's status keeps it after the pods are gone.
    if (auto metrics = MetricsFromMessage(success->reporter->message))
      status_.metrics = std::move(*metrics);
    Finish(true, "TrainingJobSucceeded", success->message);
    return;
  }

  if (input_.auth_secret_replaced) {
    Finish(false, "AuthSecretDeleted",
           "the Secret " + builder_.auth_secret() +
               " holding the job's auth key was deleted while the job ran: its live pods "
               "hold the old key, a recreated replica would get a new one and be refused. "
               "Delete and re-create the job");
    return;
  }
  if (input_.gang_unavailable) {
    Finish(false, "GangSchedulingUnavailable", *input_.gang_unavailable);
    return;
  }
  PruneBackoff();
  bool restarted = false;
  std::set<ReplicaType> outdated;
  for (const Slot& slot : slots_) {
    if (slot.pod == nullptr) continue;
    // Ended by the cluster, not the workload: replaced whatever its restartPolicy.
    if (auto cause = DisruptionOf(slot, *slot.pod, /*vanished=*/false)) {
      if (auto failure = HandleDisruption(slot, *slot.pod, *cause, restarted)) {
        Finish(false, failure->first, failure->second);
        return;
      }
      continue;
    }
    if (slot.pod->deletion_timestamp) continue;  // deleting is not failing
    if (!Terminated(slot.pod->phase)) {
      if (!slot.pod->spec_hash.empty() && slot.pod->spec_hash != spec_hashes_.at(slot.type)) {
        DeletePod(*slot.pod);
        outdated.insert(slot.type);
      }
      continue;
    }
    if (auto failure = HandleTerminated(slot, restarted)) {
      Finish(false, failure->first, failure->second);
      return;
    }
  }

  // Pods gone while not terminal, which the operator did not delete.
  for (const ObservedPod& gone : observed_.vanished) {
    auto slot = std::find_if(slots_.begin(), slots_.end(),
                             [&](const Slot& s) { return s.name == gone.name; });
    if (slot == slots_.end() || (slot->pod != nullptr && slot->pod->uid == gone.uid)) continue;
    if (auto cause = DisruptionOf(*slot, gone, /*vanished=*/true)) {
      if (auto failure = HandleDisruption(*slot, gone, *cause, restarted)) {
        Finish(false, failure->first, failure->second);
        return;
      }
    }
  }
  for (ReplicaType type : outdated) {
    AddEvent(EventType::kNormal, "ReplicaOutdated",
             std::string(api::Role(type).key) +
                 " pods built from an earlier spec are recreated from the current one");
  }
  for (const ObservedPod* pod : orphan_pods_) DeletePod(*pod);
  std::set<std::string> wanted_services;  // the other mode's Services go
  if (mode_ == api::ServiceMode::kJobWide) {
    wanted_services.insert(JobServiceName(job_.metadata.name));
  } else {
    for (const Slot& slot : slots_) wanted_services.insert(slot.name);
  }
  for (const ObservedService& s : observed_.services) {
    if (!wanted_services.count(s.name) && !s.deletion_timestamp) {
      plan_.deletes.push_back({ChildRef::Kind::kService, s.name});
    }
  }
  CreateMissing();
  UpdateRunning(restarted);
}

bool Planner::WaitingForEvaluators() const {
  const api::Condition* running = status_.Find(ConditionType::kRunning);
  return running != nullptr && running->status && running->reason == kWaitingForEvaluator;
}

void Planner::RunEvaluatorsAfterTraining(const std::optional<Success>& success) {
  if (success) {
    if (auto metrics = MetricsFromMessage(success->reporter->message))
      status_.metrics = std::move(*metrics);
  }
  // Training is over: its replicas are neither restarted nor recreated, and the ones
  // still running are cleaned up as when a job finishes (cleanPodPolicy). Finished ones
  // stay until the job finishes: the coordinator's pod is the record of the success.
  const bool clean = job_.spec.run_policy.clean_pod_policy != api::CleanPodPolicy::kNone;
  for (const ObservedPod& pod : observed_.pods) {
    if (pod.role != ReplicaType::kEvaluator && clean && !Terminated(pod.phase)) DeletePod(pod);
  }
  for (const ObservedPod* pod : orphan_pods_) DeletePod(*pod);
  PruneBackoff();
  bool restarted = false;
  int32_t done = 0;
  const ObservedPod* reporter = nullptr;  // evaluator 0, once it exited 0
  for (const Slot& slot : slots_) {
    if (slot.type != ReplicaType::kEvaluator || slot.pod == nullptr) continue;
    if (auto cause = DisruptionOf(slot, *slot.pod, /*vanished=*/false)) {
      if (auto failure = HandleDisruption(slot, *slot.pod, *cause, restarted)) {
        Finish(false, failure->first, failure->second);
        return;
      }
      continue;
    }
    if (slot.pod->deletion_timestamp) continue;
    if (slot.pod->phase == PodPhase::kSucceeded) {
      // Done, whatever its restartPolicy: it evaluated the final checkpoint.
      ++done;
      if (slot.index == 0) reporter = slot.pod;
    } else if (slot.pod->phase == PodPhase::kFailed) {
      if (auto failure = HandleTerminated(slot, restarted)) {
        Finish(false, failure->first, failure->second);
        return;
      }
    }
  }
  const int32_t evaluators = job_.spec.Replicas(ReplicaType::kEvaluator);
  const std::string trained =
      "training succeeded" + (success ? " (" + success->message + ")" : std::string());
  if (done == evaluators) {
    // The evaluator's final metrics join the coordinator's, if they fit.
    if (reporter != nullptr) {
      if (auto em = MetricsFromMessage(reporter->message)) {
        json merged = status_.metrics.value_or(json::object());
        merged["evaluator"] = std::move(*em);
        if (merged.dump().size() <= api::kMaxMetricsBytes) status_.metrics = std::move(merged);
      }
    }
    Finish(true, "TrainingJobSucceeded",
           trained + " and " +
               (evaluators == 1 ? std::string("the evaluator")
                                : "all " + std::to_string(evaluators) + " evaluators") +
               " evaluated the final checkpoint");
    return;
  }
  // The gang's other members are gone or finished: a replacement evaluator in
  // the group would wait for siblings that never come (Coscheduling's minMember).
  outside_gang_ = true;
  CreateMissing(ReplicaType::kEvaluator);
  const std::string message = trained + "; waiting for " + std::to_string(evaluators - done) +
                              " of " + std::to_string(evaluators) +
                              " evaluators to evaluate the final checkpoint and exit 0" +
                              (restarted ? " (restarting a failed evaluator)" : "");
  SetCondition(ConditionType::kRunning, true, std::string(kWaitingForEvaluator), message);
  if (restarted) {
    SetCondition(ConditionType::kRestarting, true, "ReplicaRestarting",
                 "a failed evaluator is being recreated");
  } else {
    SetCondition(ConditionType::kRestarting, false, std::string(kWaitingForEvaluator), message);
  }
}
}  // namespace

bool OnlyLiveCountsDiffer(const api::TrainingJobStatus& a, const api::TrainingJobStatus& b) {
  if (a == b) return false;
  api::TrainingJobStatus c = b;
  c.running = a.running;
  for (auto& [type, rs] : c.replica_statuses) {
    auto it = a.replica_statuses.find(type);
    if (it == a.replica_statuses.end()) return false;
    rs.active = it->second.active;
  }
  // Unschedulable still True for the same reason: only its message (how many
  // pods wait, the scheduler's words) moved, as pods get placed one by one.
  const api::Condition* was = a.Find(ConditionType::kUnschedulable);
  for (api::Condition& cond : c.conditions) {
    if (cond.type == ConditionType::kUnschedulable && was != nullptr && was->status &&
        cond.status && cond.reason == was->reason) {
      cond.message = was->message;
    }
  }
  return c == a;
}

bool OnlyPendingCountsDiffer(const api::TrainingJobStatus& a, const api::TrainingJobStatus& b) {
  if (a == b) return false;
  api::TrainingJobStatus c = b;
  for (auto& [type, rs] : c.replica_statuses) {
    auto it = a.replica_statuses.find(type);
    if (it == a.replica_statuses.end()) return false;
    rs.active = it->second.active;
  }
  return c == a;
}

bool ClusterConfigInSecret(const api::TrainingJob& job, const ObservedChildren& observed,
                           const std::map<ReplicaType, std::string>& spec_hashes) {
  if (!job.status.start_time) return true;  // never ran: the Secret is created with the cluster
  for (const ObservedPod& pod : observed.pods) {
    auto hash = spec_hashes.find(pod.role);
    if (pod.cluster_config_in_secret && hash != spec_hashes.end() && pod.spec_hash == hash->second)
      return true;
  }
  return false;
}

api::ServiceMode EffectiveServiceMode(const api::TrainingJob& job,
                                      const ObservedChildren& observed) {
  if (job.spec.service_mode) return *job.spec.service_mode;
  const std::string job_service = JobServiceName(job.metadata.name);
  for (const ObservedService& s : observed.services) {
    if (s.name != job_service) return api::ServiceMode::kPerReplica;
  }
  return api::ServiceMode::kJobWide;
}

namespace {

Plan Planner::Run() {
  status_ = job_.status;
  status_.observed_generation = job_.metadata.generation;

  // Only UIDs of pods that still exist can be seen again; a deleted pod's UID
  // never comes back, so forgetting it is safe and keeps the list short.
  std::set<std::string> live_uids;
  for (const ObservedPod& pod : observed_.pods) live_uids.insert(pod.uid);
  std::erase_if(status_.counted_failures,
                [&](const std::string& uid) { return !live_uids.count(uid); });
  // A vanished pod's UID stays while the executor still reports it, and the
  // newest kKeptGoneDisruptions of the others stay too: the executor's cache
  // drops a pod a moment before it reports it vanished, and a plan in between
  // must not make the pod count twice.
  for (const ObservedPod& pod : observed_.vanished) live_uids.insert(pod.uid);
  size_t gone = 0;
  for (const std::string& uid : status_.counted_disruptions) gone += !live_uids.count(uid);
  for (auto it = status_.counted_disruptions.begin();
       gone > kKeptGoneDisruptions && it != status_.counted_disruptions.end();) {
    if (live_uids.count(*it)) {
      ++it;
    } else {
      it = status_.counted_disruptions.erase(it);  // oldest first
      --gone;
    }
  }

  std::map<std::string, const ObservedPod*> by_name;
  for (const ObservedPod& pod : observed_.pods) by_name[pod.name] = &pod;
  std::set<std::string> slot_names;
  for (const api::RoleInfo& role : api::kRoles) {
    auto it = job_.spec.replica_specs.find(role.type);
    if (it == job_.spec.replica_specs.end()) continue;
    for (int32_t i = 0; i < it->second.replicas; ++i) {
      std::string name = api::ChildName(job_.metadata.name, role.type, i);
      auto pod = by_name.find(name);
      slots_.push_back(
          {role.type, i, name, &it->second, pod == by_name.end() ? nullptr : pod->second});
      slot_names.insert(std::move(name));
    }
  }
  for (const ObservedPod& pod : observed_.pods) {
    if (!slot_names.count(pod.name)) orphan_pods_.push_back(&pod);
  }
  RecountReplicas();

  if (status_.Finished()) {
    if (!status_.completion_time) {
      // Finished by an older writer that left no completionTime: the TTL counts
      // from when the job became finished.
      const api::Condition* done = status_.IsTrue(ConditionType::kSucceeded)
                                       ? status_.Find(ConditionType::kSucceeded)
                                       : status_.Find(ConditionType::kFailed);
      status_.completion_time = done->last_transition_time;
    }
    CleanUpFinished();
    ScheduleTtl();
  } else if (job_.metadata.deletion_timestamp) {
    // Being deleted: garbage collection removes the children; create nothing.
  } else {
    const ClusterSpec cluster = input_.cluster_override
                                    ? *input_.cluster_override
                                    : BuildClusterSpec(job_, input_.default_cluster_domain, mode_);
    // Shared by every pod of a role: built once here, not per pod.
    cluster_config_ = ClusterConfigJson(cluster);
    for (const auto& [type, spec] : job_.spec.replica_specs)
      spec_hashes_[type] = SpecHash(spec, cluster_config_);
    config_in_secret_ =
        !input_.secret_not_ours && ClusterConfigInSecret(job_, observed_, spec_hashes_);
    builder_.set_config_in_secret(config_in_secret_);
    // Pods an earlier operator made read the key from "<job>-auth": their
    // replacements must get the same key, so they keep reading that Secret.
    for (const ObservedPod& pod : observed_.pods) {
      if (pod.legacy_auth_secret && !pod.deletion_timestamp && pod.phase != PodPhase::kFailed &&
          pod.phase != PodPhase::kSucceeded) {
        builder_.set_auth_secret(LegacyAuthSecretName(job_.metadata.name));
        break;
      }
    }
    Status valid = api::ToStatus(api::Validate(job_));
    if (valid.ok() && !gang_.ok()) valid = gang_.status();
    if (valid.ok()) valid = CheckTemplates();
    if (valid.ok() && input_.rejected_child) valid = InvalidArgument(*input_.rejected_child);
    if (!status_.IsTrue(ConditionType::kCreated)) {
      SetCondition(ConditionType::kCreated, true, "TrainingJobCreated",
                   "TrainingJob " + job_.metadata.name + " is created");
    }
    if (!valid.ok()) {
      Finish(false, "InvalidSpec", valid.message());
    } else if (job_.spec.run_policy.suspend) {
      Suspend("TrainingJobSuspended", "the job is suspended; its pods are deleted");
    } else if (input_.hold) {
      Suspend(input_.hold->reason, input_.hold->message);
    } else {
      if (status_.IsTrue(ConditionType::kSuspended)) {
        SetCondition(ConditionType::kSuspended, false, "TrainingJobResumed", "the job is resumed");
        AddEvent(EventType::kNormal, "Resumed", "the job is resumed; its pods are recreated");
        status_.start_time = input_.now;  // the deadline counts from the resume
      }
      if (!status_.start_time) status_.start_time = input_.now;
      RunActive();
    }
  }
  const bool active = !status_.Finished() && !job_.metadata.deletion_timestamp &&
                      !job_.spec.run_policy.suspend && !input_.hold;
  UpdateSchedulable(active);
  UpdateStartable(active);
  UpdateRefused(active);
  RecountReplicas();
  UpdateState();
  Summarize();
  plan_.status_changed = !(status_ == job_.status);
  plan_.status = std::move(status_);
  return std::move(plan_);
}

}  // namespace

void SetCondition(api::TrainingJobStatus& status, ConditionType type, bool value,
                  std::string reason, std::string message, api::Time now) {
  for (api::Condition& c : status.conditions) {
    if (c.type != type) continue;
    if (c.status != value) c.last_transition_time = now;
    c.status = value;
    c.reason = std::move(reason);
    c.message = std::move(message);
    return;
  }
  // An absent condition reads as False: only record one when it is True.
  if (!value) return;
  status.conditions.push_back({type, true, std::move(reason), std::move(message), now});
}

void SetFinished(api::TrainingJobStatus& status, bool succeeded, std::string reason,
                 std::string message, api::Time now) {
  SetCondition(status, ConditionType::kRunning, false, reason, message, now);
  SetCondition(status, ConditionType::kRestarting, false, reason, message, now);
  SetCondition(status, succeeded ? ConditionType::kSucceeded : ConditionType::kFailed, true,
               std::move(reason), std::move(message), now);
  status.completion_time = now;
}

void UpdateState(api::TrainingJobStatus& status, api::Time now) {
  api::SetSummaryConditions(status.conditions, now);
  static constexpr std::array<ConditionType, 5> kPrecedence = {
      ConditionType::kSucceeded, ConditionType::kFailed, ConditionType::kSuspended,
      ConditionType::kRestarting, ConditionType::kRunning};
  status.state = "Created";
  for (ConditionType t : kPrecedence) {
    if (status.IsTrue(t)) {
      status.state = std::string(api::Name(t));
      return;
    }
  }
}

Plan PlanJob(const api::TrainingJob& job, const ObservedChildren& observed,
             const PlanInput& input) {
  return Planner(job, observed, input).Run();
}

}  // namespace kubetrain::planner
