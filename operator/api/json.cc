#include "operator/api/json.h"

#include <initializer_list>
#include <limits>
#include <string>

#include "operator/api/json_read.h"

namespace kubetrain::api {

using nlohmann::json;

namespace {

using namespace json_read;  // NOLINT: the shared field readers

Status ReadTime(const json& obj, const std::string& path, std::string_view key,
                std::optional<Time>& out) {
  std::optional<std::string> text;
  KT_RETURN_IF_ERROR(ReadString(obj, path, key, text));
  if (!text) return Status::Ok();
  StatusOr<Time> t = ParseTime(*text);
  if (!t.ok()) return Error(Join(path, key), t.status().message());
  out = *t;
  return Status::Ok();
}

Status ReadStringMap(const json& obj, const std::string& path, std::string_view key,
                     std::map<std::string, std::string>& out) {
  const json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  std::string p = Join(path, key);
  KT_RETURN_IF_ERROR(ExpectObject(*v, p));
  for (const auto& [k, value] : v->items()) {
    if (!value.is_string()) return Error(Join(p, k), "must be a string");
    out[k] = value.get<std::string>();
  }
  return Status::Ok();
}

Status ParseMetadata(const json& j, ObjectMeta& m) {
  const std::string path = "metadata";
  KT_RETURN_IF_ERROR(ExpectObject(j, path));
  KT_RETURN_IF_ERROR(ReadString(j, path, "name", m.name));
  KT_RETURN_IF_ERROR(ReadString(j, path, "namespace", m.namespace_));
  KT_RETURN_IF_ERROR(ReadString(j, path, "uid", m.uid));
  KT_RETURN_IF_ERROR(ReadString(j, path, "resourceVersion", m.resource_version));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "generation", m.generation));
  KT_RETURN_IF_ERROR(ReadStringMap(j, path, "labels", m.labels));
  KT_RETURN_IF_ERROR(ReadStringMap(j, path, "annotations", m.annotations));
  KT_RETURN_IF_ERROR(ReadTime(j, path, "creationTimestamp", m.creation_timestamp));
  KT_RETURN_IF_ERROR(ReadTime(j, path, "deletionTimestamp", m.deletion_timestamp));
  return Status::Ok();
}

// `take_template`: `j` belongs to a document the caller gave up (ParseTrainingJob(json&&)):
// the template is moved out of it, not copied.
Status ParseReplicaSpec(const json& j, const std::string& path, ReplicaSpec& r,
                        bool take_template) {
  KT_RETURN_IF_ERROR(ExpectObject(j, path));
  KT_RETURN_IF_ERROR(RejectUnknown(j, path, {"replicas", "restartPolicy", "template"}));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "replicas", r.replicas));
  KT_RETURN_IF_ERROR(ReadEnum(j, path, "restartPolicy",
                              {RestartPolicy::kNever, RestartPolicy::kOnFailure,
                               RestartPolicy::kAlways, RestartPolicy::kExitCode},
                              r.restart_policy));
  const json* t = Field(j, "template");
  if (t == nullptr) return Error(Join(path, "template"), "required field is missing");
  KT_RETURN_IF_ERROR(ExpectObject(*t, Join(path, "template")));
  if (take_template) {
    r.pod_template = std::move(const_cast<json&>(*t));  // not const: see ParseUnsafe
  } else {
    r.pod_template = *t;
  }
  return Status::Ok();
}

Status ParseSchedulingPolicy(const json& j, const std::string& path, SchedulingPolicy& s) {
  KT_RETURN_IF_ERROR(ExpectObject(j, path));
  KT_RETURN_IF_ERROR(RejectUnknown(
      j, path,
      {"minAvailable", "queue", "priorityClassName", "schedulerName", "scheduleTimeoutSeconds"}));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "minAvailable", s.min_available));
  KT_RETURN_IF_ERROR(ReadString(j, path, "queue", s.queue));
  KT_RETURN_IF_ERROR(ReadString(j, path, "priorityClassName", s.priority_class_name));
  KT_RETURN_IF_ERROR(ReadString(j, path, "schedulerName", s.scheduler_name));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "scheduleTimeoutSeconds", s.schedule_timeout_seconds));
  return Status::Ok();
}

