#include "operator/planner/metrics_ingress.h"

namespace kubetrain::planner {

namespace {

bool Alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// A label name or value: at most 63 characters, alphanumeric at both ends,
// '-', '_' and '.' between. A value may be empty.
bool LabelText(std::string_view s, bool may_be_empty) {
  if (s.empty()) return may_be_empty;
  if (s.size() > 63 || !Alnum(s.front()) || !Alnum(s.back())) return false;
  for (char c : s) {
    if (!Alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

// A label key: an optional DNS-subdomain prefix and '/', then a name.
bool LabelKey(std::string_view key) {
  const size_t slash = key.rfind('/');
  if (slash == std::string_view::npos) return LabelText(key, false);
  const std::string_view prefix = key.substr(0, slash);
  if (prefix.empty() || prefix.size() > 253 || !Alnum(prefix.front()) || !Alnum(prefix.back())) {
    return false;
  }
  for (char c : prefix) {
    if (!Alnum(c) && c != '-' && c != '.') return false;
  }
  return LabelText(key.substr(slash + 1), false);
}

// "'<text>': <why>" (appended piecewise: GCC 12's -Wrestrict misfires on
// chained operator+ at -O3).
Status Bad(std::string_view text, std::string_view why) {
  std::string m = "'";
  m.append(text).append("': ").append(why);
  return InvalidArgument(m);
}

}  // namespace

StatusOr<LabelMap> ParseLabels(std::string_view text) {
  if (text.empty()) return InvalidArgument("empty label selector (want key=value[,key=value])");
  LabelMap out;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return Bad(item, "want key=value");
    }
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (!LabelKey(key)) return Bad(key, "not a label key");
    if (!LabelText(value, true)) return Bad(value, "not a label value");
    out[std::string(key)] = std::string(value);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

StatusOr<MetricsIngress> MetricsIngressFromFlags(
    std::string_view operator_namespace, std::string_view operator_pod_labels,
    const std::vector<std::string>& namespace_selectors) {
  MetricsIngress out;
  if (!operator_namespace.empty()) {
    if (!LabelText(operator_namespace, false)) {
      return InvalidArgument("--operator-namespace: " +
                             Bad(operator_namespace, "not a namespace name").message());
    }
    out.operator_namespace = std::string(operator_namespace);
  }
  StatusOr<LabelMap> pods = ParseLabels(operator_pod_labels);
  if (!pods.ok()) return InvalidArgument("--operator-pod-labels: " + pods.status().message());
  out.operator_pod_labels = std::move(*pods);
  for (const std::string& text : namespace_selectors) {
    StatusOr<LabelMap> ns = ParseLabels(text);
    if (!ns.ok()) return InvalidArgument("--network-policy-metrics-from: " + ns.status().message());
    out.namespace_selectors.push_back(std::move(*ns));
  }
  return out;
}

}  // namespace kubetrain::planner
