#include "operator/sweep/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "operator/api/json.h"
#include "operator/sweep/median_stop.h"

namespace kubetrain::sweep {

using nlohmann::json;

namespace {

// A row's key for the parameters BoundSweepStatus left out ("3 more").
constexpr std::string_view kMoreParametersKey = "...";
// Event messages (they quote trial messages), as a row's message is bounded.
constexpr size_t kMaxEventMessageBytes = 1024;

// splitmix64: a fixed, portable generator (std::uniform_*_distribution is
// implementation-defined, so the same seed could give other trials elsewhere).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, 1), from (seed, trial, parameter) alone.
double Uniform(int64_t seed, int32_t index, size_t param) {
  uint64_t h = Mix(static_cast<uint64_t>(seed));
  h = Mix(h ^ static_cast<uint64_t>(index));
  h = Mix(h ^ static_cast<uint64_t>(param));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

std::string FormatNumber(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::string FormatInt(double v) {
  return std::to_string(static_cast<int64_t>(std::llround(v)));
}

double Step(const api::Parameter& p) {
  return p.step.value_or(1.0);
}

// Points of a numeric parameter on the grid: min, min+step, ... <= max.
int64_t GridPoints(const api::Parameter& p) {
  if (p.type == api::ParameterType::kCategorical) return static_cast<int64_t>(p.values.size());
  const double lo = p.min.value_or(0), hi = p.max.value_or(0), step = Step(p);
  if (!(step > 0) || !(hi >= lo)) return 1;
  const double n = std::floor((hi - lo) / step * (1 + 1e-12)) + 1;
  return n > 1e9 ? int64_t{1'000'000'000} : static_cast<int64_t>(n);
}

std::string GridValue(const api::Parameter& p, int64_t k) {
  if (p.type == api::ParameterType::kCategorical) return p.values[static_cast<size_t>(k)];
  const double v = p.min.value_or(0) + static_cast<double>(k) * Step(p);
  return p.type == api::ParameterType::kInt ? FormatInt(v) : FormatNumber(v, 12);
}

std::string RandomValue(const api::Parameter& p, double u) {
  if (p.type == api::ParameterType::kCategorical) {
    const size_t n = p.values.size();
    return p.values[std::min(n - 1, static_cast<size_t>(u * static_cast<double>(n)))];
  }
  const double lo = p.min.value_or(0), hi = p.max.value_or(1);
  if (p.type == api::ParameterType::kInt) {
    if (p.scale == api::Scale::kLog) {
      const double v = std::floor(std::exp(std::log(lo) + u * (std::log(hi + 1) - std::log(lo))));
      return FormatInt(std::clamp(v, lo, hi));
    }
    const double step = Step(p);
    const double points = std::floor((hi - lo) / step) + 1;
    return FormatInt(lo + std::min(points - 1, std::floor(u * points)) * step);
  }
  const double v = p.scale == api::Scale::kLog
                       ? std::exp(std::log(lo) + u * (std::log(hi) - std::log(lo)))
                       : lo + u * (hi - lo);
  return FormatNumber(std::clamp(v, lo, hi), 6);
}

void SubstituteStrings(json& j, const std::map<std::string, std::string>& params,
                       std::string& unknown) {
  if (j.is_object() || j.is_array()) {
    for (auto& child : j) SubstituteStrings(child, params, unknown);
    return;
  }
  if (!j.is_string()) return;
  const std::string& in = j.get_ref<const std::string&>();
  static constexpr std::string_view kOpen = "${params.";
  if (in.find(kOpen) == std::string::npos) return;
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t at = in.find(kOpen, pos);
    if (at == std::string::npos) break;
    const size_t close = in.find('}', at);
    if (close == std::string::npos) break;
    const std::string name = in.substr(at + kOpen.size(), close - at - kOpen.size());
    out += in.substr(pos, at - pos);
    auto it = params.find(name);
    if (it == params.end()) {
      if (unknown.empty()) unknown = name;
      out += in.substr(at, close + 1 - at);
    } else {
      out += it->second;
    }
    pos = close + 1;
  }
  out += in.substr(pos);
  j = std::move(out);
}

void SetCondition(api::TrainingSweepStatus& s, api::ConditionType type, bool value,
                  const std::string& reason, const std::string& message, api::Time now) {
  for (api::Condition& c : s.conditions) {
    if (c.type != type) continue;
    if (c.status != value) c.last_transition_time = now;
    c.status = value;
    c.reason = reason;
    c.message = message;
    return;
  }
  s.conditions.push_back(api::Condition{type, value, reason, message, now});
}

bool Better(const api::Objective& o, double a, double b) {
  return o.direction == api::Direction::kMaximize ? a > b : a < b;
}

bool GoalReached(const api::Objective& o, double v) {
  if (!o.goal) return false;
  return o.direction == api::Direction::kMaximize ? v >= *o.goal : v <= *o.goal;
}

std::string Describe(const std::map<std::string, std::string>& params) {
  std::string out;
  for (const auto& [k, v] : params) out += (out.empty() ? "" : ", ") + k + "=" + v;
  return out;
}

}  // namespace

int32_t TotalTrials(const api::TrainingSweepSpec& spec) {
  if (spec.algorithm.name != api::SearchAlgorithm::kGrid) return spec.max_trials;
  int64_t size = 1;
  for (const api::Parameter& p : spec.parameters) {
    size *= std::max<int64_t>(1, GridPoints(p));
    if (size >= spec.max_trials) return spec.max_trials;
  }
  return static_cast<int32_t>(std::min<int64_t>(size, spec.max_trials));
}

std::map<std::string, std::string> TrialParameters(const api::TrainingSweepSpec& spec,
                                                   int32_t index) {
  std::map<std::string, std::string> out;
  if (spec.algorithm.name == api::SearchAlgorithm::kGrid) {
    int64_t rest = index;
    for (size_t i = spec.parameters.size(); i-- > 0;) {
      const api::Parameter& p = spec.parameters[i];
      const int64_t n = std::max<int64_t>(1, GridPoints(p));
      if (p.type == api::ParameterType::kCategorical && p.values.empty()) continue;
      out[p.name] = GridValue(p, rest % n);
      rest /= n;
    }
    return out;
  }
  for (size_t i = 0; i < spec.parameters.size(); ++i) {
    const api::Parameter& p = spec.parameters[i];
    if (p.type == api::ParameterType::kCategorical && p.values.empty()) continue;
    out[p.name] = RandomValue(p, Uniform(spec.algorithm.seed, index, i));
  }
  return out;
}

StatusOr<api::TrainingJobSpec> Substitute(const api::TrainingJobSpec& spec,
                                          const std::map<std::string, std::string>& params) {
  json j = api::SpecToJson(spec);
  std::string unknown;
  SubstituteStrings(j, params, unknown);
  if (!unknown.empty()) {
    return InvalidArgument("spec.trialTemplate: ${params." + unknown +
                           "} names no parameter in spec.parameters");
  }
  auto job = api::ParseTrainingJob(json{{"apiVersion", api::kApiVersion},
                                        {"kind", api::kKind},
                                        {"metadata", {{"name", "trial"}}},
                                        {"spec", std::move(j)}});
  if (!job.ok()) {
    return InvalidArgument("the substituted trial template is invalid: " + job.status().message());
  }
  return std::move(job->spec);
}

StatusOr<double> MetricValue(const std::optional<json>& metrics, std::string_view path) {
  if (!metrics || !metrics->is_object()) {
    return NotFound("the trial succeeded without reporting metrics (no status.metrics)");
  }
  const json* at = &*metrics;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string key(path.substr(pos, dot == std::string_view::npos ? path.npos : dot - pos));
    if (!at->is_object() || !at->contains(key)) {
      return NotFound("the trial succeeded but status.metrics has no " + std::string(path));
    }
    at = &(*at)[key];
    if (dot == std::string_view::npos) break;
    pos = dot + 1;
  }
  if (!at->is_number() || !std::isfinite(at->get<double>())) {
    return NotFound("the trial succeeded but status.metrics." + std::string(path) +
                    " is not a finite number");
  }
  return at->get<double>();
}

namespace {

// The trainer flags whose directory must not be shared between trials: a trial would resume
// from another's checkpoint, or commit its model over another's.
constexpr std::string_view kPerTrialDirFlags[] = {"--checkpoint-dir", "--output"};

std::string TrialDir(std::string_view dir, std::string_view trial) {
  std::string out(dir);
  while (out.size() > 1 && out.back() == '/' && !out.ends_with("://")) out.pop_back();
  return out + "/" + std::string(trial);
}

// Gives every per-trial directory flag in the containers' command and args ("--flag=DIR" or
// "--flag DIR") the trial's own subdirectory DIR/<trial>.
void PerTrialDirs(api::TrainingJobSpec& spec, std::string_view trial) {
  for (auto& [type, replica] : spec.replica_specs) {
    json* containers = nullptr;
    if (auto pod = replica.pod_template.find("spec");
        pod != replica.pod_template.end() && pod->is_object()) {
      if (auto c = pod->find("containers"); c != pod->end() && c->is_array()) containers = &*c;
    }
    if (containers == nullptr) continue;
    for (json& container : *containers) {
      if (!container.is_object()) continue;
      for (const char* list : {"command", "args"}) {
        auto words = container.find(list);
        if (words == container.end() || !words->is_array()) continue;
        for (size_t i = 0; i < words->size(); ++i) {
          if (!(*words)[i].is_string()) continue;
          const std::string word = (*words)[i].get<std::string>();
          for (std::string_view flag : kPerTrialDirFlags) {
            if (word.size() > flag.size() + 1 && word.starts_with(flag) &&
                word[flag.size()] == '=') {
              (*words)[i] = std::string(flag) + "=" + TrialDir(word.substr(flag.size() + 1), trial);
            } else if (word == flag && i + 1 < words->size() && (*words)[i + 1].is_string() &&
                       !(*words)[i + 1].get<std::string>().empty()) {
              (*words)[i + 1] = TrialDir((*words)[i + 1].get<std::string>(), trial);
              ++i;
            }
          }
        }
      }
    }
  }
}

}  // namespace

StatusOr<api::TrainingJob> BuildTrial(const api::TrainingSweep& sweep, int32_t index) {
  const auto params = TrialParameters(sweep.spec, index);
  auto spec = Substitute(sweep.spec.trial_template, params);
  if (!spec.ok()) return spec.status();
  api::TrainingJob trial;
  trial.metadata.name = api::TrialName(sweep.metadata.name, index);
  trial.metadata.namespace_ = sweep.metadata.namespace_;
  trial.metadata.labels[std::string(kSweepNameLabel)] = sweep.metadata.name;
  trial.metadata.labels[std::string(kTrialIndexLabel)] = std::to_string(index);
  trial.metadata.annotations[std::string(kParametersAnnotation)] = json(params).dump();
  trial.spec = std::move(*spec);
  PerTrialDirs(trial.spec, trial.metadata.name);
  trial.spec.run_policy.suspend = sweep.spec.suspend;
  trial.spec.run_policy.ttl_seconds_after_finished.reset();  // the sweep applies it
  return trial;
}

namespace {

// One pass of the sweep planner over the sweep's status rows and its observed
// trials, in named steps (PlanRowsAndTrials reads them in order). Each step
// works on plan_.status (s_), which starts as the sweep's status.
class RowsPass {
 public:
  RowsPass(const api::TrainingSweep& sweep, const std::vector<ObservedTrial>& trials, api::Time now)
      : sweep_(sweep),
        spec_(sweep.spec),
        trials_(trials),
        now_(now),
        total_(TotalTrials(sweep.spec)),
        s_(plan_.status) {
    s_ = sweep.status;
  }

