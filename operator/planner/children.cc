#include "operator/planner/children.h"

#include <algorithm>

#include "common/workload_contract.h"
#include "operator/api/json.h"
#include "operator/api/validation.h"

namespace kubetrain::planner {

using api::ReplicaType;
using nlohmann::json;

namespace {

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64(std::string_view in) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kBase64[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// The container fields the operator and the local runner read, typed as the
// Pod API wants them. The CRD passes templates through unchecked, and a YAML
// slip such as `args: [--layers=32,16]` (two items, the second a number) would
// otherwise surface only as a rejected pod create.
Status CheckContainer(const json& c, const std::string& path) {
  if (!c.is_object()) return InvalidArgument(path + ": must be an object");
  if (!c.contains("name") || !c["name"].is_string() || c["name"].get<std::string>().empty()) {
    return InvalidArgument(path + ".name: required (a non-empty string)");
  }
  for (const char* key : {"command", "args"}) {
    if (!c.contains(key)) continue;
    const json& list = c[key];
    if (!list.is_array()) return InvalidArgument(path + "." + key + ": must be a list of strings");
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string()) {
        return InvalidArgument(path + "." + key + "[" + std::to_string(i) +
                               "]: must be a string, got " + list[i].dump() +
                               " (quote it in YAML)");
      }
    }
  }
  if (c.contains("env")) {
    if (!c["env"].is_array()) return InvalidArgument(path + ".env: must be an array");
    for (size_t i = 0; i < c["env"].size(); ++i) {
      const json& e = c["env"][i];
      const std::string epath = path + ".env[" + std::to_string(i) + "]";
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) {
        return InvalidArgument(epath + ": must be an object with a string name");
      }
      if (e.contains("value") && !e["value"].is_string()) {
        return InvalidArgument(epath + ".value: must be a string, got " + e["value"].dump() +
                               " (quote it in YAML)");
      }
    }
  }
  return Status::Ok();
}

// The headless Service of a replica (per-replica mode) or of the whole job: peers find
// each other by DNS while starting up, before any is ready.
json HeadlessService(json metadata, json selector, int32_t port) {
  json spec = {
      {"clusterIP", "None"},
      {"selector", std::move(selector)},
      {"publishNotReadyAddresses", true},
      {"ports",
       json::array(
           {{{"name", kPortName}, {"port", port}, {"targetPort", port}, {"protocol", "TCP"}}})}};
  return json{{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata", std::move(metadata)},
              {"spec", std::move(spec)}};
}

}  // namespace

std::string SpecHash(const api::ReplicaSpec& spec, std::string_view cluster_config) {
  const std::string input = spec.pod_template.dump() + "\n" + std::string(cluster_config);
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : input) {
    h ^= c;
    h *= 1099511628211ull;
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[i] = kDigits[h & 15];
  return out;
}

json ChildBuilder::OwnerReferences() const {
  // A job that never went through an apiserver (render, local run) has no UID;
  // an ownerReference without one would be rejected.
  if (job_.metadata.uid.empty()) return json::array();
  return json::array({{{"apiVersion", api::kApiVersion},
                       {"kind", api::kKind},
                       {"name", job_.metadata.name},
                       {"uid", job_.metadata.uid},
                       {"controller", true},
                       {"blockOwnerDeletion", true}}});
}

json ChildBuilder::Labels(ReplicaType type, int32_t index) const {
  return {{kJobNameLabel, job_.metadata.name},
          {kReplicaTypeLabel, api::Role(type).lower},
          {kReplicaIndexLabel, std::to_string(index)}};
}

json ChildBuilder::ChildMetadata(const std::string& name, const json& labels) const {
  json meta = {{"name", name}, {"labels", labels}};
  if (!job_.metadata.namespace_.empty()) meta["namespace"] = job_.metadata.namespace_;
  json owners = OwnerReferences();
  if (!owners.empty()) meta["ownerReferences"] = std::move(owners);
  return meta;
}

Status CheckPodTemplate(ReplicaType type, const api::ReplicaSpec& replica) {
  const std::string path = "spec.replicaSpecs." + std::string(api::Role(type).key) + ".template";
  const json& tmpl = replica.pod_template;
  if (auto meta = tmpl.find("metadata"); meta != tmpl.end()) {
    if (!meta->is_object()) return InvalidArgument(path + ".metadata: must be an object");
    auto labels = meta->find("labels");
    if (labels != meta->end() && !labels->is_object()) {
      return InvalidArgument(path + ".metadata.labels: must be an object");
    }
    auto annotations = meta->find("annotations");
    if (annotations != meta->end() && !annotations->is_object()) {
      return InvalidArgument(path + ".metadata.annotations: must be an object");
    }
  }
  auto spec = tmpl.find("spec");
  if (spec == tmpl.end() || !spec->is_object()) {
    return InvalidArgument(path + ".spec: required (a pod spec with containers)");
  }
  auto containers = spec->find("containers");
  if (containers == spec->end() || !containers->is_array() || containers->empty()) {
    return InvalidArgument(path + ".spec.containers: at least one container is required");
  }
  for (size_t i = 0; i < containers->size(); ++i) {
    KT_RETURN_IF_ERROR(
        CheckContainer((*containers)[i], path + ".spec.containers[" + std::to_string(i) + "]"));
  }
  // CheckContainer vetted every container's env; the main container's ports.
  const size_t main_index = MainContainerIndex(*containers);
  const json& main = (*containers)[main_index];
  if (auto ports = main.find("ports"); ports != main.end() && !ports->is_array()) {
    return InvalidArgument(path + ".spec.containers[" + std::to_string(main_index) +
                           "].ports: must be an array");
  }
  return Status::Ok();
}

