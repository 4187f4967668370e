// Decoding a Pod as the apiserver serves it into what the planner reads: the
// Kubernetes executor's side of ObservedPod (the local runner observes its own
// processes instead).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "operator/kube/client.h"
#include "operator/planner/planner.h"
#include "operator/runtime/object.h"

namespace kubetrain::controller {

planner::PodPhase PodPhaseFromString(std::string_view phase);  // anything unexpected: kUnknown

// Turns a Pod as served by the apiserver into an ObservedPod: the main container
// (named "trainer", else the first) decides exit code, reason and message.
// InvalidArgument for a pod without valid replica labels or with a malformed
// timestamp; never throws.
StatusOr<planner::ObservedPod> ObservePod(const nlohmann::json& pod);

// The pod informer's cache entry: metadata (for the owner index) plus what the
// planner reads, instead of the whole served object.
struct CachedPod {
  runtime::ObjectMeta meta;
  planner::ObservedPod pod;
  std::string metrics_url;  // where its metrics are read (status.progress); empty: nowhere
  std::string node_name;    // spec.nodeName; empty while unscheduled
};
[[nodiscard]] StatusOr<CachedPod> ToCachedPod(const nlohmann::json& pod);
// The fields of a served Pod that ToCachedPod reads (its metadata and status,
// its containers' names, env names and sources, and ports): the pod informer
// parses only these (kube::ListOptions::fields), not the rest of the spec.
const std::shared_ptr<const kube::FieldFilter>& CachedPodFields();

// Whether `a` and `b` differ in nothing the controller reads: in no field but
// metadata.resourceVersion and node_name (read only for a message). A pod update that changes only
// what the cache does not keep (the scheduler's binding, kwok's or the kubelet's condition
// timestamps) needs no reconcile of its job.
bool SameForTheController(const CachedPod& a, const CachedPod& b);

}  // namespace kubetrain::controller
