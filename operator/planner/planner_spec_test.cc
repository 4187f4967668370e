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

// ---- Suspend and resume --------------------------------------------------------

TEST(PlannerSuspendTest, SuspendDeletesEveryPodAndStopsTheClock) {
  api::TrainingJob job = Job();
  job.spec.run_policy.suspend = true;
  job.spec.run_policy.active_deadline_seconds = 100;
  job.status.start_time = kNow - seconds(99);
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_EQ(DeletedPods(plan).size(), 4u);
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_EQ(plan.status.state, "Suspended");
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kSuspended));
  EXPECT_FALSE(plan.requeue_after.has_value());
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "Suspended");
  // Much later, still suspended: no deadline failure, no new event.
  Plan later = PlanJob(After(job, plan), {}, Input(kNow + seconds(1000)));
  EXPECT_FALSE(later.status.Finished());
  EXPECT_TRUE(later.events.empty());
  EXPECT_TRUE(later.creates.empty());
}

TEST(PlannerSuspendTest, ResumeRecreatesPodsAndRestartsTheDeadlineClock) {
  api::TrainingJob job = Job();
  job.spec.run_policy.suspend = true;
  job.spec.run_policy.active_deadline_seconds = 100;
  job.status.start_time = kNow - seconds(99);
  Plan suspended = PlanJob(job, All(PodPhase::kRunning), Input());
  api::TrainingJob resumed = After(job, suspended);
  resumed.spec.run_policy.suspend = false;
  ObservedChildren o = All(PodPhase::kRunning);
  o.pods.clear();
  const api::Time later = kNow + seconds(500);
  Plan plan = PlanJob(resumed, o, Input(later));
  EXPECT_EQ(plan.status.start_time, later);
  EXPECT_EQ(plan.requeue_after, seconds(100));
  EXPECT_EQ(CreatedNames(plan).size(), 4u);
  EXPECT_FALSE(plan.status.IsTrue(ConditionType::kSuspended));
  EXPECT_EQ(Cond(plan, ConditionType::kSuspended)->last_transition_time, later);
  EXPECT_EQ(plan.status.state, "Created");
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "Resumed");
}

TEST(PlannerSuspendTest, AQueueHoldSuspendsWithItsReasonAndCountsNoRestart) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  job.spec.run_policy.backoff_limit = 0;
  PlanInput in = Input();
  in.hold = PlanInput::Hold{"Evicted", "Kueue evicted Workload w (Preempted)"};
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-1").phase = PodPhase::kFailed;  // not a failure to count: the job is held
  Plan plan = PlanJob(job, o, in);
  EXPECT_EQ(DeletedPods(plan).size(), 4u);
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_FALSE(plan.status.Finished()) << "eviction spends no restart budget";
  EXPECT_EQ(plan.status.state, "Suspended");
  ASSERT_NE(Cond(plan, ConditionType::kSuspended), nullptr);
  EXPECT_EQ(Cond(plan, ConditionType::kSuspended)->reason, "Evicted");
  EXPECT_EQ(Cond(plan, ConditionType::kSuspended)->message, in.hold->message);
  EXPECT_FALSE(job.spec.run_policy.suspend);
  // A new reason is recorded; the same one again changes nothing.
  PlanInput waiting = Input();
  waiting.hold = PlanInput::Hold{"WaitingForAdmission", "waiting for Kueue"};
  Plan again = PlanJob(After(job, plan), {}, waiting);
  EXPECT_EQ(Cond(again, ConditionType::kSuspended)->reason, "WaitingForAdmission");
  EXPECT_EQ(again.events.size(), 1u);
  Plan same = PlanJob(After(After(job, plan), again), {}, waiting);
  EXPECT_FALSE(same.status_changed);
  EXPECT_TRUE(same.events.empty());
  // Admitted: the hold is lifted and the pods are created.
  Plan run = PlanJob(After(After(job, plan), again), {}, Input());
  size_t pods = 0;
  for (const ChildCreate& c : run.creates) pods += c.ref.kind == ChildRef::Kind::kPod ? 1 : 0;
  EXPECT_EQ(pods, 4u);
  EXPECT_FALSE(run.status.IsTrue(ConditionType::kSuspended));
  EXPECT_EQ(run.status.replica_statuses[ReplicaType::kWorker].restarts, 0);
}

// ---- Bad input -------------------------------------------------------------------

