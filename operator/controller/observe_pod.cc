#include "operator/controller/observe_pod.h"

#include <array>

#include "common/utf8.h"
#include "operator/api/json.h"
#include "operator/planner/env_contract.h"
#include "operator/planner/gang.h"
#include "operator/progress/endpoint.h"

namespace kubetrain::controller {

using planner::ClusterConfigInSecret;
using planner::kPodGroupLabel;
using planner::kReplicaIndexLabel;
using planner::kReplicaTypeLabel;
using planner::kSpecHashAnnotation;
using planner::LegacyAuthSecret;
using planner::MainContainerIndex;
using planner::ObservedPod;
using planner::PodPhase;
using planner::ReplicaFromLabels;

using nlohmann::json;

PodPhase PodPhaseFromString(std::string_view phase) {
  if (phase == "Pending") return PodPhase::kPending;
  if (phase == "Running") return PodPhase::kRunning;
  if (phase == "Succeeded") return PodPhase::kSucceeded;
  if (phase == "Failed") return PodPhase::kFailed;
  return PodPhase::kUnknown;
}

namespace {

using api::Member;
// The pod labels ObservedPod keeps: the replica's (ReplicaFromLabels) and its
// gang's (the planner's PodGroup check).
constexpr std::array<std::string_view, 3> kReadPodLabels = {kReplicaTypeLabel, kReplicaIndexLabel,
                                                            kPodGroupLabel};
// The kubelet caps a termination message at 4096 bytes; a reason is one word.
constexpr size_t kMaxMessageBytes = 4096;
constexpr size_t kMaxReasonBytes = 256;
const json kNoObject = json::object();
const json kNoArray = json::array();

// Waiting reasons of a container the kubelet cannot start and keeps retrying
// without the pod ever failing: the job would wait forever without a word.
bool IsStartFailure(std::string_view reason) {
  return reason == "ErrImagePull" || reason == "ImagePullBackOff" || reason == "InvalidImageName" ||
         reason == "ErrImageNeverPull" || reason == "CreateContainerConfigError" ||
         reason == "CreateContainerError";
}

// "<reason>: <message>" of the first init or main container stuck so.
std::string CannotStart(const json& status) {
  for (const char* field : {"initContainerStatuses", "containerStatuses"}) {
    const json& statuses = Member(status, field, kNoArray);
    if (!statuses.is_array()) continue;
    for (const json& cs : statuses) {
      if (!cs.is_object()) continue;
      const json& state = Member(cs, "state", kNoObject);
      if (!state.is_object() || !state.contains("waiting") || !state["waiting"].is_object())
        continue;
      const std::string reason = api::StringField(state["waiting"], "reason");
      if (!IsStartFailure(reason)) continue;
      // Cut: the cache keeps it for every stuck pod.
      return CleanText(reason + ": " + api::StringField(state["waiting"], "message"), 1024);
    }
  }
  return "";
}

StatusOr<std::optional<api::Time>> OptTime(const json& j, std::string_view key) {
  std::string text = api::StringField(j, key);
  if (text.empty()) return std::optional<api::Time>();
  KT_ASSIGN_OR_RETURN(api::Time t, api::ParseTime(text));
  return std::optional<api::Time>(t);
}

StatusOr<ObservedPod> ObservePodUnsafe(const json& pod) {
  if (!pod.is_object()) return InvalidArgument("pod must be an object");
  const json& meta = Member(pod, "metadata", kNoObject);
  const json& spec = Member(pod, "spec", kNoObject);
  const json& status = Member(pod, "status", kNoObject);
  ObservedPod out;
  out.name = api::StringField(meta, "name");
  out.uid = api::StringField(meta, "uid");
  // Only the labels the planner reads (a TFJob's pods carry v1's four more,
  // every pod the job name): kept for every cached pod, they add up.
  if (meta.contains("labels") && meta["labels"].is_object()) {
    for (std::string_view k : kReadPodLabels) {
      auto v = meta["labels"].find(k);
      if (v != meta["labels"].end() && v->is_string())
        out.labels[std::string(k)] = v->get<std::string>();
    }
  }
  if (meta.contains("annotations") && meta["annotations"].is_object()) {
    out.spec_hash = api::StringField(meta["annotations"], kSpecHashAnnotation);
  }
  auto replica = ReplicaFromLabels(out.labels);
  if (!replica)
    return InvalidArgument("pod " + out.name + " has no valid kubetrain.io replica labels");
  out.role = replica->first;
  out.index = replica->second;
  out.phase = PodPhaseFromString(api::StringField(status, "phase"));
  KT_ASSIGN_OR_RETURN(out.deletion_timestamp, OptTime(meta, "deletionTimestamp"));
  if (auto g = meta.find("deletionGracePeriodSeconds");
      g != meta.end() && g->is_number_integer() && g->get<int64_t>() >= 0) {
    out.deletion_grace_seconds = std::min<int64_t>(g->get<int64_t>(), 366LL * 24 * 3600);
  }
  KT_ASSIGN_OR_RETURN(out.creation_timestamp, OptTime(meta, "creationTimestamp"));

  out.cluster_config_in_secret = ClusterConfigInSecret(pod);
  out.legacy_auth_secret = LegacyAuthSecret(pod);
  std::string main_name;
  const json& containers = Member(spec, "containers", kNoArray);
  if (containers.is_array() && !containers.empty()) {
    main_name = api::StringField(containers[MainContainerIndex(containers)], "name");
  }
  const json& statuses = Member(status, "containerStatuses", kNoArray);
  if (statuses.is_array()) {
    for (const json& cs : statuses) {
      if (!cs.is_object() || api::StringField(cs, "name") != main_name) continue;
      const json& state = Member(cs, "state", kNoObject);
      if (state.contains("running") && state["running"].is_object()) {
        KT_ASSIGN_OR_RETURN(out.running_since, OptTime(state["running"], "startedAt"));
      }
      if (state.contains("terminated") && state["terminated"].is_object()) {
        const json& t = state["terminated"];
        if (t.contains("exitCode") && t["exitCode"].is_number_integer()) {
          out.exit_code = t["exitCode"].get<int32_t>();
        }
        // The workload writes both: no terminal escapes into events, describe or the CLI.
        out.reason = CleanText(api::StringField(t, "reason"), kMaxReasonBytes);
        out.message = CleanText(api::StringField(t, "message"), kMaxMessageBytes);
      }
    }
  }
  if (out.phase == PodPhase::kPending) out.cannot_start = CannotStart(status);
  const json& conditions = Member(status, "conditions", kNoArray);
  if (conditions.is_array()) {
    for (const json& c : conditions) {
      if (c.is_object() && api::StringField(c, "type") == "PodScheduled" &&
          api::StringField(c, "status") == "False" &&
          api::StringField(c, "reason") == "Unschedulable") {
        // Cut: the cache keeps it for every pending pod.
        out.unschedulable = CleanText(api::StringField(c, "message"), 1024);
        if (out.unschedulable.empty()) out.unschedulable = "Unschedulable";
      }
      if (c.is_object() && api::StringField(c, "type") == "DisruptionTarget" &&
          api::StringField(c, "status") == "True") {
        out.disruption = CleanText(api::StringField(c, "reason"), kMaxReasonBytes);
        if (out.disruption.empty()) out.disruption = "DisruptionTarget";
      }
    }
  }
  if (out.disruption.empty() && out.phase == PodPhase::kFailed &&
      api::StringField(status, "reason") == "Evicted") {
    out.disruption = "Evicted";  // the kubelet's node-pressure eviction
  }
  if (out.reason.empty())
    out.reason = CleanText(api::StringField(status, "reason"), kMaxReasonBytes);
  if (out.message.empty()) {
    out.message = CleanText(api::StringField(status, "message"), kMaxMessageBytes);
  }
  return out;
}

}  // namespace

StatusOr<ObservedPod> ObservePod(const json& pod) {
  try {
    return ObservePodUnsafe(pod);
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("malformed pod: ") + e.what());
  }
}

