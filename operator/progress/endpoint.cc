#include "operator/progress/endpoint.h"

#include "common/workload_contract.h"
#include "operator/api/json.h"

namespace kubetrain::progress {

using nlohmann::json;

namespace {

using api::Member;
const json kNoObject = json::object();
const json kNoArray = json::array();
const json kNull;
}  // namespace

std::optional<std::string> PodMetricsUrl(const json& pod) {
  if (!pod.is_object()) return std::nullopt;
  const json& status = Member(pod, "status", kNoObject);
  if (!status.is_object()) return std::nullopt;
  const json& ip_value = Member(status, "podIP", kNull);
  if (!ip_value.is_string() || ip_value.get<std::string>().empty()) return std::nullopt;
  std::string ip = ip_value.get<std::string>();
  const json& spec = Member(pod, "spec", kNoObject);
  if (!spec.is_object()) return std::nullopt;
  const json& containers = Member(spec, "containers", kNoArray);
  if (!containers.is_array() || containers.empty()) return std::nullopt;
  const json* main = &containers[0];
  for (const json& c : containers) {
    if (c.is_object() && c.value("name", json()) == "trainer") main = &c;
  }
  if (!main->is_object()) return std::nullopt;
  const json& ports = Member(*main, "ports", kNoArray);
  if (!ports.is_array()) return std::nullopt;
  for (const json& p : ports) {
    if (!p.is_object() || p.value("name", json()) != contract::kMetricsPortName) continue;
    const json& number = Member(p, "containerPort", kNull);
    if (!number.is_number_integer()) return std::nullopt;
    const int64_t port = number.get<int64_t>();
    if (port < 1 || port > 65535) return std::nullopt;
    if (ip.find(':') != std::string::npos) ip = "[" + ip + "]";
    return "http://" + ip + ":" + std::to_string(port) + "/metrics";
  }
  return std::nullopt;
}

}  // namespace kubetrain::progress
