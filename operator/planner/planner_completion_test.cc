#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "operator/api/json.h"
#include "operator/api/sweep.h"
#include "operator/api/validation.h"
#include "operator/api/yaml.h"
#include "operator/planner/children.h"
#include "operator/planner/planner.h"
#include "operator/planner/planner_test_util.h"

namespace kubetrain::planner {
namespace {

using namespace planner_testing;  // NOLINT(google-build-using-namespace): the tests' vocabulary

// ---- Success and cleanPodPolicy ----------------------------------------------

TEST(PlannerSuccessTest, WorkerZeroDecidesWithoutChiefAndRunningPodsAreCleanedUp) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(Job(), o, Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
  EXPECT_EQ(plan.status.state, "Succeeded");
  EXPECT_EQ(Cond(plan, ConditionType::kSucceeded)->message, "Worker 0 succeeded");
  EXPECT_EQ(plan.status.completion_time, kNow);
  EXPECT_FALSE(plan.status.IsTrue(ConditionType::kRunning));
  // PS pods never keep a finished job alive.
  EXPECT_EQ(DeletedPods(plan), (std::vector<std::string>{"tj-ps-0", "tj-ps-1", "tj-worker-1"}));
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].type, EventType::kNormal);
}

TEST(PlannerSuccessTest, ChiefDecidesWhenThereIsOne) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kChief].pod_template = Template();
  ObservedChildren o = All(PodPhase::kRunning);
  o.pods.push_back(Pod(ReplicaType::kChief, 0, PodPhase::kRunning));
  o.services.push_back({"tj-chief-0", std::nullopt});
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_FALSE(plan.status.Finished());
  Find(o, "tj-chief-0").phase = PodPhase::kSucceeded;
  plan = PlanJob(job, o, Input());
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
  EXPECT_EQ(Cond(plan, ConditionType::kSucceeded)->message, "Chief 0 succeeded");
}

TEST(PlannerSuccessTest, AllWorkersWaitsForEveryWorker) {
  api::TrainingJob job = Job();
  job.spec.success_policy = api::SuccessPolicy::kAllWorkers;
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kWorker).succeeded, 1);
  Find(o, "tj-worker-1").phase = PodPhase::kSucceeded;
  plan = PlanJob(job, o, Input());
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
  EXPECT_EQ(Cond(plan, ConditionType::kSucceeded)->message, "all 2 workers succeeded");
}

TEST(PlannerSuccessTest, SucceededWorkerIsNotRecreated) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-1").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(Job(RestartPolicy::kAlways), o, Input());
  EXPECT_TRUE(plan.deletes.empty());
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_EQ(plan.status.state, "Running");
}

TEST(PlannerSuccessTest, CleanPodPolicyAllDeletesFinishedPodsToo) {
  api::TrainingJob job = Job();
  job.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kAll;
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_EQ(DeletedPods(plan).size(), 4u);
}

TEST(PlannerSuccessTest, CleanPodPolicyNoneKeepsEveryPod) {
  api::TrainingJob job = Job();
  job.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kNone;
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
  EXPECT_TRUE(plan.deletes.empty());
}

TEST(PlannerSuccessTest, FinishedJobNeverGetsNewPods) {
  api::TrainingJob job = Job();
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Plan done = PlanJob(job, o, Input());
  // Every pod is gone, one even failed on the way out: still nothing is created.
  Plan later = PlanJob(After(job, done), {}, Input(kNow + seconds(5)));
  EXPECT_TRUE(later.creates.empty());
  EXPECT_TRUE(later.deletes.empty());
  EXPECT_TRUE(later.events.empty());
  EXPECT_EQ(later.status.completion_time, kNow);
  EXPECT_EQ(later.status.replica_statuses.at(ReplicaType::kPS).active, 0);  // counts stay live
  ObservedChildren failed = All(PodPhase::kFailed);
  later = PlanJob(After(job, done), failed, Input(kNow + seconds(5)));
  EXPECT_TRUE(later.creates.empty());
  EXPECT_EQ(later.status.replica_statuses.at(ReplicaType::kWorker).restarts, 0);
  EXPECT_TRUE(later.status.IsTrue(ConditionType::kSucceeded));
}

