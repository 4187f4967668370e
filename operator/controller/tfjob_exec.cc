#include "operator/controller/tfjob_exec.h"

#include <algorithm>

#include "operator/api/json.h"
#include "operator/api/validation.h"
#include "operator/planner/env_contract.h"

namespace kubetrain::controller {

using planner::ChildCreate;
using planner::ChildRef;
using planner::kClusterConfigKey;
using planner::kPortName;
using planner::ObservedChildren;
using planner::ObservedPod;
using planner::ObservedService;
using planner::Plan;
namespace tfjob_v1 = planner::tfjob_v1;

using nlohmann::json;

namespace {

// The string at obj[a][b]... or nullptr. Never throws.
const json* Path(const json& obj, std::initializer_list<const char*> keys) {
  const json* at = &obj;
  for (const char* k : keys) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(k);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

void ReplaceAll(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

// The TFJob controls every child, as in v1.
void OwnedByTFJob(json& object) {
  json* owners = object.is_object() && object.contains("metadata") &&
                         object["metadata"].is_object() &&
                         object["metadata"].contains("ownerReferences")
                     ? &object["metadata"]["ownerReferences"]
                     : nullptr;
  if (owners == nullptr || !owners->is_array()) return;
  for (json& o : *owners) {
    if (!o.is_object() || o.value("kind", "") != api::kKind) continue;
    o["apiVersion"] = api::kTFJobApiVersion;
    o["kind"] = api::kTFJobKind;
  }
}

void AddLabels(json& meta, const std::map<std::string, std::string>& labels) {
  if (!meta["labels"].is_object()) meta["labels"] = json::object();
  for (const auto& [k, v] : labels) meta["labels"][k] = v;
}

// The container v1 gives the port and TF_CONFIG: "tensorflow", else the first.
json* TensorflowContainer(json& pod) {
  json* containers =
      Path(pod, {"spec", "containers"}) != nullptr ? &pod["spec"]["containers"] : nullptr;
  if (containers == nullptr || !containers->is_array() || containers->empty()) return nullptr;
  for (json& c : *containers) {
    if (c.is_object() && c.value("name", json()) == api::kTFJobContainerName) return &c;
  }
  return &(*containers)[0];
}

void AdaptPod(const TFJobView& view, const std::string& type, int32_t index, json& pod,
              std::string_view domain) {
  AddLabels(pod["metadata"], tfjob_v1::Labels(view.shape, type, index, /*for_pod=*/true));
  json* main = TensorflowContainer(pod);
  if (main == nullptr || !main->is_object()) return;
  // The port: v1's name on kubetrain's port of the same number, else v1's own.
  json& ports = (*main)["ports"];
  if (!ports.is_array()) ports = json::array();
  const bool named = std::any_of(ports.begin(), ports.end(), [](const json& p) {
    return p.is_object() && p.value("name", json()) == api::kTFJobPortName;
  });
  if (!named) {
    bool renamed = false;
    for (json& p : ports) {
      if (p.is_object() && p.value("name", json()) == kPortName &&
          p.value("containerPort", json()) == json(view.job.spec.port)) {
        p["name"] = api::kTFJobPortName;
        renamed = true;
      }
    }
    if (!renamed) {
      ports.push_back({{"name", api::kTFJobPortName}, {"containerPort", api::kTFJobDefaultPort}});
    }
  }
  // TF_CONFIG: v1's bytes for a distributed job, none otherwise.
  json& env = (*main)["env"];
  if (!env.is_array()) env = json::array();
  const std::optional<std::string> tf_config = tfjob_v1::TfConfig(view.shape, type, index, domain);
  bool set = false;
  for (auto it = env.begin(); it != env.end();) {
    if (!it->is_object() || it->value("name", json()) != contract::kEnvTfConfig) {
      ++it;
      continue;
    }
    if (!tf_config || set) {
      it = env.erase(it);
      continue;
    }
    *it = {{"name", contract::kEnvTfConfig}, {"value", *tf_config}};
    set = true;
    ++it;
  }
  if (tf_config && !set) env.push_back({{"name", contract::kEnvTfConfig}, {"value", *tf_config}});
}

void AdaptService(const TFJobView& view, api::ReplicaType role, const std::string& type,
                  int32_t index, json& service) {
  const auto labels = tfjob_v1::Labels(view.shape, type, index, /*for_pod=*/false);
  AddLabels(service["metadata"], labels);
  auto spec = view.job.spec.replica_specs.find(role);
  const json tmpl = spec != view.job.spec.replica_specs.end() ? spec->second.pod_template : json();
  // v1's Service: a port per port of the tensorflow container, defaulted as the pod's.
  const json v1 = tfjob_v1::Service(view.shape, type, index,
                                    tfjob_v1::Pod(view.shape, type, index, tmpl, "Never", ""));
  service["spec"]["ports"] = v1["spec"]["ports"];
  service["spec"]["selector"] = v1["spec"]["selector"];
}

}  // namespace

StatusOr<TFJobMode> ParseTFJobMode(std::string_view text) {
  if (text == "off") return TFJobMode::kOff;
  if (text == "managed") return TFJobMode::kManaged;
  if (text == "all") return TFJobMode::kAll;
  return InvalidArgument("--tfjob: want off, managed or all, got \"" + std::string(text) + "\"");
}

std::string_view Name(TFJobMode mode) {
  switch (mode) {
    case TFJobMode::kManaged:
      return "managed";
    case TFJobMode::kAll:
      return "all";
    default:
      return "off";
  }
}

std::optional<std::string> TFJobManagedBy(const json& tfjob) {
  const json* m = Path(tfjob, {"spec", "runPolicy", "managedBy"});
  if (m == nullptr || !m->is_string() || m->get<std::string>().empty()) return std::nullopt;
  return m->get<std::string>();
}

bool TakesTFJob(TFJobMode mode, const std::optional<std::string>& managed_by) {
  switch (mode) {
    case TFJobMode::kManaged:
      return managed_by == api::kTFJobManagedByKubetrain;
    case TFJobMode::kAll:
      return !managed_by || *managed_by == api::kTFJobManagedByKubetrain;
    default:
      return false;
  }
}

StatusOr<runtime::CompactObject> ToCachedTFJob(const json& tfjob) {
  static constexpr const char* kLastApplied = "kubectl.kubernetes.io/last-applied-configuration";
  const json* annotations = Path(tfjob, {"metadata", "annotations"});
  if (annotations == nullptr || !annotations->is_object() || !annotations->contains(kLastApplied)) {
    return runtime::ToCompactObject(tfjob);
  }
  json copy = tfjob;
  copy["metadata"]["annotations"].erase(kLastApplied);
  return runtime::ToCompactObject(copy);
}

bool FinishedElsewhere(const json& tfjob) {
  if (Path(tfjob, {"metadata", "annotations", kTFJobStateAnnotation.data()}) != nullptr) {
    return false;
  }
  const json* conditions = Path(tfjob, {"status", "conditions"});
  if (conditions == nullptr || !conditions->is_array()) return false;
  return std::any_of(conditions->begin(), conditions->end(), [](const json& c) {
    return c.is_object() && c.value("status", json()) == "True" &&
           (c.value("type", json()) == "Succeeded" || c.value("type", json()) == "Failed");
  });
}

bool IsTFJobKey(std::string_view key) {
  return key.starts_with(kTFJobKeyPrefix);
}

std::string TFJobKey(std::string_view ns, std::string_view name) {
  return std::string(kTFJobKeyPrefix) + std::string(ns) + "/" + std::string(name);
}

std::string_view StripTFJobKey(std::string_view key) {
  if (IsTFJobKey(key)) key.remove_prefix(kTFJobKeyPrefix.size());
  return key;
}

StatusOr<TFJobView> ReadTFJob(const json& tfjob) {
  TFJobView view;
  KT_ASSIGN_OR_RETURN(view.conversion, api::ConvertTFJob(tfjob));
  // The converted job's JSON is read once, here: the view keeps the parsed job.
  json j = std::move(view.conversion.job);
  view.conversion.job = json();
  if (const json* meta = Path(tfjob, {"metadata"})) {
    for (const char* k :
         {"uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation"}) {
      if (meta->contains(k)) j["metadata"][k] = (*meta)[k];
    }
  }
  j["spec"]["serviceMode"] = api::Name(api::ServiceMode::kPerReplica);
  auto job = api::ParseTrainingJob(std::move(j));
  if (!job.ok()) {
    return InvalidArgument(api::ToTFJobMessage(view.conversion, job.status().message()));
  }
  view.job = std::move(*job);
  const std::vector<api::FieldError> errors = api::Validate(view.job);
  if (!errors.empty()) {
    return InvalidArgument(
        api::ToTFJobMessage(view.conversion, errors.front().path + ": " + errors.front().message));
  }
  // The planner's state; an unreadable one (edited by hand) starts afresh.
  if (const json* a = Path(tfjob, {"metadata", "annotations", kTFJobStateAnnotation.data()});
      a != nullptr && a->is_string()) {
    const json state = json::parse(a->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (auto status = api::ParseTrainingJobStatus(state); status.ok()) {
      view.job.status = std::move(*status);
    }
  }
  view.shape = tfjob_v1::ShapeOf(view.conversion, view.job);
  for (const auto& [role, spec] : view.job.spec.replica_specs) {
    auto it = view.conversion.v1_types.find(std::string(api::Role(role).key));
    const std::string type =
        it != view.conversion.v1_types.end() ? it->second : std::string(api::Role(role).key);
    view.type_of[role] = type;
    if (tfjob_v1::ChildName(view.job.metadata.name, type, 0) ==
        api::ChildName(view.job.metadata.name, role, 0)) {
      continue;
    }
    for (int32_t i = 0; i < spec.replicas; ++i) {
      const std::string planner = api::ChildName(view.job.metadata.name, role, i);
      const std::string v1 = tfjob_v1::ChildName(view.job.metadata.name, type, i);
      view.to_v1[planner] = v1;
      view.to_planner[v1] = planner;
    }
  }
  return view;
}

std::string V1Name(const TFJobView& view, std::string planner_name) {
  if (auto it = view.to_v1.find(planner_name); it != view.to_v1.end()) return it->second;
  return planner_name;
}

void ToPlannerNames(const TFJobView& view, ObservedChildren& observed) {
  if (view.to_planner.empty()) return;
  auto rename = [&](std::string& name) {
    if (auto it = view.to_planner.find(name); it != view.to_planner.end()) name = it->second;
  };
  for (ObservedPod& p : observed.pods) rename(p.name);
  for (ObservedPod& p : observed.vanished) rename(p.name);
  for (ObservedService& s : observed.services) rename(s.name);
}

void ToV1Children(const TFJobView& view, Plan& plan, std::string_view custom_cluster_domain) {
  auto rename = [&](std::string& name) {
    if (auto it = view.to_v1.find(name); it != view.to_v1.end()) name = it->second;
  };
  // CLUSTER_CONFIG's hosts "<name>.<ns>.svc..." under v1's names.
  auto rename_hosts = [&](json* text) {
    if (text == nullptr || !text->is_string() || view.to_v1.empty()) return;
    std::string s = text->get<std::string>();
    for (const auto& [from, to] : view.to_v1) ReplaceAll(s, "\"" + from + ".", "\"" + to + ".");
    *text = std::move(s);
  };
  for (ChildCreate& create : plan.creates) {
    OwnedByTFJob(create.object);
    switch (create.ref.kind) {
      case ChildRef::Kind::kPod:
      case ChildRef::Kind::kService: {
        rename(create.ref.name);
        create.object["metadata"]["name"] = create.ref.name;
        if (!create.ref.role) break;  // the job-wide Service (not in PerReplica mode)
        auto type = view.type_of.find(*create.ref.role);
        if (type == view.type_of.end()) break;
        if (create.ref.kind == ChildRef::Kind::kPod) {
          AdaptPod(view, type->second, create.ref.index, create.object, custom_cluster_domain);
        } else {
          AdaptService(view, *create.ref.role, type->second, create.ref.index, create.object);
        }
        break;
      }
      case ChildRef::Kind::kSecret:
        if (create.object.contains("stringData")) {
          rename_hosts(&create.object["stringData"][std::string(kClusterConfigKey)]);
        }
        break;
      case ChildRef::Kind::kConfigMap:
        if (create.object.contains("data")) {
          rename_hosts(&create.object["data"][std::string(kClusterConfigKey)]);
        }
        break;
      default:
        break;
    }
  }
  for (ChildRef& ref : plan.deletes) {
    if (ref.kind == ChildRef::Kind::kPod || ref.kind == ChildRef::Kind::kService) rename(ref.name);
  }
}

json V1Status(const TFJobView& view, const api::TrainingJobStatus& status,
              const json& served_status) {
  json out = tfjob_v1::Status(status, view.shape, view.type_of);
  if (!served_status.is_object() || !served_status.contains("replicaStatuses")) return out;
  bool finished = false;
  if (auto it = served_status.find("conditions"); it != served_status.end() && it->is_array()) {
    for (const json& c : *it) {
      if (!c.is_object()) continue;
      const std::string type = c.value("type", std::string());
      finished |= (type == "Succeeded" || type == "Failed") && c.value("status", "") == "True";
    }
  }
  if (finished) out["replicaStatuses"] = served_status["replicaStatuses"];
  return out;
}

json TFJobStatePatch(const std::string& rv, const api::TrainingJobStatus& status) {
  return {{"metadata",
           {{"resourceVersion", rv},
            {"annotations",
             {{std::string(kTFJobStateAnnotation), api::StatusToJson(status).dump()}}}}}};
}

std::optional<json> UnconvertibleStatus(const json& tfjob, const std::string& message,
                                        api::Time now) {
  const json* served = Path(tfjob, {"status", "conditions"});
  if (served != nullptr && served->is_array()) {
    for (const json& c : *served) {
      if (c.is_object() && c.value("type", json()) == "Failed" &&
          c.value("status", json()) == "True") {
        return std::nullopt;
      }
    }
  }
  const json* name = Path(tfjob, {"metadata", "name"});
  const std::string job = name != nullptr && name->is_string() ? name->get<std::string>() : "";
  const std::string t = api::FormatTime(now);
  auto condition = [&](const char* type, const char* reason, const std::string& text) {
    return json{{"type", type},    {"status", "True"},    {"reason", reason},
                {"message", text}, {"lastUpdateTime", t}, {"lastTransitionTime", t}};
  };
  return json{{"conditions",
               json::array({condition("Created", "TFJobCreated", "TFJob " + job + " is created."),
                            condition("Failed", "TFJobFailed",
                                      "kubetrain cannot run this TFJob: " + message)})},
              {"replicaStatuses", json::object()},
              {"completionTime", t}};
}

}  // namespace kubetrain::controller
