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

// ---- disruptions ------------------------------------------------------

TEST(PlannerDisruptionTest, AnEvictedPodUnderNeverIsReplacedNotAFailure) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-1") = Evicted(ReplicaType::kWorker, 1);
  api::TrainingJob job = Job(RestartPolicy::kNever);
  job.spec.run_policy.backoff_limit = 0;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(DeletedPods(plan), std::vector<std::string>{"tj-worker-1"});
  EXPECT_EQ(Worker(plan).restarts, 0);
  EXPECT_EQ(Worker(plan).disruptions, 1);
  EXPECT_TRUE(Worker(plan).backoff.empty());  // no crash-loop delay
  EXPECT_EQ(plan.status.restarts, 0);
  EXPECT_EQ(plan.status.disruptions, 1);
  EXPECT_EQ(plan.status.counted_disruptions, std::vector<std::string>{"tj-worker-1-uid"});
  const Event* e = EventWith(plan, "PodDisrupted");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->type, EventType::kNormal);
  EXPECT_NE(e->message.find("tj-worker-1"), std::string::npos) << e->message;
  EXPECT_NE(e->message.find("Evicted"), std::string::npos) << e->message;

  // Once gone, the replica is recreated at once: no backoff to wait out.
  api::TrainingJob next = After(job, plan);
  o.pods.pop_back();
  Plan gone = PlanJob(next, o, Input(kNow + seconds(1)));
  EXPECT_EQ(CreatedNames(gone), std::vector<std::string>{"Pod/tj-worker-1"});
  EXPECT_EQ(gone.status.disruptions, 1);
}

TEST(PlannerDisruptionTest, EveryDisruptionTargetReasonIsADisruption) {
  for (const char* reason : {"PreemptionByScheduler", "EvictionByEvictionAPI",
                             "DeletionByTaintManager", "TerminationByKubelet", "DeletionByPodGC"}) {
    ObservedChildren o = All(PodPhase::kRunning);
    ObservedPod& p = Find(o, "tj-ps-0");
    p = Pod(ReplicaType::kPS, 0, PodPhase::kFailed, 143);
    p.disruption = reason;
    Plan plan = PlanJob(Job(RestartPolicy::kNever), o, Input());
    EXPECT_FALSE(plan.status.Finished()) << reason;
    EXPECT_EQ(DeletedPods(plan), std::vector<std::string>{"tj-ps-0"}) << reason;
    EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kPS).disruptions, 1) << reason;
    EXPECT_EQ(plan.status.restarts, 0) << reason;
    const Event* e = EventWith(plan, "PodDisrupted");
    ASSERT_NE(e, nullptr) << reason;
    EXPECT_NE(e->message.find(reason), std::string::npos) << e->message;
  }
}

TEST(PlannerDisruptionTest, APodDeletedWhileRunningBySomeoneElseIsCountedOnce) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").deletion_timestamp = kNow;
  api::TrainingJob job = Job(RestartPolicy::kNever);
  Plan plan = PlanJob(job, o, Input());
  EXPECT_TRUE(plan.deletes.empty());  // already going
  EXPECT_EQ(Worker(plan).disruptions, 1);
  ASSERT_NE(EventWith(plan, "PodDisrupted"), nullptr);
  EXPECT_NE(EventWith(plan, "PodDisrupted")->message.find("Deleted"), std::string::npos);
  // Seen again, then exiting 143 after its graceful save: still one.
  job = After(job, plan);
  Plan again = PlanJob(job, o, Input(kNow + seconds(1)));
  EXPECT_EQ(Worker(again).disruptions, 1);
  EXPECT_EQ(EventWith(again, "PodDisrupted"), nullptr);
  ObservedPod& p = Find(o, "tj-worker-0");
  p.phase = PodPhase::kFailed;
  p.exit_code = 143;
  job = After(job, again);
  Plan exited = PlanJob(job, o, Input(kNow + seconds(2)));
  EXPECT_FALSE(exited.status.Finished());
  EXPECT_EQ(Worker(exited).disruptions, 1);
  EXPECT_EQ(exited.status.restarts, 0);
}