StatusOr<json> ChildBuilder::Pod(ReplicaType type, int32_t index, const api::ReplicaSpec& replica,
                                 std::string_view spec_hash) const {
  KT_RETURN_IF_ERROR(CheckPodTemplate(type, replica));
  const json& tmpl = replica.pod_template;
  json meta = tmpl.value("metadata", json::object());
  json labels = meta.value("labels", json::object());
  labels.update(Labels(type, index));  // ours win: the controller selects on them
  if (gang_ != nullptr) labels[std::string(kPodGroupLabel)] = gang_->group_name;
  json pod_meta = ChildMetadata(api::ChildName(job_.metadata.name, type, index), labels);
  json annotations = meta.value("annotations", json::object());
  annotations[std::string(kSpecHashAnnotation)] = spec_hash;
  pod_meta["annotations"] = std::move(annotations);

  json spec = tmpl["spec"];
  json& containers = spec["containers"];
  const size_t main_index = MainContainerIndex(containers);
  json& main = containers[main_index];

  // The env contract. Our variables replace any of the same name in the template,
  // so a stale copy pasted from another job cannot shadow them.
  json env = main.value("env", json::array());
  json kept = json::array();
  for (const json& e : env) {
    std::string name = e.is_object() ? api::StringField(e, "name") : "";
    if (std::find(contract::kContractEnv.begin(), contract::kContractEnv.end(), name) ==
        contract::kContractEnv.end()) {
      kept.push_back(e);
    }
  }
  // CLUSTER_CONFIG from the job's Secret (or ConfigMap) and TF_CONFIG expanded
  // from it: a pod's size does not grow with the job's.
  if (config_in_secret_) {
    json ref = {{"name", auth_secret_}, {"key", kClusterConfigKey}};
    kept.push_back(
        {{"name", contract::kEnvClusterConfig}, {"valueFrom", {{"secretKeyRef", std::move(ref)}}}});
  } else {
    json ref = {{"name", ClusterConfigMapName(job_.metadata.name)}, {"key", kClusterConfigKey}};
    kept.push_back({{"name", contract::kEnvClusterConfig},
                    {"valueFrom", {{"configMapKeyRef", std::move(ref)}}}});
  }
  kept.push_back({{"name", contract::kEnvPodName}, {"value", PodNameEnv(type, index)}});
  kept.push_back({{"name", contract::kEnvTfConfig}, {"value", TfConfigTemplate(type, index)}});
  json secret_ref = {{"name", auth_secret_}, {"key", kAuthSecretKey}};
  kept.push_back(
      {{"name", contract::kEnvAuthKey}, {"valueFrom", {{"secretKeyRef", std::move(secret_ref)}}}});
  main["env"] = std::move(kept);

  json ports = main.value("ports", json::array());
  bool has_port = false, name_taken = false, has_metrics = false;
  for (const json& p : ports) {
    if (!p.is_object()) continue;
    has_port = has_port || p.value("containerPort", json()) == json(job_.spec.port);
    name_taken = name_taken || api::StringField(p, "name") == kPortName;
    // A port named "metrics", or one already on the metrics port: the
    // template decides (status.progress reads the port named "metrics").
    has_metrics = has_metrics || api::StringField(p, "name") == contract::kMetricsPortName ||
                  p.value("containerPort", json()) == json(contract::kDefaultMetricsPort);
  }
  if (!has_port) {
    json port = {{"containerPort", job_.spec.port}, {"protocol", "TCP"}};
    if (!name_taken) port["name"] = kPortName;
    ports.push_back(std::move(port));
  }
  // Where the operator reads the trainer's metrics for status.progress (its own
  // named port, so a NetworkPolicy can admit it apart from the training port).
  if (!has_metrics && job_.spec.port != contract::kDefaultMetricsPort) {
    ports.push_back({{"name", contract::kMetricsPortName},
                     {"containerPort", contract::kDefaultMetricsPort},
                     {"protocol", "TCP"}});
  }
  main["ports"] = std::move(ports);

  if (mode_ == api::ServiceMode::kJobWide) {
    // DNS <pod>.<job>.<ns>.svc.<domain> through the job's headless Service.
    spec["hostname"] = api::ChildName(job_.metadata.name, type, index);
    spec["subdomain"] = JobServiceName(job_.metadata.name);
  }
  // The operator restarts pods itself (restart policies, backoff accounting);
  // the kubelet restarting containers in place would hide failures from it.
  spec["restartPolicy"] = "Never";
  if (const auto& sp = job_.spec.run_policy.scheduling_policy) {
    if (sp->scheduler_name) spec["schedulerName"] = *sp->scheduler_name;
    if (sp->priority_class_name) spec["priorityClassName"] = *sp->priority_class_name;
  }
  if (gang_ != nullptr) spec["schedulerName"] = gang_->scheduler_name;
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", std::move(pod_meta)},
              {"spec", std::move(spec)}};
}