TEST(PlannerSuccessTest, FinishedJobKeepsCleaningUpPodsThatStillRun) {
  api::TrainingJob job = Job();
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Plan done = PlanJob(job, o, Input());
  Plan again = PlanJob(After(job, done), o, Input(kNow + seconds(1)));  // deletes not visible
  EXPECT_EQ(DeletedPods(again).size(), 3u);
  EXPECT_TRUE(again.events.empty());
}

// ---- Evaluators: the job succeeds after the final evaluation -------------------

// tj with one Evaluator (restartPolicy as given) besides its 2 PS + 2 workers.
api::TrainingJob JobWithEvaluator(RestartPolicy policy = RestartPolicy::kOnFailure,
                                  int32_t evaluators = 1) {
  api::TrainingJob job = Job();
  api::ReplicaSpec& e = job.spec.replica_specs[ReplicaType::kEvaluator];
  e.replicas = evaluators;
  e.restart_policy = policy;
  e.pod_template = Template();
  return job;
}

// Every pod running, an evaluator's too; worker 0 has succeeded with its metrics.
ObservedChildren TrainedWithEvaluator(int32_t evaluators = 1) {
  ObservedChildren o = All(PodPhase::kRunning);
  for (int32_t i = 0; i < evaluators; ++i) {
    o.pods.push_back(Pod(ReplicaType::kEvaluator, i, PodPhase::kRunning));
    o.services.push_back({api::ChildName("tj", ReplicaType::kEvaluator, i), std::nullopt});
  }
  Find(o, "tj-worker-0") = Pod(ReplicaType::kWorker, 0, PodPhase::kSucceeded, 0);
  Find(o, "tj-worker-0").message = R"({"task":"worker-0","steps":400})";
  return o;
}

