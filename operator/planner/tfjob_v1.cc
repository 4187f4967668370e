#include "operator/planner/tfjob_v1.h"

#include <algorithm>
#include <cctype>
#include <tuple>

namespace kubetrain::planner::tfjob_v1 {

using nlohmann::json;

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsChiefOrMaster(std::string_view type) {
  return type == "Chief" || type == "Master";
}

// A JSON string as Go's encoding/json writes it (HTML characters escaped).
std::string GoQuote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '<':
        out += "\\u003c";
        break;
      case '>':
        out += "\\u003e";
        break;
      case '&':
        out += "\\u0026";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string Host(const Shape& shape, const Replica& r, int32_t i, std::string_view domain) {
  std::string host = ChildName(shape.name, r.type, i) + "." + shape.namespace_ + ".svc";
  if (!domain.empty()) host += "." + std::string(domain);
  return host + ":" + std::to_string(r.port);
}

// {"type":"worker","index":1}
std::string Task(std::string_view type, int32_t index) {
  return "{\"type\":" + GoQuote(Lower(type)) + ",\"index\":" + std::to_string(index) + "}";
}

std::string_view V1Reason(api::ConditionType t, bool status, bool suspended) {
  switch (t) {
    case api::ConditionType::kCreated:
      return "TFJobCreated";
    case api::ConditionType::kRunning:
      return !status && suspended ? "TFJobSuspended" : "TFJobRunning";
    case api::ConditionType::kRestarting:
      return "TFJobRestarting";
    case api::ConditionType::kSucceeded:
      return "TFJobSucceeded";
    case api::ConditionType::kFailed:
      return "TFJobFailed";
    case api::ConditionType::kSuspended:
      return status ? "TFJobSuspended" : "TFJobResumed";
    default:
      return "";
  }
}

// v1's order among conditions of the same second: the one v1 sets last, last.
int V1Order(api::ConditionType t) {
  switch (t) {
    case api::ConditionType::kCreated:
      return 0;
    case api::ConditionType::kRunning:
      return 1;
    case api::ConditionType::kRestarting:
      return 2;
    case api::ConditionType::kSuspended:
      return 3;
    case api::ConditionType::kSucceeded:
      return 4;
    case api::ConditionType::kFailed:
      return 5;
    default:
      return 6;
  }
}

}  // namespace

Shape ShapeOf(const api::TFJobConversion& conversion, const api::TrainingJob& job) {
  Shape shape;
  shape.name = job.metadata.name;
  shape.namespace_ = job.metadata.namespace_;
  shape.enable_dynamic_worker = conversion.enable_dynamic_worker;
  for (const auto& [role, spec] : job.spec.replica_specs) {
    const std::string key(api::Role(role).key);
    auto it = conversion.v1_types.find(key);
    shape.replicas.push_back(
        {it != conversion.v1_types.end() ? it->second : key, spec.replicas, job.spec.port});
  }
  return shape;
}

bool Shape::HasChiefOrMaster() const {
  return std::any_of(replicas.begin(), replicas.end(),
                     [](const Replica& r) { return IsChiefOrMaster(r.type); });
}

std::string ChildName(std::string_view job, std::string_view type, int32_t index) {
  std::string n = std::string(job) + "-" + Lower(type) + "-" + std::to_string(index);
  std::replace(n.begin(), n.end(), '/', '-');
  return n;
}

bool IsMasterRole(const Shape& shape, std::string_view type, int32_t index) {
  if (shape.HasChiefOrMaster()) return IsChiefOrMaster(type);
  return type == "Worker" && index == 0;
}

std::map<std::string, std::string> Labels(const Shape& shape, std::string_view type, int32_t index,
                                          bool for_pod) {
  std::string job = shape.name;
  std::replace(job.begin(), job.end(), '/', '-');
  std::map<std::string, std::string> labels = {
      {std::string(kOperatorNameLabel), std::string(kOperatorName)},
      {std::string(kJobNameLabel), job},
      {std::string(kReplicaTypeLabel), Lower(type)},
      {std::string(kReplicaIndexLabel), std::to_string(index)},
  };
  if (for_pod && IsMasterRole(shape, type, index)) labels[std::string(kJobRoleLabel)] = "master";
  return labels;
}

bool IsDistributed(const Shape& shape) {
  int64_t n = 0;
  for (const Replica& r : shape.replicas) n += r.replicas;
  return n != 1;
}