  // Start time, Created, the generation observed.
  void Accept() {
    if (!s_.start_time) s_.start_time = now_;
    if (!s_.IsTrue(api::ConditionType::kCreated)) {
      SetCondition(s_, api::ConditionType::kCreated, true, "SweepCreated", "the sweep was accepted",
                   now_);
      if (s_.state.empty()) s_.state = "Created";
    }
    s_.observed_generation = sweep_.metadata.generation;
  }

  // A row for each observed trial the status does not know (a status write
  // was lost), in index order.
  void AdoptUnknownTrials() {
    const bool omitted_any = s_.omitted.Total() != 0;
    const int32_t last_row = s_.trials.empty() ? -1 : s_.trials.back().index;
    for (const ObservedTrial& t : trials_) {
      bool known = false;
      for (const api::TrialStatus& row : s_.trials) known = known || row.index == t.index;
      if (known || t.index < 0 || t.index >= total_) continue;
      if (omitted_any && t.index < last_row) continue;  // its row was dropped: final, counted
      api::TrialStatus row;
      row.name = t.name;
      row.index = t.index;
      row.parameters = TrialParameters(spec_, t.index);
      s_.trials.push_back(std::move(row));
    }
    std::sort(s_.trials.begin(), s_.trials.end(),
              [](const auto& a, const auto& b) { return a.index < b.index; });
  }

