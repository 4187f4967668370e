#include "operator/sweep/planner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "operator/api/json.h"
#include "operator/api/yaml.h"

namespace kubetrain::sweep {
namespace {

using api::ConditionType;
using api::TrialPhase;
using nlohmann::json;

constexpr api::Time kNow{std::chrono::seconds(1'800'000'000)};

api::TrainingSweep Sweep(const char* algorithm = "grid", int parallelism = 2, int max_trials = 6) {
  std::string text = R"(
apiVersion: kubetrain.io/v1alpha1
kind: TrainingSweep
metadata: {name: s, namespace: ns, uid: u1}
spec:
  objective: {metric: eval.auc}
  algorithm: {name: )" +
                     std::string(algorithm) +
                     R"(, seed: 7}
  parallelism: )" + std::to_string(parallelism) +
                     R"(
  maxTrials: )" + std::to_string(max_trials) +
                     R"(
  parameters:
    - {name: lr, type: double, min: 0.001, max: 0.003, step: 0.001}
    - {name: layers, type: categorical, values: ["8", "16"]}
  trialTemplate:
    replicaSpecs:
      Worker:
        template: {spec: {containers: [{name: trainer, image: t,
                   args: ["--lr=${params.lr}", "--layers=${params.layers}"]}]}}
)";
  auto docs = api::ParseYamlDocuments(text);
  EXPECT_TRUE(docs.ok()) << docs.status().ToString();
  auto sweep = api::ParseTrainingSweep((*docs)[0].value);
  EXPECT_TRUE(sweep.ok()) << sweep.status().ToString();
  return *sweep;
}

// A trial as the executor would see it after the job planner finished it.
ObservedTrial Finished(int index, bool succeeded, std::optional<json> metrics) {
  ObservedTrial t;
  t.name = "s-" + std::to_string(index);
  t.index = index;
  t.status.conditions.push_back({succeeded ? ConditionType::kSucceeded : ConditionType::kFailed,
                                 true, succeeded ? "JobSucceeded" : "BackoffLimitExceeded",
                                 "worker-0 exited 1", kNow});
  t.status.metrics = std::move(metrics);
  return t;
}
ObservedTrial Running(int index) {
  ObservedTrial t;
  t.name = "s-" + std::to_string(index);
  t.index = index;
  t.status.conditions.push_back({ConditionType::kRunning, true, "", "", kNow});
  return t;
}
json Auc(double v) {
  return json{{"eval", {{"auc", v}}}};
}

TEST(SweepSpaceTest, GridEnumeratesEveryPointOnceLastParameterFastest) {
  api::TrainingSweepSpec spec = Sweep().spec;
  spec.max_trials = 100;
  EXPECT_EQ(TotalTrials(spec), 6);
  std::set<std::map<std::string, std::string>> seen;
  for (int i = 0; i < 6; ++i) seen.insert(TrialParameters(spec, i));
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_EQ(TrialParameters(spec, 0),
            (std::map<std::string, std::string>{{"layers", "8"}, {"lr", "0.001"}}));
  EXPECT_EQ(TrialParameters(spec, 1),
            (std::map<std::string, std::string>{{"layers", "16"}, {"lr", "0.001"}}));
  EXPECT_EQ(TrialParameters(spec, 5),
            (std::map<std::string, std::string>{{"layers", "16"}, {"lr", "0.003"}}));
  spec.max_trials = 4;
  EXPECT_EQ(TotalTrials(spec), 4);
}

TEST(SweepSpaceTest, GridIntegerStepsIncludeMax) {
  api::TrainingSweepSpec spec = Sweep().spec;
  spec.parameters = {{"batch", api::ParameterType::kInt, 128, 1024, 128, api::Scale::kLinear, {}}};
  spec.max_trials = 100;
  EXPECT_EQ(TotalTrials(spec), 8);
  EXPECT_EQ(TrialParameters(spec, 7).at("batch"), "1024");
}

TEST(SweepSpaceTest, RandomIsSeededInRangeAndLogUniform) {
  api::TrainingSweepSpec spec = Sweep("random").spec;
  spec.parameters = {
      {"lr", api::ParameterType::kDouble, 1e-4, 1, std::nullopt, api::Scale::kLog, {}},
      {"n", api::ParameterType::kInt, 1, 10, std::nullopt, api::Scale::kLinear, {}}};
  int below_1e2 = 0;
  std::set<std::string> ns;
  for (int i = 0; i < 400; ++i) {
    auto p = TrialParameters(spec, i);
    EXPECT_EQ(p, TrialParameters(spec, i)) << "deterministic";
    const double lr = std::stod(p.at("lr"));
    EXPECT_GE(lr, 1e-4);
    EXPECT_LE(lr, 1.0);
    below_1e2 += lr < 1e-2;
    const int n = std::stoi(p.at("n"));
    EXPECT_GE(n, 1);
    EXPECT_LE(n, 10);
    ns.insert(p.at("n"));
  }
  // Log-uniform over 4 decades: half the draws below 1e-2 (linear: 1%).
  EXPECT_GT(below_1e2, 150);
  EXPECT_LT(below_1e2, 250);
  EXPECT_EQ(ns.size(), 10u);
  api::TrainingSweepSpec other = spec;
  other.algorithm.seed = 8;
  EXPECT_NE(TrialParameters(spec, 0), TrialParameters(other, 0));
}

TEST(SweepSubstituteTest, ReplacesReferencesInStringsAndRejectsUnknownNames) {
  api::TrainingSweep sweep = Sweep();
  auto trial = BuildTrial(sweep, 1);
  ASSERT_TRUE(trial.ok()) << trial.status().ToString();
  EXPECT_EQ(trial->metadata.name, "s-1");
  EXPECT_EQ(trial->metadata.namespace_, "ns");
  EXPECT_EQ(trial->metadata.labels.at(std::string(kSweepNameLabel)), "s");
  EXPECT_EQ(trial->metadata.labels.at(std::string(kTrialIndexLabel)), "1");
  EXPECT_EQ(trial->metadata.annotations.at(std::string(kParametersAnnotation)),
            R"({"layers":"16","lr":"0.001"})");
  const json args = trial->spec.replica_specs.at(api::ReplicaType::kWorker)
                        .pod_template["spec"]["containers"][0]["args"];
  EXPECT_EQ(args, json({"--lr=0.001", "--layers=16"}));

  auto bad = Substitute(sweep.spec.trial_template, {{"lr", "1"}});
  EXPECT_EQ(bad.status().message(),
            "spec.trialTemplate: ${params.layers} names no parameter in spec.parameters");
}

TEST(SweepMetricTest, ReadsADottedPathAndExplainsWhatIsMissing) {
  EXPECT_EQ(*MetricValue(Auc(0.7), "eval.auc"), 0.7);
  EXPECT_EQ(MetricValue(std::nullopt, "eval.auc").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(MetricValue(json{{"eval", {{"loss", 1}}}}, "eval.auc").status().message(),
            "the trial succeeded but status.metrics has no eval.auc");
  EXPECT_FALSE(MetricValue(json{{"eval", {{"auc", "high"}}}}, "eval.auc").ok());
}

TEST(SweepPlanTest, StartsUpToParallelismAndRecordsRowsFirst) {
  api::TrainingSweep sweep = Sweep();
  SweepPlan plan = PlanSweep(sweep, {}, kNow);
  ASSERT_EQ(plan.creates.size(), 2u);
  EXPECT_EQ(plan.creates[0].metadata.name, "s-0");
  EXPECT_EQ(plan.creates[1].metadata.name, "s-1");
  ASSERT_EQ(plan.status.trials.size(), 2u);
  EXPECT_EQ(plan.status.trials[0].phase, TrialPhase::kPending);
  EXPECT_EQ(plan.status.running, 2);
  EXPECT_EQ(plan.status.state, "Running");
  EXPECT_EQ(plan.status.trial_progress, "0/6");
  EXPECT_TRUE(plan.status_changed);
  EXPECT_EQ(plan.events.size(), 2u);
  EXPECT_EQ(plan.events[0].reason, "TrialCreated");

  // The cache of trials lags: the rows alone keep it at 2, and the creates are
  // repeated (idempotent by name), never new indices.
  sweep.status = plan.status;
  SweepPlan again = PlanSweep(sweep, {}, kNow);
  EXPECT_EQ(again.creates.size(), 2u);
  EXPECT_EQ(again.status.trials.size(), 2u);
  EXPECT_FALSE(again.status_changed);

  // Observed running: nothing to do.
  SweepPlan steady = PlanSweep(sweep, {Running(0), Running(1)}, kNow);
  EXPECT_TRUE(steady.creates.empty());
  EXPECT_EQ(steady.status.trials[0].phase, TrialPhase::kRunning);
}

// Runs the planner against a scripted "cluster" until the sweep finishes;
// `outcome(index)` is how trial index ends. Returns the most trials at once.
int Simulate(api::TrainingSweep& sweep, const std::function<ObservedTrial(int)>& outcome,
             int max_rounds = 50) {
  std::map<int, ObservedTrial> live;
  int peak = 0;
  for (int round = 0; round < max_rounds && !sweep.status.Finished(); ++round) {
    std::vector<ObservedTrial> observed;
    for (auto& [i, t] : live) observed.push_back(t);
    SweepPlan plan = PlanSweep(sweep, observed, kNow);
    sweep.status = plan.status;
    for (const auto& name : plan.deletes) {
      std::erase_if(live, [&](const auto& kv) { return kv.second.name == name; });
    }
    for (const auto& c : plan.creates) {
      const int i = std::stoi(c.metadata.labels.at(std::string(kTrialIndexLabel)));
      if (!live.contains(i)) live[i] = Running(i);
    }
    int active = 0;
    for (auto& [i, t] : live) active += !t.status.Finished();
    peak = std::max(peak, active);
    // Every running trial finishes before the next round.
    for (auto& [i, t] : live) {
      if (!t.status.Finished()) t = outcome(i);
    }
  }
  return peak;
}

TEST(SweepPlanTest, GridRunsEveryTrialAndPicksTheBest) {
  api::TrainingSweep sweep = Sweep();
  const int peak = Simulate(sweep, [](int i) { return Finished(i, true, Auc(0.5 + 0.01 * i)); });
  EXPECT_LE(peak, 2);
  EXPECT_TRUE(sweep.status.IsTrue(ConditionType::kSucceeded));
  EXPECT_EQ(sweep.status.Find(ConditionType::kSucceeded)->reason, "AllTrialsFinished");
  ASSERT_TRUE(sweep.status.best_trial);
  EXPECT_EQ(sweep.status.best_trial->name, "s-5");
  EXPECT_EQ(sweep.status.best_trial->parameters.at("lr"), "0.003");
  EXPECT_DOUBLE_EQ(sweep.status.best_trial->value, 0.55);
  EXPECT_EQ(sweep.status.succeeded, 6);
  EXPECT_EQ(sweep.status.trial_progress, "6/6");
  EXPECT_EQ(sweep.status.state, "Succeeded");
}

TEST(SweepPlanTest, MinimizePicksTheLowest) {
  api::TrainingSweep sweep = Sweep();
  sweep.spec.objective.direction = api::Direction::kMinimize;
  Simulate(sweep, [](int i) { return Finished(i, true, Auc(0.5 + 0.01 * i)); });
  EXPECT_EQ(sweep.status.best_trial->name, "s-0");
}

TEST(SweepPlanTest, GoalReachedStopsRunningTrials) {
  api::TrainingSweep sweep = Sweep("grid", 2);
  sweep.spec.objective.goal = 0.9;
  sweep.status = PlanSweep(sweep, {}, kNow).status;
  SweepPlan plan = PlanSweep(sweep, {Finished(0, true, Auc(0.95)), Running(1)}, kNow);
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_EQ(plan.deletes, std::vector<std::string>{"s-1"});
  EXPECT_EQ(plan.status.Find(ConditionType::kSucceeded)->reason, "GoalReached");
  EXPECT_EQ(plan.status.trials[1].phase, TrialPhase::kStopped);
  EXPECT_EQ(plan.status.stopped, 1);
  EXPECT_EQ(plan.status.best_trial->name, "s-0");
  // Finished: a trial still observed (delete not seen yet) is deleted again, nothing created.
  sweep.status = plan.status;
  SweepPlan after = PlanSweep(sweep, {Finished(0, true, Auc(0.95)), Running(1)}, kNow);
  EXPECT_EQ(after.deletes, std::vector<std::string>{"s-1"});
  EXPECT_TRUE(after.creates.empty());
  EXPECT_FALSE(after.status_changed);
}

TEST(SweepPlanTest, SuccessWithoutTheMetricCountsAsFailed) {
  api::TrainingSweep sweep = Sweep();
  sweep.status = PlanSweep(sweep, {}, kNow).status;
  SweepPlan plan = PlanSweep(sweep, {Finished(0, true, json{{"steps", 10}}), Running(1)}, kNow);
  EXPECT_EQ(plan.status.trials[0].phase, TrialPhase::kFailed);
  EXPECT_EQ(plan.status.trials[0].reason, "MetricMissing");
  EXPECT_EQ(plan.status.trials[0].message,
            "the trial succeeded but status.metrics has no eval.auc");
  EXPECT_EQ(plan.status.failed, 1);
  ASSERT_EQ(plan.events.size(), 2u);  // TrialFailed, then TrialCreated for s-2
  EXPECT_EQ(plan.events[0].reason, "TrialFailed");
  EXPECT_TRUE(plan.events[0].warning);
  EXPECT_EQ(plan.creates.size(), 1u);
}

TEST(SweepPlanTest, TooManyFailedTrialsFailsTheSweep) {
  api::TrainingSweep sweep = Sweep();
  sweep.spec.max_failed_trials = 1;
  Simulate(sweep, [](int i) { return Finished(i, false, std::nullopt); });
  EXPECT_EQ(sweep.status.Find(ConditionType::kFailed)->reason, "TooManyFailedTrials");
  EXPECT_EQ(sweep.status.failed, 2);
  EXPECT_EQ(sweep.status.trials.size(), 2u);
}

TEST(SweepPlanTest, NoSuccessAtAllFailsTheSweep) {
  api::TrainingSweep sweep = Sweep("grid", 3, 3);
  Simulate(sweep, [](int i) { return Finished(i, true, std::nullopt); });
  EXPECT_EQ(sweep.status.Find(ConditionType::kFailed)->reason, "NoTrialSucceeded");
  EXPECT_FALSE(sweep.status.best_trial);
}

TEST(SweepPlanTest, SuspendStartsNothingAndSuspendsRunningTrials) {
  api::TrainingSweep sweep = Sweep();
  sweep.status = PlanSweep(sweep, {}, kNow).status;
  sweep.spec.suspend = true;
  SweepPlan plan = PlanSweep(sweep, {Finished(0, true, Auc(0.6)), Running(1)}, kNow);
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_EQ(plan.set_suspend, (std::vector<std::pair<std::string, bool>>{{"s-1", true}}));
  EXPECT_EQ(plan.status.state, "Suspended");
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kSuspended));

