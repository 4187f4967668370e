// Decoding a Pod as the apiserver serves it into what the planner reads: the
// Kubernetes executor's side of ObservedPod (the local runner observes its own
// processes instead).
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "common/status.h"
#include "operator/planner/planner.h"

namespace kubetrain::controller {

PodPhase PodPhaseFromString(std::string_view phase);  // anything unexpected: kUnknown

// Turns a Pod as served by the apiserver into an ObservedPod: the main container
// (named "trainer", else the first) decides exit code, reason and message.
// InvalidArgument for a pod without valid replica labels or with a malformed
// timestamp; never throws.
StatusOr<ObservedPod> ObservePod(const nlohmann::json& pod);

}  // namespace kubetrain::controller