  // Each row not final from its trial: running, succeeded with its metric,
  // failed, or deleted; its loss curve; an event for each row that became final.
  void UpdateRowsFromTrials() {
    for (api::TrialStatus& row : s_.trials) {
      if (api::IsFinal(row.phase)) continue;
      const ObservedTrial* t = Observed(row.index);
      const api::TrialPhase before = row.phase;
      if (t == nullptr) {
        if (row.phase == api::TrialPhase::kRunning) {
          row.phase = api::TrialPhase::kFailed;
          row.reason = "TrialDeleted";
          row.message = "the trial's TrainingJob was deleted before it finished";
        }
      } else if (t->status.IsTrue(api::ConditionType::kSucceeded)) {
        auto value = MetricValue(t->status.metrics, spec_.objective.metric);
        if (value.ok()) {
          row.phase = api::TrialPhase::kSucceeded;
          row.value = *value;
          row.reason.clear();
          row.message.clear();
        } else {
          row.phase = api::TrialPhase::kFailed;
          row.reason = "MetricMissing";
          row.message = value.status().message();
        }
      } else if (t->status.IsTrue(api::ConditionType::kFailed)) {
        row.phase = api::TrialPhase::kFailed;
        const api::Condition* c = t->status.Find(api::ConditionType::kFailed);
        row.reason = c->reason.empty() ? "TrialFailed" : c->reason;
        row.message = c->message;
      } else if (!t->deleting) {
        row.phase = api::TrialPhase::kRunning;
      }
      // The loss curve, for the median stopping rule (a succeeded trial's last reading too).
      if (spec_.early_stopping && t != nullptr && t->status.progress && t->status.progress->loss &&
          (row.phase == api::TrialPhase::kRunning || row.phase == api::TrialPhase::kSucceeded)) {
        const api::Progress& p = *t->status.progress;
        RecordCurvePoint(row.curve, p.step, p.total_steps, *p.loss);
      }
      if (row.phase == before || !api::IsFinal(row.phase)) continue;
      if (row.phase == api::TrialPhase::kSucceeded) {
        plan_.events.push_back({false, "TrialSucceeded",
                                "trial " + row.name + " (" + Describe(row.parameters) +
                                    ") reached " + spec_.objective.metric + "=" +
                                    FormatNumber(*row.value, 6)});
      } else {
        plan_.events.push_back(
            {true, "TrialFailed",
             "trial " + row.name + " failed (" + row.reason + "): " + row.message});
      }
    }
  }

