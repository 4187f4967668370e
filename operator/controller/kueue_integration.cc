#include "operator/controller/kueue_integration.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>

namespace kubetrain::controller {

using planner::ChildCreate;
using planner::ChildRef;
using planner::PlanInput;

using json = nlohmann::json;
using Action = kueue::Decision::Action;

KueueIntegration::KueueIntegration(JobClient* client, runtime::EventRecorder* recorder)
    : client_(client), recorder_(recorder) {}

void KueueIntegration::Event(const api::TrainingJob& job, const std::string& type,
                             const std::string& reason, const std::string& message) {
  recorder_->Record(JobReference(job.metadata.namespace_, job.metadata.name, job.metadata.uid),
                    type, reason, "Kueue", message);
}

// The Workload's priority, as Kueue's own job integrations choose it: the
// WorkloadPriorityClass of the job's label; else the PriorityClass its pods run
// with; else the cluster's default PriorityClass (globalDefault), if any.
StatusOr<std::optional<kueue::Priority>> KueueIntegration::PriorityOf(const api::TrainingJob& job) {
  const auto value_of = [](const json& obj) {
    const json& v = obj.contains("value") ? obj["value"] : json();
    return v.is_number_integer() ? v.get<int32_t>() : 0;
  };
  auto it = job.metadata.labels.find(std::string(kueue::kPriorityClassLabel));
  if (it != job.metadata.labels.end() && !it->second.empty()) {
    auto wpc = client_->GetObject(kWorkloadPriorityClasses, "", it->second);
    if (!wpc.ok()) {
      return wpc.status().WithContext("WorkloadPriorityClass " + it->second + " (label " +
                                      std::string(kueue::kPriorityClassLabel) + ")");
    }
    return std::optional<kueue::Priority>(kueue::Priority{it->second, value_of(*wpc)});
  }
  if (std::optional<std::string> name = kueue::PodPriorityClassName(job)) {
    auto pc = client_->GetObject(kPriorityClasses, "", *name);
    if (!pc.ok()) {
      return pc.status().WithContext("PriorityClass " + *name + " (the pods' priorityClassName)");
    }
    return std::optional<kueue::Priority>(
        kueue::Priority{*name, value_of(*pc), kueue::kPodPriorityClassSource});
  }
  auto classes = client_->ListWatch(kPriorityClasses, "", "", nullptr)->List();
  if (!classes.ok()) return classes.status().WithContext("list PriorityClasses");
  for (const json& pc : classes->value("items", json::array())) {
    if (pc.value("globalDefault", false)) {
      return std::optional<kueue::Priority>(kueue::Priority{
          pc["metadata"].value("name", ""), value_of(pc), kueue::kPodPriorityClassSource});
    }
  }
  return std::optional<kueue::Priority>();
}

StatusOr<KueueIntegration::SyncResult> KueueIntegration::Sync(
    const api::TrainingJob& job, const std::string& queue, const runtime::GenericObject* workload,
    bool pods_active, api::Time now) {
  const json* wl = workload != nullptr ? &workload->object : nullptr;
  const kueue::Decision d = kueue::Decide(job, queue, wl, pods_active);
  const std::string& ns = job.metadata.namespace_;
  SyncResult out;
  if (d.hold) out.hold = PlanInput::Hold{d.hold->reason, d.hold->message};
  switch (d.action) {
    case Action::kNone:
      break;
    case Action::kCreateWorkload: {
      Status made = Status::Ok();
      auto priority = PriorityOf(job);
      if (!priority.ok()) {
        made = priority.status();
      } else {
        const json obj = kueue::BuildWorkload(job, queue, *priority);
        const Status created = client_->Create(kWorkloads, ns, obj);
        if (created.ok()) {
          Event(job, "Normal", "CreatedWorkload",
                "created Workload " + obj["metadata"]["name"].get<std::string>() + " in queue " +
                    queue);
        } else if (created.code() != StatusCode::kAlreadyExists) {
          made = created.WithContext("create Workload");
        }
      }
      if (made.ok()) break;
      const StatusCode code = made.code();
      if (code != StatusCode::kNotFound && code != StatusCode::kInvalidArgument &&
          code != StatusCode::kPermissionDenied && code != StatusCode::kFailedPrecondition) {
        return made;  // transient: the reconcile retries with backoff
      }
      // Lasting until someone acts: say so in the job's status, and look again.
      const std::string message = "cannot queue the job in " + queue + ": " + made.message();
      Event(job, "Warning", "WorkloadNotCreated", message);
      out.hold = PlanInput::Hold{"WorkloadNotCreated", message};
      out.retry_after = std::chrono::seconds(10);
      break;
    }
    case Action::kDeleteWorkload: {
      kube::DeleteOptions opts;
      opts.precondition_uid = workload->meta.uid;
      const Status s = client_->Delete(kWorkloads, ns, workload->meta.name, opts);
      if (!s.ok() && s.code() != StatusCode::kNotFound) return s.WithContext("delete Workload");
      Event(job, "Normal", "DeletedWorkload",
            "deleted Workload " + workload->meta.name + ": its pod sets no longer match the job");
      break;
    }
    case Action::kClearAdmission:
      KT_RETURN_IF_ERROR(WriteStatus(*workload, kueue::ClearedAdmissionStatus(*wl, now)));
      break;
    case Action::kFinishWorkload: {
      const bool succeeded = job.status.IsTrue(api::ConditionType::kSucceeded);
      const api::Condition* c =
          job.status.Find(succeeded ? api::ConditionType::kSucceeded : api::ConditionType::kFailed);
      KT_RETURN_IF_ERROR(WriteStatus(
          *workload, kueue::FinishedStatus(*wl, succeeded, c != nullptr ? c->message : "", now)));
      break;
    }
    case Action::kSetPodsReady:
      KT_RETURN_IF_ERROR(WriteStatus(
          *workload,
          kueue::PodsReadyStatus(*wl, job.status.IsTrue(api::ConditionType::kRunning), now)));
      break;
    case Action::kRemoveFinalizer:
      KT_RETURN_IF_ERROR(RemoveFinalizer(*workload));
      break;
    case Action::kMoveQueue: {
      const std::string from = kueue::QueueOf(*wl);
      auto updated = client_->Update(kWorkloads, ns, kueue::WithQueue(*wl, queue));
      if (!updated.ok() && updated.status().code() != StatusCode::kNotFound) {
        return updated.status().WithContext("move Workload " + workload->meta.name + " to queue " +
                                            queue);
      }
      Event(job, "Normal", "WorkloadQueueChanged",
            "the job's queue changed: Workload " + workload->meta.name + " moved from queue " +
                from + " to " + queue);
      break;
    }
    case Action::kDeactivate:
    case Action::kActivate: {
      const bool active = d.action == Action::kActivate;
      auto updated = client_->Update(kWorkloads, ns, kueue::WithActive(*wl, active));
      if (!updated.ok() && updated.status().code() != StatusCode::kNotFound) {
        return updated.status().WithContext((active ? "activate" : "deactivate") +
                                            std::string(" Workload ") + workload->meta.name);
      }
      Event(job, "Normal", active ? "ActivatedWorkload" : "DeactivatedWorkload",
            active ? "the job resumed: Workload " + workload->meta.name + " is queued again"
                   : "the job is suspended: Workload " + workload->meta.name +
                         " is deactivated and its quota released");
      break;
    }
  }
  return out;
}

StatusOr<std::shared_ptr<const runtime::GenericObject>> KueueIntegration::UncachedWorkload(
    const api::TrainingJob& job) {
  const api::Condition* held = job.status.Find(api::ConditionType::kSuspended);
  if (held == nullptr || !held->status ||
      (held->reason != kueue::kReasonWaitingForAdmission && held->reason != kueue::kReasonEvicted &&
       held->reason != "WorkloadNotCreated")) {
    return std::shared_ptr<const runtime::GenericObject>();
  }
  auto got = client_->GetObject(kWorkloads, job.metadata.namespace_, kueue::WorkloadName(job));
  if (!got.ok() && got.status().code() == StatusCode::kNotFound)
    return std::shared_ptr<const runtime::GenericObject>();
  if (!got.ok()) return got.status().WithContext("get Workload");
  KT_ASSIGN_OR_RETURN(runtime::GenericObject obj, runtime::ToGenericObject(*got));
  return std::make_shared<const runtime::GenericObject>(std::move(obj));
}

Status KueueIntegration::DecoratePods(const json& workload, std::vector<ChildCreate>& creates) {
  bool any_pod = false;
  for (const ChildCreate& c : creates) any_pod = any_pod || c.ref.kind == ChildRef::Kind::kPod;
  if (!any_pod) return Status::Ok();
  // The flavors are read only when pods are about to be created: once per
  // admission and role in practice.
  std::map<std::string, kueue::PodSetInfo> infos;
  std::map<std::string, json> flavors;
  for (const kueue::PodSetAssignment& a : kueue::Assignments(workload)) {
    for (const std::string& f : a.flavors) {
      if (flavors.contains(f)) continue;
      auto got = client_->GetObject(kResourceFlavors, "", f);
      if (!got.ok()) return got.status().WithContext("ResourceFlavor " + f);
      flavors[f] = std::move(*got);
    }
    KT_ASSIGN_OR_RETURN(infos[a.name], kueue::InfoFromFlavors(a, flavors));
  }
  for (ChildCreate& c : creates) {
    if (c.ref.kind != ChildRef::Kind::kPod || !c.ref.role) continue;
    const std::string role(api::Role(*c.ref.role).lower);
    auto it = infos.find(role);
    if (it == infos.end()) {
      return Status(StatusCode::kFailedPrecondition,
                    "the Workload's admission has no pod set " + role);
    }
    KT_RETURN_IF_ERROR(kueue::ApplyPodSetInfo(c.object, it->second)
                           .WithContext("pod " + c.ref.name + ", pod set " + role));
  }
  return Status::Ok();
}

StatusOr<int> KueueIntegration::LabelOlderWorkloads(const std::string& ns) {
  // Only metadata is built from the listed Workloads: most of them are other
  // job kinds', read once here and never cached.
  using F = kube::KeptField;
  static const auto* const kMetadataOnly = new std::shared_ptr<const kube::FieldFilter>(
      std::make_shared<const kube::FieldFilter>(kube::FieldFilter{F{"metadata", {}}}));
  std::vector<std::pair<std::string, std::string>> ours;  // namespace, name
  auto listed = client_
                    ->ListWatch(kWorkloads, ns, std::string(kueue::kUnlabelledWorkloadsSelector),
                                *kMetadataOnly)
                    ->ListPages(
                        [&](std::vector<json>&& items) {
                          for (const json& wl : items) {
                            if (!kueue::OwnedByATrainingJob(wl)) continue;
                            const json& meta = wl["metadata"];
                            ours.emplace_back(meta.value("namespace", ""), meta.value("name", ""));
                          }
                        },
                        [&] { ours.clear(); });
  if (!listed.ok()) return listed.status().WithContext("list Workloads to label");
  int labelled = 0;
  for (const auto& [wl_ns, name] : ours) {
    // A conflict (Kueue wrote the Workload meanwhile) is retried on a fresh copy.
    Status last = Status::Ok();
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto got = client_->GetObject(kWorkloads, wl_ns, name);
      if (!got.ok() && got.status().code() == StatusCode::kNotFound) {
        last = Status::Ok();
        break;
      }
      if (!got.ok()) {
        last = got.status();
        break;
      }
      auto updated = client_->Update(kWorkloads, wl_ns, kueue::LabelForCache(*got));
      last = updated.status();
      if (updated.ok()) ++labelled;
      if (updated.ok() || updated.status().code() == StatusCode::kNotFound) {
        last = Status::Ok();
        break;
      }
      if (updated.status().code() != StatusCode::kConflict) break;
    }
    if (!last.ok()) return last.WithContext("label Workload " + wl_ns + "/" + name);
  }
  return labelled;
}