  sweep.status = plan.status;
  sweep.spec.suspend = false;
  ObservedTrial suspended = Running(1);
  suspended.suspended = true;
  SweepPlan resumed = PlanSweep(sweep, {Finished(0, true, Auc(0.6)), suspended}, kNow);
  EXPECT_EQ(resumed.set_suspend, (std::vector<std::pair<std::string, bool>>{{"s-1", false}}));
  EXPECT_EQ(resumed.creates.size(), 1u);
  EXPECT_FALSE(resumed.status.IsTrue(ConditionType::kSuspended));
  EXPECT_EQ(resumed.status.state, "Running");
}

TEST(SweepPlanTest, ARunningTrialThatVanishesFailsAndIsNotRepeated) {
  api::TrainingSweep sweep = Sweep();
  sweep.status = PlanSweep(sweep, {Running(0), Running(1)}, kNow).status;
  sweep.status = PlanSweep(sweep, {Running(0), Running(1)}, kNow).status;
  ASSERT_EQ(sweep.status.trials[1].phase, TrialPhase::kRunning);
  SweepPlan plan = PlanSweep(sweep, {Running(0)}, kNow);
  EXPECT_EQ(plan.status.trials[1].phase, TrialPhase::kFailed);
  EXPECT_EQ(plan.status.trials[1].reason, "TrialDeleted");
  ASSERT_EQ(plan.creates.size(), 1u);
  EXPECT_EQ(plan.creates[0].metadata.name, "s-2");
}