  // Early stopping (spec.earlyStopping, median_stop.h): each running trial's
  // best loss so far against the succeeded trials' running averages. A stopped
  // trial's job is deleted, as for GoalReached: it frees its pods and quota at
  // once, and its row keeps the numbers that decided.
  void EarlyStop() {
    if (!spec_.early_stopping || sweep_.status.Finished()) return;
    std::vector<std::span<const api::CurvePoint>> completed;
    for (const api::TrialStatus& row : s_.trials) {
      if (row.phase == api::TrialPhase::kSucceeded) completed.emplace_back(row.curve);
    }
    for (api::TrialStatus& row : s_.trials) {
      if (row.phase != api::TrialPhase::kRunning) continue;
      const ObservedTrial* t = Observed(row.index);
      if (t == nullptr || t->deleting || !t->status.progress || !t->status.progress->loss) {
        continue;
      }
      const api::Progress& p = *t->status.progress;
      // At its last step a trial has paid for its run and its result is about to come.
      if (p.total_steps > 0 && p.step >= p.total_steps) continue;
      auto stop = MedianStop(*spec_.early_stopping, api::Direction::kMinimize, completed, row.curve,
                             p.step, *p.loss);
      if (!stop) continue;
      row.phase = api::TrialPhase::kEarlyStopped;
      row.reason = "EarlyStopped";
      row.message = "best training loss " + FormatNumber(stop->value, 6) + " by step " +
                    std::to_string(stop->step) + " is worse than the median " +
                    FormatNumber(stop->median, 6) + " of " + std::to_string(stop->trials) +
                    " succeeded trials' running averages at that step";
      row.early_stop = *stop;
      plan_.deletes.push_back(row.name);
      plan_.events.push_back(
          {false, "TrialEarlyStopped",
           "trial " + row.name + " (" + Describe(row.parameters) + ") stopped: " + row.message});
    }
    // Stopped before, and the cache does not show the deletion yet.
    for (const api::TrialStatus& row : s_.trials) {
      if (row.phase != api::TrialPhase::kEarlyStopped) continue;
      const ObservedTrial* t = Observed(row.index);
      if (t == nullptr || t->deleting || t->status.Finished()) continue;
      DeleteOnce(row.name);
    }
  }

