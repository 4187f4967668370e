// TrainingSweep (kubetrain.io/v1alpha1): a template TrainingJob run many times
// with different hyper-parameters, as plain C++ values, plus its JSON and the
// CRD's rules in C++.
//
// The structs mirror crds/trainingsweeps.kubetrain.io.yaml field for field;
// default member initializers are the CRD's defaults. ParseTrainingSweep is
// strict in `spec` (unknown fields, wrong types, unknown enum values) and
// lenient in `metadata` and `status`, like ParseTrainingJob. ValidateSweep
// implements the CRD's value and CEL rules rule for rule (crds/crd_test.sh
// holds both to the same verdict). No exceptions escape.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "operator/api/types.h"
#include "operator/api/validation.h"

namespace kubetrain::api {

inline constexpr std::string_view kSweepKind = "TrainingSweep";
// spec.maxTrials at most this many.
inline constexpr int32_t kMaxSweepTrials = 1000;

// Bounds on a sweep's status, so that it stays far below etcd's 1.5 MiB object limit
// whatever the trials report (BoundSweepStatus applies them; planner_test measures the
// worst case at kMaxSweepTrials). Strings longer than these are cut at a UTF-8 boundary and
// end in "...".
inline constexpr size_t kMaxTrialMessageBytes = 512;  // a row's message, a condition's
inline constexpr size_t kMaxTrialReasonBytes = 128;
inline constexpr size_t kMaxParameterValueBytes = 128;  // each name and value in a row
// A row's parameters beyond this many bytes (names and values) are left out; the row then
// has the key "..." saying how many (all of them are in the trial's annotation).
inline constexpr size_t kMaxRowParameterBytes = 512;
// Rows of final trials kept in status.trials: the kBestTrialRows best succeeded ones and
// the newest others; the older ones are dropped and counted in status.omittedTrials. Rows
// of pending and running trials are always kept (at most spec.parallelism).
inline constexpr int32_t kMaxFinalTrialRows = 100;
inline constexpr int32_t kBestTrialRows = 10;

enum class Direction { kMaximize, kMinimize };
enum class SearchAlgorithm { kGrid, kRandom };
enum class ParameterType { kDouble, kInt, kCategorical };
enum class Scale { kLinear, kLog };
enum class EarlyStoppingAlgorithm { kMedianStop };

std::string_view Name(Direction d);
std::string_view Name(SearchAlgorithm a);
std::string_view Name(ParameterType t);
std::string_view Name(Scale s);
std::string_view Name(EarlyStoppingAlgorithm a);

struct Objective {
  std::string metric;  // dotted path into the trial's status.metrics: "eval.auc"
  Direction direction = Direction::kMaximize;
  std::optional<double> goal;  // stop the sweep once a trial reaches it

  friend bool operator==(const Objective&, const Objective&) = default;
};

struct AlgorithmSpec {
  SearchAlgorithm name = SearchAlgorithm::kRandom;
  int64_t seed = 0;

  friend bool operator==(const AlgorithmSpec&, const AlgorithmSpec&) = default;
};

struct Parameter {
  std::string name;  // [A-Za-z_][A-Za-z0-9_]*: referenced as ${params.NAME}
  ParameterType type = ParameterType::kDouble;
  std::optional<double> min;  // double and int
  std::optional<double> max;
  std::optional<double> step;  // grid spacing; int defaults to 1
  Scale scale = Scale::kLinear;
  std::vector<std::string> values;  // categorical

  friend bool operator==(const Parameter&, const Parameter&) = default;
};

// spec.earlyStopping (Katib's earlyStopping, with its medianstop settings as fields): stop a
// running trial whose best training loss by step s is worse than the median of the succeeded
// trials' running-average losses up to s, once s >= startStep and at least minTrialsRequired
// succeeded trials have a reading by s (operator/sweep/median_stop.h). The loss (the trial's
// status.progress.loss, lower is better) is what a trial reports while it runs; the objective
// is known only at its end.
struct EarlyStopping {
  EarlyStoppingAlgorithm algorithm = EarlyStoppingAlgorithm::kMedianStop;
  int32_t min_trials_required = 3;
  int64_t start_step = 1;

  friend bool operator==(const EarlyStopping&, const EarlyStopping&) = default;
};

struct TrainingSweepSpec {
  Objective objective;
  AlgorithmSpec algorithm;
  int32_t parallelism = 1;
  int32_t max_trials = 10;
  std::optional<int32_t> max_failed_trials;  // unset: no limit
  bool suspend = false;
  std::vector<Parameter> parameters;
  TrainingJobSpec trial_template;
  std::optional<EarlyStopping> early_stopping;  // unset: every trial runs to its end