TEST(PlannerInvalidTest, TemplateWithoutContainersFailsWithInvalidSpecOnce) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kPS].pod_template = {
      {"spec", {{"containers", json::array()}}}};
  Plan plan = PlanJob(job, {}, Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "InvalidSpec");
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->message,
            "spec.replicaSpecs.PS.template.spec.containers: at least one container is required");
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_FALSE(plan.requeue_after.has_value());
  ASSERT_EQ(plan.events.size(), 1u);
  // No hot loop: planning the failed job again changes nothing and says nothing.
  Plan again = PlanJob(After(job, plan), {}, Input(kNow + seconds(1)));
  EXPECT_FALSE(again.status_changed);
  EXPECT_TRUE(again.events.empty());
  EXPECT_TRUE(again.creates.empty());
}

TEST(PlannerInvalidTest, MistypedContainerFieldsAreInvalidSpecWithTheirPath) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kWorker].pod_template = json::parse(
      R"({"spec": {"containers": [{"name": "trainer", "args": ["--layers=32", 16]}]}})");
  Plan plan = PlanJob(job, {}, Input());
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->message,
            "spec.replicaSpecs.Worker.template.spec.containers[0].args[1]: must be a string, got "
            "16 (quote it in YAML)");
  job.spec.replica_specs[ReplicaType::kWorker].pod_template = json::parse(
      R"({"spec": {"containers": [{"name": "trainer", "env": [{"name": "N", "value": 3}]}]}})");
  plan = PlanJob(job, {}, Input());
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->message,
            "spec.replicaSpecs.Worker.template.spec.containers[0].env[0].value: must be a string, "
            "got 3 (quote it in YAML)");
}

TEST(PlannerInvalidTest, OtherUnusableTemplatesAreInvalidSpec) {
  for (const char* tmpl : {R"({})", R"({"spec": []})", R"({"spec": {"containers": [1]}})",
                           R"({"spec": {"containers": [{"name": "t", "env": {}}]}})",
                           R"({"spec": {"containers": [{"image": "no-name"}]}})",
                           R"({"spec": {"containers": [{"name": "t", "command": "sh"}]}})",
                           R"({"metadata": {"labels": []}, "spec": {"containers": [{}]}})"}) {
    api::TrainingJob job = Job();
    job.spec.replica_specs[ReplicaType::kWorker].pod_template = json::parse(tmpl);
    Plan plan = PlanJob(job, {}, Input());
    EXPECT_EQ(plan.status.state, "Failed") << tmpl;
    EXPECT_TRUE(plan.creates.empty()) << tmpl;
  }
}

TEST(PlannerInvalidTest, UnusableTemplateFieldsAreNamed) {
  // Checked without building a pod (CheckPodTemplate); the builder refuses the same.
  const std::pair<const char*, const char*> cases[] = {
      {R"({"metadata": null, "spec": {"containers": [{"name": "t"}]}})",
       "spec.replicaSpecs.Worker.template.metadata: must be an object"},
      {R"({"metadata": {"annotations": "a=b"}, "spec": {"containers": [{"name": "t"}]}})",
       "spec.replicaSpecs.Worker.template.metadata.annotations: must be an object"},
      {R"({"spec": {"containers": [{"name": "t", "ports": {"containerPort": 1}}]}})",
       "spec.replicaSpecs.Worker.template.spec.containers[0].ports: must be an array"},
      {R"({"spec": {"containers": [{"name": "side"}, {"name": "trainer", "ports": 1}]}})",
       "spec.replicaSpecs.Worker.template.spec.containers[1].ports: must be an array"},
      {R"({"spec": {"containers": [{"name": "t", "env": [{"value": "x"}]}]}})",
       "spec.replicaSpecs.Worker.template.spec.containers[0].env[0]: must be an object with a "
       "string name"},
  };
  for (const auto& [tmpl, message] : cases) {
    api::TrainingJob job = Job();
    job.spec.replica_specs[ReplicaType::kWorker].pod_template = json::parse(tmpl);
    Plan plan = PlanJob(job, {}, Input());
    ASSERT_TRUE(plan.status.IsTrue(ConditionType::kFailed)) << tmpl;
    EXPECT_EQ(Cond(plan, ConditionType::kFailed)->message, message) << tmpl;
    EXPECT_TRUE(plan.creates.empty()) << tmpl;
    const api::ReplicaSpec& spec = job.spec.replica_specs[ReplicaType::kWorker];
    EXPECT_EQ(CheckPodTemplate(ReplicaType::kWorker, spec).message(), message) << tmpl;
    auto pod =
        ChildBuilder(job, api::ServiceMode::kPerReplica).Pod(ReplicaType::kWorker, 0, spec, "h");
    EXPECT_EQ(pod.status().message(), message) << tmpl;
  }
}