  // The counts of rows by phase (with the omitted ones) and trialProgress.
  void Count() {
    s_.running = 0;
    s_.succeeded = s_.omitted.succeeded;
    s_.failed = s_.omitted.failed;
    s_.stopped = s_.omitted.stopped;
    s_.early_stopped = s_.omitted.early_stopped;
    for (const api::TrialStatus& row : s_.trials) {
      switch (row.phase) {
        case api::TrialPhase::kPending:
        case api::TrialPhase::kRunning:
          ++s_.running;
          break;
        case api::TrialPhase::kSucceeded:
          ++s_.succeeded;
          break;
        case api::TrialPhase::kFailed:
          ++s_.failed;
          break;
        case api::TrialPhase::kStopped:
          ++s_.stopped;
          break;
        case api::TrialPhase::kEarlyStopped:
          ++s_.early_stopped;
          break;
      }
    }
    s_.trial_progress = std::to_string(Finished()) + "/" + std::to_string(total_);
  }

  void PickBest() {
    s_.best_trial.reset();
    for (const api::TrialStatus& row : s_.trials) {
      if (row.phase != api::TrialPhase::kSucceeded || !row.value) continue;
      if (!s_.best_trial || Better(spec_.objective, *row.value, s_.best_trial->value)) {
        s_.best_trial = api::BestTrial{row.name, row.parameters, *row.value};
      }
    }
  }

  // A finished sweep only makes sure nothing of it still runs.
  SweepPlan StopWhatStillRuns() {
    StopActive(s_.IsTrue(api::ConditionType::kSucceeded) ? "SweepSucceeded" : "SweepFailed");
    Count();
    // A trial stopped before whose deletion the cache does not show yet.
    for (const ObservedTrial& t : trials_) {
      if (!t.deleting && !t.status.Finished()) DeleteOnce(t.name);
    }
    return Done();
  }

  // Why the spec (the CRD should have refused it) or the trial template is
  // invalid; empty when valid.
  std::string Invalid() const {
    std::string invalid = ToStatus(api::ValidateSweep(sweep_)).message();
    if (invalid.empty() && total_ > 0) {
      auto first = BuildTrial(sweep_, 0);
      if (!first.ok()) invalid = first.status().message();
    }
    return invalid;
  }

  // Stops every trial not final and finishes the sweep.
  SweepPlan End(bool succeeded, const std::string& reason, const std::string& message) {
    StopActive(reason);
    Count();
    Finish(succeeded, reason, message);
    return Done();
  }

