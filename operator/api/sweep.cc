#include "operator/api/sweep.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <set>

#include "operator/api/json.h"
#include "operator/api/json_read.h"
namespace kubetrain::api {

using nlohmann::json;

std::string_view Name(Direction d) {
  return d == Direction::kMaximize ? "maximize" : "minimize";
}
std::string_view Name(SearchAlgorithm a) {
  return a == SearchAlgorithm::kGrid ? "grid" : "random";
}
std::string_view Name(ParameterType t) {
  switch (t) {
    case ParameterType::kDouble:
      return "double";
    case ParameterType::kInt:
      return "int";
    case ParameterType::kCategorical:
      return "categorical";
  }
  return "double";
}
std::string_view Name(Scale s) {
  return s == Scale::kLinear ? "linear" : "log";
}

std::string_view Name(EarlyStoppingAlgorithm) {
  return "medianStop";
}

namespace {
constexpr std::initializer_list<TrialPhase> kTrialPhases = {
    TrialPhase::kPending, TrialPhase::kRunning, TrialPhase::kSucceeded,
    TrialPhase::kFailed,  TrialPhase::kStopped, TrialPhase::kEarlyStopped};
}  // namespace

std::string_view Name(TrialPhase p) {
  switch (p) {
    case TrialPhase::kPending:
      return "Pending";
    case TrialPhase::kRunning:
      return "Running";
    case TrialPhase::kSucceeded:
      return "Succeeded";
    case TrialPhase::kFailed:
      return "Failed";
    case TrialPhase::kStopped:
      return "Stopped";
    case TrialPhase::kEarlyStopped:
      return "EarlyStopped";
  }
  return "Pending";
}

std::optional<TrialPhase> TrialPhaseFromName(std::string_view name) {
  for (TrialPhase p : kTrialPhases) {
    if (Name(p) == name) return p;
  }
  return std::nullopt;
}

bool IsFinal(TrialPhase p) {
  return p == TrialPhase::kSucceeded || p == TrialPhase::kFailed || p == TrialPhase::kStopped ||
         p == TrialPhase::kEarlyStopped;
}

const Condition* TrainingSweepStatus::Find(ConditionType type) const {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}
bool TrainingSweepStatus::IsTrue(ConditionType type) const {
  const Condition* c = Find(type);
  return c != nullptr && c->status;
}
bool TrainingSweepStatus::Finished() const {
  return IsTrue(ConditionType::kSucceeded) || IsTrue(ConditionType::kFailed);
}

std::string TrialName(std::string_view sweep_name, int32_t index) {
  return std::string(sweep_name) + "-" + std::to_string(index);
}

std::string KindOf(const json& object) {
  if (!object.is_object()) return "";
  auto it = object.find("kind");
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

namespace {

// --- reading (strict in spec) ---

using namespace json_read;  // NOLINT: the shared field readers

Status ParseParameter(const json& j, const std::string& path, Parameter& p) {
  KT_RETURN_IF_ERROR(ExpectObject(j, path));
  KT_RETURN_IF_ERROR(
      RejectUnknown(j, path, {"name", "type", "min", "max", "step", "scale", "values"}));
  if (Field(j, "name") == nullptr) return Error(Join(path, "name"), "required field is missing");
  if (Field(j, "type") == nullptr) return Error(Join(path, "type"), "required field is missing");
  KT_RETURN_IF_ERROR(ReadString(j, path, "name", p.name));
  KT_RETURN_IF_ERROR(
      ReadEnum(j, path, "type",
               {ParameterType::kDouble, ParameterType::kInt, ParameterType::kCategorical}, p.type));
  KT_RETURN_IF_ERROR(ReadNumber(j, path, "min", p.min));
  KT_RETURN_IF_ERROR(ReadNumber(j, path, "max", p.max));
  KT_RETURN_IF_ERROR(ReadNumber(j, path, "step", p.step));
  KT_RETURN_IF_ERROR(ReadEnum(j, path, "scale", {Scale::kLinear, Scale::kLog}, p.scale));
  if (const json* v = Field(j, "values")) {
    const std::string vpath = Join(path, "values");
    if (!v->is_array()) return Error(vpath, "must be an array");
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        return Error(vpath + "[" + std::to_string(i) + "]", "must be a string");
      }
      p.values.push_back((*v)[i].get<std::string>());
    }
  }
  return Status::Ok();
}

// "spec.replicaSpecs..." (as ParseTrainingJob names it) -> "spec.trialTemplate.replicaSpecs...".
std::string TemplatePath(std::string_view message) {
  if (message.starts_with("spec.")) {
    return "spec.trialTemplate." + std::string(message.substr(5));
  }
  return std::string(message);
}

Status ParseSpec(const json& j, TrainingSweepSpec& s) {
  const std::string path = "spec";
  KT_RETURN_IF_ERROR(ExpectObject(j, path));
  KT_RETURN_IF_ERROR(
      RejectUnknown(j, path,
                    {"objective", "algorithm", "parallelism", "maxTrials", "maxFailedTrials",
                     "suspend", "parameters", "trialTemplate", "earlyStopping"}));
  const json* objective = Field(j, "objective");
  if (objective == nullptr) return Error("spec.objective", "required field is missing");
  KT_RETURN_IF_ERROR(ExpectObject(*objective, "spec.objective"));
  KT_RETURN_IF_ERROR(RejectUnknown(*objective, "spec.objective", {"metric", "direction", "goal"}));
  if (Field(*objective, "metric") == nullptr) {
    return Error("spec.objective.metric", "required field is missing");
  }
  KT_RETURN_IF_ERROR(ReadString(*objective, "spec.objective", "metric", s.objective.metric));
  KT_RETURN_IF_ERROR(ReadEnum(*objective, "spec.objective", "direction",
                              {Direction::kMaximize, Direction::kMinimize}, s.objective.direction));
  KT_RETURN_IF_ERROR(ReadNumber(*objective, "spec.objective", "goal", s.objective.goal));
  if (const json* a = Field(j, "algorithm")) {
    KT_RETURN_IF_ERROR(ExpectObject(*a, "spec.algorithm"));
    KT_RETURN_IF_ERROR(RejectUnknown(*a, "spec.algorithm", {"name", "seed"}));
    KT_RETURN_IF_ERROR(ReadEnum(*a, "spec.algorithm", "name",
                                {SearchAlgorithm::kGrid, SearchAlgorithm::kRandom},
                                s.algorithm.name));
    KT_RETURN_IF_ERROR(ReadInt(*a, "spec.algorithm", "seed", s.algorithm.seed));
  }
  KT_RETURN_IF_ERROR(ReadInt(j, path, "parallelism", s.parallelism));
  KT_RETURN_IF_ERROR(ReadInt(j, path, "maxTrials", s.max_trials));
  if (Field(j, "maxFailedTrials") != nullptr) {
    int32_t v = 0;
    KT_RETURN_IF_ERROR(ReadInt(j, path, "maxFailedTrials", v));
    s.max_failed_trials = v;
  }
  KT_RETURN_IF_ERROR(ReadBool(j, path, "suspend", s.suspend));
  if (const json* e = Field(j, "earlyStopping")) {
    const std::string epath = "spec.earlyStopping";
    KT_RETURN_IF_ERROR(ExpectObject(*e, epath));
    KT_RETURN_IF_ERROR(RejectUnknown(*e, epath, {"algorithm", "minTrialsRequired", "startStep"}));
    EarlyStopping es;
    KT_RETURN_IF_ERROR(
        ReadEnum(*e, epath, "algorithm", {EarlyStoppingAlgorithm::kMedianStop}, es.algorithm));
    KT_RETURN_IF_ERROR(ReadInt(*e, epath, "minTrialsRequired", es.min_trials_required));
    KT_RETURN_IF_ERROR(ReadInt(*e, epath, "startStep", es.start_step));
    s.early_stopping = es;
  }
  const json* params = Field(j, "parameters");
  if (params == nullptr) return Error("spec.parameters", "required field is missing");
  if (!params->is_array()) return Error("spec.parameters", "must be an array");
  for (size_t i = 0; i < params->size(); ++i) {
    Parameter p;
    KT_RETURN_IF_ERROR(
        ParseParameter((*params)[i], "spec.parameters[" + std::to_string(i) + "]", p));
    s.parameters.push_back(std::move(p));
  }
  const json* t = Field(j, "trialTemplate");
  if (t == nullptr) return Error("spec.trialTemplate", "required field is missing");
  KT_RETURN_IF_ERROR(ExpectObject(*t, "spec.trialTemplate"));
  // The template is a TrainingJob spec: the TrainingJob's own parser checks it.
  auto job = ParseTrainingJob(json{{"apiVersion", kApiVersion},
                                   {"kind", kKind},
                                   {"metadata", {{"name", "trial"}}},
                                   {"spec", *t}});
  if (!job.ok()) return InvalidArgument(TemplatePath(job.status().message()));
  s.trial_template = std::move(job->spec);
  return Status::Ok();
}

void ReadParameterMap(const json& j, std::map<std::string, std::string>& out) {
  if (!j.is_object()) return;
  for (const auto& [k, v] : j.items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
}

}  // namespace

StatusOr<TrainingSweepStatus> ParseTrainingSweepStatus(const json& j) {
  TrainingSweepStatus s;
  if (!j.is_object()) return s;
  // Conditions, state and times have the TrainingJob's shape: its parser reads them.
  json common = json::object();
  for (const char* key : {"state", "conditions", "startTime", "completionTime"}) {
    if (j.contains(key)) common[key] = j[key];
  }
  auto job_status = ParseTrainingJobStatus(common);
  if (!job_status.ok()) return job_status.status();
  s.state = job_status->state;
  s.conditions = std::move(job_status->conditions);
  s.start_time = job_status->start_time;
  s.completion_time = job_status->completion_time;
  s.observed_generation = j.value("observedGeneration", int64_t{0});
  s.running = j.value("running", 0);
  s.succeeded = j.value("succeeded", 0);
  s.failed = j.value("failed", 0);
  s.stopped = j.value("stopped", 0);
  s.early_stopped = j.value("earlyStopped", 0);
  s.trial_progress = j.value("trialProgress", std::string());
  if (const json* o = Field(j, "omittedTrials"); o != nullptr && o->is_object()) {
    s.omitted.succeeded = o->value("succeeded", 0);
    s.omitted.failed = o->value("failed", 0);
    s.omitted.stopped = o->value("stopped", 0);
    s.omitted.early_stopped = o->value("earlyStopped", 0);
  }
  if (const json* trials = Field(j, "trials"); trials != nullptr && trials->is_array()) {
    for (const json& t : *trials) {
      if (!t.is_object()) continue;
      TrialStatus row;
      row.name = t.value("name", std::string());
      row.index = t.value("index", 0);
      ReadParameterMap(t.value("parameters", json::object()), row.parameters);
      row.phase =
          TrialPhaseFromName(t.value("phase", std::string())).value_or(TrialPhase::kPending);
      if (const json* v = Field(t, "value"); v != nullptr && v->is_number()) {
        row.value = v->get<double>();
      }
      row.reason = t.value("reason", std::string());
      row.message = t.value("message", std::string());
      if (const json* c = Field(t, "curve"); c != nullptr && c->is_array()) {
        for (const json& point : *c) {
          if (row.curve.size() >= kMaxCurvePoints) break;
          if (!point.is_array() || point.size() != 2 || !point[0].is_number_integer() ||
              !point[1].is_number()) {
            continue;
          }
          row.curve.push_back({point[0].get<int64_t>(), point[1].get<double>()});
        }
      }
      if (const json* e = Field(t, "earlyStopped"); e != nullptr && e->is_object()) {
        EarlyStopRecord r;
        r.step = e->value("step", int64_t{0});
        r.value = e->value("value", 0.0);
        r.median = e->value("median", 0.0);
        r.trials = e->value("trials", 0);
        row.early_stop = r;
      }
      s.trials.push_back(std::move(row));
    }
  }
  if (const json* b = Field(j, "bestTrial"); b != nullptr && b->is_object()) {
    BestTrial best;
    best.name = b->value("name", std::string());
    ReadParameterMap(b->value("parameters", json::object()), best.parameters);
    if (const json* v = Field(*b, "value"); v != nullptr && v->is_number()) {
      best.value = v->get<double>();
      s.best_trial = std::move(best);
    }
  }
  return s;
}

StatusOr<TrainingSweep> ParseTrainingSweep(const json& object) {
  if (!object.is_object()) return InvalidArgument("a TrainingSweep must be an object");
  const std::string kind = KindOf(object);
  if (kind != kSweepKind) {
    return InvalidArgument("kind: want " + std::string(kSweepKind) + ", got \"" + kind + "\"");
  }
  TrainingSweep sweep;
  // Metadata has the TrainingJob's shape: borrow its lenient reader.
  auto meta = ParseTrainingJob(json{{"apiVersion", kApiVersion},
                                    {"kind", kKind},
                                    {"metadata", object.value("metadata", json::object())},
                                    {"spec", {{"replicaSpecs", json::object()}}}});
  if (!meta.ok()) return meta.status();
  sweep.metadata = std::move(meta->metadata);
  const json* spec = Field(object, "spec");
  if (spec == nullptr) return Error("spec", "required field is missing");
  KT_RETURN_IF_ERROR(ParseSpec(*spec, sweep.spec));
  if (const json* status = Field(object, "status")) {
    auto s = ParseTrainingSweepStatus(*status);
    if (!s.ok()) return s.status();
    sweep.status = std::move(*s);
  }
  return sweep;
}

namespace {

json ParameterToJson(const Parameter& p) {
  json out = {{"name", p.name}, {"type", Name(p.type)}};
  if (p.min) out["min"] = *p.min;
  if (p.max) out["max"] = *p.max;
  if (p.step) out["step"] = *p.step;
  if (p.type != ParameterType::kCategorical) out["scale"] = Name(p.scale);
  if (!p.values.empty()) out["values"] = p.values;
  return out;
}

}  // namespace

json SweepStatusToJson(const TrainingSweepStatus& s) {
  TrainingJobStatus common;
  common.state = s.state;
  common.conditions = s.conditions;
  common.start_time = s.start_time;
  common.completion_time = s.completion_time;
  json out = StatusToJson(common);
  if (s.observed_generation != 0) out["observedGeneration"] = s.observed_generation;
  out["running"] = s.running;
  out["succeeded"] = s.succeeded;
  out["failed"] = s.failed;
  out["stopped"] = s.stopped;
  if (s.early_stopped != 0) out["earlyStopped"] = s.early_stopped;
  if (!s.trial_progress.empty()) out["trialProgress"] = s.trial_progress;
  if (s.omitted.Total() != 0) {
    out["omittedTrials"] = {{"succeeded", s.omitted.succeeded},
                            {"failed", s.omitted.failed},
                            {"stopped", s.omitted.stopped}};
    if (s.omitted.early_stopped != 0) {
      out["omittedTrials"]["earlyStopped"] = s.omitted.early_stopped;
    }
  }
  if (!s.trials.empty()) {
    json rows = json::array();
    for (const TrialStatus& t : s.trials) {
      json row = {{"name", t.name},
                  {"index", t.index},
                  {"parameters", t.parameters},
                  {"phase", Name(t.phase)}};
      if (t.value) row["value"] = *t.value;
      if (!t.reason.empty()) row["reason"] = t.reason;
      if (!t.message.empty()) row["message"] = t.message;
      if (!t.curve.empty()) {
        json curve = json::array();
        for (const CurvePoint& p : t.curve) curve.push_back(json::array({p.step, p.loss}));
        row["curve"] = std::move(curve);
      }
      if (t.early_stop) {
        row["earlyStopped"] = {{"step", t.early_stop->step},
                               {"value", t.early_stop->value},
                               {"median", t.early_stop->median},
                               {"trials", t.early_stop->trials}};
      }
      rows.push_back(std::move(row));
    }
    out["trials"] = std::move(rows);
  }
  if (s.best_trial) {
    out["bestTrial"] = {{"name", s.best_trial->name},
                        {"parameters", s.best_trial->parameters},
                        {"value", s.best_trial->value}};
  }
  return out;
}

std::string BoundText(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  constexpr std::string_view kMore = "...";
  if (max_bytes < kMore.size()) return std::string(kMore.substr(0, max_bytes));
  size_t end = max_bytes - kMore.size();
  // Back to the start of a UTF-8 sequence (never inside one).
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return std::string(s.substr(0, end)) + std::string(kMore);
}

json ToJson(const TrainingSweep& sweep) {
  TrainingJob shell;
  shell.metadata = sweep.metadata;
  json out = ToJson(shell);
  out["kind"] = kSweepKind;
  const TrainingSweepSpec& s = sweep.spec;
  json objective = {{"metric", s.objective.metric}, {"direction", Name(s.objective.direction)}};
  if (s.objective.goal) objective["goal"] = *s.objective.goal;
  json params = json::array();
  for (const Parameter& p : s.parameters) params.push_back(ParameterToJson(p));
  json spec = {{"objective", std::move(objective)},
               {"algorithm", {{"name", Name(s.algorithm.name)}, {"seed", s.algorithm.seed}}},
               {"parallelism", s.parallelism},
               {"maxTrials", s.max_trials},
               {"suspend", s.suspend},
               {"parameters", std::move(params)},
               {"trialTemplate", SpecToJson(s.trial_template)}};
  if (s.max_failed_trials) spec["maxFailedTrials"] = *s.max_failed_trials;
  if (s.early_stopping) {
    spec["earlyStopping"] = {{"algorithm", Name(s.early_stopping->algorithm)},
                             {"minTrialsRequired", s.early_stopping->min_trials_required},
                             {"startStep", s.early_stopping->start_step}};
  }
  out["spec"] = std::move(spec);
  out.erase("status");
  json status = SweepStatusToJson(sweep.status);
  if (status.size() > 4 || sweep.status.running != 0 || !sweep.status.state.empty()) {
    out["status"] = std::move(status);
  }
  return out;
}

// --- the CRD's rules ---

namespace {

bool IsParameterName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(name.front())) return false;
  for (char c : name) {
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

// The CRD's objective.metric pattern: dot-separated [A-Za-z0-9_-]+ segments.
bool IsMetricPath(std::string_view path) {
  if (path.empty()) return false;
  bool segment_empty = true;
  for (char c : path) {
    if (c == '.') {
      if (segment_empty) return false;
      segment_empty = true;
      continue;
    }
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
    segment_empty = false;
  }
  return !segment_empty;
}

// A DNS-1035 label without its length limit (the budget rule covers length).
bool MatchesLabelPattern(std::string_view name) {
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (name.empty() || name.front() < 'a' || name.front() > 'z' || !alnum(name.back())) return false;
  for (char c : name) {
    if (!alnum(c) && c != '-') return false;
  }
  return true;
}

bool Integral(const std::optional<double>& v) {
  return !v || *v == std::trunc(*v);
}

// Validates the template as the spec of the longest-named trial: the
// TrainingJob's own rules, paths moved under spec.trialTemplate.
void ValidateTemplate(const TrainingSweep& sweep, std::vector<FieldError>& errors) {
  TrainingJob trial;
  trial.metadata.name = "t";  // name rules are the sweep's own (below)
  trial.spec = sweep.spec.trial_template;
  for (FieldError e : Validate(trial)) {
    if (e.path.starts_with("metadata")) continue;
    e.path = TemplatePath(e.path);
    errors.push_back(std::move(e));
  }
}

}  // namespace

std::vector<FieldError> ValidateSweep(const TrainingSweep& sweep) {
  std::vector<FieldError> errors;
  const std::string& name = sweep.metadata.name;
  const TrainingSweepSpec& spec = sweep.spec;

  // Root CEL rules: the name, and the name budget of the last trial's children.
  if (name.empty()) {
    errors.push_back({"metadata.name", "required field is missing"});
  } else if (!MatchesLabelPattern(name)) {
    errors.push_back({"metadata.name",
                      "metadata.name must be a DNS-1035 label (lower-case letters, digits and "
                      "'-', starting with a letter), because trials are named <sweep>-<index>"});
  }
  if (!name.empty() && spec.max_trials >= 1) {
    const std::string last_trial = TrialName(name, spec.max_trials - 1);
    for (const auto& [type, r] : spec.trial_template.replica_specs) {
      if (r.replicas <= 0) continue;
      if (ChildName(last_trial, type, r.replicas - 1).size() > kMaxChildNameLength) {
        errors.push_back(
            {"metadata.name",
             "the longest trial child name <sweep>-<trial>-<role>-<index> would exceed 63 "
             "characters; shorten metadata.name"});
        break;
      }
    }
  }

  if (!IsMetricPath(spec.objective.metric)) {
    errors.push_back(
        {"spec.objective.metric", "must be a dotted path into status.metrics such as eval.auc"});
  }
  if (spec.objective.goal && !std::isfinite(*spec.objective.goal)) {
    errors.push_back({"spec.objective.goal", "must be a finite number"});
  }
  if (spec.parallelism < 1) {
    errors.push_back({"spec.parallelism", "should be greater than or equal to 1"});
  }
  if (spec.max_trials < 1) {
    errors.push_back({"spec.maxTrials", "should be greater than or equal to 1"});
  }
  if (spec.max_trials > kMaxSweepTrials) {
    errors.push_back(
        {"spec.maxTrials", "should be less than or equal to " + std::to_string(kMaxSweepTrials)});
  }
  if (spec.max_failed_trials && *spec.max_failed_trials < 0) {
    errors.push_back({"spec.maxFailedTrials", "should be greater than or equal to 0"});
  }
  if (const auto& e = spec.early_stopping) {
    if (e->min_trials_required < 1) {
      errors.push_back(
          {"spec.earlyStopping.minTrialsRequired", "should be greater than or equal to 1"});
    }
    if (e->min_trials_required > kMaxSweepTrials) {
      errors.push_back({"spec.earlyStopping.minTrialsRequired",
                        "should be less than or equal to " + std::to_string(kMaxSweepTrials)});
    }
    if (e->start_step < 1) {
      errors.push_back({"spec.earlyStopping.startStep", "should be greater than or equal to 1"});
    }
  }

  if (spec.parameters.empty()) {
    errors.push_back({"spec.parameters", "should have at least 1 items"});
  }
  if (spec.parameters.size() > 20) {
    errors.push_back({"spec.parameters", "should have at most 20 items"});
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < spec.parameters.size(); ++i) {
    const Parameter& p = spec.parameters[i];
    const std::string path = "spec.parameters[" + std::to_string(i) + "]";
    if (!seen.insert(p.name).second) {
      errors.push_back({path, "Duplicate value: parameter names must be unique"});
    }
    if (!IsParameterName(p.name)) {
      errors.push_back({path + ".name",
                        "must match [A-Za-z_][A-Za-z0-9_]* (it is referenced as ${params.NAME})"});
    }
    const bool numeric = p.type != ParameterType::kCategorical;
    if (numeric && (!p.min || !p.max)) {
      errors.push_back({path, "double and int parameters need min and max"});
    }
    if (numeric && p.min && p.max && !(*p.min < *p.max)) {
      errors.push_back({path, "min must be less than max"});
    }
    if (numeric && p.scale == Scale::kLog && p.min && !(*p.min > 0)) {
      errors.push_back({path, "scale log needs min > 0"});
    }
    if (p.step && !(*p.step > 0)) {
      errors.push_back({path + ".step", "should be greater than 0"});
    }
    if (p.type == ParameterType::kInt &&
        (!Integral(p.min) || !Integral(p.max) || !Integral(p.step))) {
      errors.push_back({path, "int parameters need integer min, max and step"});
    }
    if (p.type == ParameterType::kCategorical && p.values.empty()) {
      errors.push_back({path, "categorical parameters need values"});
    }
    if (p.type != ParameterType::kCategorical && !p.values.empty()) {
      errors.push_back({path, "values is only for categorical parameters"});
    }
    if (p.values.size() > 100) {
      errors.push_back({path + ".values", "should have at most 100 items"});
    }
  }
  if (spec.algorithm.name == SearchAlgorithm::kGrid) {
    for (const Parameter& p : spec.parameters) {
      if (p.type == ParameterType::kDouble && !p.step) {
        errors.push_back(
            {"spec", "grid search needs a finite space: every double parameter needs a step"});
        break;
      }
    }
  }
  ValidateTemplate(sweep, errors);
  return errors;
}

std::vector<FieldError> ValidateSweepUpdate(const TrainingSweep& old_sweep,
                                            const TrainingSweep& updated) {
  std::vector<FieldError> errors;
  if (old_sweep.spec.objective != updated.spec.objective) {
    errors.push_back({"spec", "spec.objective is immutable"});
  }
  return errors;
}

}  // namespace kubetrain::api
