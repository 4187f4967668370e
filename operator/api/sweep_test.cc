#include "operator/api/sweep.h"

#include <gtest/gtest.h>

#include "operator/api/yaml.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

constexpr const char* kSweep = R"(
apiVersion: kubetrain.io/v1alpha1
kind: TrainingSweep
metadata: {name: s, namespace: ns}
spec:
  objective: {metric: eval.auc, goal: 0.8}
  algorithm: {name: grid}
  parallelism: 2
  maxTrials: 6
  parameters:
    - {name: lr, type: double, min: 0.001, max: 0.003, step: 0.001}
    - {name: layers, type: categorical, values: ["8", "16"]}
  trialTemplate:
    replicaSpecs:
      Worker:
        template: {spec: {containers: [{name: trainer, image: t, args: ["--lr=${params.lr}"]}]}}
)";

json SweepJson(const char* text = kSweep) {
  auto docs = ParseYamlDocuments(text);
  EXPECT_TRUE(docs.ok()) << docs.status().ToString();
  return (*docs)[0].value;
}

TrainingSweep Sweep() {
  auto sweep = ParseTrainingSweep(SweepJson());
  EXPECT_TRUE(sweep.ok()) << sweep.status().ToString();
  return *sweep;
}

std::string Errors(const TrainingSweep& sweep) {
  auto errors = ValidateSweep(sweep);
  return errors.empty() ? "OK" : ToStatus(errors).message();
}

TEST(SweepParseTest, ReadsEveryFieldAndDefaults) {
  TrainingSweep s = Sweep();
  EXPECT_EQ(s.metadata.name, "s");
  EXPECT_EQ(s.spec.objective.metric, "eval.auc");
  EXPECT_EQ(s.spec.objective.direction, Direction::kMaximize);
  EXPECT_EQ(s.spec.objective.goal, 0.8);
  EXPECT_EQ(s.spec.algorithm.name, SearchAlgorithm::kGrid);
  EXPECT_EQ(s.spec.algorithm.seed, 0);
  EXPECT_EQ(s.spec.parallelism, 2);
  EXPECT_EQ(s.spec.max_trials, 6);
  EXPECT_FALSE(s.spec.max_failed_trials);
  ASSERT_EQ(s.spec.parameters.size(), 2u);
  EXPECT_EQ(s.spec.parameters[1].values, (std::vector<std::string>{"8", "16"}));
  EXPECT_EQ(s.spec.trial_template.Replicas(ReplicaType::kWorker), 1);
  EXPECT_EQ(Errors(s), "OK");
}

