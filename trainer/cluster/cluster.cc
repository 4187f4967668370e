#include "trainer/cluster/cluster.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "common/workload_contract.h"

namespace kubetrain::trainer {
namespace {

using contract::kRoleChief;
using contract::kRoleEvaluator;
using contract::kRolePs;
using contract::kRoleWorker;
using nlohmann::json;

bool IsKnownRole(std::string_view role) {
  return role == kRoleChief || role == kRolePs || role == kRoleWorker || role == kRoleEvaluator;
}

StatusOr<int> ParseIndex(std::string_view s) {
  int value = 0;
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return InvalidArgument("");
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size() || value < 0) return InvalidArgument("");
  return value;
}

// Parses the role -> addresses map shared by CLUSTER_CONFIG and TF_CONFIG["cluster"].
StatusOr<std::map<std::string, std::vector<std::string>>> ParseRoles(const json& j,
                                                                     std::string_view what) {
  std::map<std::string, std::vector<std::string>> roles;
  if (!j.is_object()) return InvalidArgument(std::string(what) + " must be a JSON object");
  for (const auto& [role, addrs] : j.items()) {
    if (role != kRoleChief && role != kRolePs && role != kRoleWorker) {
      return InvalidArgument(std::string(what) + ": unknown role \"" + role +
                             "\" (expected chief, ps or worker)");
    }
    if (!addrs.is_array()) {
      return InvalidArgument(std::string(what) + ": role \"" + role +
                             "\" must be a list of \"host:port\" strings");
    }
    std::vector<std::string>& out = roles[role];
    for (size_t i = 0; i < addrs.size(); ++i) {
      const std::string where = std::string(what) + ": " + role + "[" + std::to_string(i) + "]";
      if (!addrs[i].is_string()) return InvalidArgument(where + " is not a string");
      std::string addr = addrs[i].get<std::string>();
      auto hp = SplitHostPort(addr);
      if (!hp.ok()) return hp.status().WithContext(where);
      out.push_back(std::move(addr));
    }
  }
  if (auto chief = roles.find(std::string(kRoleChief));
      chief != roles.end() && chief->second.size() > 1) {
    return InvalidArgument(std::string(what) + ": at most one chief is allowed, got " +
                           std::to_string(chief->second.size()));
  }
  return roles;
}

Status CheckMember(const ClusterInfo& info, std::string_view source) {
  if (info.role == kRoleEvaluator) return Status::Ok();  // evaluators are not cluster members
  auto it = info.roles.find(info.role);
  const size_t n = it == info.roles.end() ? 0 : it->second.size();
  if (static_cast<size_t>(info.index) >= n) {
    return InvalidArgument(std::string(source) + ": task " + info.TaskName() +
                           " is not in the cluster (role \"" + info.role + "\" has " +
                           std::to_string(n) + " member(s))");
  }
  return Status::Ok();
}

StatusOr<json> ParseJson(std::string_view text, std::string_view what) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return InvalidArgument(std::string(what) + " is not valid JSON: " + e.what());
  }
}

}  // namespace

const std::vector<std::string>& ClusterInfo::Members(std::string_view r) const {
  static const std::vector<std::string> kEmpty;
  auto it = roles.find(std::string(r));
  return it == roles.end() ? kEmpty : it->second;
}

int ClusterInfo::NumTrainers() const {
  return static_cast<int>(Members(kRoleChief).size() + Members(kRoleWorker).size());
}

int ClusterInfo::TrainerRank() const {
  if (role == kRoleChief) return index;
  if (role == kRoleWorker) return index + static_cast<int>(Members(kRoleChief).size());
  return -1;
}

StatusOr<HostPort> SplitHostPort(std::string_view address) {
  HostPort hp;
  std::string_view port_str;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return InvalidArgument("address \"" + std::string(address) + "\" is not \"[ipv6]:port\"");
    }
    hp.host = std::string(address.substr(1, close - 1));
    port_str = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos || colon == 0 || address.find(':') != colon) {
      return InvalidArgument("address \"" + std::string(address) + "\" is not \"host:port\"");
    }
    hp.host = std::string(address.substr(0, colon));
    port_str = address.substr(colon + 1);
  }
  auto [ptr, ec] = std::from_chars(port_str.data(), port_str.data() + port_str.size(), hp.port);
  if (port_str.empty() || ec != std::errc() || ptr != port_str.data() + port_str.size() ||
      hp.port < 1 || hp.port > 65535) {
    return InvalidArgument("address \"" + std::string(address) +
                           "\" has an invalid port (expected 1-65535)");
  }
  if (hp.host.empty())
    return InvalidArgument("address \"" + std::string(address) + "\" has no host");
  return hp;
}

