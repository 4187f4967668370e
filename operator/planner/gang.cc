#include "operator/planner/gang.h"

#include <algorithm>

namespace kubetrain::planner {

using nlohmann::json;

namespace {

Status AddTo(ResourceList& into, const ResourceList& add) {
  for (const auto& [name, q] : add) {
    KT_ASSIGN_OR_RETURN(into[name], AddQuantity(into[name], q));
  }
  return Status::Ok();
}

void MaxInto(ResourceList& into, const ResourceList& other) {
  for (const auto& [name, q] : other) {
    Quantity& have = into[name];
    have.milli = std::max(have.milli, q.milli);
  }
}

// A resource map (requests, limits, overhead): name -> quantity, where YAML may
// have made a quantity a number (`cpu: 1`).
Status ReadResources(const json& j, const std::string& path, ResourceList& out) {
  if (!j.is_object()) return InvalidArgument(path + ": must be an object");
  for (const auto& [name, value] : j.items()) {
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else if (value.is_number()) {
      text = value.dump();
    } else {
      return InvalidArgument(path + "." + name +
                             ": must be a quantity such as \"500m\" or \"1Gi\"");
    }
    StatusOr<Quantity> q = ParseQuantity(text);
    if (!q.ok()) return InvalidArgument(path + "." + name + ": " + q.status().message());
    out[name] = *q;
  }
  return Status::Ok();
}

// One container's requests; a limit stands in for a missing request (the
// apiserver defaults requests to limits).
StatusOr<ResourceList> ContainerRequests(const json& c, const std::string& path) {
  ResourceList out;
  if (!c.is_object() || !c.contains("resources")) return out;
  const json& res = c["resources"];
  if (!res.is_object()) return InvalidArgument(path + ".resources: must be an object");
  if (res.contains("limits")) {
    KT_RETURN_IF_ERROR(ReadResources(res["limits"], path + ".resources.limits", out));
  }
  if (res.contains("requests")) {
    ResourceList requests;
    KT_RETURN_IF_ERROR(ReadResources(res["requests"], path + ".resources.requests", requests));
    for (auto& [name, q] : requests) out[name] = q;
  }
  return out;
}

StatusOr<ResourceList> PodRequestsAt(const json& pod_template, const std::string& path) {
  ResourceList containers, sidecars, init_peak;
  if (!pod_template.is_object() || !pod_template.contains("spec")) return containers;
  const json& spec = pod_template["spec"];
  if (!spec.is_object()) return containers;
  if (spec.contains("containers") && spec["containers"].is_array()) {
    const json& list = spec["containers"];
    for (size_t i = 0; i < list.size(); ++i) {
      KT_ASSIGN_OR_RETURN(ResourceList r, ContainerRequests(list[i], path + ".spec.containers[" +
                                                                         std::to_string(i) + "]"));
      KT_RETURN_IF_ERROR(AddTo(containers, r));
    }
  }
  if (spec.contains("initContainers") && spec["initContainers"].is_array()) {
    const json& list = spec["initContainers"];
    for (size_t i = 0; i < list.size(); ++i) {
      KT_ASSIGN_OR_RETURN(
          ResourceList r,
          ContainerRequests(list[i], path + ".spec.initContainers[" + std::to_string(i) + "]"));
      const bool sidecar =
          list[i].is_object() && list[i].value("restartPolicy", json()) == "Always";
      if (sidecar) {
        KT_RETURN_IF_ERROR(AddTo(sidecars, r));
      } else {
        // A regular init container runs alone beside the sidecars started before it.
        KT_RETURN_IF_ERROR(AddTo(r, sidecars));
        MaxInto(init_peak, r);
      }
    }
  }
  KT_RETURN_IF_ERROR(AddTo(containers, sidecars));
  MaxInto(containers, init_peak);
  if (spec.contains("overhead")) {
    ResourceList overhead;
    KT_RETURN_IF_ERROR(ReadResources(spec["overhead"], path + ".spec.overhead", overhead));
    KT_RETURN_IF_ERROR(AddTo(containers, overhead));
  }
  std::erase_if(containers, [](const auto& entry) { return entry.second.milli == 0; });
  return containers;
}

}  // namespace

std::string PodGroupName(std::string_view job_name, std::string_view job_uid) {
  if (job_uid.empty()) return std::string(job_name);
  constexpr size_t kMaxLabelValue = 63;
  const size_t room = kMaxLabelValue > job_uid.size() + 1 ? kMaxLabelValue - job_uid.size() - 1 : 0;
  std::string name(job_name.substr(0, room));
  // A label value ends alphanumeric: no '-' before ours.
  while (!name.empty() && name.back() == '-') name.pop_back();
  if (name.empty()) return std::string(job_uid.substr(0, kMaxLabelValue));
  return name + "-" + std::string(job_uid);
}

std::optional<std::string> GangSchedulerName(const api::TrainingJob& job,
                                             std::string_view operator_scheduler) {
  const auto& sp = job.spec.run_policy.scheduling_policy;
  const bool job_names_one = sp && sp->scheduler_name && !sp->scheduler_name->empty();
  if (job_names_one && (sp->min_available || !operator_scheduler.empty())) {
    return *sp->scheduler_name;
  }
  if (!operator_scheduler.empty()) return std::string(operator_scheduler);
  return std::nullopt;
}

StatusOr<ResourceList> PodRequests(const json& pod_template) {
  return PodRequestsAt(pod_template, "template");
}

StatusOr<GangSpec> PlanGang(const api::TrainingJob& job, std::string scheduler_name) {
  GangSpec gang;
  gang.scheduler_name = std::move(scheduler_name);
  gang.group_name = PodGroupName(job.metadata.name, job.metadata.uid);
  int32_t total = 0;
  for (const auto& [type, spec] : job.spec.replica_specs) total += spec.replicas;
  const auto& sp = job.spec.run_policy.scheduling_policy;
  gang.min_member = sp && sp->min_available ? *sp->min_available : total;
  if (gang.min_member > total) {
    return InvalidArgument("spec.runPolicy.schedulingPolicy.minAvailable: " +
                           std::to_string(gang.min_member) + " is more than the job's " +
                           std::to_string(total) + " replicas: the gang could never be scheduled");
  }
  if (sp) gang.schedule_timeout_seconds = sp->schedule_timeout_seconds;
  int32_t remaining = gang.min_member;
  for (const api::RoleInfo& role : api::kRoles) {
    auto it = job.spec.replica_specs.find(role.type);
    if (it == job.spec.replica_specs.end() || remaining == 0) continue;
    const int32_t n = std::min(remaining, it->second.replicas);
    remaining -= n;
    KT_ASSIGN_OR_RETURN(ResourceList pod,
                        PodRequestsAt(it->second.pod_template,
                                      "spec.replicaSpecs." + std::string(role.key) + ".template"));
    for (auto& [name, q] : pod) {
      KT_ASSIGN_OR_RETURN(Quantity scaled, ScaleQuantity(q, n));
      KT_ASSIGN_OR_RETURN(gang.min_resources[name], AddQuantity(gang.min_resources[name], scaled));
    }
  }
  return gang;
}

}  // namespace kubetrain::planner