TEST(PlannerInvalidTest, CrdRuleViolationIsInvalidSpec) {
  // An apiserver without the CRD's rules, or a local file: the planner still refuses.
  api::TrainingJob job = Job();
  job.spec.replica_specs.erase(ReplicaType::kWorker);
  Plan plan = PlanJob(job, {}, Input());
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "InvalidSpec");
  EXPECT_NE(Cond(plan, ConditionType::kFailed)->message.find("needs at least one Worker or Chief"),
            std::string::npos);
}

TEST(PlannerInvalidTest, ChildRejectedByTheApiserverIsInvalidSpec) {
  PlanInput in = Input();
  in.rejected_child = "Pod \"tj-ps-0\" is invalid: spec.containers[0].image: Required value";
  Plan plan = PlanJob(Job(), All(PodPhase::kPending), in);
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "InvalidSpec");
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->message, *in.rejected_child);
  EXPECT_EQ(DeletedPods(plan).size(), 4u);  // cleanPodPolicy Running
  EXPECT_TRUE(plan.creates.empty());
}

TEST(PlannerInvalidTest, JobBeingDeletedGetsNothing) {
  api::TrainingJob job = Job();
  job.metadata.deletion_timestamp = kNow;
  Plan plan = PlanJob(job, {}, Input());
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_TRUE(plan.deletes.empty());
}

// Every example plans cleanly: no InvalidSpec, a pod per replica.
TEST(PlannerExamplesTest, EveryExamplePlansWithoutInvalidSpec) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(KUBETRAIN_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    StatusOr<std::vector<api::YamlDocument>> docs = api::ParseYamlDocuments(text.str());
    ASSERT_TRUE(docs.ok()) << entry.path();
    for (const api::YamlDocument& doc : *docs) {
      if (api::KindOf(doc.value) == api::kSweepKind) continue;     // sweep/planner_test.cc
      if (doc.value.value("kind", "") != "TrainingJob") continue;  // e.g. its Secret
      StatusOr<api::TrainingJob> job = api::ParseTrainingJob(doc.value);
      ASSERT_TRUE(job.ok()) << entry.path() << ": " << job.status().ToString();
      Plan plan = PlanJob(*job, {}, Input());
      EXPECT_FALSE(plan.status.Finished())
          << entry.path() << ": " << plan.status.Find(ConditionType::kFailed)->message;
      int replicas = 0;
      for (const auto& [type, spec] : job->spec.replica_specs) replicas += spec.replicas;
      int pods = 0;
      for (const ChildCreate& c : plan.creates) pods += c.ref.kind == ChildRef::Kind::kPod;
      EXPECT_EQ(pods, replicas) << entry.path();
      ++count;
    }
  }
  EXPECT_GE(count, 3);
}

// ---- Replica labels ----------------------------------------------------------------

TEST(ReplicaFromLabelsTest, RejectsMalformedLabels) {
  EXPECT_FALSE(
      ReplicaFromLabels({{"kubetrain.io/replica-type", "ps"}, {"kubetrain.io/replica-index", "1x"}})
          .has_value());
  EXPECT_FALSE(
      ReplicaFromLabels({{"kubetrain.io/replica-type", "PS"}, {"kubetrain.io/replica-index", "1"}})
          .has_value());
}

// ---- The status rules an executor shares --------------------------------------------

TEST(PlannerStatusRulesTest, SetFinishedFailsLikeThePlannerAndAddsNoFalseConditions) {
  api::TrainingJobStatus status;
  SetFinished(status, /*succeeded=*/false, "InvalidSpec", "spec: bad", kNow);
  UpdateState(status, kNow);
  // Absent Running/Restarting read as False; kstatus's Ready and Stalled follow.
  ASSERT_EQ(status.conditions.size(), 3u);
  EXPECT_EQ(status.conditions[0].type, ConditionType::kFailed);
  EXPECT_FALSE(status.IsTrue(ConditionType::kReady));
  EXPECT_TRUE(status.IsTrue(ConditionType::kStalled));
  EXPECT_EQ(status.Find(ConditionType::kReconciling), nullptr);
  EXPECT_EQ(status.conditions[0].reason, "InvalidSpec");
  EXPECT_EQ(status.conditions[0].message, "spec: bad");
  EXPECT_EQ(status.conditions[0].last_transition_time, kNow);
  EXPECT_EQ(status.completion_time, kNow);
  EXPECT_EQ(status.state, "Failed");
}