  // The sweep's end, if it has come: the goal reached, too many failures,
  // every trial final.
  std::optional<SweepPlan> EndIfOver() {
    if (s_.best_trial && GoalReached(spec_.objective, s_.best_trial->value)) {
      return End(true, "GoalReached",
                 "trial " + s_.best_trial->name + " reached " + spec_.objective.metric + "=" +
                     FormatNumber(s_.best_trial->value, 6) + " (goal " +
                     FormatNumber(*spec_.objective.goal, 6) + ")");
    }
    if (spec_.max_failed_trials && s_.failed > *spec_.max_failed_trials) {
      return End(false, "TooManyFailedTrials",
                 std::to_string(s_.failed) + " trials failed, more than maxFailedTrials (" +
                     std::to_string(*spec_.max_failed_trials) + ")");
    }
    const int32_t finished = Finished();
    if (finished < total_ || s_.running != 0) return std::nullopt;
    if (s_.best_trial) {
      Finish(true, "AllTrialsFinished",
             std::to_string(finished) + " trials finished; best " + s_.best_trial->name + " (" +
                 Describe(s_.best_trial->parameters) + ") " + spec_.objective.metric + "=" +
                 FormatNumber(s_.best_trial->value, 6));
    } else {
      Finish(false, "NoTrialSucceeded",
             "all " + std::to_string(finished) + " trials finished and none reported " +
                 spec_.objective.metric);
    }
    return Done();
  }

  // Running trials follow spec.suspend; a suspended sweep starts nothing and
  // ends its plan here (true).
  bool Suspend() {
    for (const api::TrialStatus& row : s_.trials) {
      if (api::IsFinal(row.phase)) continue;
      const ObservedTrial* t = Observed(row.index);
      if (t != nullptr && !t->deleting && t->suspended != spec_.suspend) {
        plan_.set_suspend.emplace_back(t->name, spec_.suspend);
      }
    }
    if (spec_.suspend) {
      SetCondition(s_, api::ConditionType::kSuspended, true, "SweepSuspended",
                   "spec.suspend is true: no new trials, running trials suspended", now_);
      SetCondition(s_, api::ConditionType::kRunning, false, "SweepSuspended", "", now_);
      s_.state = "Suspended";
      return true;
    }
    if (s_.IsTrue(api::ConditionType::kSuspended)) {
      SetCondition(s_, api::ConditionType::kSuspended, false, "SweepResumed",
                   "spec.suspend is false", now_);
    }
    return false;
  }

  // Trials up to parallelism: Pending rows not yet observed first, then new
  // rows in index order; then the sweep is Running.
  void StartTrials() {
    for (const api::TrialStatus& row : s_.trials) {
      if (row.phase != api::TrialPhase::kPending || Observed(row.index) != nullptr) continue;
      auto trial = BuildTrial(sweep_, row.index);
      if (trial.ok()) plan_.creates.push_back(std::move(*trial));
    }
    int32_t next = s_.trials.empty() ? 0 : s_.trials.back().index + 1;
    while (s_.running < spec_.parallelism && next < total_) {
      auto trial = BuildTrial(sweep_, next);
      if (!trial.ok()) break;  // checked for trial 0 above; substitution does not differ
      api::TrialStatus row;
      row.name = trial->metadata.name;
      row.index = next;
      row.parameters = TrialParameters(spec_, next);
      plan_.events.push_back(
          {false, "TrialCreated", "trial " + row.name + " started: " + Describe(row.parameters)});
      s_.trials.push_back(std::move(row));
      plan_.creates.push_back(std::move(*trial));
      ++s_.running;
      ++next;
    }
    Count();
    SetCondition(s_, api::ConditionType::kRunning, true, "TrialsRunning",
                 std::to_string(s_.running) + " trials running, " + s_.trial_progress + " finished",
                 now_);
    s_.state = "Running";
  }

  SweepPlan Done() {
    plan_.status_changed = s_ != sweep_.status;
    return std::move(plan_);
  }

 private:
  const ObservedTrial* Observed(int32_t index) const {
    for (const ObservedTrial& t : trials_) {
      if (t.index == index) return &t;
    }
    return nullptr;
  }

  int32_t Finished() const { return s_.succeeded + s_.failed + s_.stopped + s_.early_stopped; }

  void DeleteOnce(const std::string& name) {
    if (std::find(plan_.deletes.begin(), plan_.deletes.end(), name) == plan_.deletes.end()) {
      plan_.deletes.push_back(name);
    }
  }