// The job controller deleting a trial at its TTL could beat the sweep to its
// result (the row then read TrialDeleted). Trials are made without the TTL and
// the sweep deletes each one once its final row is written.
TEST(SweepPlanTest, TrialsCarryNoTtlTheSweepDeletesThemOnceTheirResultIsWritten) {
  api::TrainingSweep sweep = Sweep("grid", 1, 2);
  sweep.spec.trial_template.run_policy.ttl_seconds_after_finished = 60;
  SweepPlan plan = PlanSweep(sweep, {}, kNow);
  ASSERT_EQ(plan.creates.size(), 1u);
  EXPECT_FALSE(plan.creates[0].spec.run_policy.ttl_seconds_after_finished)
      << "the job controller must not delete a trial whose result is not recorded";
  sweep.status = plan.status;

  ObservedTrial done = Finished(0, true, Auc(0.7));
  done.status.completion_time = kNow;
  // The row turns Succeeded in this plan but is not written yet: keep the trial.
  plan = PlanSweep(sweep, {done}, kNow + std::chrono::seconds(120));
  EXPECT_EQ(plan.status.trials[0].phase, TrialPhase::kSucceeded);
  EXPECT_TRUE(plan.deletes.empty());
  sweep.status = plan.status;  // written

  // Written, TTL not yet over: requeue for when it is.
  plan = PlanSweep(sweep, {done, Running(1)}, kNow + std::chrono::seconds(45));
  EXPECT_TRUE(plan.deletes.empty());
  ASSERT_TRUE(plan.requeue_after);
  EXPECT_EQ(*plan.requeue_after, std::chrono::seconds(15));
  // Over: deleted, the row kept.
  plan = PlanSweep(sweep, {done, Running(1)}, kNow + std::chrono::seconds(60));
  EXPECT_EQ(plan.deletes, std::vector<std::string>{"s-0"});
  EXPECT_EQ(plan.status.trials[0].phase, TrialPhase::kSucceeded);
  EXPECT_EQ(plan.status.trials[0].value, 0.7);

  // Without a TTL in the template nothing is deleted.
  sweep.spec.trial_template.run_policy.ttl_seconds_after_finished.reset();
  plan = PlanSweep(sweep, {done, Running(1)}, kNow + std::chrono::seconds(600));
  EXPECT_TRUE(plan.deletes.empty());
  EXPECT_FALSE(plan.requeue_after);
}

