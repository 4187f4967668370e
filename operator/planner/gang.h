// Gang scheduling: a job's pods are scheduled all together or not at all, by a
// scheduler with the Coscheduling plugin (kubernetes-sigs/scheduler-plugins),
// through a PodGroup (scheduling.x-k8s.io/v1alpha1) the job owns. Pure: which
// jobs are gang-scheduled and what their PodGroup says; the child builders
// (children.h) turn a GangSpec into the PodGroup and the pods' label and
// schedulerName.
//
// The rule: a job is gang-scheduled when the operator names a gang scheduler
// (--gang-scheduler-name), or when the job itself names a scheduler
// (schedulingPolicy.schedulerName) and asks for a gang (minAvailable). Its
// pods go to schedulingPolicy.schedulerName, else the operator's scheduler.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "operator/api/types.h"
#include "operator/planner/quantity.h"

namespace kubetrain::planner {

// On every pod of a gang-scheduled job: the name of its PodGroup.
inline constexpr std::string_view kPodGroupLabel = "scheduling.x-k8s.io/pod-group";
inline constexpr std::string_view kPodGroupApiVersion = "scheduling.x-k8s.io/v1alpha1";

// The job's PodGroup: "<job>-<uid>", the job's name cut so that the whole
// fits the 63 characters of a label value (every pod carries it in
// kPodGroupLabel). Named by the job's UID like the auth Secret and the
// NetworkPolicy (env_contract.h): a job re-created under its name must not
// adopt the earlier job's group, which the garbage collector deletes soon
// after, leaving the new job's pods in a group that is gone. Without a UID
// (kubetrain render of a file): the job's name.
std::string PodGroupName(std::string_view job_name, std::string_view job_uid);

// What a gang-scheduled job's PodGroup and pods carry.
struct GangSpec {
  std::string scheduler_name;  // every pod's spec.schedulerName
  std::string group_name;      // the PodGroup's name: PodGroupName
  // The pods that must be placed together: schedulingPolicy.minAvailable,
  // default every replica.
  int32_t min_member = 0;
  // The summed requests of the first min_member replicas in role order (Chief,
  // PS, Worker, Evaluator), with which the scheduler checks up front that the
  // cluster could hold the gang at all.
  ResourceList min_resources;
  std::optional<int32_t> schedule_timeout_seconds;

  friend bool operator==(const GangSpec&, const GangSpec&) = default;
};

// The gang scheduler of `job`, or nullopt when it is not gang-scheduled (see
// the rule above). `operator_scheduler`: the operator's --gang-scheduler-name,
// empty when it has none.
std::optional<std::string> GangSchedulerName(const api::TrainingJob& job,
                                             std::string_view operator_scheduler);

// What the scheduler counts for one pod of `pod_template` (a PodTemplateSpec):
// per resource, the containers' requests (a limit stands in for a missing
// request) plus sidecars (init containers with restartPolicy Always), or the
// largest regular init container with the sidecars started before it, if
// larger; plus spec.overhead. InvalidArgument naming the field for a malformed
// quantity.
StatusOr<ResourceList> PodRequests(const nlohmann::json& pod_template);

// The job's GangSpec for `scheduler_name` (its group PodGroupName). InvalidArgument (the job fails
// with InvalidSpec) when minAvailable exceeds the job's replicas or a request is malformed.
StatusOr<GangSpec> PlanGang(const api::TrainingJob& job, std::string scheduler_name);

}  // namespace kubetrain::planner