// What a disruption cost, in the trainer's words (its termination message's "stopped"):
// in status.replicaStatuses[role].lastDisruption and the events, whether it comes with
// the first sight of the disruption or with the exit after it was counted.
TEST(PlannerDisruptionTest, TheCostOfADisruptionIsInLastDisruptionAndTheEvents) {
  const std::string lost =
      "stopped by SIGTERM at step 412: no --checkpoint-dir, so this progress is lost (the job "
      "starts over)";
  // Counted while running (deleted by someone else), then exits 143 with its account.
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").deletion_timestamp = kNow;
  api::TrainingJob job = Job(RestartPolicy::kNever);
  Plan plan = PlanJob(job, o, Input());
  ASSERT_TRUE(Worker(plan).last_disruption.has_value());
  EXPECT_EQ(Worker(plan).last_disruption->pod, "tj-worker-0");
  EXPECT_EQ(Worker(plan).last_disruption->reason, "Deleted");
  EXPECT_EQ(Worker(plan).last_disruption->message, "");
  ObservedPod& p = Find(o, "tj-worker-0");
  p.phase = PodPhase::kFailed;
  p.exit_code = 143;
  p.message = nlohmann::json{{"stopped", lost}}.dump();
  job = After(job, plan);
  Plan exited = PlanJob(job, o, Input(kNow + seconds(2)));
  ASSERT_TRUE(Worker(exited).last_disruption.has_value());
  EXPECT_EQ(Worker(exited).last_disruption->message, lost);
  EXPECT_EQ(Worker(exited).last_disruption->exit_code, std::optional<int32_t>(143));
  ASSERT_NE(EventWith(exited, "DisruptedPodStopped"), nullptr);
  EXPECT_NE(EventWith(exited, "DisruptedPodStopped")->message.find(lost), std::string::npos);
  EXPECT_EQ(Worker(exited).disruptions, 1);
  // Once only.
  job = After(job, exited);
  EXPECT_EQ(EventWith(PlanJob(job, o, Input(kNow + seconds(3))), "DisruptedPodStopped"), nullptr);

  // First seen already exited (preempted): the cost is in the PodDisrupted event at once.
  ObservedChildren o2 = All(PodPhase::kRunning);
  ObservedPod& q = Find(o2, "tj-ps-0");
  q = Pod(ReplicaType::kPS, 0, PodPhase::kFailed, 143);
  q.disruption = "PreemptionByScheduler";
  q.message =
      nlohmann::json{{"stopped", "stopped by SIGTERM; this shard is in checkpoint 400"}}.dump();
  Plan preempted = PlanJob(Job(RestartPolicy::kNever), o2, Input());
  const auto& ps = preempted.status.replica_statuses.at(ReplicaType::kPS);
  ASSERT_TRUE(ps.last_disruption.has_value());
  EXPECT_EQ(ps.last_disruption->reason, "PreemptionByScheduler");
  EXPECT_EQ(ps.last_disruption->message, "stopped by SIGTERM; this shard is in checkpoint 400");
  ASSERT_NE(EventWith(preempted, "PodDisrupted"), nullptr);
  EXPECT_NE(EventWith(preempted, "PodDisrupted")->message.find("checkpoint 400"),
            std::string::npos);
}

TEST(PlannerDisruptionTest, AGracefulExitOfADeletedPodIsADisruption) {
  // First seen already Failed with 143 while being deleted by someone else.
  ObservedChildren o = All(PodPhase::kRunning);
  ObservedPod& p = Find(o, "tj-worker-0");
  p = Pod(ReplicaType::kWorker, 0, PodPhase::kFailed, 143);
  p.deletion_timestamp = kNow;
  Plan plan = PlanJob(Job(RestartPolicy::kNever), o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(Worker(plan).disruptions, 1);
  EXPECT_EQ(Worker(plan).restarts, 0);
}

TEST(PlannerDisruptionTest, APodTheOperatorDeletedIsNoDisruption) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").deletion_timestamp = kNow;
  Find(o, "tj-worker-0").deleted_by_operator = true;
  // A pod of an earlier spec the planner deletes itself.
  Find(o, "tj-worker-1").deletion_timestamp = kNow;
  Find(o, "tj-worker-1").spec_hash = "earlier";
  Plan plan = PlanJob(Job(RestartPolicy::kNever), o, Input());
  EXPECT_EQ(Worker(plan).disruptions, 0);
  EXPECT_EQ(EventWith(plan, "PodDisrupted"), nullptr);
}