Status ParseRunPolicy(const json& j, const std::string& path, RunPolicy& r) {
  KT_RETURN_IF_ERROR(ExpectObject(j, path));
  KT_RETURN_IF_ERROR(RejectUnknown(
      j, path,
      {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "startDeadlineSeconds",
       "backoffLimit", "suspend", "schedulingPolicy", "disruptionPolicy"}));
  KT_RETURN_IF_ERROR(ReadEnum(
      j, path, "cleanPodPolicy",
      {CleanPodPolicy::kNone, CleanPodPolicy::kRunning, CleanPodPolicy::kAll}, r.clean_pod_policy));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "ttlSecondsAfterFinished", r.ttl_seconds_after_finished));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "activeDeadlineSeconds", r.active_deadline_seconds));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "startDeadlineSeconds", r.start_deadline_seconds));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "backoffLimit", r.backoff_limit));
  KT_RETURN_IF_ERROR(ReadBool(j, path, "suspend", r.suspend));
  KT_RETURN_IF_ERROR(ReadEnum(j, path, "disruptionPolicy",
                              {DisruptionPolicy::kIgnore, DisruptionPolicy::kCount},
                              r.disruption_policy));
  if (const json* s = Field(j, "schedulingPolicy")) {
    SchedulingPolicy policy;
    KT_RETURN_IF_ERROR(ParseSchedulingPolicy(*s, Join(path, "schedulingPolicy"), policy));
    r.scheduling_policy = std::move(policy);
  }
  return Status::Ok();
}

Status ParseSpec(const json& j, TrainingJobSpec& spec, bool take_templates) {
  const std::string path = "spec";
  KT_RETURN_IF_ERROR(ExpectObject(j, path));
  KT_RETURN_IF_ERROR(RejectUnknown(
      j, path,
      {"replicaSpecs", "runPolicy", "successPolicy", "port", "clusterDomain", "serviceMode"}));
  const json* replicas = Field(j, "replicaSpecs");
  const std::string rpath = "spec.replicaSpecs";
  if (replicas == nullptr) return Error(rpath, "required field is missing");
  KT_RETURN_IF_ERROR(ExpectObject(*replicas, rpath));
  for (const auto& [key, value] : replicas->items()) {
    std::optional<ReplicaType> type = ReplicaTypeFromKey(key);
    if (!type) {
      return Error(Join(rpath, key),
                   "unknown replica type \"" + key + "\" (want PS, Worker, Chief or Evaluator)");
    }
    ReplicaSpec r;
    KT_RETURN_IF_ERROR(ParseReplicaSpec(value, Join(rpath, key), r, take_templates));
    spec.replica_specs[*type] = std::move(r);
  }
  if (const json* rp = Field(j, "runPolicy")) {
    KT_RETURN_IF_ERROR(ParseRunPolicy(*rp, "spec.runPolicy", spec.run_policy));
  }
  KT_RETURN_IF_ERROR(ReadEnum(j, path, "successPolicy",
                              {SuccessPolicy::kChiefOrWorker0, SuccessPolicy::kAllWorkers},
                              spec.success_policy));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "port", spec.port));
  KT_RETURN_IF_ERROR(ReadString(j, path, "clusterDomain", spec.cluster_domain));
  if (Field(j, "serviceMode") != nullptr) {
    ServiceMode mode = ServiceMode::kJobWide;
    KT_RETURN_IF_ERROR(
        ReadEnum(j, path, "serviceMode", {ServiceMode::kPerReplica, ServiceMode::kJobWide}, mode));
    spec.service_mode = mode;
  }
  return Status::Ok();
}