TEST(SweepPlanTest, InvalidTemplateFailsTheSweepWithTheReason) {
  api::TrainingSweep sweep = Sweep();
  sweep.spec.parameters.pop_back();  // ${params.layers} now names nothing
  SweepPlan plan = PlanSweep(sweep, {}, kNow);
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_EQ(plan.status.Find(ConditionType::kFailed)->reason, "InvalidSpec");
  EXPECT_EQ(plan.status.Find(ConditionType::kFailed)->message,
            "spec.trialTemplate: ${params.layers} names no parameter in spec.parameters");
}

TEST(SweepPlanTest, ExamplePlansItsFirstTrials) {
  std::ifstream in(std::string(KUBETRAIN_EXAMPLES_DIR) + "/sweep.yaml");
  std::stringstream text;
  text << in.rdbuf();
  auto docs = api::ParseYamlDocuments(text.str());
  ASSERT_TRUE(docs.ok());
  auto sweep = api::ParseTrainingSweep((*docs)[0].value);
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  SweepPlan plan = PlanSweep(*sweep, {}, kNow);
  EXPECT_FALSE(plan.status.Finished());
  ASSERT_EQ(static_cast<int>(plan.creates.size()), sweep->spec.parallelism);
  for (const auto& trial : plan.creates) {
    EXPECT_TRUE(api::Validate(trial).empty()) << api::ToStatus(api::Validate(trial)).ToString();
    EXPECT_EQ(api::ToJson(trial).dump().find("${params."), std::string::npos);
  }
}

}  // namespace
}  // namespace kubetrain::sweep

