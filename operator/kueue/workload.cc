#include "operator/kueue/workload.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>

#include "operator/api/json.h"

namespace kubetrain::kueue {
namespace {

using json = nlohmann::json;

const json* FindCondition(const json& workload, std::string_view type) {
  const json* status = workload.contains("status") ? &workload["status"] : nullptr;
  if (status == nullptr || !status->is_object() || !status->contains("conditions")) return nullptr;
  const json& conds = (*status)["conditions"];
  if (!conds.is_array()) return nullptr;
  for (const json& c : conds) {
    if (c.is_object() && c.value("type", std::string()) == type) return &c;
  }
  return nullptr;
}

bool IsTrue(const json& workload, std::string_view type) {
  const json* c = FindCondition(workload, type);
  return c != nullptr && c->value("status", std::string()) == "True";
}

bool BeingDeleted(const json& workload) {
  const json& meta = workload.value("metadata", json::object());
  return meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
}

// Kueue's IsActive: spec.active unset or true.
bool IsActive(const json& workload) {
  const json& spec = workload.value("spec", json::object());
  const auto it = spec.find("active");
  return it == spec.end() || !it->is_boolean() || it->get<bool>();
}

bool DeactivatedForSuspend(const json& workload) {
  const json& meta = workload.value("metadata", json::object());
  const json& annotations = meta.value("annotations", json::object());
  const auto it = annotations.find(std::string(kDeactivatedForSuspendAnnotation));
  return it != annotations.end() && *it == "true";
}

std::string ConditionString(const json* c, const char* field) {
  if (c == nullptr) return "";
  return c->value(field, std::string());
}

int64_t Generation(const json& workload) {
  const json& m = workload.value("metadata", json::object());
  auto it = m.find("generation");
  return it != m.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// metav1.Condition semantics (apimeta.SetStatusCondition): the transition time
// changes only with the status.
void SetCondition(json& status, std::string_view type, bool value, std::string_view reason,
                  std::string_view message, int64_t generation, api::Time now) {
  if (!status.contains("conditions") || !status["conditions"].is_array())
    status["conditions"] = json::array();
  const std::string s = value ? "True" : "False";
  for (json& c : status["conditions"]) {
    if (!c.is_object() || c.value("type", std::string()) != type) continue;
    if (c.value("status", std::string()) != s) c["lastTransitionTime"] = api::FormatTime(now);
    c["status"] = s;
    c["reason"] = reason;
    c["message"] = message;
    c["observedGeneration"] = generation;
    return;
  }
  status["conditions"].push_back({{"type", type},
                                  {"status", s},
                                  {"reason", reason},
                                  {"message", message},
                                  {"observedGeneration", generation},
                                  {"lastTransitionTime", api::FormatTime(now)}});
}

void UnsetQuotaReservation(json& status, std::string_view reason, std::string_view message,
                           std::string_view admitted_reason, std::string_view admitted_message,
                           int64_t generation, api::Time now) {
  SetCondition(status, "QuotaReserved", false, reason, message, generation, now);
  status.erase("admission");
  SetCondition(status, "Admitted", false, admitted_reason, admitted_message, generation, now);
}

json Requests(const json& tmpl) {
  json out = json::array();
  const json& spec = tmpl.value("spec", json::object());
  for (const char* list : {"initContainers", "containers"}) {
    auto it = spec.find(list);
    if (it == spec.end() || !it->is_array()) continue;
    for (const json& c : *it) {
      json r = c.is_object() ? c.value("resources", json::object()) : json::object();
      out.push_back(r.is_object() ? r.value("requests", json::object()) : json::object());
    }
  }
  return out;
}

std::string Sha1Hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha1(), nullptr);
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kDigits[md[i] >> 4]);
    out.push_back(kDigits[md[i] & 15]);
  }
  return out;
}

// Merges `from` into the object at `to` (created if absent); a key present
// with another value is a conflict.
Status MergeMap(json& to, const std::map<std::string, std::string>& from, std::string_view what) {
  if (from.empty()) return Status::Ok();
  if (!to.is_object()) to = json::object();
  for (const auto& [k, v] : from) {
    auto it = to.find(k);
    if (it != to.end() && !(it->is_string() && it->get<std::string>() == v)) {
      return Status(StatusCode::kFailedPrecondition,
                    "the admission's " + std::string(what) + " " + k + "=" + v +
                        " conflicts with the pod template's " + k + "=" + it->dump());
    }
    to[k] = v;
  }
  return Status::Ok();
}

}  // namespace