TEST(PlannerEvaluatorTest, TrainingSuccessWaitsForTheEvaluatorAndSaysSo) {
  api::TrainingJob job = JobWithEvaluator();
  Plan plan = PlanJob(job, TrainedWithEvaluator(), Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(plan.status.state, "Running");
  const api::Condition* running = Cond(plan, ConditionType::kRunning);
  ASSERT_NE(running, nullptr);
  EXPECT_TRUE(running->status);
  EXPECT_EQ(running->reason, "WaitingForEvaluator");
  EXPECT_EQ(running->message,
            "training succeeded (Worker 0 succeeded); waiting for 1 of 1 evaluators to evaluate "
            "the final checkpoint and exit 0");
  // The evaluator is not killed; the training pods still running are cleaned up.
  EXPECT_EQ(DeletedPods(plan), (std::vector<std::string>{"tj-ps-0", "tj-ps-1", "tj-worker-1"}));
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_EQ(plan.status.metrics, json({{"task", "worker-0"}, {"steps", 400}}));
  // Nothing changes while the evaluator runs: the status is stable.
  Plan again = PlanJob(After(job, plan), TrainedWithEvaluator(), Input(kNow + seconds(30)));
  EXPECT_FALSE(again.status_changed);
}

TEST(PlannerEvaluatorTest, TheJobSucceedsOnceTheEvaluatorExitsZeroWithItsMetrics) {
  api::TrainingJob job = JobWithEvaluator();
  ObservedChildren o = TrainedWithEvaluator();
  Plan waiting = PlanJob(job, o, Input());
  Find(o, "tj-evaluator-0") = Pod(ReplicaType::kEvaluator, 0, PodPhase::kSucceeded, 0);
  Find(o, "tj-evaluator-0").message = R"({"task":"evaluator-0","step":400,"eval":{"auc":0.8}})";
  Plan plan = PlanJob(After(job, waiting), o, Input(kNow + seconds(60)));
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
  EXPECT_EQ(Cond(plan, ConditionType::kSucceeded)->message,
            "training succeeded (Worker 0 succeeded) and the evaluator evaluated the final "
            "checkpoint");
  EXPECT_EQ(plan.status.completion_time, kNow + seconds(60));
  EXPECT_FALSE(plan.status.IsTrue(ConditionType::kRunning));
  EXPECT_EQ(plan.status.metrics, json::parse(R"({"task":"worker-0","steps":400,
                            "evaluator":{"task":"evaluator-0","step":400,"eval":{"auc":0.8}}})"));
}

TEST(PlannerEvaluatorTest, AnEvaluatorThatExitedZeroEarlierLetsTheJobSucceedAtOnce) {
  ObservedChildren o = TrainedWithEvaluator();
  Find(o, "tj-evaluator-0").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(JobWithEvaluator(), o, Input());
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
}

TEST(PlannerEvaluatorTest, WhileTrainingRunsTheEvaluatorDoesNotDecide) {
  ObservedChildren o = TrainedWithEvaluator();
  Find(o, "tj-worker-0").phase = PodPhase::kRunning;
  Find(o, "tj-evaluator-0").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(JobWithEvaluator(), o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(Cond(plan, ConditionType::kRunning)->reason, "TrainingJobRunning");
  EXPECT_TRUE(plan.deletes.empty());
}

TEST(PlannerEvaluatorTest, AFailedEvaluatorIsRestartedAfterTrainingAndNothingElseIs) {
  api::TrainingJob job = JobWithEvaluator();
  ObservedChildren o = TrainedWithEvaluator();
  Find(o, "tj-evaluator-0") = Pod(ReplicaType::kEvaluator, 0, PodPhase::kFailed, 1);
  Plan plan = PlanJob(job, o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kEvaluator).restarts, 1);
  EXPECT_EQ(plan.status.state, "Restarting");
  EXPECT_EQ(Cond(plan, ConditionType::kRunning)->reason, "WaitingForEvaluator");
  EXPECT_EQ(DeletedPods(plan),
            (std::vector<std::string>{"tj-ps-0", "tj-ps-1", "tj-worker-1", "tj-evaluator-0"}));
  // Every pod but the coordinator's is gone; after the backoff only the evaluator
  // comes back.
  ObservedChildren gone = o;
  std::erase_if(gone.pods, [](const ObservedPod& p) { return p.name != "tj-worker-0"; });
  Plan later = PlanJob(After(job, plan), gone, Input(kNow + kRestartBackoffBase));
  EXPECT_EQ(CreatedNames(later), (std::vector<std::string>{"Pod/tj-evaluator-0"}));
  EXPECT_EQ(later.status.state, "Running");
  EXPECT_EQ(Cond(later, ConditionType::kRunning)->reason, "WaitingForEvaluator");
}

// After training the evaluator runs alone; a replacement in
// the gang would wait for minMember siblings that never come back.
TEST(PlannerEvaluatorTest, AnEvaluatorRecreatedAfterTrainingJoinsNoGang) {
  api::TrainingJob job = JobWithEvaluator();
  api::SchedulingPolicy sp;
  sp.scheduler_name = "gang-scheduler";
  sp.min_available = 5;
  job.spec.run_policy.scheduling_policy = sp;
  Plan first = PlanJob(job, {}, Input());
  for (const ChildCreate& c : first.creates) {
    if (c.ref.kind == ChildRef::Kind::kPod) {
      EXPECT_EQ(c.object["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "tj-job-uid");
    }
  }
  ObservedChildren o = TrainedWithEvaluator();
  Find(o, "tj-evaluator-0") = Pod(ReplicaType::kEvaluator, 0, PodPhase::kFailed, 1);
  Plan plan = PlanJob(job, o, Input());
  ObservedChildren gone = o;
  std::erase_if(gone.pods, [](const ObservedPod& p) { return p.name != "tj-worker-0"; });
  Plan later = PlanJob(After(job, plan), gone, Input(kNow + kRestartBackoffBase));
  const ChildCreate* evaluator = nullptr;
  for (const ChildCreate& c : later.creates) {
    if (c.ref.kind == ChildRef::Kind::kPod) evaluator = &c;
  }
  ASSERT_NE(evaluator, nullptr);
  EXPECT_EQ(evaluator->ref.name, "tj-evaluator-0");
  EXPECT_FALSE(evaluator->object["metadata"]["labels"].contains("scheduling.x-k8s.io/pod-group"));
  EXPECT_EQ(evaluator->object["spec"]["schedulerName"], "gang-scheduler")
      << "the same scheduler, as a pod of no group";
}

TEST(PlannerEvaluatorTest, WaitingIsRememberedWhenTheCoordinatorsPodIsGone) {
  api::TrainingJob job = JobWithEvaluator();
  Plan waiting = PlanJob(job, TrainedWithEvaluator(), Input());
  ObservedChildren o = TrainedWithEvaluator();
  std::erase_if(o.pods, [](const ObservedPod& p) { return p.role != ReplicaType::kEvaluator; });
  Plan plan = PlanJob(After(job, waiting), o, Input(kNow + seconds(5)));
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_TRUE(plan.creates.empty()) << CreatedNames(plan).size();
  EXPECT_EQ(Cond(plan, ConditionType::kRunning)->reason, "WaitingForEvaluator");
  Find(o, "tj-evaluator-0").phase = PodPhase::kSucceeded;
  plan = PlanJob(After(job, plan), o, Input(kNow + seconds(6)));
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
}

TEST(PlannerEvaluatorTest, AnEvaluatorExitingZeroUnderAlwaysIsDoneOnceTrainingSucceeded) {
  ObservedChildren o = TrainedWithEvaluator();
  Find(o, "tj-evaluator-0") = Pod(ReplicaType::kEvaluator, 0, PodPhase::kSucceeded, 0);
  Plan plan = PlanJob(JobWithEvaluator(RestartPolicy::kAlways), o, Input());
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
  EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kEvaluator).restarts, 0);
}

TEST(PlannerEvaluatorTest, AnEvaluatorFailingUnderNeverFailsTheJob) {
  ObservedChildren o = TrainedWithEvaluator();
  Find(o, "tj-evaluator-0") = Pod(ReplicaType::kEvaluator, 0, PodPhase::kFailed, 1);
  Plan plan = PlanJob(JobWithEvaluator(RestartPolicy::kNever), o, Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "ReplicaFailed");
  EXPECT_NE(Cond(plan, ConditionType::kFailed)->message.find("Evaluator 0"), std::string::npos);
}

TEST(PlannerEvaluatorTest, EveryEvaluatorMustSucceed) {
  api::TrainingJob job = JobWithEvaluator(RestartPolicy::kOnFailure, 2);
  ObservedChildren o = TrainedWithEvaluator(2);
  Find(o, "tj-evaluator-1").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_NE(Cond(plan, ConditionType::kRunning)->message.find("waiting for 1 of 2 evaluators"),
            std::string::npos);
  Find(o, "tj-evaluator-0").phase = PodPhase::kSucceeded;
  plan = PlanJob(After(job, plan), o, Input());
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
  EXPECT_NE(Cond(plan, ConditionType::kSucceeded)->message.find("all 2 evaluators"),
            std::string::npos);
}

TEST(PlannerEvaluatorTest, TheDeadlineStillAppliesWhileWaiting) {
  api::TrainingJob job = JobWithEvaluator();
  job.spec.run_policy.active_deadline_seconds = 100;
  Plan waiting = PlanJob(job, TrainedWithEvaluator(), Input());
  ASSERT_FALSE(waiting.status.Finished());
  Plan plan = PlanJob(After(job, waiting), TrainedWithEvaluator(), Input(kNow + seconds(100)));
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "DeadlineExceeded");
  EXPECT_EQ(DeletedPods(plan).back(), "tj-evaluator-0");
}