TEST(PlannerDisruptionTest, AVanishedRunningPodIsCountedOnceWhileReported) {
  ObservedChildren o = All(PodPhase::kRunning);
  ObservedPod gone = Find(o, "tj-worker-1");
  o.pods.pop_back();
  o.vanished.push_back(gone);
  api::TrainingJob job = Job(RestartPolicy::kNever);
  Plan plan = PlanJob(job, o, Input());
  EXPECT_EQ(CreatedNames(plan), std::vector<std::string>{"Pod/tj-worker-1"});
  EXPECT_EQ(Worker(plan).disruptions, 1);
  EXPECT_EQ(Worker(plan).restarts, 0);
  ASSERT_NE(EventWith(plan, "PodDisrupted"), nullptr);
  EXPECT_NE(EventWith(plan, "PodDisrupted")->message.find("Vanished"), std::string::npos);
  EXPECT_EQ(plan.status.counted_disruptions, std::vector<std::string>{"tj-worker-1-uid"});
  // Reported again (the executor keeps it until that status is written): not twice.
  job = After(job, plan);
  Plan again = PlanJob(job, o, Input(kNow + seconds(1)));
  EXPECT_EQ(Worker(again).disruptions, 1);
  // No longer reported: its UID is still known for a while, the count stays.
  o.vanished.clear();
  job = After(job, again);
  Plan later = PlanJob(job, o, Input(kNow + seconds(2)));
  EXPECT_EQ(Worker(later).disruptions, 1);
  // Reported late again (the cache dropped it before the report): still one.
  o.vanished.push_back(gone);
  job = After(job, later);
  Plan late = PlanJob(job, o, Input(kNow + seconds(3)));
  EXPECT_EQ(Worker(late).disruptions, 1);
}

TEST(PlannerDisruptionTest, TheUidsOfGoneDisruptedPodsAreBounded) {
  api::TrainingJob job = Job(RestartPolicy::kNever);
  for (int i = 0; i < 100; ++i)
    job.status.counted_disruptions.push_back("old-" + std::to_string(i));
  Plan plan = PlanJob(job, All(PodPhase::kRunning), Input());
  ASSERT_EQ(plan.status.counted_disruptions.size(), 64u);
  EXPECT_EQ(plan.status.counted_disruptions.front(), "old-36");  // the newest kept
}

TEST(PlannerDisruptionTest, AVanishedPodPodGcHadMarkedFailedIsADisruption) {
  ObservedChildren o = All(PodPhase::kRunning);
  ObservedPod gone = Pod(ReplicaType::kWorker, 1, PodPhase::kFailed);
  gone.disruption = "DeletionByPodGC";
  o.pods.pop_back();
  o.vanished.push_back(gone);
  Plan plan = PlanJob(Job(RestartPolicy::kNever), o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(Worker(plan).disruptions, 1);
  EXPECT_EQ(CreatedNames(plan), std::vector<std::string>{"Pod/tj-worker-1"});
}

TEST(PlannerDisruptionTest, AVanishedPodThatHadFailedOrWasOutdatedIsNoDisruption) {
  ObservedChildren o = All(PodPhase::kRunning);
  ObservedPod failed = Pod(ReplicaType::kWorker, 1, PodPhase::kFailed, 1);
  ObservedPod outdated = Find(o, "tj-worker-0");
  outdated.spec_hash = "earlier";
  std::erase_if(o.pods, [](const ObservedPod& p) { return p.role == ReplicaType::kWorker; });
  o.vanished = {failed, outdated};
  Plan plan = PlanJob(Job(RestartPolicy::kNever), o, Input());
  EXPECT_EQ(Worker(plan).disruptions, 0);
  EXPECT_FALSE(plan.status.Finished());
}

TEST(PlannerDisruptionTest, DisruptionsDoNotConsumeTheBackoffLimit) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  job.spec.run_policy.backoff_limit = 1;
  job.status.replica_statuses[ReplicaType::kPS].restarts = 1;  // the limit is reached
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0") = Evicted(ReplicaType::kWorker, 0);
  Find(o, "tj-worker-1").disruption = "PreemptionByScheduler";
  Find(o, "tj-worker-1").deletion_timestamp = kNow;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(plan.status.disruptions, 2);
  EXPECT_TRUE(Worker(plan).backoff.empty());
}

