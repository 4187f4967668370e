#include "operator/planner/env_contract.h"

#include <algorithm>
#include <charconv>

#include "common/workload_contract.h"
#include "operator/api/json.h"
#include "operator/api/validation.h"

namespace kubetrain::planner {

using api::ReplicaType;
using nlohmann::json;

namespace {

json ClusterJson(const ClusterSpec& cluster) {
  json out = json::object();  // std::map underneath: keys come out sorted
  for (const auto& [type, hosts] : cluster) out[std::string(api::Role(type).lower)] = hosts;
  return out;
}

}  // namespace

std::optional<std::pair<ReplicaType, int32_t>> ReplicaFromLabels(
    const std::map<std::string, std::string>& labels) {
  auto type_it = labels.find(std::string(kReplicaTypeLabel));
  auto index_it = labels.find(std::string(kReplicaIndexLabel));
  if (type_it == labels.end() || index_it == labels.end()) return std::nullopt;
  std::optional<ReplicaType> type = api::ReplicaTypeFromLower(type_it->second);
  const std::string& text = index_it->second;
  int32_t index = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
  if (!type || ec != std::errc() || end != text.data() + text.size() || index < 0) {
    return std::nullopt;
  }
  return std::make_pair(*type, index);
}

size_t MainContainerIndex(const json& containers) {
  for (size_t i = 0; i < containers.size(); ++i) {
    if (containers[i].is_object() && api::StringField(containers[i], "name") == kMainContainerName)
      return i;
  }
  return 0;
}

std::string TemplateContractEnv(const json& tmpl) {
  std::string names;
  const json spec = tmpl.value("spec", json::object());
  const json containers = spec.is_object() ? spec.value("containers", json::array()) : json();
  if (!containers.is_array() || containers.empty()) return names;
  const json& main = containers[MainContainerIndex(containers)];
  const json env = main.is_object() ? main.value("env", json::array()) : json();
  if (!env.is_array()) return names;
  for (const json& e : env) {
    const std::string name = e.is_object() ? api::StringField(e, "name") : "";
    if (std::find(contract::kContractEnv.begin(), contract::kContractEnv.end(), name) ==
        contract::kContractEnv.end())
      continue;
    names += (names.empty() ? "" : ", ") + name;
  }
  return names;
}

std::string PodNameEnv(ReplicaType role, int32_t index) {
  return std::string(api::Role(role).lower) + "-" + std::to_string(index);
}

namespace {
// "<base>-<uid>", or `base` without a UID (kubetrain render of a file): the
// children a job re-created under its name must never take for its own.
std::string NamedByUid(std::string base, std::string_view job_uid) {
  if (!job_uid.empty()) base.append("-").append(job_uid);
  return base;
}
}  // namespace

std::string NetworkPolicyName(std::string_view job_name, std::string_view job_uid) {
  return NamedByUid(std::string(job_name) + "-training", job_uid);
}

std::string AuthSecretName(std::string_view job_name, std::string_view job_uid) {
  return NamedByUid(LegacyAuthSecretName(job_name), job_uid);
}

std::string LegacyAuthSecretName(std::string_view job_name) {
  return std::string(job_name) + "-auth";
}

std::string AuthKeyText(const std::array<uint8_t, 32>& key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : key) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

std::string JobServiceName(std::string_view job_name) {
  return std::string(job_name);
}

ClusterSpec BuildClusterSpec(const api::TrainingJob& job, std::string_view default_domain,
                             api::ServiceMode mode) {
  const std::string ns = job.metadata.namespace_.empty() ? "default" : job.metadata.namespace_;
  const std::string domain = job.spec.cluster_domain.value_or(std::string(default_domain));
  std::string subdomain;  // ".<job>" under the job-wide Service
  if (mode == api::ServiceMode::kJobWide) {
    subdomain.push_back('.');
    subdomain.append(JobServiceName(job.metadata.name));
  }
  ClusterSpec cluster;
  for (const auto& [type, spec] : job.spec.replica_specs) {
    if (!api::Role(type).in_cluster || spec.replicas <= 0) continue;
    std::vector<std::string>& hosts = cluster[type];
    for (int32_t i = 0; i < spec.replicas; ++i) {
      hosts.push_back(api::ChildName(job.metadata.name, type, i) + subdomain + "." + ns + ".svc." +
                      domain + ":" + std::to_string(job.spec.port));
    }
  }
  return cluster;
}

std::string ClusterConfigJson(const ClusterSpec& cluster) {
  return ClusterJson(cluster).dump();
}

std::string TfConfigJson(const ClusterSpec& cluster, ReplicaType role, int32_t index) {
  json tf = {{"cluster", ClusterJson(cluster)},
             {"task", {{"type", api::Role(role).lower}, {"index", index}}},
             {"environment", "cloud"}};
  return tf.dump();
}

std::string TfConfigTemplate(ReplicaType role, int32_t index) {
  // The keys in nlohmann::json's (sorted) order, as TfConfigJson dumps them.
  return R"({"cluster":$(CLUSTER_CONFIG),"environment":"cloud","task":{"index":)" +
         std::to_string(index) + R"(,"type":")" + std::string(api::Role(role).lower) + R"("}})";
}

std::string ClusterConfigMapName(std::string_view job_name) {
  return std::string(job_name) + "-cluster";
}

namespace {

// The valueFrom object of variable `name` in the pod's main container; null
// when it has none. By reference throughout: the pod informer calls this for
// every pod it caches.
const json* MainEnvSource(const json& pod, std::string_view name) {
  if (!pod.is_object()) return nullptr;
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return nullptr;
  auto containers = spec->find("containers");
  if (containers == spec->end() || !containers->is_array() || containers->empty()) return nullptr;
  const json& main = (*containers)[MainContainerIndex(*containers)];
  if (!main.is_object()) return nullptr;
  auto env = main.find("env");
  if (env == main.end() || !env->is_array()) return nullptr;
  for (const json& e : *env) {
    if (!e.is_object() || api::StringField(e, "name") != name) continue;
    auto from = e.find("valueFrom");
    return from != e.end() && from->is_object() ? &*from : nullptr;
  }
  return nullptr;
}

}  // namespace

bool ClusterConfigInSecret(const json& pod) {
  const json* from = MainEnvSource(pod, contract::kEnvClusterConfig);
  return from != nullptr && from->contains("secretKeyRef");
}

bool LegacyAuthSecret(const json& pod) {
  const json* from = MainEnvSource(pod, contract::kEnvAuthKey);
  if (from == nullptr) return false;
  auto ref = from->find("secretKeyRef");
  if (ref == from->end() || !ref->is_object()) return false;
  const std::string name = api::StringField(*ref, "name");
  return name.size() > 5 && name.ends_with("-auth");
}

}  // namespace kubetrain::planner
