// Who besides a job's own pods may open connections to them, through the job's
// NetworkPolicy (ChildBuilder::NetworkPolicy): the operator, which reads the
// trainers' metrics port for status.progress, and, when the operator is told
// so, monitoring namespaces scraping that port. Pure data and its flag syntax.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kubetrain::planner {

using LabelMap = std::map<std::string, std::string>;

struct MetricsIngress {
  // The operator's pods: in this namespace (matched by its
  // kubernetes.io/metadata.name label), carrying these labels. The defaults
  // are deploy/kustomize's; Helm passes its own.
  std::string operator_namespace = "kubetrain-system";
  LabelMap operator_pod_labels = {{"app.kubernetes.io/name", "kubetrain-operator"}};
  // Every pod of the namespaces each selector matches (a monitoring stack);
  // none by default.
  std::vector<LabelMap> namespace_selectors;

  friend bool operator==(const MetricsIngress&, const MetricsIngress&) = default;
};

// "key=value,key=value" (the flags' syntax) as a label map. InvalidArgument
// naming the offending item for an empty text, an item without '=', or a key
// or value Kubernetes would refuse in a label selector.
StatusOr<LabelMap> ParseLabels(std::string_view text);

// The operator's flags as a MetricsIngress: `operator_namespace` (empty: the
// default's), `operator_pod_labels` and each of `namespace_selectors` in
// ParseLabels' syntax. InvalidArgument naming the flag for a bad one.
StatusOr<MetricsIngress> MetricsIngressFromFlags(
    std::string_view operator_namespace, std::string_view operator_pod_labels,
    const std::vector<std::string>& namespace_selectors);

}  // namespace kubetrain::planner
