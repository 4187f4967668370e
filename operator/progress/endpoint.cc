#include "operator/progress/endpoint.h"

#include "operator/progress/metric_names.h"

namespace kubetrain::progress {

using nlohmann::json;

std::optional<std::string> PodMetricsUrl(const json& pod) {
  if (!pod.is_object()) return std::nullopt;
  const json status = pod.value("status", json::object());
  if (!status.is_object()) return std::nullopt;
  const json ip_value = status.value("podIP", json());
  if (!ip_value.is_string() || ip_value.get<std::string>().empty()) return std::nullopt;
  std::string ip = ip_value.get<std::string>();
  const json spec = pod.value("spec", json::object());
  if (!spec.is_object()) return std::nullopt;
  const json containers = spec.value("containers", json::array());
  if (!containers.is_array() || containers.empty()) return std::nullopt;
  const json* main = &containers[0];
  for (const json& c : containers) {
    if (c.is_object() && c.value("name", json()) == "trainer") main = &c;
  }
  if (!main->is_object()) return std::nullopt;
  const json ports = main->value("ports", json::array());
  if (!ports.is_array()) return std::nullopt;
  for (const json& p : ports) {
    if (!p.is_object() || p.value("name", json()) != kMetricsPortName) continue;
    const json number = p.value("containerPort", json());
    if (!number.is_number_integer()) return std::nullopt;
    const int64_t port = number.get<int64_t>();
    if (port < 1 || port > 65535) return std::nullopt;
    if (ip.find(':') != std::string::npos) ip = "[" + ip + "]";
    return "http://" + ip + ":" + std::to_string(port) + "/metrics";
  }
  return std::nullopt;
}

}  // namespace kubetrain::progress