Status ParseFailure(const json& j, const std::string& path, FailureInfo& f) {
  KT_RETURN_IF_ERROR(ExpectObject(j, path));
  KT_RETURN_IF_ERROR(ReadString(j, path, "pod", f.pod));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "exitCode", f.exit_code));
  KT_RETURN_IF_ERROR(ReadString(j, path, "reason", f.reason));
  KT_RETURN_IF_ERROR(ReadString(j, path, "message", f.message));
  std::optional<Time> t;
  KT_RETURN_IF_ERROR(ReadTime(j, path, "time", t));
  f.time = t.value_or(Time{});
  return Status::Ok();
}

Status ParseStatusInto(const json& j, TrainingJobStatus& s) {
  const std::string path = "status";
  KT_RETURN_IF_ERROR(ExpectObject(j, path));
  KT_RETURN_IF_ERROR(ReadString(j, path, "state", s.state));
  if (const json* conds = Field(j, "conditions")) {
    if (!conds->is_array()) return Error("status.conditions", "must be an array");
    for (size_t i = 0; i < conds->size(); ++i) {
      const json& c = (*conds)[i];
      std::string cpath = "status.conditions[" + std::to_string(i) + "]";
      KT_RETURN_IF_ERROR(ExpectObject(c, cpath));
      std::string type, status_text;
      KT_RETURN_IF_ERROR(ReadString(c, cpath, "type", type));
      std::optional<ConditionType> ct = ConditionTypeFromName(type);
      if (!ct) continue;  // written by someone else; not ours to interpret
      Condition cond;
      cond.type = *ct;
      KT_RETURN_IF_ERROR(ReadString(c, cpath, "status", status_text));
      cond.status = status_text == "True";
      KT_RETURN_IF_ERROR(ReadString(c, cpath, "reason", cond.reason));
      KT_RETURN_IF_ERROR(ReadString(c, cpath, "message", cond.message));
      std::optional<Time> t;
      KT_RETURN_IF_ERROR(ReadTime(c, cpath, "lastTransitionTime", t));
      cond.last_transition_time = t.value_or(Time{});
      s.conditions.push_back(std::move(cond));
    }
  }
  if (const json* rs = Field(j, "replicaStatuses")) {
    KT_RETURN_IF_ERROR(ExpectObject(*rs, "status.replicaStatuses"));
    for (const auto& [key, value] : rs->items()) {
      std::optional<ReplicaType> type = ReplicaTypeFromKey(key);
      if (!type) continue;
      std::string rpath = "status.replicaStatuses." + key;
      KT_RETURN_IF_ERROR(ExpectObject(value, rpath));
      ReplicaStatus r;
      KT_RETURN_IF_ERROR(ReadInt(value, rpath, "active", r.active));
      KT_RETURN_IF_ERROR(ReadInt(value, rpath, "succeeded", r.succeeded));
      KT_RETURN_IF_ERROR(ReadInt(value, rpath, "failed", r.failed));
      KT_RETURN_IF_ERROR(ReadInt(value, rpath, "restarts", r.restarts));
      KT_RETURN_IF_ERROR(ReadInt(value, rpath, "disruptions", r.disruptions));
      if (const json* f = Field(value, "lastFailure")) {
        FailureInfo info;
        KT_RETURN_IF_ERROR(ParseFailure(*f, rpath + ".lastFailure", info));
        r.last_failure = std::move(info);
      }
      if (const json* f = Field(value, "lastDisruption")) {
        FailureInfo info;
        KT_RETURN_IF_ERROR(ParseFailure(*f, rpath + ".lastDisruption", info));
        r.last_disruption = std::move(info);
      }
      if (const json* b = Field(value, "backoff")) {
        if (!b->is_array()) return Error(rpath + ".backoff", "must be an array");
        for (size_t i = 0; i < b->size(); ++i) {
          const std::string bpath = rpath + ".backoff[" + std::to_string(i) + "]";
          KT_RETURN_IF_ERROR(ExpectObject((*b)[i], bpath));
          RestartBackoff entry;
          KT_RETURN_IF_ERROR(ReadInt((*b)[i], bpath, "index", entry.index));
          KT_RETURN_IF_ERROR(ReadInt((*b)[i], bpath, "failures", entry.failures));
          std::optional<Time> t;
          KT_RETURN_IF_ERROR(ReadTime((*b)[i], bpath, "notBefore", t));
          entry.not_before = t.value_or(Time{});
          r.backoff.push_back(entry);
        }
      }
      s.replica_statuses[*type] = std::move(r);
    }
  }
  KT_RETURN_IF_ERROR(ReadTime(j, path, "startTime", s.start_time));
  KT_RETURN_IF_ERROR(ReadTime(j, path, "completionTime", s.completion_time));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "observedGeneration", s.observed_generation));
  if (const json* cf = Field(j, "countedFailures")) {
    if (!cf->is_array()) return Error("status.countedFailures", "must be an array");
    for (const json& uid : *cf) {
      if (!uid.is_string()) return Error("status.countedFailures", "must hold strings");
      s.counted_failures.push_back(uid.get<std::string>());
    }
  }
  if (const json* cd = Field(j, "countedDisruptions")) {
    if (!cd->is_array()) return Error("status.countedDisruptions", "must be an array");
    for (const json& uid : *cd) {
      if (!uid.is_string()) return Error("status.countedDisruptions", "must hold strings");
      s.counted_disruptions.push_back(uid.get<std::string>());
    }
  }
  // Whatever a workload reported; the CRD makes it an object. Anything else is
  // not ours to interpret, and must not make the job unreadable.
  if (const json* m = Field(j, "metrics"); m != nullptr && m->is_object()) s.metrics = *m;
  KT_RETURN_IF_ERROR(ReadInt(j, path, "running", s.running));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "restarts", s.restarts));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "disruptions", s.disruptions));
  if (const json* p = Field(j, "progress")) {
    const std::string ppath = "status.progress";
    KT_RETURN_IF_ERROR(ExpectObject(*p, ppath));
    Progress progress;
    KT_RETURN_IF_ERROR(ReadInt(*p, ppath, "step", progress.step));
    KT_RETURN_IF_ERROR(ReadInt(*p, ppath, "totalSteps", progress.total_steps));
    KT_RETURN_IF_ERROR(ReadInt(*p, ppath, "percent", progress.percent));
    KT_RETURN_IF_ERROR(ReadInt(*p, ppath, "samplesPerSecond", progress.samples_per_second));
    KT_RETURN_IF_ERROR(ReadString(*p, ppath, "eta", progress.eta));
    KT_RETURN_IF_ERROR(ReadString(*p, ppath, "replica", progress.replica));
    KT_RETURN_IF_ERROR(ReadNumber(*p, ppath, "loss", progress.loss));
    std::optional<Time> t;
    KT_RETURN_IF_ERROR(ReadTime(*p, ppath, "updateTime", t));
    progress.update_time = t.value_or(Time{});
    s.progress = std::move(progress);
  }
  return Status::Ok();
}