  friend bool operator==(const TrainingSweepSpec&, const TrainingSweepSpec&) = default;
};

enum class TrialPhase { kPending, kRunning, kSucceeded, kFailed, kStopped, kEarlyStopped };
std::string_view Name(TrialPhase p);
std::optional<TrialPhase> TrialPhaseFromName(std::string_view name);
// Succeeded, Failed, Stopped or EarlyStopped: the trial will not change again.
bool IsFinal(TrialPhase p);

// A row keeps at most this many (step, loss) points of its trial's curve: the first reading in
// each 1/kMaxCurvePoints of its total steps.
// Ten, with the loss to 6 significant digits: 1,000 running rows of curves add at most ~350 KB
// to the status (SweepBoundTest).
inline constexpr size_t kMaxCurvePoints = 10;

struct CurvePoint {
  int64_t step = 0;
  double loss = 0;

  friend bool operator==(const CurvePoint&, const CurvePoint&) = default;
};

// The numbers that stopped a trial (phase EarlyStopped).
struct EarlyStopRecord {
  int64_t step = 0;    // the trial's step when it was judged
  double value = 0;    // its best loss by that step
  double median = 0;   // the median of the succeeded trials' running averages up to it
  int32_t trials = 0;  // how many succeeded trials the median is over
  friend bool operator==(const EarlyStopRecord&, const EarlyStopRecord&) = default;
};

// One row per trial the sweep started, in index order.
struct TrialStatus {
  std::string name;
  int32_t index = 0;
  std::map<std::string, std::string> parameters;  // name -> substituted text
  TrialPhase phase = TrialPhase::kPending;
  std::optional<double> value;  // the objective, when the trial reported it
  std::string reason;           // why it failed or stopped
  std::string message;
  // With spec.earlyStopping: the trial's loss curve, as read while it ran (bounded by
  // kMaxCurvePoints), and what stopped it early.
  std::vector<CurvePoint> curve;
  std::optional<EarlyStopRecord> early_stop;

  friend bool operator==(const TrialStatus&, const TrialStatus&) = default;
};

struct BestTrial {
  std::string name;
  std::map<std::string, std::string> parameters;
  double value = 0;

  friend bool operator==(const BestTrial&, const BestTrial&) = default;
};

// Final trials whose rows were dropped from status.trials (see kMaxFinalTrialRows), by
// phase. They are included in the status' succeeded, failed and stopped counts.
struct OmittedTrials {
  int32_t succeeded = 0;
  int32_t failed = 0;
  int32_t stopped = 0;
  int32_t early_stopped = 0;

  int32_t Total() const { return succeeded + failed + stopped + early_stopped; }
  friend bool operator==(const OmittedTrials&, const OmittedTrials&) = default;
};

struct TrainingSweepStatus {
  // Created, Running, Suspended, Succeeded or Failed.
  std::string state;
  std::vector<Condition> conditions;
  // In index order; bounded (see kMaxFinalTrialRows). Every trial whose index is below the
  // last row's and that has no row is final and counted in `omitted`.
  std::vector<TrialStatus> trials;
  OmittedTrials omitted;
  std::optional<BestTrial> best_trial;
  int32_t running = 0;  // trials pending or running
  int32_t succeeded = 0;
  int32_t failed = 0;
  int32_t stopped = 0;
  int32_t early_stopped = 0;   // stopped by spec.earlyStopping (not failed)
  std::string trial_progress;  // "<finished>/<total>", for `kubectl get`
  std::optional<Time> start_time;
  std::optional<Time> completion_time;
  int64_t observed_generation = 0;

  friend bool operator==(const TrainingSweepStatus&, const TrainingSweepStatus&) = default;

  const Condition* Find(ConditionType type) const;
  bool IsTrue(ConditionType type) const;
  bool Finished() const;
};

struct TrainingSweep {
  ObjectMeta metadata;
  TrainingSweepSpec spec;
  TrainingSweepStatus status;

  friend bool operator==(const TrainingSweep&, const TrainingSweep&) = default;
};

StatusOr<TrainingSweep> ParseTrainingSweep(const nlohmann::json& object);
StatusOr<TrainingSweepStatus> ParseTrainingSweepStatus(const nlohmann::json& status);
nlohmann::json ToJson(const TrainingSweep& sweep);
nlohmann::json SweepStatusToJson(const TrainingSweepStatus& status);

// `s` cut to at most `max_bytes` bytes at a UTF-8 boundary, ending in "..." when cut.
// Idempotent: a bounded string is returned unchanged.
std::string BoundText(std::string_view s, size_t max_bytes);

// The name of trial `index` of sweep `sweep_name`: "<sweep>-<index>".
std::string TrialName(std::string_view sweep_name, int32_t index);

// The CRD's rules (create and update). Empty when the sweep is valid.
std::vector<FieldError> ValidateSweep(const TrainingSweep& sweep);
// The update rules (CEL transition rules): the objective cannot change, since
// the values already recorded were measured against it. Does not repeat
// ValidateSweep(updated).
std::vector<FieldError> ValidateSweepUpdate(const TrainingSweep& old_sweep,
                                            const TrainingSweep& updated);

// The object's kind, "" when it has none.
std::string KindOf(const nlohmann::json& object);

}  // namespace kubetrain::api