TEST(PlannerEvaluatorTest, FailedTrainingStopsTheEvaluatorEvenUnderCleanPodPolicyNone) {
  api::TrainingJob job = JobWithEvaluator(RestartPolicy::kNever);
  job.spec.replica_specs[ReplicaType::kWorker].restart_policy = RestartPolicy::kNever;
  job.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kNone;
  ObservedChildren o = TrainedWithEvaluator();
  Find(o, "tj-worker-0") = Pod(ReplicaType::kWorker, 0, PodPhase::kFailed, 1);
  Plan plan = PlanJob(job, o, Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(DeletedPods(plan), (std::vector<std::string>{"tj-evaluator-0"}));
}

// ---- status.metrics ---------------------------------------------------------------

TEST(PlannerMetricsTest, SuccessCopiesWorkerZerosTerminationMessageIntoStatus) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0") = Pod(ReplicaType::kWorker, 0, PodPhase::kSucceeded, 0);
  Find(o, "tj-worker-0").message = kTrainerMetrics;
  Find(o, "tj-worker-1").message = R"({"task":"worker-1","steps":390})";
  Plan plan = PlanJob(Job(), o, Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
  ASSERT_TRUE(plan.status.metrics.has_value());
  EXPECT_EQ(*plan.status.metrics, json::parse(kTrainerMetrics));
  EXPECT_EQ((*plan.status.metrics)["eval"]["auc"], 0.757);
}

TEST(PlannerMetricsTest, ChiefReportsWhenThereIsOne) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kChief].pod_template = Template();
  ObservedChildren o = All(PodPhase::kSucceeded);
  for (ObservedPod& p : o.pods) p.message = R"({"task":")" + p.name + R"("})";
  o.pods.push_back(Pod(ReplicaType::kChief, 0, PodPhase::kSucceeded, 0));
  o.pods.back().message = R"({"task":"chief-0","eval":{"auc":0.8}})";
  o.services.push_back({"tj-chief-0", std::nullopt});
  Plan plan = PlanJob(job, o, Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
  ASSERT_TRUE(plan.status.metrics.has_value());
  EXPECT_EQ((*plan.status.metrics)["task"], "chief-0");
}

TEST(PlannerMetricsTest, AllWorkersTakesWorkerZerosMetricsEvenIfAnotherFinishesLast) {
  api::TrainingJob job = Job();
  job.spec.success_policy = api::SuccessPolicy::kAllWorkers;
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Find(o, "tj-worker-0").message = kTrainerMetrics;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_FALSE(plan.status.metrics.has_value());  // not finished yet
  Find(o, "tj-worker-1").phase = PodPhase::kSucceeded;
  Find(o, "tj-worker-1").message = R"({"task":"worker-1","steps":390})";
  plan = PlanJob(After(job, plan), o, Input(kNow + seconds(10)));
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
  ASSERT_TRUE(plan.status.metrics.has_value());
  EXPECT_EQ((*plan.status.metrics)["task"], "worker-0");
}

TEST(PlannerMetricsTest, MetricsAreKeptAfterThePodsAreGone) {
  api::TrainingJob job = Job();
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Find(o, "tj-worker-0").message = kTrainerMetrics;
  Plan done = PlanJob(job, o, Input());
  ASSERT_TRUE(done.status.metrics.has_value());
  Plan later = PlanJob(After(job, done), {}, Input(kNow + seconds(30)));
  ASSERT_TRUE(later.status.metrics.has_value());
  EXPECT_EQ(*later.status.metrics, *done.status.metrics);
  // A succeeded pod seen again with another message changes nothing either.
  Find(o, "tj-worker-0").message = R"({"steps":1})";
  later = PlanJob(After(job, done), o, Input(kNow + seconds(30)));
  EXPECT_EQ(*later.status.metrics, *done.status.metrics);
}

TEST(PlannerMetricsTest, FailedJobGetsNoMetrics) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0") = Pod(ReplicaType::kWorker, 0, PodPhase::kFailed, 3);
  Find(o, "tj-worker-0").message = kTrainerMetrics;
  Plan plan = PlanJob(Job(RestartPolicy::kNever), o, Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_FALSE(plan.status.metrics.has_value());
}

TEST(PlannerMetricsTest, UnusableTerminationMessagesGiveNoMetricsButTheJobStillSucceeds) {
  // Exactly at the cap is fine; one byte more is not.
  const std::string at_cap = R"({"pad":")" + std::string(api::kMaxMetricsBytes - 10, 'x') + R"("})";
  ASSERT_EQ(at_cap.size(), api::kMaxMetricsBytes);
  const std::string over_cap =
      R"({"pad":")" + std::string(api::kMaxMetricsBytes - 9, 'x') + R"("})";
  // Short as text, too long once serialised: each 1e9 prints as 1000000000.0.
  std::string grows = "{";
  for (int i = 0; i < 300; ++i) grows += (i ? ",\"" : "\"") + std::to_string(i) + "\":1e9";
  grows += "}";
  ASSERT_LT(grows.size(), api::kMaxMetricsBytes);
  const std::string deep = std::string(2000, '[') + std::string(2000, ']');
  const std::vector<std::string> unusable = {"",
                                             "done",
                                             "{\"steps\":",
                                             "[1,2,3]",
                                             "42",
                                             "\"text\"",
                                             "null",
                                             "{\"loss\":NaN}",
                                             "{\"x\":1e400}",
                                             "{\"bad\":\"\xff\xfe\"}",
                                             R"({"a":1} {"b":2})",
                                             "{\"a\":" + deep + "}x",
                                             over_cap,
                                             grows};
  for (const std::string& message : unusable) {
    ObservedChildren o = All(PodPhase::kRunning);
    Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
    Find(o, "tj-worker-0").message = message;
    Plan plan = PlanJob(Job(), o, Input());
    EXPECT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded)) << message.substr(0, 40);
    EXPECT_FALSE(plan.status.metrics.has_value()) << message.substr(0, 40);
  }
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Find(o, "tj-worker-0").message = at_cap;
  EXPECT_TRUE(PlanJob(Job(), o, Input()).status.metrics.has_value());
}