std::optional<std::string> TfConfig(const Shape& shape, std::string_view type, int32_t index,
                                    std::string_view custom_cluster_domain) {
  if (!IsDistributed(shape)) return std::nullopt;
  // ClusterSpec: map[string][]string, keys sorted as Go marshals a map.
  std::map<std::string, std::vector<std::string>> cluster;
  for (const Replica& r : shape.replicas) {
    auto& hosts = cluster[Lower(r.type)];
    for (int32_t i = 0; i < r.replicas; ++i)
      hosts.push_back(Host(shape, r, i, custom_cluster_domain));
  }
  auto list = [](const std::vector<std::string>& hosts) {
    std::string out = "[";
    for (size_t i = 0; i < hosts.size(); ++i) {
      if (i != 0) out += ',';
      out += GoQuote(hosts[i]);
    }
    out += ']';
    return out;
  };
  const std::string rt = Lower(type);
  if (shape.enable_dynamic_worker) {
    // SparseTFConfig{Cluster: {Worker map[int32]string, PS []string}, Task}.
    std::string worker = "{}", ps = "[]";
    const auto& ps_hosts = cluster["ps"];
    if (rt == "ps") {
      if (index >= 0 && static_cast<size_t>(index) < ps_hosts.size()) {
        ps = list({ps_hosts[static_cast<size_t>(index)]});
      }
    } else if (rt == "worker") {
      ps = list(ps_hosts);
      const auto& w = cluster["worker"];
      if (index >= 0 && static_cast<size_t>(index) < w.size()) {
        worker = "{" + GoQuote(std::to_string(index)) + ":" +
                 GoQuote(w[static_cast<size_t>(index)]) + "}";
      }
    }
    return "{\"cluster\":{\"worker\":" + worker + ",\"ps\":" + ps +
           "},\"task\":" + Task(type, index) + "}";
  }
  std::string out = "{\"cluster\":{";
  bool first = true;
  for (const auto& [key, hosts] : cluster) {
    if (!first) out += ',';
    out += GoQuote(key);
    out += ':';
    out += list(hosts);
    first = false;
  }
  return out + "},\"task\":" + Task(type, index) + ",\"environment\":\"cloud\"}";
}

namespace {

// The index of the "tensorflow" container, else 0 (v1's getDefaultContainerIndex).
size_t TensorflowIndex(const json& containers) {
  for (size_t i = 0; i < containers.size(); ++i) {
    if (containers[i].is_object() && containers[i].value("name", json()) == "tensorflow") return i;
  }
  return 0;
}

json LabelsJson(const std::map<std::string, std::string>& labels) {
  json out = json::object();
  for (const auto& [k, v] : labels) out[k] = v;
  return out;
}

}  // namespace

json Pod(const Shape& shape, std::string_view type, int32_t index, const json& pod_template,
         std::string_view restart_policy, std::string_view custom_cluster_domain) {
  json pod = pod_template.is_object() ? pod_template : json::object();
  json& meta = pod["metadata"];
  if (!meta.is_object()) meta = json::object();
  meta["name"] = ChildName(shape.name, type, index);
  if (!meta["labels"].is_object()) meta["labels"] = json::object();
  for (const auto& [k, v] : Labels(shape, type, index, true)) meta["labels"][k] = v;
  json& spec = pod["spec"];
  if (!spec.is_object()) spec = json::object();
  spec["restartPolicy"] = restart_policy == "ExitCode" ? "Never" : std::string(restart_policy);
  json* containers = spec.contains("containers") ? &spec["containers"] : nullptr;
  if (containers != nullptr && containers->is_array() && !containers->empty()) {
    json& main = (*containers)[TensorflowIndex(*containers)];
    if (main.is_object()) {
      // Defaulting: the tfjob-port, unless the container names one.
      if (!main["ports"].is_array()) main["ports"] = json::array();
      bool has_port = false;
      for (const json& p : main["ports"]) {
        has_port = has_port || (p.is_object() && p.value("name", json()) == "tfjob-port");
      }
      if (!has_port) main["ports"].push_back({{"name", "tfjob-port"}, {"containerPort", 2222}});
      // SetClusterSpec: appended to the container named "tensorflow" only.
      if (main.value("name", json()) == "tensorflow") {
        if (auto tf_config = TfConfig(shape, type, index, custom_cluster_domain)) {
          if (!main["env"].is_array()) main["env"] = json::array();
          main["env"].push_back({{"name", "TF_CONFIG"}, {"value", *tf_config}});
        }
      }
    }
  }
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", std::move(meta)},
              {"spec", std::move(spec)}};
}