StatusOr<ClusterInfo> ParseClusterConfig(std::string_view cluster_json, std::string_view pod_name) {
  KT_ASSIGN_OR_RETURN(json j, ParseJson(cluster_json, "CLUSTER_CONFIG"));
  ClusterInfo info;
  KT_ASSIGN_OR_RETURN(info.roles, ParseRoles(j, "CLUSTER_CONFIG"));
  const size_t dash = pod_name.rfind('-');
  if (dash == std::string_view::npos) {
    return InvalidArgument("POD_NAME \"" + std::string(pod_name) +
                           "\" is not \"<role>-<index>\" (e.g. worker-0)");
  }
  info.role = std::string(pod_name.substr(0, dash));
  auto index = ParseIndex(pod_name.substr(dash + 1));
  if (!index.ok()) {
    return InvalidArgument("POD_NAME \"" + std::string(pod_name) +
                           "\": index is not a non-negative integer");
  }
  info.index = *index;
  if (!IsKnownRole(info.role)) {
    return InvalidArgument("POD_NAME \"" + std::string(pod_name) + "\": unknown role \"" +
                           info.role + "\" (expected chief, ps, worker or evaluator)");
  }
  KT_RETURN_IF_ERROR(CheckMember(info, "POD_NAME"));
  return info;
}

StatusOr<ClusterInfo> ParseTfConfig(std::string_view tf_config_json) {
  KT_ASSIGN_OR_RETURN(json j, ParseJson(tf_config_json, "TF_CONFIG"));
  if (!j.is_object() || !j.contains("cluster") || !j.contains("task")) {
    return InvalidArgument("TF_CONFIG must be an object with \"cluster\" and \"task\"");
  }
  ClusterInfo info;
  KT_ASSIGN_OR_RETURN(info.roles, ParseRoles(j["cluster"], "TF_CONFIG.cluster"));
  const json& task = j["task"];
  if (!task.is_object() || !task.contains("type") || !task["type"].is_string() ||
      !task.contains("index") || !task["index"].is_number_integer() ||
      task["index"].get<int64_t>() < 0) {
    return InvalidArgument(
        "TF_CONFIG.task must be {\"type\": <role string>, \"index\": <non-negative integer>}");
  }
  info.role = task["type"].get<std::string>();
  // TensorFlow spells the coordinator "master" in old configs; treat it as the chief.
  if (info.role == "master") info.role = kRoleChief;
  info.index = static_cast<int>(task["index"].get<int64_t>());
  if (!IsKnownRole(info.role)) {
    return InvalidArgument("TF_CONFIG.task.type: unknown role \"" + info.role +
                           "\" (expected chief, ps, worker or evaluator)");
  }
  KT_RETURN_IF_ERROR(CheckMember(info, "TF_CONFIG.task"));
  return info;
}

StatusOr<ClusterInfo> ClusterFromEnv(const std::function<const char*(const char*)>& getenv_fn) {
  const char* cluster = getenv_fn(contract::kEnvClusterConfig.data());
  if (cluster != nullptr && *cluster != '\0') {
    const char* pod = getenv_fn(contract::kEnvPodName.data());
    if (pod == nullptr || *pod == '\0') {
      return InvalidArgument("CLUSTER_CONFIG is set but POD_NAME is not");
    }
    return ParseClusterConfig(cluster, pod);
  }
  const char* tf = getenv_fn(contract::kEnvTfConfig.data());
  if (tf != nullptr && *tf != '\0') return ParseTfConfig(tf);
  return NotFound("neither CLUSTER_CONFIG nor TF_CONFIG is set");
}

}  // namespace kubetrain::trainer