  // Every row not final is Stopped for `reason`; its trial deleted.
  void StopActive(const std::string& reason) {
    for (api::TrialStatus& row : s_.trials) {
      if (api::IsFinal(row.phase)) continue;
      const ObservedTrial* t = Observed(row.index);
      if (t != nullptr && !t->deleting) plan_.deletes.push_back(t->name);
      row.phase = api::TrialPhase::kStopped;
      row.reason = reason;
      row.message = "stopped: the sweep finished";
    }
  }

  void Finish(bool succeeded, const std::string& reason, const std::string& message) {
    SetCondition(s_, api::ConditionType::kRunning, false, reason, message, now_);
    SetCondition(s_, succeeded ? api::ConditionType::kSucceeded : api::ConditionType::kFailed, true,
                 reason, message, now_);
    s_.state = succeeded ? "Succeeded" : "Failed";
    if (!s_.completion_time) s_.completion_time = now_;
    plan_.events.push_back({!succeeded, succeeded ? "SweepSucceeded" : "SweepFailed", message});
  }

  const api::TrainingSweep& sweep_;
  const api::TrainingSweepSpec& spec_;
  const std::vector<ObservedTrial>& trials_;
  const api::Time now_;
  const int32_t total_;
  SweepPlan plan_;
  api::TrainingSweepStatus& s_;  // plan_.status
};

SweepPlan PlanRowsAndTrials(const api::TrainingSweep& sweep,
                            const std::vector<ObservedTrial>& trials, api::Time now) {
  RowsPass pass(sweep, trials, now);
  pass.Accept();
  pass.AdoptUnknownTrials();
  pass.UpdateRowsFromTrials();
  pass.EarlyStop();
  pass.Count();
  pass.PickBest();
  if (sweep.status.Finished()) return pass.StopWhatStillRuns();
  if (std::string invalid = pass.Invalid(); !invalid.empty()) {
    return pass.End(false, "InvalidSpec", invalid);
  }
  if (auto over = pass.EndIfOver()) return std::move(*over);
  if (pass.Suspend()) return pass.Done();
  pass.StartTrials();
  return pass.Done();
}

// The template's TTL, applied by the sweep: a finished trial whose final row
// is already written (in the status the sweep was read with, not only in this
// plan) is deleted `ttl` after its completionTime.
void ApplyTrialTtl(const api::TrainingSweep& sweep, const std::vector<ObservedTrial>& trials,
                   api::Time now, SweepPlan& plan) {
  const auto& ttl = sweep.spec.trial_template.run_policy.ttl_seconds_after_finished;
  if (!ttl) return;
  const auto& rows = sweep.status.trials;
  for (const ObservedTrial& t : trials) {
    if (t.deleting || !t.status.Finished() || !t.status.completion_time) continue;
    const auto row = std::find_if(rows.begin(), rows.end(),
                                  [&](const api::TrialStatus& r) { return r.index == t.index; });
    // Final in its row, or its final row was dropped (see BoundSweepStatus).
    const bool recorded = row != rows.end() ? api::IsFinal(row->phase)
                                            : sweep.status.omitted.Total() != 0 && !rows.empty() &&
                                                  t.index < rows.back().index;
    if (!recorded) continue;
    if (std::find(plan.deletes.begin(), plan.deletes.end(), t.name) != plan.deletes.end()) continue;
    const api::Time due = *t.status.completion_time + std::chrono::seconds(*ttl);
    if (due <= now) {
      plan.deletes.push_back(t.name);
      continue;
    }
    const auto wait = std::chrono::ceil<std::chrono::seconds>(due - now);
    if (!plan.requeue_after || wait < *plan.requeue_after) plan.requeue_after = wait;
  }
}

}  // namespace

SweepPlan PlanSweep(const api::TrainingSweep& sweep, const std::vector<ObservedTrial>& trials,
                    api::Time now) {
  SweepPlan plan = PlanRowsAndTrials(sweep, trials, now);
  api::SetSummaryConditions(plan.status.conditions, now);
  BoundSweepStatus(plan.status, sweep.spec.objective);
  plan.status_changed = plan.status != sweep.status;
  for (SweepEvent& e : plan.events) e.message = api::BoundText(e.message, kMaxEventMessageBytes);
  ApplyTrialTtl(sweep, trials, now, plan);
  return plan;
}

void BoundSweepStatus(api::TrainingSweepStatus& status, const api::Objective& objective) {
  const auto bound_parameters = [](std::map<std::string, std::string>& params) {
    std::map<std::string, std::string> kept;
    size_t bytes = 0, left_out = 0;
    for (const auto& [name, value] : params) {
      if (name == kMoreParametersKey) continue;
      std::string n = api::BoundText(name, api::kMaxParameterValueBytes);
      std::string v = api::BoundText(value, api::kMaxParameterValueBytes);
      if (bytes + n.size() + v.size() > api::kMaxRowParameterBytes) {
        ++left_out;
        continue;
      }
      bytes += n.size() + v.size();
      kept.emplace(std::move(n), std::move(v));
    }
    if (const auto more = params.find(std::string(kMoreParametersKey)); more != params.end()) {
      kept.emplace(more->first, more->second);  // already bounded: left as it is
    } else if (left_out > 0) {
      kept.emplace(kMoreParametersKey, std::to_string(left_out) + " more");
    }
    params = std::move(kept);
  };
  for (api::TrialStatus& row : status.trials) {
    bound_parameters(row.parameters);
    if (!api::IsFinal(row.phase)) {  // only a final row says why (up to parallelism rows)
      row.reason.clear();
      row.message.clear();
    }
    // Only running and succeeded trials' curves are read again (the early stopping median).
    if (api::IsFinal(row.phase) && row.phase != api::TrialPhase::kSucceeded) row.curve.clear();
    if (row.curve.size() > api::kMaxCurvePoints) row.curve.resize(api::kMaxCurvePoints);
    row.reason = api::BoundText(row.reason, api::kMaxTrialReasonBytes);
    row.message = api::BoundText(row.message, api::kMaxTrialMessageBytes);
  }
  if (status.best_trial) bound_parameters(status.best_trial->parameters);
  for (api::Condition& c : status.conditions) {
    c.reason = api::BoundText(c.reason, api::kMaxTrialReasonBytes);
    c.message = api::BoundText(c.message, api::kMaxTrialMessageBytes);
  }

  // Rows of final trials: the best kBestTrialRows succeeded, then the newest, up to
  // kMaxFinalTrialRows. Pending and running rows always stay.
  std::vector<size_t> finals;
  for (size_t i = 0; i < status.trials.size(); ++i) {
    if (api::IsFinal(status.trials[i].phase)) finals.push_back(i);
  }
  if (finals.size() <= static_cast<size_t>(api::kMaxFinalTrialRows)) return;
  std::vector<bool> keep(status.trials.size(), false);
  std::vector<size_t> best;
  for (size_t i : finals) {
    const api::TrialStatus& row = status.trials[i];
    if (row.phase == api::TrialPhase::kSucceeded && row.value) best.push_back(i);
  }
  std::stable_sort(best.begin(), best.end(), [&](size_t a, size_t b) {
    return Better(objective, *status.trials[a].value, *status.trials[b].value);
  });
  int32_t kept = 0;
  for (size_t k = 0; k < best.size() && kept < api::kBestTrialRows; ++k, ++kept) {
    keep[best[k]] = true;
  }
  for (auto it = finals.rbegin(); it != finals.rend() && kept < api::kMaxFinalTrialRows; ++it) {
    if (!keep[*it]) {
      keep[*it] = true;
      ++kept;
    }
  }
  std::vector<api::TrialStatus> rows;
  rows.reserve(status.trials.size());
  for (size_t i = 0; i < status.trials.size(); ++i) {
    api::TrialStatus& row = status.trials[i];
    if (!api::IsFinal(row.phase) || keep[i]) {
      rows.push_back(std::move(row));
      continue;
    }
    switch (row.phase) {
      case api::TrialPhase::kSucceeded:
        ++status.omitted.succeeded;
        break;
      case api::TrialPhase::kFailed:
        ++status.omitted.failed;
        break;
      case api::TrialPhase::kEarlyStopped:
        ++status.omitted.early_stopped;
        break;
      default:
        ++status.omitted.stopped;
        break;
    }
  }
  status.trials = std::move(rows);
}

}  // namespace kubetrain::sweep