std::optional<std::string> QueueName(const api::TrainingJob& job) {
  auto it = job.metadata.labels.find(std::string(kQueueNameLabel));
  if (it == job.metadata.labels.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

std::string WorkloadName(const api::TrainingJob& job) {
  std::string kind(api::kKind);
  std::transform(kind.begin(), kind.end(), kind.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string hash = Sha1Hex(std::string(api::kKind) + "\n" + std::string(api::kGroup) +
                                   "\n" + job.metadata.name + "\n" + job.metadata.uid);
  std::string prefix = kind + "-" + job.metadata.name;
  constexpr size_t kMaxPrefix = 252 - 5;
  if (prefix.size() > kMaxPrefix) prefix.resize(kMaxPrefix);
  return prefix + "-" + hash.substr(0, 5);
}

std::optional<std::string> PodPriorityClassName(const api::TrainingJob& job) {
  if (const auto& sp = job.spec.run_policy.scheduling_policy;
      sp && sp->priority_class_name && !sp->priority_class_name->empty()) {
    return *sp->priority_class_name;
  }
  for (const api::RoleInfo& role : api::kRoles) {
    auto it = job.spec.replica_specs.find(role.type);
    if (it == job.spec.replica_specs.end() || it->second.replicas <= 0) continue;
    const json& spec = it->second.pod_template.value("spec", json::object());
    std::string name = api::StringField(spec, "priorityClassName");
    if (!name.empty()) return name;
  }
  return std::nullopt;
}

json BuildWorkload(const api::TrainingJob& job, const std::string& queue,
                   const std::optional<Priority>& priority) {
  json pod_sets = json::array();
  for (const api::RoleInfo& role : api::kRoles) {
    auto it = job.spec.replica_specs.find(role.type);
    if (it == job.spec.replica_specs.end() || it->second.replicas <= 0) continue;
    pod_sets.push_back({{"name", role.lower},
                        {"count", it->second.replicas},
                        {"template", it->second.pod_template}});
  }
  json meta = {{"name", WorkloadName(job)},
               {"namespace", job.metadata.namespace_},
               {"labels", {{kJobUidLabel, job.metadata.uid}, {kJobNameLabel, job.metadata.name}}},
               {"finalizers", json::array({kResourceInUseFinalizer})},
               {"ownerReferences", json::array({{{"apiVersion", api::kApiVersion},
                                                 {"kind", api::kKind},
                                                 {"name", job.metadata.name},
                                                 {"uid", job.metadata.uid},
                                                 {"controller", true},
                                                 {"blockOwnerDeletion", true}}})}};
  json spec = {{"queueName", queue}, {"podSets", std::move(pod_sets)}};
  if (priority) {
    spec["priorityClassName"] = priority->class_name;
    spec["priority"] = priority->value;
    spec["priorityClassSource"] = priority->source;
  }
  return {{"apiVersion", kApiVersion},
          {"kind", "Workload"},
          {"metadata", std::move(meta)},
          {"spec", std::move(spec)}};
}

bool PodSetsMatch(const json& workload, const api::TrainingJob& job) {
  const json want = BuildWorkload(job, "", std::nullopt)["spec"]["podSets"];
  const json& spec = workload.value("spec", json::object());
  const json have = spec.value("podSets", json::array());
  if (!have.is_array() || have.size() != want.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!have[i].is_object() || have[i].value("name", std::string()) != want[i]["name"] ||
        have[i].value("count", int64_t{-1}) != want[i]["count"].get<int64_t>()) {
      return false;
    }
    if (Requests(have[i].value("template", json::object())) != Requests(want[i]["template"]))
      return false;
  }
  return true;
}

std::vector<PodSetAssignment> Assignments(const json& workload) {
  std::vector<PodSetAssignment> out;
  const json& status = workload.value("status", json::object());
  auto adm = status.find("admission");
  if (adm == status.end() || !adm->is_object()) return out;
  for (const json& a : adm->value("podSetAssignments", json::array())) {
    if (!a.is_object()) continue;
    PodSetAssignment p;
    p.name = a.value("name", std::string());
    const json flavors = a.value("flavors", json::object());
    for (const auto& [resource, flavor] : flavors.items()) {
      if (!flavor.is_string()) continue;
      const std::string f = flavor.get<std::string>();
      if (std::find(p.flavors.begin(), p.flavors.end(), f) == p.flavors.end())
        p.flavors.push_back(f);
    }
    out.push_back(std::move(p));
  }
  return out;
}

StatusOr<PodSetInfo> InfoFromFlavors(const PodSetAssignment& assignment,
                                     const std::map<std::string, json>& flavors) {
  PodSetInfo info;
  info.labels[std::string(kPodSetLabel)] = assignment.name;
  for (const std::string& name : assignment.flavors) {
    auto it = flavors.find(name);
    if (it == flavors.end())
      return Status(StatusCode::kNotFound, "ResourceFlavor " + name + " not found");
    const json& spec = it->second.value("spec", json::object());
    const json node_labels = spec.value("nodeLabels", json::object());
    for (const auto& [k, v] : node_labels.items()) {
      if (v.is_string()) info.node_selector[k] = v.get<std::string>();
    }
    for (const json& t : spec.value("tolerations", json::array())) info.tolerations.push_back(t);
  }
  return info;
}

Status ApplyPodSetInfo(json& pod, const PodSetInfo& info) {
  json& meta = pod["metadata"];
  if (!info.labels.empty()) KT_RETURN_IF_ERROR(MergeMap(meta["labels"], info.labels, "label"));
  if (!info.annotations.empty())
    KT_RETURN_IF_ERROR(MergeMap(meta["annotations"], info.annotations, "annotation"));
  json& spec = pod["spec"];
  if (!info.node_selector.empty())
    KT_RETURN_IF_ERROR(MergeMap(spec["nodeSelector"], info.node_selector, "node selector"));
  if (!info.tolerations.empty()) {
    json& tol = spec["tolerations"];
    if (!tol.is_array()) tol = json::array();
    for (const json& t : info.tolerations) {
      if (std::find(tol.begin(), tol.end(), t) == tol.end()) tol.push_back(t);
    }
  }
  return Status::Ok();
}

Decision Decide(const api::TrainingJob& job, const std::string& queue, const json* workload,
                bool pods_active) {
  Decision d;
  const std::string wl_name = WorkloadName(job);
  if (job.status.Finished()) {
    if (workload == nullptr) return d;
    if (!IsTrue(*workload, "Finished")) {
      d.action = Decision::Action::kFinishWorkload;
    } else if (HasOurFinalizer(*workload)) {
      d.action = Decision::Action::kRemoveFinalizer;
    }
    return d;
  }
  auto hold = [&](std::string_view reason, std::string message) {
    d.hold = Hold{std::string(reason), std::move(message)};
  };
  // Not Kueue's: no label and no Workload.
  if (queue.empty() && workload == nullptr) return d;
  // Whether the Workload should move to the job's (changed) queue now: only
  // while it holds no quota, so an admission is never moved under a running job.
  const auto should_move = [&] {
    return !queue.empty() && QueueOf(*workload) != queue && !IsTrue(*workload, "QuotaReserved");
  };
  if (job.spec.run_policy.suspend) {
    // The planner holds the job with its own Suspended reason; here only the
    // quota is given back.
    if (workload == nullptr || BeingDeleted(*workload)) return d;
    if (IsActive(*workload)) {
      d.action = Decision::Action::kDeactivate;
    } else if (IsTrue(*workload, "QuotaReserved") && IsTrue(*workload, "Evicted") && !pods_active) {
      d.action = Decision::Action::kClearAdmission;
    } else if (should_move()) {
      d.action = Decision::Action::kMoveQueue;
    }
    return d;
  }
  if (workload == nullptr) {
    hold(kReasonWaitingForAdmission,
         "waiting for Kueue to admit Workload " + wl_name + " in queue " + queue);
    if (!pods_active) d.action = Decision::Action::kCreateWorkload;
    return d;
  }
  if (BeingDeleted(*workload)) {
    hold(kReasonWaitingForAdmission,
         "Workload " + wl_name + " is being deleted; a new one follows once it is gone");
    if (!pods_active && HasOurFinalizer(*workload)) d.action = Decision::Action::kRemoveFinalizer;
    return d;
  }
  if (!PodSetsMatch(*workload, job)) {
    if (queue.empty()) {
      // A new Workload could not be queued anywhere: keep this one (the job
      // stays held, its pods are not made from roles it does not describe).
      hold(kReasonWaitingForAdmission,
           "the job's roles changed and its kueue.x-k8s.io/queue-name label was removed: "
           "Workload " +
               wl_name + " no longer describes it; label it with a queue to queue it again");
      return d;
    }
    hold(kReasonWaitingForAdmission,
         "the job's roles changed; Workload " + wl_name + " is replaced and queued again");
    d.action = Decision::Action::kDeleteWorkload;
    return d;
  }
  // The queue the job waits in: its label's, else (label removed) its Workload's.
  const std::string in_queue = queue.empty() ? QueueOf(*workload) : queue;
  const std::string label_note =
      queue.empty() ? " (its kueue.x-k8s.io/queue-name label was removed: it stays in its "
                      "Workload's queue)"
                    : "";
  if (!IsActive(*workload)) {
    if (DeactivatedForSuspend(*workload)) {
      hold(kReasonWaitingForAdmission, "the job resumed: Workload " + wl_name +
                                           " is activated and queued again in " + in_queue);
      d.action = Decision::Action::kActivate;
      return d;
    }
    hold(kReasonEvicted, "Workload " + wl_name +
                             " is deactivated (spec.active is false) by someone other than this "
                             "operator; the job waits until it is activated again");
    if (IsTrue(*workload, "QuotaReserved") && IsTrue(*workload, "Evicted") && !pods_active)
      d.action = Decision::Action::kClearAdmission;
    return d;
  }
  if (should_move()) {
    hold(kReasonWaitingForAdmission, "the job's queue changed: Workload " + wl_name +
                                         " moves from queue " + QueueOf(*workload) + " to " +
                                         queue + " and waits there to be admitted");
    d.action = Decision::Action::kMoveQueue;
    return d;
  }
  const json* ev = FindCondition(*workload, "Evicted");
  // An eviction by our own deactivation is over once the Workload is active
  // again and its quota is released: it simply queues.
  const bool evicted_by_suspend =
      ConditionString(ev, "reason") == "Deactivated" && !IsTrue(*workload, "QuotaReserved");
  if (IsTrue(*workload, "Evicted") && !evicted_by_suspend) {
    hold(kReasonEvicted, "Kueue evicted Workload " + wl_name + " (" +
                             ConditionString(ev, "reason") +
                             "): " + ConditionString(ev, "message") +
                             "; its pods are deleted and it waits to be admitted again");
    if (IsTrue(*workload, "QuotaReserved") && !pods_active)
      d.action = Decision::Action::kClearAdmission;
    return d;
  }
  if (IsTrue(*workload, "Admitted")) {  // run
    // Only transitions are written: a missing PodsReady counts as WaitForStart.
    const bool ready = job.status.IsTrue(api::ConditionType::kRunning);
    if (ready != IsTrue(*workload, "PodsReady") &&
        (ready || FindCondition(*workload, "PodsReady") != nullptr)) {
      d.action = Decision::Action::kSetPodsReady;
    }
    return d;
  }
  const json* qr = FindCondition(*workload, "QuotaReserved");
  std::string message =
      "waiting for Kueue to admit Workload " + wl_name + " in queue " + in_queue + label_note;
  const std::string why = ConditionString(qr, "message");
  if (!why.empty()) message += ": " + why;
  hold(kReasonWaitingForAdmission, std::move(message));
  return d;
}

namespace {

constexpr std::string_view kWaitForStart = "WaitForStart";
constexpr std::string_view kNotReadyMessage = "Not all pods are ready or succeeded";

}  // namespace

json PodsReadyStatus(const json& workload, bool ready, api::Time now) {
  json status = workload.value("status", json::object());
  const int64_t gen = Generation(workload);
  const json* c = FindCondition(workload, "PodsReady");
  const std::string reason = ConditionString(c, "reason");
  const bool was_ready = IsTrue(workload, "PodsReady");
  if (ready) {
    const bool recovered = reason == "WaitForRecovery" || reason == "Recovered";
    SetCondition(status, "PodsReady", true, recovered ? "Recovered" : "Started",
                 "All pods reached readiness and the workload is running", gen, now);
  } else if (was_ready || reason == "WaitForRecovery") {
    SetCondition(status, "PodsReady", false, "WaitForRecovery",
                 "At least one pod has failed, waiting for recovery", gen, now);
  } else {
    SetCondition(status, "PodsReady", false, kWaitForStart, kNotReadyMessage, gen, now);
  }
  return status;
}

json ClearedAdmissionStatus(const json& workload, api::Time now) {
  json status = workload.value("status", json::object());
  const int64_t gen = Generation(workload);
  const json* ev = FindCondition(workload, "Evicted");
  const std::string reason = ConditionString(ev, "reason");
  const std::string message = ConditionString(ev, "message");
  const bool requeued = reason == "Preempted" || reason == "NodeFailures";
  SetCondition(status, "Requeued", requeued, reason.empty() ? "Evicted" : reason, message, gen,
               now);
  UnsetQuotaReservation(status, "Pending", message, "NoReservation",
                        "The workload has no reservation", gen, now);
  // The next admission starts its pods afresh (Kueue's reconciler says so
  // for any Workload that is not admitted).
  if (FindCondition(workload, "PodsReady") != nullptr) {
    SetCondition(status, "PodsReady", false, kWaitForStart, kNotReadyMessage, gen, now);
  }
  return status;
}

json FinishedStatus(const json& workload, bool succeeded, const std::string& message,
                    api::Time now) {
  json status = workload.value("status", json::object());
  const int64_t gen = Generation(workload);
  SetCondition(status, "Finished", true, succeeded ? "Succeeded" : "Failed", message, gen, now);
  UnsetQuotaReservation(status, "Finished", "Workload has finished", "Finished",
                        "Workload has finished", gen, now);
  return status;
}

json WithActive(const json& workload, bool active) {
  json out = workload;
  out["spec"]["active"] = active;
  json& meta = out["metadata"];
  const std::string key(kDeactivatedForSuspendAnnotation);
  if (active) {
    if (meta.contains("annotations") && meta["annotations"].is_object())
      meta["annotations"].erase(key);
  } else {
    meta["annotations"][key] = "true";
  }
  return out;
}

json WithQueue(const json& workload, const std::string& queue) {
  json out = workload;
  out["spec"]["queueName"] = queue;
  return out;
}

std::string QueueOf(const json& workload) {
  const json& spec = workload.value("spec", json::object());
  return spec.is_object() ? api::StringField(spec, "queueName") : std::string();
}

bool OwnedByATrainingJob(const json& workload) {
  const json& meta = workload.value("metadata", json::object());
  for (const json& o : meta.value("ownerReferences", json::array())) {
    if (!o.is_object() || !o.value("controller", false)) continue;
    const std::string api_version = o.value("apiVersion", std::string());
    return o.value("kind", std::string()) == api::kKind &&
           api_version.starts_with(std::string(api::kGroup) + "/") &&
           !o.value("name", std::string()).empty();
  }
  return false;
}

json LabelForCache(const json& workload) {
  json out = workload;
  std::string job;
  for (const json& o : workload["metadata"].value("ownerReferences", json::array())) {
    if (o.is_object() && o.value("controller", false)) job = o.value("name", std::string());
  }
  out["metadata"]["labels"][std::string(kJobNameLabel)] = job;
  return out;
}

json FinalizersWithoutOurs(const json& workload) {
  json out = json::array();
  const json& meta = workload.value("metadata", json::object());
  for (const json& f : meta.value("finalizers", json::array())) {
    if (!(f.is_string() && f.get<std::string>() == kResourceInUseFinalizer)) out.push_back(f);
  }
  return out;
}

bool HasOurFinalizer(const json& workload) {
  const json& meta = workload.value("metadata", json::object());
  for (const json& f : meta.value("finalizers", json::array())) {
    if (f.is_string() && f.get<std::string>() == kResourceInUseFinalizer) return true;
  }
  return false;
}

}  // namespace kubetrain::kueue