// ---- Deadline and TTL -----------------------------------------------------------

TEST(PlannerDeadlineTest, RequeuesForTheTimeLeft) {
  api::TrainingJob job = Job();
  job.spec.run_policy.active_deadline_seconds = 100;
  job.status.start_time = kNow - seconds(40);
  Plan plan = PlanJob(job, All(PodPhase::kRunning), Input());
  EXPECT_EQ(plan.requeue_after, seconds(60));
  EXPECT_FALSE(plan.status.Finished());
}

TEST(PlannerDeadlineTest, NewJobRequeuesForTheWholeDeadline) {
  api::TrainingJob job = Job();
  job.spec.run_policy.active_deadline_seconds = 100;
  Plan plan = PlanJob(job, {}, Input());
  EXPECT_EQ(plan.requeue_after, seconds(100));
}

TEST(PlannerDeadlineTest, FailsAtTheDeadlineAndDeletesRunningPods) {
  api::TrainingJob job = Job();
  job.spec.run_policy.active_deadline_seconds = 100;
  job.status.start_time = kNow - seconds(100);
  Plan plan = PlanJob(job, All(PodPhase::kRunning), Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "DeadlineExceeded");
  EXPECT_EQ(DeletedPods(plan).size(), 4u);
  EXPECT_FALSE(plan.requeue_after.has_value());
  EXPECT_EQ(plan.events[0].reason, "DeadlineExceeded");
}