TEST(PlannerDisruptionTest, CountPolicyHandlesADisruptionAsAFailure) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  job.spec.run_policy.disruption_policy = api::DisruptionPolicy::kCount;
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-1") = Evicted(ReplicaType::kWorker, 1);
  Plan plan = PlanJob(job, o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(Worker(plan).restarts, 1);
  EXPECT_EQ(Worker(plan).disruptions, 1);
  ASSERT_EQ(Worker(plan).backoff.size(), 1u);  // the crash-loop delay applies
  EXPECT_EQ(DeletedPods(plan), std::vector<std::string>{"tj-worker-1"});
  ASSERT_NE(EventWith(plan, "RestartingReplica"), nullptr);
  // Never: the job fails.
  job.spec.replica_specs.at(ReplicaType::kWorker).restart_policy = RestartPolicy::kNever;
  Plan never = PlanJob(job, o, Input());
  ASSERT_TRUE(never.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(Cond(never, ConditionType::kFailed)->reason, "ReplicaFailed");
  // backoffLimit reached: the job fails.
  job.spec.replica_specs.at(ReplicaType::kWorker).restart_policy = RestartPolicy::kOnFailure;
  job.spec.run_policy.backoff_limit = 0;
  Plan limited = PlanJob(job, o, Input());
  ASSERT_TRUE(limited.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(Cond(limited, ConditionType::kFailed)->reason, "BackoffLimitExceeded");
}

TEST(PlannerDisruptionTest, CountPolicyCountsAVanishedPodAsARestart) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  job.spec.run_policy.disruption_policy = api::DisruptionPolicy::kCount;
  ObservedChildren o = All(PodPhase::kRunning);
  ObservedPod gone = Find(o, "tj-worker-1");
  o.pods.pop_back();
  o.vanished.push_back(gone);
  Plan plan = PlanJob(job, o, Input());
  EXPECT_EQ(Worker(plan).restarts, 1);
  EXPECT_EQ(Worker(plan).disruptions, 1);
  // It waits out the crash-loop backoff like a failed replica.
  EXPECT_TRUE(CreatedNames(plan).empty());
}

TEST(PlannerDisruptionTest, ADisruptedEvaluatorIsReplacedAfterTraining) {
  api::TrainingJob job = Job(RestartPolicy::kNever);
  job.spec.replica_specs[ReplicaType::kEvaluator] = {1, RestartPolicy::kNever, Template()};
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  o.pods.push_back(Evicted(ReplicaType::kEvaluator, 0));
  Plan plan = PlanJob(job, o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kEvaluator).disruptions, 1);
  const auto deleted = DeletedPods(plan);
  EXPECT_NE(std::find(deleted.begin(), deleted.end(), "tj-evaluator-0"), deleted.end());
}

TEST(PlannerDisruptionTest, DisruptionCountsSurviveTheStatusRoundTrip) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-1") = Evicted(ReplicaType::kWorker, 1);
  api::TrainingJob job = Job(RestartPolicy::kNever);
  job.spec.run_policy.disruption_policy = api::DisruptionPolicy::kCount;
  Plan plan = PlanJob(Job(RestartPolicy::kNever), o, Input());
  auto status = api::ParseTrainingJobStatus(api::StatusToJson(plan.status));
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(*status, plan.status);
  auto spec = api::ParseTrainingJob(api::ToJson(job));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->spec.run_policy.disruption_policy, api::DisruptionPolicy::kCount);
}

// ---- backoffLimit ---------------------------------------------------------------

TEST(PlannerBackoffTest, RestartsUpToTheLimitThenFails) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  job.spec.run_policy.backoff_limit = 1;
  job.status.replica_statuses[ReplicaType::kPS].restarts = 1;  // restarts add up over roles
  ObservedChildren o = All(PodPhase::kRunning);
  ObservedPod& p = Find(o, "tj-worker-0");
  p = Pod(ReplicaType::kWorker, 0, PodPhase::kFailed, 137);
  p.reason = "OOMKilled";
  p.message = "out of memory";
  Plan plan = PlanJob(job, o, Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "BackoffLimitExceeded");
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->message,
            "backoffLimit 1 exceeded; last failure: Worker 0 (pod tj-worker-0) failed with exit "
            "code 137 (OOMKilled): out of memory");
  EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kWorker).last_failure,
            (api::FailureInfo{"tj-worker-0", 137, "OOMKilled", "out of memory", kNow}));
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "BackoffLimitExceeded");
  EXPECT_EQ(plan.events[0].message, Cond(plan, ConditionType::kFailed)->message);
}

TEST(PlannerBackoffTest, BelowTheLimitRestarts) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  job.spec.run_policy.backoff_limit = 2;
  job.status.replica_statuses[ReplicaType::kPS].restarts = 1;
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kFailed;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kWorker).restarts, 1);
}

TEST(PlannerBackoffTest, LimitZeroFailsOnTheFirstFailure) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  job.spec.run_policy.backoff_limit = 0;
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-ps-1").phase = PodPhase::kFailed;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "BackoffLimitExceeded");
}

TEST(PlannerBackoffTest, TwoFailuresInOnePlanBothCount) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  job.spec.run_policy.backoff_limit = 1;
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-ps-0").phase = PodPhase::kFailed;
  Find(o, "tj-worker-0").phase = PodPhase::kFailed;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "BackoffLimitExceeded");
}

}  // namespace
}  // namespace kubetrain::planner
