// SweepController against a fake apiserver (runtime/fake_api_client.h) on a
// FakeClock: how the executor carries out the sweep planner's plans. The same
// behaviours run against a real control plane in tests/sweep/.
#include "operator/sweep/sweep_controller.h"

#include <gtest/gtest.h>

#include <thread>

#include "operator/api/json.h"
#include "operator/runtime/fake_api_client.h"
#include "operator/runtime/metrics.h"
#include "operator/sweep/planner.h"

namespace kubetrain::sweep {
namespace {

using nlohmann::json;
using runtime::AdvanceUntil;
using runtime::Eventually;
using runtime::FakeApi;
using runtime::NowhereClient;
using runtime::RecorderOptions;
using runtime::Settle;
using std::chrono::seconds;

// A sweep of `max_trials` random learning rates, `parallelism` at a time,
// each trial one worker.
json Sweep(int parallelism, int max_trials) {
  const json tmpl = {
      {"spec",
       {{"containers", {{{"name", "trainer"}, {"image", "x"}, {"args", {"--lr=${params.lr}"}}}}}}}};
  return {
      {"apiVersion", "kubetrain.io/v1alpha1"},
      {"kind", "TrainingSweep"},
      {"metadata", {{"name", "sw"}, {"namespace", "ml"}, {"uid", "sweep-uid"}, {"generation", 1}}},
      {"spec",
       {{"objective", {{"metric", "eval.auc"}, {"direction", "maximize"}}},
        {"algorithm", {{"name", "random"}, {"seed", 7}}},
        {"parallelism", parallelism},
        {"maxTrials", max_trials},
        {"parameters", {{{"name", "lr"}, {"type", "double"}, {"min", 0.001}, {"max", 0.1}}}},
        {"trialTemplate",
         {{"replicaSpecs",
           {{"Worker", {{"replicas", 1}, {"restartPolicy", "ExitCode"}, {"template", tmpl}}}}}}}}}};
}

// Runs a SweepController over `api` on `clock` until destroyed; its events go
// nowhere.
class Running {
 public:
  Running(FakeApi* api, FakeClock* clock)
      : events_client_(NowhereClient()),
        recorder_(events_client_.get(), RecorderOptions()),
        metrics_(&registry_),
        controller_(api, &recorder_, &metrics_,
                    SweepControllerOptions{.namespaces = {"ml"}, .workers = 2, .clock = clock}) {
    controller_.Start();
    thread_ = std::jthread([this](std::stop_token stop) { controller_.Run(stop); });
  }
  bool Synced() const { return controller_.Synced(); }
  bool Idle() const { return controller_.Idle(); }
  double Registry(std::string_view name) const { return registry_.Get(name, ""); }

 private:
  std::unique_ptr<kube::Client> events_client_;
  runtime::EventRecorder recorder_;
  runtime::Metrics registry_;
  controller::Metrics metrics_;
  SweepController controller_;
  std::jthread thread_;  // stopped and joined first
};

std::vector<std::string> TrialNames(FakeApi& api) {
  std::vector<std::string> names;
  for (const json& t : api.All(kTrainingJobs)) names.push_back(t["metadata"].value("name", ""));
  return names;
}

// Trial `name` finished Succeeded with eval.auc `auc`, as its job controller
// would write it.
void Succeed(FakeApi& api, const FakeClock& clock, const std::string& name, double auc) {
  json trial = *api.Get(kTrainingJobs, "ml", name);
  const api::Time now = api::Now(clock);
  api::TrainingJobStatus status;
  status.state = "Succeeded";
  status.conditions = {{api::ConditionType::kSucceeded, true, "TrainingJobSucceeded", "", now}};
  status.completion_time = now;
  status.metrics = json{{"eval", {{"auc", auc}}}};
  trial["status"] = api::StatusToJson(status);
  ASSERT_TRUE(api.UpdateStatus(kTrainingJobs, "ml", trial).ok());
}

std::chrono::system_clock::time_point TestWallStart() {
  return std::chrono::sys_days(std::chrono::year{2026} / 11 / 23);
}

TEST(SweepControllerTest, RunsParallelismTrialsAtOnceAndFinishesWithTheBest) {
  FakeApi api;
  api.Seed(kTrainingSweeps, Sweep(/*parallelism=*/2, /*max_trials=*/3));
  FakeClock clock(TestWallStart());
  Running controller(&api, &clock);
  ASSERT_TRUE(Settle(api, controller));
  std::vector<std::string> trials = TrialNames(api);
  ASSERT_EQ(trials.size(), 2u);
  // The status row that counts a trial is written before the trial is created.
  const auto calls = api.calls();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.front().verb, "update_status");
  EXPECT_EQ(calls.front().resource, "trainingsweeps");
  for (const std::string& name : trials) {
    const json t = *api.Get(kTrainingJobs, "ml", name);
    EXPECT_EQ(t["metadata"]["labels"].value(std::string(kSweepNameLabel), ""), "sw");
    EXPECT_EQ(t["metadata"]["ownerReferences"][0].value("uid", ""), "sweep-uid");
  }

  Succeed(api, clock, trials[0], 0.7);
  ASSERT_TRUE(Settle(api, controller));
  trials = TrialNames(api);
  ASSERT_EQ(trials.size(), 3u);  // one more in the finished one's place, no fourth
  Succeed(api, clock, trials[1], 0.9);
  Succeed(api, clock, trials[2], 0.8);
  ASSERT_TRUE(Settle(api, controller));
  const json status = (*api.Get(kTrainingSweeps, "ml", "sw")).value("status", json::object());
  EXPECT_EQ(status.value("succeeded", 0), 3) << status.dump();
  EXPECT_EQ(status["bestTrial"].value("name", ""), trials[1]) << status.dump();
  EXPECT_EQ(TrialNames(api).size(), 3u);
  EXPECT_EQ(controller.Registry("kubetrain_reconcile_errors_total"), 0);
}

// A 422 on the sweep's status write is retried with backoff (it was taken for
// permanent by its code, and the sweep never started a trial).
TEST(SweepControllerTest, RefusedStatusWriteIsRetried) {
  FakeApi api;
  api.Seed(kTrainingSweeps, Sweep(/*parallelism=*/1, /*max_trials=*/1));
  api.FailNext("update_status", "trainingsweeps",
               Status(StatusCode::kInvalidArgument, "Invalid (422): status.trials: Too many"));
  FakeClock clock(TestWallStart());
  Running controller(&api, &clock);
  ASSERT_TRUE(AdvanceUntil(clock, api, controller, [&] { return TrialNames(api).size() == 1; }));
  EXPECT_EQ(api.calls().front().code, StatusCode::kInvalidArgument);  // nothing created before
  EXPECT_GE(controller.Registry("kubetrain_reconcile_errors_total"), 1);
}

}  // namespace
}  // namespace kubetrain::sweep