// ---- Pods that cannot start -------------------------------------------------------

// A pod whose image cannot be pulled stays Pending forever; the job said nothing.
TEST(PlannerCannotStartTest, StuckContainersShowInTheStatusWithOneEvent) {
  api::TrainingJob job = Job();
  job.status.start_time = kNow;
  ObservedChildren o = All(PodPhase::kPending);
  Find(o, "tj-worker-1").cannot_start =
      "ImagePullBackOff: Back-off pulling image \"kubetrain-trainer:typo\"";
  Plan plan = PlanJob(job, o, Input());
  const api::Condition* c = Cond(plan, ConditionType::kCannotStart);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->status);
  EXPECT_EQ(c->reason, "ImagePullBackOff");
  EXPECT_EQ(c->message,
            "1 of 4 pods cannot start; tj-worker-1: ImagePullBackOff: Back-off pulling image "
            "\"kubetrain-trainer:typo\"");
  int events = 0;
  for (const Event& e : plan.events) events += e.reason == "CannotStart";
  EXPECT_EQ(events, 1);
  EXPECT_FALSE(plan.requeue_after) << "no startDeadlineSeconds: no timer";

  // Again with that status: no second event, nothing to write.
  Plan again = PlanJob(After(job, plan), o, Input(kNow + seconds(30)));
  EXPECT_FALSE(again.status_changed);
  for (const Event& e : again.events) EXPECT_NE(e.reason, "CannotStart");

  // Pulled at last: False.
  Find(o, "tj-worker-1").cannot_start.clear();
  Plan started = PlanJob(After(job, plan), o, Input(kNow + seconds(60)));
  c = Cond(started, ConditionType::kCannotStart);
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->status);
  EXPECT_EQ(c->reason, "PodsStarted");
}

TEST(PlannerCannotStartTest, StartDeadlineFailsTheJobAndFreesThePods) {
  api::TrainingJob job = Job();
  job.spec.run_policy.start_deadline_seconds = 300;
  job.status.start_time = kNow;
  ObservedChildren o = All(PodPhase::kPending);
  Find(o, "tj-ps-0").cannot_start = "CreateContainerConfigError: secret \"creds\" not found";
  Plan first = PlanJob(job, o, Input());
  ASSERT_TRUE(first.status.IsTrue(ConditionType::kCannotStart));
  // The deadline counts from when the condition turned True.
  Plan waiting = PlanJob(After(job, first), o, Input(kNow + seconds(100)));
  EXPECT_FALSE(waiting.status.Finished());
  EXPECT_EQ(waiting.requeue_after, seconds(200));
  Plan due = PlanJob(After(job, first), o, Input(kNow + seconds(300)));
  ASSERT_TRUE(due.status.IsTrue(ConditionType::kFailed));
  const api::Condition* failed = Cond(due, ConditionType::kFailed);
  EXPECT_EQ(failed->reason, "StartDeadlineExceeded");
  EXPECT_NE(failed->message.find("secret \"creds\" not found"), std::string::npos)
      << failed->message;
  EXPECT_EQ(DeletedPods(due).size(), 4u) << "cleanPodPolicy Running takes the pending pods";
  EXPECT_FALSE(due.status.IsTrue(ConditionType::kCannotStart));
}