TEST(PlannerStatusRulesTest, SetFinishedTurnsRunningOffKeepingItsHistory) {
  api::TrainingJobStatus status;
  SetCondition(status, ConditionType::kRunning, true, "TrainingJobRunning", "up", kNow);
  SetCondition(status, ConditionType::kRunning, true, "TrainingJobRunning", "still",
               kNow + seconds(5));
  EXPECT_EQ(status.Find(ConditionType::kRunning)->last_transition_time, kNow);  // no change
  SetFinished(status, /*succeeded=*/true, "TrainingJobSucceeded", "done", kNow + seconds(9));
  UpdateState(status, kNow + seconds(9));
  EXPECT_TRUE(status.IsTrue(ConditionType::kReady));
  EXPECT_FALSE(status.IsTrue(ConditionType::kRunning));
  EXPECT_EQ(status.Find(ConditionType::kRunning)->last_transition_time, kNow + seconds(9));
  EXPECT_EQ(status.Find(ConditionType::kRunning)->reason, "TrainingJobSucceeded");
  EXPECT_EQ(status.state, "Succeeded");
}

// ---- The status round-trips through JSON unchanged ---------------------------------

TEST(PlannerStatusTest, PlannedStatusSurvivesJsonRoundTrip) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-1") = Pod(ReplicaType::kWorker, 1, PodPhase::kFailed, 137);
  Plan plan = PlanJob(Job(), o, Input());
  StatusOr<api::TrainingJobStatus> back =
      api::ParseTrainingJobStatus(api::StatusToJson(plan.status));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, plan.status);
}

TEST(PlannerStatusTest, SucceededStatusWithMetricsSurvivesJsonRoundTrip) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").phase = PodPhase::kSucceeded;
  Find(o, "tj-worker-0").message = kTrainerMetrics;
  Plan plan = PlanJob(Job(), o, Input());
  ASSERT_TRUE(plan.status.metrics.has_value());
  StatusOr<api::TrainingJobStatus> back =
      api::ParseTrainingJobStatus(json::parse(api::StatusToJson(plan.status).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, plan.status);
}

TEST(PlannerProgressTest, TemplateDecidesTheMetricsPortWhenItNamesOneOrUsesTheNumber) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kPS].pod_template = json::parse(
      R"({"spec": {"containers": [{"name": "trainer", "ports": [{"name": "metrics", "containerPort": 8000}]}]}})");
  job.spec.replica_specs[ReplicaType::kWorker].pod_template = json::parse(
      R"({"spec": {"containers": [{"name": "trainer", "ports": [{"name": "web", "containerPort": 9090}]}]}})");
  Plan plan = PlanJob(job, {}, Input());
  EXPECT_EQ((*Created(plan, "Pod", "tj-ps-0"))["spec"]["containers"][0]["ports"],
            json::parse(R"([{"name": "metrics", "containerPort": 8000},
                            {"containerPort": 2222, "name": "kubetrain", "protocol": "TCP"}])"));
  EXPECT_EQ((*Created(plan, "Pod", "tj-worker-0"))["spec"]["containers"][0]["ports"].size(), 2u);
  // The training port on 9090 leaves no room for the metrics port.
  api::TrainingJob on9090 = Job();
  on9090.spec.port = 9090;
  Plan p2 = PlanJob(on9090, {}, Input());
  EXPECT_EQ((*Created(p2, "Pod", "tj-worker-0"))["spec"]["containers"][0]["ports"],
            json::parse(R"([{"containerPort": 9090, "name": "kubetrain", "protocol": "TCP"}])"));
}

