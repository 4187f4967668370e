// The TrainingSweep planner: which trials to start, stop and report, as a pure
// function.
//
// PlanSweep(sweep, observed trials, now) -> SweepPlan. No I/O, no clock reads,
// no globals; random search is seeded and trial i's parameters depend only on
// (spec, i), so the same input always gives the same plan. Both backends use it:
// the operator's SweepController (trials are TrainingJobs owned by the sweep)
// and `kubetrain run -f sweep.yaml` (trials are local runs of the job planner).
//
// Flow / Guarantees:
//  - A trial is first recorded as a Pending row in status.trials, then created.
//    The executor writes the status before it creates: a lagging cache of trials
//    never starts more than `parallelism` trials, since the rows count as active.
//  - A Pending row whose trial is not observed is (re)created: the create is
//    idempotent (deterministic name <sweep>-<index>, AlreadyExists = done).
//  - A row that was Running and whose trial vanished is Failed (TrialDeleted),
//    never restarted: trials are not repeated behind the user's back.
//  - A trial that succeeds without a finite number at spec.objective.metric in
//    its status.metrics is Failed (MetricMissing), with the path in the message.
//  - The sweep ends Succeeded when the goal is reached (GoalReached; running
//    trials are stopped: deleted, their rows Stopped) or when every trial is
//    final with at least one success (AllTrialsFinished); Failed when more than
//    maxFailedTrials trials failed (TooManyFailedTrials; running ones stopped),
//    when every trial is final and none succeeded (NoTrialSucceeded), or when
//    the spec is invalid (InvalidSpec).
//  - status.trials is bounded (BoundSweepStatus): old final rows are dropped and
//    counted in status.omittedTrials. A trial without a row whose index is below the
//    last row's is such a trial: final, counted, never adopted again.
//  - Suspend: no new trials; running trials get spec.runPolicy.suspend: true
//    (and false again on resume).
//  - kstatus's Ready, Reconciling and Stalled are set from the other conditions
//    (api::SetSummaryConditions): a running or suspended sweep is InProgress, a
//    succeeded one Current, a failed one Failed.
//  - Early stopping (spec.earlyStopping, median_stop.h): each running trial's row records its
//    loss curve from status.progress (at most api::kMaxCurvePoints points); a trial whose
//    best loss so far is worse than the median of the succeeded trials' running averages
//    up to its step is
//    EarlyStopped (its row keeps the numbers: step, value, median, trials) and its
//    TrainingJob deleted. EarlyStopped is final and not failed: it counts neither toward
//    maxFailedTrials nor as a success, and such a trial is never the best (it has no
//    objective value).
//  - The template's runPolicy.ttlSecondsAfterFinished is the sweep's to apply:
//    trials are created without it (the job controller would delete a trial
//    before its result reached status.trials), and the sweep deletes a
//    finished trial that long after its completionTime, once its final row is
//    written.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "operator/api/sweep.h"
#include "operator/api/types.h"

namespace kubetrain::sweep {

// On every trial TrainingJob.
inline constexpr std::string_view kSweepNameLabel = "kubetrain.io/sweep-name";
inline constexpr std::string_view kTrialIndexLabel = "kubetrain.io/trial-index";
// The trial's parameters as a JSON object of strings: {"lr":"0.01"}.
inline constexpr std::string_view kParametersAnnotation = "kubetrain.io/parameters";

// How many trials the sweep runs: maxTrials, capped by the grid's size.
int32_t TotalTrials(const api::TrainingSweepSpec& spec);

// Trial `index`'s parameter values, as the text substituted for ${params.NAME}.
// Grid: the index-th point, the last parameter varying fastest. Random: drawn
// from a hash of (seed, index, parameter), uniform on the (log) scale.
std::map<std::string, std::string> TrialParameters(const api::TrainingSweepSpec& spec,
                                                   int32_t index);

// Replaces ${params.NAME} in every string of the template (not in keys).
// InvalidArgument when a reference names no parameter, or when the result is
// not a valid TrainingJob spec.
StatusOr<api::TrainingJobSpec> Substitute(const api::TrainingJobSpec& spec,
                                          const std::map<std::string, std::string>& params);

// The number at dotted `path` in `metrics`; NotFound with a reason otherwise.
StatusOr<double> MetricValue(const std::optional<nlohmann::json>& metrics, std::string_view path);

// The trial TrainingJob for row `index`: name, namespace, labels, annotations
// and the substituted spec without ttlSecondsAfterFinished (ownership is the
// executor's business). Every container's `--checkpoint-dir` and `--output`
// (`--flag=DIR` or `--flag DIR`, in command or args) become DIR/<trial name>:
// trials sharing a directory would resume from each other's checkpoints.
StatusOr<api::TrainingJob> BuildTrial(const api::TrainingSweep& sweep, int32_t index);

// A trial TrainingJob as the executor observes it.
struct ObservedTrial {
  std::string name;
  int32_t index = 0;
  bool deleting = false;
  bool suspended = false;  // its spec.runPolicy.suspend
  api::TrainingJobStatus status;
};

struct SweepEvent {
  bool warning = false;
  std::string reason;
  std::string message;
};

struct SweepPlan {
  std::vector<api::TrainingJob> creates;
  std::vector<std::string> deletes;                       // trials to stop
  std::vector<std::pair<std::string, bool>> set_suspend;  // trial -> spec.runPolicy.suspend
  api::TrainingSweepStatus status;
  bool status_changed = false;
  std::vector<SweepEvent> events;
  // When the next trial's TTL runs out (reconcile again then); unset: none.
  std::optional<std::chrono::seconds> requeue_after;
};

SweepPlan PlanSweep(const api::TrainingSweep& sweep, const std::vector<ObservedTrial>& trials,
                    api::Time now);

// Bounds `status` in place (PlanSweep's last step): every row's, the best trial's and every
// condition's strings cut to the api::kMax*Bytes limits (a pending or running row has no
// reason or message); rows of final trials beyond
// api::kMaxFinalTrialRows dropped, oldest first, never one of the api::kBestTrialRows best
// (by `objective`) nor the newest row, and counted in status.omitted. Counts and
// trialProgress are unchanged by it. Idempotent.
void BoundSweepStatus(api::TrainingSweepStatus& status, const api::Objective& objective);

}  // namespace kubetrain::sweep