json Service(const Shape& shape, std::string_view type, int32_t index, const json& pod_template) {
  const json labels = LabelsJson(Labels(shape, type, index, false));
  std::map<std::string, json> by_name;  // v1 reads them into a map[string]int32
  const json* spec =
      pod_template.is_object() && pod_template.contains("spec") ? &pod_template["spec"] : nullptr;
  if (spec != nullptr && spec->is_object() && spec->contains("containers") &&
      (*spec)["containers"].is_array()) {
    for (const json& c : (*spec)["containers"]) {
      if (!c.is_object() || c.value("name", json()) != "tensorflow") continue;
      if (!c.contains("ports") || !c["ports"].is_array()) break;
      for (const json& p : c["ports"]) {
        if (!p.is_object()) continue;
        const json n = p.contains("name") ? p["name"] : json();
        const std::string name = n.is_string() ? n.get<std::string>() : std::string();
        by_name[name] = p.value("containerPort", json());
      }
      break;
    }
  }
  json ports = json::array();
  for (const auto& [name, port] : by_name) {
    json sp = {{"port", port}};
    if (!name.empty()) sp["name"] = name;
    ports.push_back(std::move(sp));
  }
  return json{{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata", {{"name", ChildName(shape.name, type, index)}, {"labels", labels}}},
              {"spec", {{"clusterIP", "None"}, {"selector", labels}, {"ports", std::move(ports)}}}};
}

json Status(const api::TrainingJobStatus& status, const Shape& shape,
            const std::map<api::ReplicaType, std::string>& type_of) {
  const bool suspended = status.IsTrue(api::ConditionType::kSuspended);
  const std::string job = shape.name;
  const std::string ns_job = shape.namespace_ + "/" + shape.name;
  std::vector<const api::Condition*> kept;
  for (const api::Condition& c : status.conditions) {
    if (V1Reason(c.type, c.status, suspended).empty()) continue;
    kept.push_back(&c);
  }
  // Running and Restarting exclude each other in v1: keep the later one.
  const api::Condition* running = status.Find(api::ConditionType::kRunning);
  const api::Condition* restarting = status.Find(api::ConditionType::kRestarting);
  if (running != nullptr && restarting != nullptr) {
    const bool drop_running =
        restarting->status &&
        (!running->status || restarting->last_transition_time >= running->last_transition_time);
    std::erase(kept, drop_running ? running : restarting);
  }
  // Newest last; within a second, Created first (v1 sets it when it first
  // sees the job, before anything else), then False before True (v1 turns
  // Suspended False before Running True), then in the order v1 sets them.
  std::stable_sort(kept.begin(), kept.end(), [](const api::Condition* a, const api::Condition* b) {
    auto key = [](const api::Condition* c) {
      return std::make_tuple(c->last_transition_time, c->type != api::ConditionType::kCreated,
                             c->status, V1Order(c->type));
    };
    return key(a) < key(b);
  });
  json conditions = json::array();
  for (const api::Condition* c : kept) {
    std::string message = c->message;
    switch (c->type) {
      case api::ConditionType::kCreated:
        message = "TFJob " + job + " is created.";
        break;
      case api::ConditionType::kRunning:
        message = suspended && !c->status ? "TFJob " + job + " is suspended."
                                          : "TFJob " + ns_job + " is running.";
        break;
      case api::ConditionType::kSucceeded:
        message = "TFJob " + ns_job + " successfully completed.";
        break;
      case api::ConditionType::kSuspended:
        message = "TFJob " + job + (c->status ? " is suspended." : " is resumed.");
        break;
      default:
        break;
    }
    const std::string time = api::FormatTime(c->last_transition_time);
    conditions.push_back({{"type", api::Name(c->type)},
                          {"status", c->status ? "True" : "False"},
                          {"reason", V1Reason(c->type, c->status, suspended)},
                          {"message", message},
                          {"lastUpdateTime", time},
                          {"lastTransitionTime", time}});
  }
  json out = json::object();
  if (!conditions.empty()) out["conditions"] = std::move(conditions);
  json replica_statuses = json::object();
  const bool succeeded = status.IsTrue(api::ConditionType::kSucceeded);
  for (const auto& [role, rs] : status.replica_statuses) {
    auto it = type_of.find(role);
    const std::string type = it != type_of.end() ? it->second : std::string(api::Role(role).key);
    json r = json::object();  // omitempty: zeros are left out, as v1 writes them
    int32_t active = rs.active, done = rs.succeeded;
    if (succeeded) {  // v1 counts what still ran at success as succeeded
      done += active;
      active = 0;
    }
    if (active != 0) r["active"] = active;
    if (done != 0) r["succeeded"] = done;
    if (rs.failed != 0) r["failed"] = rs.failed;
    replica_statuses[type] = std::move(r);
  }
  out["replicaStatuses"] = std::move(replica_statuses);
  if (status.start_time) out["startTime"] = api::FormatTime(*status.start_time);
  if (status.completion_time) out["completionTime"] = api::FormatTime(*status.completion_time);
  return out;
}

}  // namespace kubetrain::planner::tfjob_v1