// `take_templates`: the caller owns `object` (non-const) and gives it up, so the
// pod templates are moved out of it.
StatusOr<TrainingJob> ParseUnsafe(const json& object, bool take_templates) {
  if (!object.is_object()) return InvalidArgument("a TrainingJob must be a JSON object");
  KT_RETURN_IF_ERROR(
      RejectUnknown(object, "", {"apiVersion", "kind", "metadata", "spec", "status"}));
  std::string api_version, kind;
  KT_RETURN_IF_ERROR(ReadString(object, "", "apiVersion", api_version));
  KT_RETURN_IF_ERROR(ReadString(object, "", "kind", kind));
  if (api_version != kApiVersion) {
    return Error("apiVersion",
                 "must be " + std::string(kApiVersion) + ", got \"" + api_version + "\"");
  }
  if (kind != kKind) return Error("kind", "must be TrainingJob, got \"" + kind + "\"");
  TrainingJob job;
  const json* meta = Field(object, "metadata");
  if (meta == nullptr) return Error("metadata", "required field is missing");
  KT_RETURN_IF_ERROR(ParseMetadata(*meta, job.metadata));
  const json* spec = Field(object, "spec");
  if (spec == nullptr) return Error("spec", "required field is missing");
  KT_RETURN_IF_ERROR(ParseSpec(*spec, job.spec, take_templates));
  if (const json* status = Field(object, "status")) {
    KT_RETURN_IF_ERROR(ParseStatusInto(*status, job.status));
  }
  return job;
}