TEST(PlannerCannotStartTest, StartDeadlineDoesNotCountWhileThePodsStart) {
  api::TrainingJob job = Job();
  job.spec.run_policy.start_deadline_seconds = 300;
  job.status.start_time = kNow - seconds(1000);
  Plan plan = PlanJob(job, All(PodPhase::kPending), Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(Cond(plan, ConditionType::kCannotStart), nullptr);
}

TEST(PlannerTtlTest, FinishedJobIsDeletedAfterTheTtl) {
  api::TrainingJob job = Job();
  job.spec.run_policy.ttl_seconds_after_finished = 60;
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Plan done = PlanJob(job, o, Input());
  EXPECT_EQ(done.requeue_after, seconds(60));
  EXPECT_FALSE(done.delete_job);
  Plan early = PlanJob(After(job, done), {}, Input(kNow + seconds(45)));
  EXPECT_EQ(early.requeue_after, seconds(15));
  EXPECT_FALSE(early.delete_job);
  Plan due = PlanJob(After(job, done), {}, Input(kNow + seconds(60)));
  EXPECT_TRUE(due.delete_job);
}

TEST(PlannerTtlTest, TtlCountsFromTheFinishedConditionWhenCompletionTimeIsMissing) {
  api::TrainingJob job = Job();
  job.spec.run_policy.ttl_seconds_after_finished = 60;
  job.status.conditions.push_back(
      {ConditionType::kFailed, true, "ReplicaFailed", "m", kNow - seconds(20)});
  Plan plan = PlanJob(job, {}, Input());
  EXPECT_EQ(plan.status.completion_time, kNow - seconds(20));
  EXPECT_EQ(plan.requeue_after, seconds(40));
}

TEST(PlannerTtlTest, ZeroTtlDeletesAtOnce) {
  api::TrainingJob job = Job(RestartPolicy::kNever);
  job.spec.run_policy.ttl_seconds_after_finished = 0;
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-ps-0").phase = PodPhase::kFailed;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_TRUE(plan.delete_job);
}

// ---- Refused creates ------------------------------------------------------------

// The executor says the apiserver refuses the job's pods: the condition says
// why at once, and goes (removed, not False: the REFUSED column reads its
// reason) once the executor no longer says so.
TEST(PlannerRefusedTest, CreateRefusedFollowsTheExecutorAndIsRemovedOnceCleared) {
  api::TrainingJob job = Job();
  PlanInput in = Input();
  in.create_refused = PlanInput::Refusal{
      "QuotaExceeded", "cannot create pod tj-worker-1: exceeded quota: q, limited: pods=2"};
  Plan plan = PlanJob(job, ObservedChildren{}, in);
  const api::Condition* c = Cond(plan, ConditionType::kCreateRefused);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->status);
  EXPECT_EQ(c->reason, "QuotaExceeded");
  EXPECT_EQ(c->message, in.create_refused->message);
  EXPECT_EQ(c->last_transition_time, kNow);
  EXPECT_TRUE(plan.status_changed);
  EXPECT_FALSE(plan.creates.empty());  // the executor decides when to probe

  job = After(job, plan);
  Plan again = PlanJob(job, ObservedChildren{}, Input(kNow + seconds(20)));
  EXPECT_EQ(Cond(again, ConditionType::kCreateRefused), nullptr);
  EXPECT_TRUE(again.status_changed);
}

// A suspended (or finished) job is not refused anything: no condition.
TEST(PlannerRefusedTest, ASuspendedJobIsNotRefused) {
  api::TrainingJob job = Job();
  job.spec.run_policy.suspend = true;
  PlanInput in = Input();
  in.create_refused = PlanInput::Refusal{"PodCreateForbidden", "cannot create pod tj-ps-0: no"};
  EXPECT_EQ(Cond(PlanJob(job, ObservedChildren{}, in), ConditionType::kCreateRefused), nullptr);
}

}  // namespace
}  // namespace kubetrain::planner