TEST(PlannerProgressTest, CountsRunningPodsAndRestartsForTheColumns) {
  api::TrainingJob job = Job();
  job.status.replica_statuses[ReplicaType::kPS].restarts = 2;
  job.status.replica_statuses[ReplicaType::kWorker].restarts = 3;
  ObservedChildren observed;
  observed.pods = {Pod(ReplicaType::kPS, 0, PodPhase::kRunning),
                   Pod(ReplicaType::kPS, 1, PodPhase::kPending),
                   Pod(ReplicaType::kWorker, 0, PodPhase::kRunning),
                   Pod(ReplicaType::kWorker, 1, PodPhase::kRunning)};
  observed.pods[3].deletion_timestamp = kNow;  // being deleted: not running
  Plan plan = PlanJob(job, observed, Input());
  EXPECT_EQ(plan.status.running, 2);
  EXPECT_EQ(plan.status.restarts, 5);
  EXPECT_EQ(api::StatusToJson(plan.status)["running"], 2);
}

api::Progress SomeProgress() {
  api::Progress p;
  p.step = 980;
  p.total_steps = 1000;
  p.percent = 98;
  p.samples_per_second = 5000;
  p.eta = "4s";
  p.replica = "worker-0";
  p.update_time = kNow;
  return p;
}

TEST(PlannerProgressTest, ProgressFromTheInputReplacesTheStatusAndIsKeptWithoutOne) {
  api::TrainingJob job = Job();
  PlanInput in = Input();
  in.progress = SomeProgress();
  Plan plan = PlanJob(job, {}, in);
  ASSERT_TRUE(plan.status.progress);
  EXPECT_EQ(*plan.status.progress, SomeProgress());
  EXPECT_TRUE(plan.status_changed);
  // No reading (the operator restarted, or the pod serves no metrics): kept.
  job.status = plan.status;
  Plan again = PlanJob(job, {}, Input());
  EXPECT_EQ(again.status.progress, SomeProgress());
  // The same reading again: no status write.
  Plan same = PlanJob(job, {}, in);
  EXPECT_FALSE(same.status_changed);
}

TEST(PlannerProgressTest, SuccessShowsEveryStepDoneAndFailureKeepsTheStepWithoutEta) {
  for (bool success : {true, false}) {
    api::TrainingJob job = Job();
    job.spec.replica_specs[ReplicaType::kWorker].restart_policy = RestartPolicy::kNever;
    PlanInput in = Input();
    in.progress = SomeProgress();
    ObservedChildren observed;
    observed.pods = {Pod(ReplicaType::kWorker, 0,
                         success ? PodPhase::kSucceeded : PodPhase::kFailed, success ? 0 : 1)};
    Plan plan = PlanJob(job, observed, in);
    ASSERT_TRUE(plan.status.Finished()) << success;
    ASSERT_TRUE(plan.status.progress);
    EXPECT_EQ(plan.status.progress->eta, "") << success;
    EXPECT_EQ(plan.status.progress->percent, success ? 100 : 98);
    EXPECT_EQ(plan.status.progress->step, success ? 1000 : 980);
  }
}

// A job done before the operator read its coordinator's metrics once (a job shorter
// than the 10 s reading interval; docs/first-cluster.md's example takes ~10 s on a
// node): progress from the final metrics' steps, not absent.
TEST(PlannerProgressTest, SuccessWithoutAReadingShowsTheStepsOfTheFinalMetrics) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kWorker].restart_policy = RestartPolicy::kNever;
  ObservedChildren observed;
  observed.pods = {Pod(ReplicaType::kWorker, 0, PodPhase::kSucceeded, 0)};
  observed.pods[0].message = R"({"task":"worker-0","steps":400,"eval":{"auc":0.75}})";
  Plan plan = PlanJob(job, observed, Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kSucceeded));
  ASSERT_TRUE(plan.status.progress);
  EXPECT_EQ(plan.status.progress->step, 400);
  EXPECT_EQ(plan.status.progress->total_steps, 400);
  EXPECT_EQ(plan.status.progress->percent, 100);
  EXPECT_EQ(plan.status.progress->eta, "");
  EXPECT_EQ(plan.status.progress->replica, "worker-0");
  // Kept as it is on the next pass (no status write).
  job.status = plan.status;
  EXPECT_FALSE(PlanJob(job, observed, Input(kNow + seconds(30))).status_changed);
  // No steps in the message: still no progress (nothing to show).
  observed.pods[0].message = R"({"eval":{"auc":0.75}})";
  EXPECT_FALSE(PlanJob(Job(), observed, Input()).status.progress);
}

}  // namespace
}  // namespace kubetrain::planner