void PutOptional(json& j, const char* key, const auto& value) {
  if (value) j[key] = *value;
}

}  // namespace

StatusOr<TrainingJob> ParseTrainingJob(const json& object) {
  try {
    return ParseUnsafe(object, false);
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("malformed TrainingJob: ") + e.what());
  }
}

StatusOr<TrainingJob> ParseTrainingJob(json&& object) {
  try {
    return ParseUnsafe(object, true);
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("malformed TrainingJob: ") + e.what());
  }
}

StatusOr<TrainingJobStatus> ParseTrainingJobStatus(const json& status) {
  try {
    TrainingJobStatus s;
    KT_RETURN_IF_ERROR(ParseStatusInto(status, s));
    return s;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("malformed TrainingJob status: ") + e.what());
  }
}

json SpecToJson(const TrainingJobSpec& spec) {
  json replicas = json::object();
  for (const auto& [type, r] : spec.replica_specs) {
    replicas[std::string(Role(type).key)] = {{"replicas", r.replicas},
                                             {"restartPolicy", Name(r.restart_policy)},
                                             {"template", r.pod_template}};
  }
  const RunPolicy& rp = spec.run_policy;
  json run = {{"cleanPodPolicy", Name(rp.clean_pod_policy)}, {"suspend", rp.suspend}};
  PutOptional(run, "ttlSecondsAfterFinished", rp.ttl_seconds_after_finished);
  PutOptional(run, "activeDeadlineSeconds", rp.active_deadline_seconds);
  PutOptional(run, "startDeadlineSeconds", rp.start_deadline_seconds);
  PutOptional(run, "backoffLimit", rp.backoff_limit);
  // The default is left out: a job written back reads as it was written.
  if (rp.disruption_policy != DisruptionPolicy::kIgnore) {
    run["disruptionPolicy"] = Name(rp.disruption_policy);
  }
  if (rp.scheduling_policy) {
    json sp = json::object();
    PutOptional(sp, "minAvailable", rp.scheduling_policy->min_available);
    PutOptional(sp, "queue", rp.scheduling_policy->queue);
    PutOptional(sp, "priorityClassName", rp.scheduling_policy->priority_class_name);
    PutOptional(sp, "schedulerName", rp.scheduling_policy->scheduler_name);
    PutOptional(sp, "scheduleTimeoutSeconds", rp.scheduling_policy->schedule_timeout_seconds);
    run["schedulingPolicy"] = std::move(sp);
  }
  json out = {{"replicaSpecs", std::move(replicas)},
              {"runPolicy", std::move(run)},
              {"successPolicy", Name(spec.success_policy)},
              {"port", spec.port}};
  PutOptional(out, "clusterDomain", spec.cluster_domain);
  if (spec.service_mode) out["serviceMode"] = Name(*spec.service_mode);
  return out;
}

