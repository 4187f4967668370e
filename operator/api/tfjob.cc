#include "operator/api/tfjob.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include "operator/api/json.h"
#include "operator/api/json_read.h"
#include "operator/api/types.h"
#include "operator/api/validation.h"

namespace kubetrain::api {

using nlohmann::json;

namespace {

using namespace json_read;  // NOLINT: the shared field readers

// v1's replica types and the TrainingJob role each becomes.
struct TFRole {
  std::string_view tf_key;
  std::string_view key;
};
constexpr std::array<TFRole, 5> kTFRoles = {{
    {"PS", "PS"},
    {"Worker", "Worker"},
    {"Chief", "Chief"},
    {"Master", "Chief"},
    {"Evaluator", "Evaluator"},
}};

bool EqualFold(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// A string field that must be one of `allowed` ("" and absent: `fallback`).
Status ReadChoice(const json& obj, const std::string& path, std::string_view key,
                  std::initializer_list<std::string_view> allowed, std::string& out) {
  std::string text;
  KT_RETURN_IF_ERROR(ReadString(obj, path, key, text));
  if (text.empty()) return Status::Ok();
  std::string want;
  for (std::string_view a : allowed) {
    if (a == text) {
      out = text;
      return Status::Ok();
    }
    want += (want.empty() ? "" : ", ") + std::string(a);
  }
  return Error(Join(path, key), "unsupported value \"" + text + "\" (want one of " + want + ")");
}

Status ConvertMetadata(const json& tf, TFJobConversion& out) {
  const json* meta = Field(tf, "metadata");
  if (meta == nullptr) return Error("metadata.name", "required field is missing");
  KT_RETURN_IF_ERROR(ExpectObject(*meta, "metadata"));
  json m = json::object();
  std::string name, generate_name, ns;
  KT_RETURN_IF_ERROR(ReadString(*meta, "metadata", "name", name));
  KT_RETURN_IF_ERROR(ReadString(*meta, "metadata", "generateName", generate_name));
  KT_RETURN_IF_ERROR(ReadString(*meta, "metadata", "namespace", ns));
  if (name.empty() && generate_name.empty()) {
    return Error("metadata.name", "required field is missing");
  }
  // v1's webhook: the name is a DNS-1035 label (it names Services).
  if (!name.empty() && !IsDns1035Label(name)) {
    return Error("metadata.name",
                 "must be a DNS-1035 label (lower case letters, digits and "
                 "'-', starting with a letter, at most 63 characters)");
  }
  if (!name.empty()) m["name"] = name;
  if (!generate_name.empty()) m["generateName"] = generate_name;
  if (!ns.empty()) m["namespace"] = ns;
  for (const char* key : {"labels", "annotations"}) {
    const json* v = Field(*meta, key);
    if (v == nullptr) continue;
    KT_RETURN_IF_ERROR(ExpectObject(*v, Join("metadata", key)));
    json kept = json::object();
    for (const auto& [k, value] : v->items()) {
      if (!value.is_string()) return Error(Join(Join("metadata", key), k), "must be a string");
      // kubectl's record of the TFJob it applied: not the TrainingJob's.
      if (k == "kubectl.kubernetes.io/last-applied-configuration") continue;
      kept[k] = value;
    }
    if (!kept.empty()) m[key] = std::move(kept);
  }
  out.job["metadata"] = std::move(m);
  return Status::Ok();
}

// One role's ReplicaSpec. `port` is the role's tfjob-port (v1: the "tensorflow"
// container's port of that name, else 2222).
Status ConvertReplicaSpec(const json& r, const std::string& path, json& out, int32_t& port,
                          std::vector<TFJobNote>& notes) {
  KT_RETURN_IF_ERROR(ExpectObject(r, path));
  KT_RETURN_IF_ERROR(RejectUnknown(r, path, {"replicas", "restartPolicy", "template"}));
  int32_t replicas = 1;
  KT_RETURN_IF_ERROR(ReadInt(r, path, "replicas", replicas));
  std::string restart = "Never";  // v1's TFJobDefaultRestartPolicy
  KT_RETURN_IF_ERROR(
      ReadChoice(r, path, "restartPolicy", {"Always", "OnFailure", "Never", "ExitCode"}, restart));
  out = json::object();
  out["replicas"] = replicas;
  if (restart != "Never") out["restartPolicy"] = restart;

  const std::string tpath = Join(path, "template");
  const std::string cpath = tpath + ".spec.containers";
  const json* t = Field(r, "template");
  const json* spec = t != nullptr && t->is_object() ? Field(*t, "spec") : nullptr;
  const json* containers =
      spec != nullptr && spec->is_object() ? Field(*spec, "containers") : nullptr;
  if (t != nullptr) KT_RETURN_IF_ERROR(ExpectObject(*t, tpath));
  if (spec != nullptr) KT_RETURN_IF_ERROR(ExpectObject(*spec, tpath + ".spec"));
  if (containers == nullptr || !containers->is_array() || containers->empty()) {
    return Error(cpath, "must be specified (at least one container)");
  }
  json tmpl = *t;
  json& cs = tmpl["spec"]["containers"];
  std::optional<size_t> tf_index, trainer_index;
  for (size_t i = 0; i < cs.size(); ++i) {
    const std::string ipath = cpath + "[" + std::to_string(i) + "]";
    KT_RETURN_IF_ERROR(ExpectObject(cs[i], ipath));
    if (StringField(cs[i], "image").empty()) return Error(Join(ipath, "image"), "must be required");
    const std::string name = StringField(cs[i], "name");
    if (name == kTFJobContainerName && !tf_index) tf_index = i;
    if (name == "trainer") trainer_index = i;
  }
  if (!tf_index) {
    return Error(cpath,
                 "must have at least one container with name " + std::string(kTFJobContainerName));
  }
  if (trainer_index) {
    return Error(cpath + "[" + std::to_string(*trainer_index) + "].name",
                 "a container named \"trainer\" beside \"tensorflow\": kubetrain would give the "
                 "environment (TF_CONFIG) to \"trainer\", v1 gives it to \"tensorflow\"; rename "
                 "one");
  }
  port = kTFJobDefaultPort;
  const json& tf = cs[*tf_index];
  if (const json* ports = Field(tf, "ports"); ports != nullptr && ports->is_array()) {
    for (const json& p : *ports) {
      if (!p.is_object() || StringField(p, "name") != kTFJobPortName) continue;
      const json* n = Field(p, "containerPort");
      if (n == nullptr || !n->is_number_integer() || n->get<int64_t>() < 1 ||
          n->get<int64_t>() > 65535) {
        return Error(cpath + "[" + std::to_string(*tf_index) + "].ports",
                     "the tfjob-port's containerPort must be an integer in 1-65535");
      }
      port = n->get<int32_t>();
    }
  }
  if (*tf_index != 0) {
    json moved = std::move(cs[*tf_index]);
    cs.erase(cs.begin() + static_cast<std::ptrdiff_t>(*tf_index));
    cs.insert(cs.begin(), std::move(moved));
    notes.push_back({cpath,
                     "the \"tensorflow\" container is moved first: kubetrain gives the "
                     "environment contract (TF_CONFIG) to the container named \"trainer\", "
                     "else the first"});
  }
  out["template"] = std::move(tmpl);
  return Status::Ok();
}

Status ConvertSchedulingPolicy(const json& s, const std::string& path, json& out,
                               std::vector<TFJobNote>& notes) {
  KT_RETURN_IF_ERROR(ExpectObject(s, path));
  KT_RETURN_IF_ERROR(RejectUnknown(
      s, path,
      {"minAvailable", "queue", "minResources", "priorityClass", "scheduleTimeoutSeconds"}));
  out = json::object();
  std::optional<int32_t> min_available, timeout;
  std::optional<std::string> queue, priority;
  KT_RETURN_IF_ERROR(ReadInt(s, path, "minAvailable", min_available));
  KT_RETURN_IF_ERROR(ReadString(s, path, "queue", queue));
  KT_RETURN_IF_ERROR(ReadString(s, path, "priorityClass", priority));
  KT_RETURN_IF_ERROR(ReadInt(s, path, "scheduleTimeoutSeconds", timeout));
  if (min_available) out["minAvailable"] = *min_available;
  if (queue && !queue->empty()) out["queue"] = *queue;
  if (priority && !priority->empty()) out["priorityClassName"] = *priority;
  if (timeout) out["scheduleTimeoutSeconds"] = *timeout;
  if (Field(s, "minResources") != nullptr) {
    KT_RETURN_IF_ERROR(ExpectObject(s["minResources"], Join(path, "minResources")));
    notes.push_back({Join(path, "minResources"),
                     "no equivalent: kubetrain computes a gang's minResources from the pod "
                     "templates of its minAvailable pods"});
  }
  return Status::Ok();
}

Status ConvertRunPolicy(const json& spec, TFJobConversion& out, json& run_policy) {
  const std::string path = "spec.runPolicy";
  run_policy = json::object();
  const json* rp = Field(spec, "runPolicy");
  std::string clean;
  if (rp != nullptr) {
    KT_RETURN_IF_ERROR(ExpectObject(*rp, path));
    KT_RETURN_IF_ERROR(
        RejectUnknown(*rp, path,
                      {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds",
                       "backoffLimit", "schedulingPolicy", "suspend", "managedBy"}));
    KT_RETURN_IF_ERROR(ReadChoice(*rp, path, "cleanPodPolicy", {"None", "Running", "All"}, clean));
    std::optional<int32_t> ttl, backoff;
    std::optional<int64_t> deadline;
    bool suspend = false;
    std::optional<std::string> managed_by;
    KT_RETURN_IF_ERROR(ReadInt(*rp, path, "ttlSecondsAfterFinished", ttl));
    KT_RETURN_IF_ERROR(ReadInt(*rp, path, "activeDeadlineSeconds", deadline));
    KT_RETURN_IF_ERROR(ReadInt(*rp, path, "backoffLimit", backoff));
    KT_RETURN_IF_ERROR(ReadBool(*rp, path, "suspend", suspend));
    KT_RETURN_IF_ERROR(ReadString(*rp, path, "managedBy", managed_by));
    if (!clean.empty()) run_policy["cleanPodPolicy"] = clean;
    if (ttl) run_policy["ttlSecondsAfterFinished"] = *ttl;
    if (deadline) run_policy["activeDeadlineSeconds"] = *deadline;
    if (backoff) run_policy["backoffLimit"] = *backoff;
    if (suspend) run_policy["suspend"] = true;
    if (const json* s = Field(*rp, "schedulingPolicy")) {
      json sp;
      KT_RETURN_IF_ERROR(
          ConvertSchedulingPolicy(*s, Join(path, "schedulingPolicy"), sp, out.notes));
      if (!sp.empty()) run_policy["schedulingPolicy"] = std::move(sp);
    }
    if (managed_by) {
      out.managed_by = *managed_by;
      out.notes.push_back({Join(path, "managedBy"),
                           "no equivalent (\"" + *managed_by +
                               "\"): every TrainingJob is reconciled by kubetrain's operator"});
    }
  }
  if (clean.empty()) {
    out.notes.push_back(
        {Join(path, "cleanPodPolicy"),
         "unset: v1 defaults to None (pods stay after the job ends, a PS keeps running after "
         "success); kubetrain defaults to Running (removes what still runs). Set "
         "cleanPodPolicy: None to keep v1's behaviour"});
  }
  return Status::Ok();
}

}  // namespace

bool IsTFJob(const json& object) {
  return object.is_object() && StringField(object, "apiVersion") == kTFJobApiVersion &&
         StringField(object, "kind") == kTFJobKind;
}

StatusOr<TFJobConversion> ConvertTFJob(const json& tf) {
  if (!IsTFJob(tf)) return InvalidArgument("not a kubeflow.org/v1 TFJob");
  KT_RETURN_IF_ERROR(RejectUnknown(tf, "", {"apiVersion", "kind", "metadata", "spec", "status"}));
  TFJobConversion out;
  out.job = json::object();
  out.job["apiVersion"] = kApiVersion;
  out.job["kind"] = kKind;
  KT_RETURN_IF_ERROR(ConvertMetadata(tf, out));

  const json* spec = Field(tf, "spec");
  if (spec == nullptr) return Error("spec.tfReplicaSpecs", "required field is missing");
  KT_RETURN_IF_ERROR(ExpectObject(*spec, "spec"));
  KT_RETURN_IF_ERROR(RejectUnknown(
      *spec, "spec", {"runPolicy", "successPolicy", "tfReplicaSpecs", "enableDynamicWorker"}));
  json out_spec = json::object();

  const json* specs = Field(*spec, "tfReplicaSpecs");
  if (specs == nullptr) return Error("spec.tfReplicaSpecs", "required field is missing");
  KT_RETURN_IF_ERROR(ExpectObject(*specs, "spec.tfReplicaSpecs"));
  if (specs->empty()) return Error("spec.tfReplicaSpecs", "must have at least one replica type");
  json replica_specs = json::object();
  std::optional<int32_t> job_port;
  std::string port_role;
  int chief_or_master = 0;
  for (const auto& [tf_key, value] : specs->items()) {
    const std::string path = "spec.tfReplicaSpecs." + tf_key;
    const TFRole* role = nullptr;
    for (const TFRole& r : kTFRoles) {
      if (EqualFold(tf_key, r.tf_key)) role = &r;
    }
    if (role == nullptr) {
      return Error(path, "unsupported replica type (want PS, Worker, Chief, Master or Evaluator)");
    }
    if (role->key == "Chief") ++chief_or_master;
    if (chief_or_master > 1) {
      return Error("spec.tfReplicaSpecs", "must not have more than 1 Chief or Master role");
    }
    const std::string key(role->key);
    if (out.role_keys.contains(key)) {
      return Error(path,
                   "is the same replica type as " + out.role_keys[key] + " (v1 folds their case)");
    }
    out.role_keys[key] = tf_key;
    out.v1_types[key] = role->tf_key;
    if (role->tf_key == "Master") {
      out.notes.push_back({path,
                           "Master becomes Chief: pods and Services <job>-chief-<i>, "
                           "TF_CONFIG task type \"chief\" (v1: \"master\")"});
    }
    json r;
    int32_t port = kTFJobDefaultPort;
    KT_RETURN_IF_ERROR(ConvertReplicaSpec(value, path, r, port, out.notes));
    if (job_port && *job_port != port) {
      return Error(path + ".template.spec.containers",
                   "tfjob-port " + std::to_string(port) + " differs from " + port_role + "'s " +
                       std::to_string(*job_port) + ": a TrainingJob has one port (spec.port)");
    }
    job_port = port;
    port_role = tf_key;
    replica_specs[key] = std::move(r);
  }

  json run_policy;
  KT_RETURN_IF_ERROR(ConvertRunPolicy(*spec, out, run_policy));
  if (!run_policy.empty()) out_spec["runPolicy"] = std::move(run_policy);

  std::string success;
  KT_RETURN_IF_ERROR(ReadChoice(*spec, "spec", "successPolicy", {"AllWorkers"}, success));
  if (!success.empty()) out_spec["successPolicy"] = success;

  bool dynamic = false;
  KT_RETURN_IF_ERROR(ReadBool(*spec, "spec", "enableDynamicWorker", dynamic));
  out.enable_dynamic_worker = dynamic;
  if (dynamic) {
    out.notes.push_back(
        {"spec.enableDynamicWorker",
         "no equivalent: v1 gave each worker a sparse TF_CONFIG (the PS and itself) and let "
         "failed workers not fail the job; kubetrain gives the full cluster and applies each "
         "worker's restartPolicy"});
  }
  if (job_port && *job_port != kTFJobDefaultPort) out_spec["port"] = *job_port;
  out_spec["replicaSpecs"] = std::move(replica_specs);
  out.job["spec"] = std::move(out_spec);
  return out;
}

std::string ToTFJobMessage(const TFJobConversion& conversion, std::string_view message) {
  std::string out(message);
  auto replace_all = [&out](std::string_view from, std::string_view to) {
    for (size_t at = out.find(from); at != std::string::npos; at = out.find(from, at + to.size())) {
      // Whole path components only: "spec.replicaSpecs.Worker" not in "...Workers".
      const size_t end = at + from.size();
      if (end < out.size() && out[end] != '.' && out[end] != ':' && out[end] != ' ' &&
          out[end] != ',' && out[end] != ';' && out[end] != ')' && out[end] != '[') {
        at += 1;
        continue;
      }
      out.replace(at, from.size(), to);
    }
  };
  for (const auto& [key, tf_key] : conversion.role_keys) {
    if (key == tf_key) continue;
    replace_all("spec.replicaSpecs." + key, "spec.replicaSpecs." + tf_key);
  }
  replace_all("spec.replicaSpecs", "spec.tfReplicaSpecs");
  replace_all("schedulingPolicy.priorityClassName", "schedulingPolicy.priorityClass");
  return out;
}

}  // namespace kubetrain::api