namespace kubetrain::sweep {
namespace {

// A categorical parameter whose values are `bytes` long: rows would carry them whole.
api::Parameter Blob(const std::string& name, size_t bytes) {
  api::Parameter p;
  p.name = name;
  p.type = api::ParameterType::kCategorical;
  for (char c : std::string("abc")) p.values.push_back(std::string(bytes, c));
  return p;
}

size_t StatusBytes(const api::TrainingSweepStatus& s) {
  return api::SweepStatusToJson(s).dump().size();
}

// 1,000 trials, each failure with a 100 KB message and every row with
// 10 KB parameter values, used to give a status of over 100 MB (etcd refuses 1.5 MiB).
TEST(SweepBoundTest, ThousandTrialSweepKeepsBestAndNewestRowsAndCountsTheRest) {
  api::TrainingSweep sweep = Sweep("random", 50, 1000);
  sweep.spec.parameters.push_back(Blob("blob", 10'000));
  const std::string huge(100'000, 'm');
  Simulate(
      sweep,
      [&](int i) {
        if (i % 3 != 0) {
          ObservedTrial t = Finished(i, false, std::nullopt);
          t.status.conditions[0].reason = std::string(1000, 'R');
          t.status.conditions[0].message = huge;
          return t;
        }
        return Finished(i, true, Auc(1.0 - 1e-4 * i));  // the earliest trials are the best
      },
      /*max_rounds=*/100);
  const api::TrainingSweepStatus& s = sweep.status;
  ASSERT_TRUE(s.IsTrue(ConditionType::kSucceeded)) << api::SweepStatusToJson(s).dump(2);
  EXPECT_EQ(s.trial_progress, "1000/1000");
  EXPECT_EQ(s.succeeded, 334);
  EXPECT_EQ(s.failed, 666);
  EXPECT_EQ(static_cast<int>(s.trials.size()), api::kMaxFinalTrialRows);
  EXPECT_EQ(s.omitted.Total() + static_cast<int>(s.trials.size()), 1000);
  EXPECT_EQ(s.omitted.succeeded + s.omitted.failed, s.omitted.Total());
  // The best trials (0, 3, ..., 27) and the newest rows (up to 999) are kept, in order.
  ASSERT_TRUE(s.best_trial);
  EXPECT_EQ(s.best_trial->name, "s-0");
  for (int i = 0; i < api::kBestTrialRows; ++i) EXPECT_EQ(s.trials[i].index, 3 * i);
  EXPECT_EQ(s.trials.back().index, 999);
  EXPECT_TRUE(std::is_sorted(s.trials.begin(), s.trials.end(),
                             [](const auto& a, const auto& b) { return a.index < b.index; }));
  for (const api::TrialStatus& row : s.trials) {
    EXPECT_LE(row.message.size(), api::kMaxTrialMessageBytes);
    EXPECT_LE(row.reason.size(), api::kMaxTrialReasonBytes);
    EXPECT_LE(row.parameters.at("blob").size(), api::kMaxParameterValueBytes);
  }
  const api::TrialStatus& failed = s.trials[s.trials.size() - 2];  // trial 998
  ASSERT_EQ(failed.phase, TrialPhase::kFailed);
  EXPECT_EQ(failed.message, std::string(api::kMaxTrialMessageBytes - 3, 'm') + "...");
  const size_t bytes = StatusBytes(s);
  EXPECT_LT(bytes, 256u * 1024) << bytes;
  // What is written reads back the same (omittedTrials included).
  auto back = api::ParseTrainingSweepStatus(api::SweepStatusToJson(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, s);
  // Planning again with every trial still there changes nothing: the dropped rows' trials
  // are not adopted again.
  std::vector<ObservedTrial> all;
  for (int i = 0; i < 1000; ++i) all.push_back(Finished(i, i % 3 == 0, Auc(1.0 - 1e-4 * i)));
  SweepPlan again = PlanSweep(sweep, all, kNow);
  EXPECT_FALSE(again.status_changed);
  EXPECT_EQ(again.status.succeeded + again.status.failed, 1000);
}

// The worst case the bounds allow: 1,000 rows (parallelism 1000), each with 20 long
// parameters, the 100 final ones with maximal reasons and messages, maximal conditions.
TEST(SweepBoundTest, ThousandRunningRowsWithLongParametersFitFarBelowEtcdsLimit) {
  api::TrainingSweep sweep = Sweep("random", 1000, 1000);
  for (int p = 0; p < 18; ++p) {
    std::string name = "p";  // (not "p" + ...: GCC 12's -Wrestrict false positive)
    name += std::to_string(p);
    sweep.spec.parameters.push_back(Blob(name, 300));
  }
  SweepPlan plan = PlanSweep(sweep, {}, kNow);
  ASSERT_EQ(plan.status.trials.size(), 1000u);
  for (const api::TrialStatus& row : plan.status.trials) {
    size_t bytes = 0;
    for (const auto& [k, v] : row.parameters) bytes += k.size() + v.size();
    EXPECT_LE(bytes, api::kMaxRowParameterBytes + 16);
    EXPECT_EQ(row.parameters.count("..."), 1u);  // some left out, and said so
  }
  for (api::Condition& c : plan.status.conditions) c.message = std::string(1 << 20, 'c');
  // The newest 100 rows final (as many as are kept) with 1 MiB reasons and messages; the
  // other 900 still running, where a message has no place.
  for (api::TrialStatus& row : plan.status.trials) {
    row.name = std::string(63, 'n');
    row.reason = std::string(1 << 20, 'r');
    row.message = std::string(1 << 20, 'm');
    if (row.index >= 900) row.phase = TrialPhase::kFailed;
    // Early stopping's curves at their longest: 19-digit steps, losses of 6 significant digits
    // with a sign and a 3-digit exponent (RecordCurvePoint rounds every loss to 6 digits).
    for (size_t i = 0; i < api::kMaxCurvePoints; ++i) {
      row.curve.push_back(
          {std::numeric_limits<int64_t>::max() - 10 + static_cast<int64_t>(i), -1.23457e-100});
    }
  }
  BoundSweepStatus(plan.status, sweep.spec.objective);
  const size_t bytes = StatusBytes(plan.status);
  std::printf("worst-case status of 1000 running rows: %zu bytes\n", bytes);
  EXPECT_LT(bytes, 1024u * 1024) << bytes;  // etcd's limit is 1.5 MiB
  ASSERT_EQ(plan.status.trials.size(), 1000u);
  EXPECT_EQ(plan.status.trials[0].message, "");
  EXPECT_EQ(plan.status.trials[999].message.size(), api::kMaxTrialMessageBytes);
  // Bounding is idempotent: a bounded status is left as it is.
  api::TrainingSweepStatus again = plan.status;
  BoundSweepStatus(again, sweep.spec.objective);
  EXPECT_EQ(again, plan.status);
}

// Trials whose template shares a --checkpoint-dir resumed from each
// other's checkpoints. Each trial gets DIR/<trial>, in both flag forms, for --output too.
TEST(SweepPlanTest, EveryTrialGetsItsOwnCheckpointAndOutputDirectory) {
  api::TrainingSweep sweep = Sweep();
  json& container = sweep.spec.trial_template.replica_specs.at(api::ReplicaType::kWorker)
                        .pod_template["spec"]["containers"][0];
  container["command"] = {"kubetrain-trainer", "--output", "s3://b/out/"};
  container["args"] = {"--lr=${params.lr}", "--checkpoint-dir=/ckpt", "--checkpoint-dir-x=/k",
                       "--checkpoint-every=10"};
  SweepPlan plan = PlanSweep(sweep, {}, kNow);
  ASSERT_EQ(plan.creates.size(), 2u);
  for (const auto& trial : plan.creates) {
    const json& c = trial.spec.replica_specs.at(api::ReplicaType::kWorker)
                        .pod_template["spec"]["containers"][0];
    const std::string name = trial.metadata.name;
    EXPECT_EQ(c["command"], json({"kubetrain-trainer", "--output", "s3://b/out/" + name}));
    EXPECT_EQ(c["args"][1], "--checkpoint-dir=/ckpt/" + name);
    EXPECT_EQ(c["args"][2], "--checkpoint-dir-x=/k");  // another flag: untouched
    EXPECT_EQ(c["args"][3], "--checkpoint-every=10");
  }
}

TEST(SweepBoundTest, BoundTextCutsAtAUtf8Boundary) {
  EXPECT_EQ(api::BoundText("short", 10), "short");
  EXPECT_EQ(api::BoundText("abcdefghij", 8), "abcde...");
  // "é" is two bytes: never split.
  const std::string cut = api::BoundText("aaaa\xc3\xa9zzzz", 8);
  EXPECT_EQ(cut, "aaaa...");
  EXPECT_EQ(api::BoundText(cut, 8), cut);
}

}  // namespace
}  // namespace kubetrain::sweep

namespace kubetrain::sweep {
namespace {

// A trial reading `loss` at `step` of 100 (status.progress, as the progress reader writes it).
ObservedTrial Reading(ObservedTrial t, int64_t step, double loss) {
  api::Progress p;
  p.step = step;
  p.total_steps = 100;
  p.percent = static_cast<int32_t>(step);
  p.loss = loss;
  t.status.progress = p;
  return t;
}

api::TrainingSweep EarlySweep(int32_t min_trials, int64_t start_step) {
  api::TrainingSweep sweep = Sweep("grid", 6);
  sweep.spec.early_stopping = api::EarlyStopping{};
  sweep.spec.early_stopping->min_trials_required = min_trials;
  sweep.spec.early_stopping->start_step = start_step;
  return sweep;
}

TEST(SweepEarlyStopTest, StopsARunningTrialWorseThanTheSucceededMedianAndRecordsWhy) {
  api::TrainingSweep sweep = EarlySweep(2, 10);
  sweep.status = PlanSweep(sweep, {}, kNow).status;  // six Pending rows
  // Trials 0 and 1 run and record their curves (losses 0.6 and 0.4 at step 20), then succeed.
  sweep.status = PlanSweep(sweep,
                           {Reading(Running(0), 20, 0.6), Reading(Running(1), 20, 0.4),
                            Reading(Running(2), 5, 9.0), Running(3), Running(4), Running(5)},
                           kNow)
                     .status;
  EXPECT_EQ(sweep.status.trials[0].curve, (std::vector<api::CurvePoint>{{20, 0.6}}));
  EXPECT_EQ(sweep.status.early_stopped, 0) << "no trial succeeded yet";
  sweep.status = PlanSweep(sweep,
                           {Reading(Finished(0, true, Auc(0.7)), 100, 0.3),
                            Reading(Finished(1, true, Auc(0.8)), 100, 0.2),
                            Reading(Running(2), 5, 9.0), Running(3), Running(4), Running(5)},
                           kNow)
                     .status;
  EXPECT_EQ(sweep.status.early_stopped, 0) << "step 5 is before startStep 10";
  EXPECT_EQ(sweep.status.trials[2].phase, TrialPhase::kRunning);

  // Trial 2 at step 30: loss 0.9 against the median of 0.6 and 0.4 (0.5). Trial 3 ties it.
  SweepPlan plan =
      PlanSweep(sweep,
                {Reading(Finished(0, true, Auc(0.7)), 100, 0.3),
                 Reading(Finished(1, true, Auc(0.8)), 100, 0.2), Reading(Running(2), 30, 0.9),
                 Reading(Running(3), 30, 0.5), Running(4), Running(5)},
                kNow);
  const api::TrialStatus& row = plan.status.trials[2];
  EXPECT_EQ(row.phase, TrialPhase::kEarlyStopped);
  EXPECT_EQ(row.reason, "EarlyStopped");
  ASSERT_TRUE(row.early_stop);
  EXPECT_EQ(*row.early_stop, (api::EarlyStopRecord{30, 0.9, 0.5, 2}));
  EXPECT_EQ(row.message,
            "best training loss 0.9 by step 30 is worse than the median 0.5 of 2 succeeded "
            "trials' running averages at that step");
  EXPECT_EQ(plan.status.trials[3].phase, TrialPhase::kRunning) << "a tie keeps the trial";
  EXPECT_EQ(plan.deletes, std::vector<std::string>{"s-2"});
  EXPECT_EQ(plan.status.early_stopped, 1);
  EXPECT_EQ(plan.status.failed, 0) << "early stopped is not failed";
  EXPECT_EQ(plan.status.trial_progress, "3/6");
  EXPECT_EQ(plan.status.best_trial->name, "s-1");
  bool event = false;
  for (const SweepEvent& e : plan.events) event = event || e.reason == "TrialEarlyStopped";
  EXPECT_TRUE(event);

  // Round trip through JSON (the status the apiserver stores) keeps the numbers; the
  // stopped row's curve is dropped (only running and succeeded curves are read again).
  auto back = api::ParseTrainingSweepStatus(api::SweepStatusToJson(plan.status));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, plan.status);
  EXPECT_TRUE(back->trials[2].curve.empty());
  EXPECT_EQ(back->trials[1].curve.size(), 2u);

  // The cache still shows trial 2 running: deleted again, its row unchanged.
  sweep.status = plan.status;
  SweepPlan again =
      PlanSweep(sweep,
                {Reading(Finished(0, true, Auc(0.7)), 100, 0.3),
                 Reading(Finished(1, true, Auc(0.8)), 100, 0.2), Reading(Running(2), 40, 0.9),
                 Reading(Running(3), 40, 0.5), Running(4), Running(5)},
                kNow);
  EXPECT_EQ(again.deletes, std::vector<std::string>{"s-2"});
  EXPECT_EQ(again.status.trials[2].early_stop, row.early_stop);

  // Every other trial finishes: the sweep succeeds with the early-stopped trial not failed.
  sweep.status = again.status;
  SweepPlan end = PlanSweep(
      sweep,
      {Finished(0, true, Auc(0.7)), Finished(1, true, Auc(0.8)), Finished(3, true, Auc(0.6)),
       Finished(4, true, Auc(0.6)), Finished(5, true, Auc(0.6))},
      kNow);
  EXPECT_EQ(end.status.Find(ConditionType::kSucceeded)->reason, "AllTrialsFinished");
  EXPECT_EQ(end.status.trial_progress, "6/6");
  EXPECT_EQ(end.status.early_stopped, 1);
}

TEST(SweepEarlyStopTest, NothingStopsBeforeMinTrialsRequiredSucceeded) {
  api::TrainingSweep sweep = EarlySweep(3, 1);
  sweep.status = PlanSweep(sweep, {}, kNow).status;
  sweep.status = PlanSweep(sweep,
                           {Reading(Running(0), 20, 0.6), Reading(Running(1), 20, 0.4), Running(2),
                            Running(3), Running(4), Running(5)},
                           kNow)
                     .status;
  SweepPlan plan = PlanSweep(sweep,
                             {Reading(Finished(0, true, Auc(0.7)), 100, 0.3),
                              Reading(Finished(1, true, Auc(0.8)), 100, 0.2),
                              Reading(Running(2), 30, 1e9), Running(3), Running(4), Running(5)},
                             kNow);
  EXPECT_EQ(plan.status.trials[2].phase, TrialPhase::kRunning);
  EXPECT_TRUE(plan.deletes.empty());
}

TEST(SweepEarlyStopTest, ATrialAtItsLastStepIsNotStopped) {
  api::TrainingSweep sweep = EarlySweep(1, 1);
  sweep.status = PlanSweep(sweep, {}, kNow).status;
  sweep.status = PlanSweep(sweep, {Reading(Running(0), 20, 0.3), Running(1)}, kNow).status;
  sweep.status =
      PlanSweep(sweep, {Reading(Finished(0, true, Auc(0.7)), 100, 0.3), Running(1)}, kNow).status;
  SweepPlan plan = PlanSweep(
      sweep, {Reading(Finished(0, true, Auc(0.7)), 100, 0.3), Reading(Running(1), 100, 9.0)}, kNow);
  EXPECT_EQ(plan.status.trials[1].phase, TrialPhase::kRunning);
  EXPECT_TRUE(plan.deletes.empty());
  plan = PlanSweep(
      sweep, {Reading(Finished(0, true, Auc(0.7)), 100, 0.3), Reading(Running(1), 99, 9.0)}, kNow);
  EXPECT_EQ(plan.status.trials[1].phase, TrialPhase::kEarlyStopped);
}

TEST(SweepEarlyStopTest, WithoutEarlyStoppingNoCurveAndNoStop) {
  api::TrainingSweep sweep = Sweep("grid", 6);
  sweep.status = PlanSweep(sweep, {}, kNow).status;
  SweepPlan plan = PlanSweep(
      sweep, {Reading(Finished(0, true, Auc(0.7)), 100, 0.3), Reading(Running(1), 30, 1e9)}, kNow);
  EXPECT_TRUE(plan.status.trials[0].curve.empty());
  EXPECT_EQ(plan.status.trials[1].phase, TrialPhase::kRunning);
}

}  // namespace
}  // namespace kubetrain::sweep