TEST(SweepParseTest, RoundTripsThroughJson) {
  TrainingSweep s = Sweep();
  s.status.state = "Running";
  s.status.running = 1;
  s.status.trials.push_back(
      {"s-0", 0, {{"lr", "0.001"}}, TrialPhase::kSucceeded, 0.7, "", "", {}, std::nullopt});
  s.status.best_trial = BestTrial{"s-0", {{"lr", "0.001"}}, 0.7};
  auto back = ParseTrainingSweep(ToJson(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, s);
  // With early stopping: the spec, a row's curve and what stopped a trial.
  s.spec.early_stopping = EarlyStopping{EarlyStoppingAlgorithm::kMedianStop, 4, 50};
  s.status.trials[0].curve = {{10, 0.9}, {60, 0.5}};
  s.status.trials.push_back({"s-1",
                             1,
                             {{"lr", "3"}},
                             TrialPhase::kEarlyStopped,
                             std::nullopt,
                             "EarlyStopped",
                             "worse",
                             {},
                             EarlyStopRecord{60, 4.5, 0.5, 1}});
  s.status.early_stopped = 1;
  s.status.omitted.early_stopped = 2;
  back = ParseTrainingSweep(ToJson(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, s);
  EXPECT_EQ(ToJson(s)["spec"]["earlyStopping"],
            json::parse(R"({"algorithm":"medianStop","minTrialsRequired":4,"startStep":50})"));
  EXPECT_EQ(ToJson(s)["status"]["trials"][0]["curve"], json::parse("[[10,0.9],[60,0.5]]"));
}

TEST(SweepParseTest, EarlyStoppingDefaultsAndRules) {
  json j = SweepJson();
  j["spec"]["earlyStopping"] = json::object();
  auto s = ParseTrainingSweep(j);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(s->spec.early_stopping);
  EXPECT_EQ(*s->spec.early_stopping, EarlyStopping{});
  EXPECT_EQ(s->spec.early_stopping->min_trials_required, 3);
  EXPECT_EQ(s->spec.early_stopping->start_step, 1);
  EXPECT_EQ(Errors(*s), "OK");
  j["spec"]["earlyStopping"] = {{"algorithm", "hyperband"}};
  EXPECT_EQ(ParseTrainingSweep(j).status().message(),
            "spec.earlyStopping.algorithm: unsupported value \"hyperband\" (want one of "
            "medianStop)");
  j["spec"]["earlyStopping"] = {{"startstep", 3}};
  EXPECT_EQ(ParseTrainingSweep(j).status().message(),
            "spec.earlyStopping.startstep: unknown field");
  j["spec"]["earlyStopping"] = {{"minTrialsRequired", 0}, {"startStep", 0}};
  s = ParseTrainingSweep(j);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Errors(*s),
            "spec.earlyStopping.minTrialsRequired: should be greater than or equal to 1; "
            "spec.earlyStopping.startStep: should be greater than or equal to 1");
}

TEST(SweepParseTest, RejectsUnknownFieldsAndBadTemplatesWithTheirPath) {
  json j = SweepJson();
  j["spec"]["parallelism2"] = 1;
  EXPECT_EQ(ParseTrainingSweep(j).status().message(), "spec.parallelism2: unknown field");
  j = SweepJson();
  j["spec"]["trialTemplate"]["replicaSpecs"]["Worker"]["replica"] = 1;
  EXPECT_EQ(ParseTrainingSweep(j).status().message(),
            "spec.trialTemplate.replicaSpecs.Worker.replica: unknown field");
  j = SweepJson();
  j["spec"]["parameters"][0]["type"] = "float";
  EXPECT_EQ(ParseTrainingSweep(j).status().message().substr(0, 46),
            "spec.parameters[0].type: unsupported value \"fl");
  j = SweepJson();
  j["spec"]["parameters"][1]["values"][0] = 8;
  EXPECT_EQ(ParseTrainingSweep(j).status().message(),
            "spec.parameters[1].values[0]: must be a string");
  j = SweepJson();
  j["kind"] = "TrainingJob";
  EXPECT_FALSE(ParseTrainingSweep(j).ok());
}

TEST(SweepValidateTest, EachRuleRejectsWithTheCrdMessage) {
  struct Case {
    const char* what;
    void (*edit)(TrainingSweep&);
    const char* want;
  };
  const Case cases[] = {
      {"min >= max", [](TrainingSweep& s) { s.spec.parameters[0].min = 0.003; },
       "spec.parameters[0]: min must be less than max"},
      {"log with min 0",
       [](TrainingSweep& s) {
         s.spec.parameters[0].scale = Scale::kLog;
         s.spec.parameters[0].min = 0;
       },
       "spec.parameters[0]: scale log needs min > 0"},
      {"grid without step", [](TrainingSweep& s) { s.spec.parameters[0].step.reset(); },
       "spec: grid search needs a finite space: every double parameter needs a step"},
      {"parallelism 0", [](TrainingSweep& s) { s.spec.parallelism = 0; },
       "spec.parallelism: should be greater than or equal to 1"},
      {"maxTrials 0", [](TrainingSweep& s) { s.spec.max_trials = 0; },
       "spec.maxTrials: should be greater than or equal to 1"},
      {"maxFailedTrials -1", [](TrainingSweep& s) { s.spec.max_failed_trials = -1; },
       "spec.maxFailedTrials: should be greater than or equal to 0"},
      {"categorical without values", [](TrainingSweep& s) { s.spec.parameters[1].values.clear(); },
       "spec.parameters[1]: categorical parameters need values"},
      {"int with fractional min",
       [](TrainingSweep& s) {
         s.spec.parameters[0].type = ParameterType::kInt;
         s.spec.parameters[0].step = 1;
         s.spec.parameters[0].min = 0.5;
         s.spec.parameters[0].max = 3;
       },
       "spec.parameters[0]: int parameters need integer min, max and step"},
      {"duplicate names", [](TrainingSweep& s) { s.spec.parameters[1].name = "lr"; },
       "spec.parameters[1]: Duplicate value"},
      {"bad metric path", [](TrainingSweep& s) { s.spec.objective.metric = "eval..auc"; },
       "spec.objective.metric: must be a dotted path"},
      {"template without workers",
       [](TrainingSweep& s) {
         s.spec.trial_template.replica_specs[ReplicaType::kWorker].replicas = 0;
       },
       "spec.trialTemplate.replicaSpecs: spec.replicaSpecs needs at least one Worker or Chief"},
      {"bad name", [](TrainingSweep& s) { s.metadata.name = std::string(1, 'S'); },
       "metadata.name: metadata.name must be a DNS-1035 label"},
  };
  for (const Case& c : cases) {
    TrainingSweep s = Sweep();
    c.edit(s);
    EXPECT_TRUE(Errors(s).starts_with(c.want)) << c.what << ": " << Errors(s);
  }
}

TEST(SweepValidateTest, NameBudgetCountsTheLastTrialsLongestChild) {
  // "<name>-5-worker-0": 6 trials -> index 5; name + 11 characters <= 63.
  TrainingSweep s = Sweep();
  s.metadata.name = std::string(52, 'a');
  EXPECT_EQ(Errors(s), "OK");
  s.metadata.name = std::string(53, 'a');
  EXPECT_TRUE(Errors(s).find("would exceed 63 characters") != std::string::npos) << Errors(s);
  s.metadata.name = std::string(52, 'a');
  s.spec.max_trials = 11;  // index 10: one character more
  EXPECT_TRUE(Errors(s).find("would exceed 63 characters") != std::string::npos) << Errors(s);
}

TEST(SweepValidateTest, TheObjectiveIsImmutableTheRestMayChange) {
  TrainingSweep old_sweep = Sweep();
  TrainingSweep updated = old_sweep;
  updated.spec.parallelism = 4;
  updated.spec.max_trials = 8;
  updated.spec.suspend = true;
  EXPECT_TRUE(ValidateSweepUpdate(old_sweep, updated).empty());
  updated.spec.objective.goal = 0.9;
  EXPECT_EQ(ToStatus(ValidateSweepUpdate(old_sweep, updated)).message(),
            "spec: spec.objective is immutable");
}

}  // namespace
}  // namespace kubetrain::api