bool SameForTheController(const CachedPod& a, const CachedPod& b) {
  // node_name is kept for messages only: the scheduler's binding needs no reconcile.
  if (!(a.pod == b.pod) || a.metrics_url != b.metrics_url) return false;
  if (a.meta.resource_version == b.meta.resource_version) return a.meta == b.meta;
  runtime::ObjectMeta same_version = b.meta;
  same_version.resource_version = a.meta.resource_version;
  return a.meta == same_version;
}

StatusOr<CachedPod> ToCachedPod(const json& obj) {
  KT_ASSIGN_OR_RETURN(runtime::ObjectMeta meta, runtime::ParseObjectMeta(obj));
  meta.labels = {};  // the pod store indexes by owner; the planner's labels are in `pod`
  KT_ASSIGN_OR_RETURN(ObservedPod pod, ObservePod(obj));
  std::string node;
  if (const json& spec = api::Member(obj, "spec", kNoObject); spec.is_object()) {
    node = CleanText(api::StringField(spec, "nodeName"), 253);
  }
  return CachedPod{std::move(meta), std::move(pod),
                   progress::PodMetricsUrl(obj).value_or(std::string()), std::move(node)};
}

const std::shared_ptr<const kube::FieldFilter>& CachedPodFields() {
  using F = kube::KeptField;
  static const auto* const fields = new std::shared_ptr<const kube::FieldFilter>(
      std::make_shared<const kube::FieldFilter>(kube::FieldFilter{
          F{"metadata",
            {F{"name", {}}, F{"namespace", {}}, F{"uid", {}}, F{"resourceVersion", {}},
             F{"generation", {}}, F{"creationTimestamp", {}}, F{"deletionTimestamp", {}},
             F{"deletionGracePeriodSeconds", {}}, F{"ownerReferences", {}},
             F{"labels",
               {F{std::string(kReplicaTypeLabel), {}}, F{std::string(kReplicaIndexLabel), {}},
                F{std::string(kPodGroupLabel), {}}}},
             F{"annotations", {F{std::string(kSpecHashAnnotation), {}}}}}},
          F{"spec",
            {F{"nodeName", {}},
             F{"containers",
               {F{"name", {}}, F{"env", {F{"name", {}}, F{"valueFrom", {}}}}, F{"ports", {}}}}}},
          F{"status", {}},
      }));
  return *fields;
}

}  // namespace kubetrain::controller