json StatusToJson(const TrainingJobStatus& s) {
  json out = json::object();
  if (!s.state.empty()) out["state"] = s.state;
  if (!s.conditions.empty()) {
    json conds = json::array();
    for (const Condition& c : s.conditions) {
      json cj = {{"type", Name(c.type)},
                 {"status", c.status ? "True" : "False"},
                 {"lastTransitionTime", FormatTime(c.last_transition_time)}};
      if (!c.reason.empty()) cj["reason"] = c.reason;
      if (!c.message.empty()) cj["message"] = c.message;
      conds.push_back(std::move(cj));
    }
    out["conditions"] = std::move(conds);
  }
  if (!s.replica_statuses.empty()) {
    json rs = json::object();
    for (const auto& [type, r] : s.replica_statuses) {
      json rj = {{"active", r.active},
                 {"succeeded", r.succeeded},
                 {"failed", r.failed},
                 {"restarts", r.restarts}};
      if (r.disruptions != 0) rj["disruptions"] = r.disruptions;
      auto failure_json = [](const FailureInfo& f) {
        json fj = {{"pod", f.pod}, {"time", FormatTime(f.time)}};
        PutOptional(fj, "exitCode", f.exit_code);
        if (!f.reason.empty()) fj["reason"] = f.reason;
        if (!f.message.empty()) fj["message"] = f.message;
        return fj;
      };
      if (r.last_failure) rj["lastFailure"] = failure_json(*r.last_failure);
      if (r.last_disruption) rj["lastDisruption"] = failure_json(*r.last_disruption);
      if (!r.backoff.empty()) {
        json bj = json::array();
        for (const RestartBackoff& b : r.backoff) {
          bj.push_back({{"index", b.index},
                        {"failures", b.failures},
                        {"notBefore", FormatTime(b.not_before)}});
        }
        rj["backoff"] = std::move(bj);
      }
      rs[std::string(Role(type).key)] = std::move(rj);
    }
    out["replicaStatuses"] = std::move(rs);
  }
  if (s.start_time) out["startTime"] = FormatTime(*s.start_time);
  if (s.completion_time) out["completionTime"] = FormatTime(*s.completion_time);
  if (s.observed_generation != 0) out["observedGeneration"] = s.observed_generation;
  if (!s.counted_failures.empty()) out["countedFailures"] = s.counted_failures;
  if (!s.counted_disruptions.empty()) out["countedDisruptions"] = s.counted_disruptions;
  if (s.metrics) out["metrics"] = *s.metrics;
  // Once the planner has counted replicas, 0 is worth showing in `kubectl get`.
  if (!s.replica_statuses.empty() || s.running != 0 || s.restarts != 0) {
    out["running"] = s.running;
    out["restarts"] = s.restarts;
  }
  if (s.disruptions != 0) out["disruptions"] = s.disruptions;
  if (s.progress) {
    const Progress& p = *s.progress;
    json pj = {{"step", p.step},
               {"totalSteps", p.total_steps},
               {"percent", p.percent},
               {"samplesPerSecond", p.samples_per_second},
               {"updateTime", FormatTime(p.update_time)}};
    if (!p.eta.empty()) pj["eta"] = p.eta;
    if (!p.replica.empty()) pj["replica"] = p.replica;
    if (p.loss) pj["loss"] = *p.loss;
    out["progress"] = std::move(pj);
  }
  return out;
}

json ToJson(const TrainingJob& job) {
  const ObjectMeta& m = job.metadata;
  json meta = {{"name", m.name}};
  if (!m.namespace_.empty()) meta["namespace"] = m.namespace_;
  if (!m.uid.empty()) meta["uid"] = m.uid;
  if (!m.resource_version.empty()) meta["resourceVersion"] = m.resource_version;
  if (m.generation != 0) meta["generation"] = m.generation;
  if (!m.labels.empty()) meta["labels"] = m.labels;
  if (!m.annotations.empty()) meta["annotations"] = m.annotations;
  if (m.creation_timestamp) meta["creationTimestamp"] = FormatTime(*m.creation_timestamp);
  if (m.deletion_timestamp) meta["deletionTimestamp"] = FormatTime(*m.deletion_timestamp);
  json out = {{"apiVersion", kApiVersion},
              {"kind", kKind},
              {"metadata", std::move(meta)},
              {"spec", SpecToJson(job.spec)}};
  json status = StatusToJson(job.status);
  if (!status.empty()) out["status"] = std::move(status);
  return out;
}

const nlohmann::json& Member(const nlohmann::json& object, const char* key,
                             const nlohmann::json& fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it == object.end() ? fallback : *it;
}

std::string StringField(const nlohmann::json& object, std::string_view key) {
  if (!object.is_object()) return std::string();
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace kubetrain::api