json ChildBuilder::Service(ReplicaType type, int32_t index) const {
  json labels = Labels(type, index);
  return HeadlessService(ChildMetadata(api::ChildName(job_.metadata.name, type, index), labels),
                         labels, job_.spec.port);
}

json ChildBuilder::JobService() const {
  json labels = {{kJobNameLabel, job_.metadata.name}};
  return HeadlessService(ChildMetadata(JobServiceName(job_.metadata.name), labels), labels,
                         job_.spec.port);
}

json ChildBuilder::ConfigMap(std::string_view cluster_config) const {
  json labels = {{kJobNameLabel, job_.metadata.name}};
  return json{{"apiVersion", "v1"},
              {"kind", "ConfigMap"},
              {"metadata", ChildMetadata(ClusterConfigMapName(job_.metadata.name), labels)},
              {"data", {{kClusterConfigKey, cluster_config}}}};
}

json ChildBuilder::NetworkPolicy(const MetricsIngress& metrics) const {
  const json job_pods = {{"matchLabels", {{kJobNameLabel, job_.metadata.name}}}};
  const auto match = [](const LabelMap& labels) {
    json m = json::object();
    for (const auto& [k, v] : labels) m[k] = v;
    return json{{"matchLabels", std::move(m)}};
  };
  // The operator: its namespace (by the label the apiserver sets on every
  // namespace) and its pods' labels, in one peer (both must hold).
  json metrics_from = json::array(
      {{{"namespaceSelector", match({{"kubernetes.io/metadata.name", metrics.operator_namespace}})},
        {"podSelector", match(metrics.operator_pod_labels)}}});
  for (const LabelMap& ns : metrics.namespace_selectors) {
    metrics_from.push_back({{"namespaceSelector", match(ns)}});
  }
  const json training = {{"from", json::array({{{"podSelector", job_pods}}})},
                         {"ports", json::array({{{"protocol", "TCP"}, {"port", job_.spec.port}}})}};
  // A named port: whichever number the pod's "metrics" port has (the template
  // may set its own), as the progress reader finds it.
  const json metrics_rule = {
      {"from", std::move(metrics_from)},
      {"ports", json::array({{{"protocol", "TCP"}, {"port", contract::kMetricsPortName}}})}};
  json spec = {{"podSelector", job_pods},
               {"policyTypes", json::array({"Ingress"})},
               {"ingress", json::array({training, metrics_rule})}};
  json labels = {{kJobNameLabel, job_.metadata.name}};
  return json{
      {"apiVersion", "networking.k8s.io/v1"},
      {"kind", "NetworkPolicy"},
      {"metadata", ChildMetadata(NetworkPolicyName(job_.metadata.name, job_.metadata.uid), labels)},
      {"spec", std::move(spec)}};
}

json ChildBuilder::PodGroup() const {
  json spec = {{"minMember", gang_->min_member}};
  if (!gang_->min_resources.empty()) {
    json resources = json::object();
    for (const auto& [name, q] : gang_->min_resources) resources[name] = FormatQuantity(q);
    spec["minResources"] = std::move(resources);
  }
  if (gang_->schedule_timeout_seconds) {
    spec["scheduleTimeoutSeconds"] = *gang_->schedule_timeout_seconds;
  }
  json labels = {{kJobNameLabel, job_.metadata.name}};
  return json{{"apiVersion", kPodGroupApiVersion},
              {"kind", "PodGroup"},
              {"metadata", ChildMetadata(gang_->group_name, labels)},
              {"spec", std::move(spec)}};
}

json ChildBuilder::Secret(const std::array<uint8_t, 32>& key,
                          std::string_view cluster_config) const {
  json labels = {{kJobNameLabel, job_.metadata.name}};
  std::string hex = AuthKeyText(key);
  return json{{"apiVersion", "v1"},
              {"kind", "Secret"},
              {"metadata", ChildMetadata(auth_secret_, labels)},
              {"type", "Opaque"},
              {"data", {{kAuthSecretKey, Base64(hex)}}},
              {"stringData", {{kClusterConfigKey, cluster_config}}}};
}

}  // namespace kubetrain::planner