Status KueueIntegration::LabelOlderWorkloads(const std::vector<std::string>& namespaces,
                                             std::chrono::steady_clock::time_point deadline,
                                             std::stop_token stop) {
  for (const std::string& ns : namespaces) {
    auto wait = std::chrono::milliseconds(200);
    while (true) {
      auto labelled = LabelOlderWorkloads(ns);
      if (labelled.ok()) {
        if (*labelled > 0) {
          spdlog::info("labelled {} Workloads of an older operator with {}", *labelled,
                       kueue::kJobNameLabel);
        }
        break;
      }
      if (stop.stop_requested() || std::chrono::steady_clock::now() + wait > deadline) {
        return Status(StatusCode::kUnavailable,
                      "the Workloads of an older operator could not be labelled for the cache: " +
                          labelled.status().ToString());
      }
      std::mutex mu;
      std::condition_variable_any cv;
      std::unique_lock lock(mu);
      cv.wait_for(lock, stop, wait, [] { return false; });  // a backoff the stop token ends
      wait = std::min(wait * 2, std::chrono::milliseconds(5000));
    }
  }
  return Status::Ok();
}

Status KueueIntegration::ReleaseOrphan(const runtime::GenericObject& workload) {
  if (workload.meta.deletion_timestamp.empty() || !kueue::HasOurFinalizer(workload.object))
    return Status::Ok();
  return RemoveFinalizer(workload);
}

Status KueueIntegration::RemoveFinalizer(const runtime::GenericObject& workload) {
  json obj = workload.object;
  obj["metadata"]["finalizers"] = kueue::FinalizersWithoutOurs(workload.object);
  auto updated = client_->Update(kWorkloads, workload.meta.ns, obj);
  if (!updated.ok() && updated.status().code() != StatusCode::kNotFound)
    return updated.status().WithContext("remove the finalizer of Workload " + workload.meta.name);
  return Status::Ok();
}

Status KueueIntegration::WriteStatus(const runtime::GenericObject& workload, json status) {
  json obj = workload.object;
  obj["status"] = std::move(status);
  auto written = client_->UpdateStatus(kWorkloads, workload.meta.ns, obj);
  if (!written.ok() && written.status().code() != StatusCode::kNotFound)
    return written.status().WithContext("update status of Workload " + workload.meta.name);
  return Status::Ok();
}

}  // namespace kubetrain::controller
