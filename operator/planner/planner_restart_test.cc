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

// ---- Restart policies ---------------------------------------------------------

TEST(PlannerRestartTest, OnFailureDeletesTheFailedPodAndCountsARestart) {
  ObservedChildren o = All(PodPhase::kRunning);
  ObservedPod& failed = Find(o, "tj-worker-1");
  failed.phase = PodPhase::kFailed;
  failed.exit_code = 1;
  failed.reason = "Error";
  failed.message = "boom";
  Plan plan = PlanJob(Job(RestartPolicy::kOnFailure), o, Input());
  EXPECT_EQ(DeletedPods(plan), std::vector<std::string>{"tj-worker-1"});
  EXPECT_TRUE(plan.creates.empty());  // recreated only once the old pod is gone
  const api::ReplicaStatus& w = plan.status.replica_statuses.at(ReplicaType::kWorker);
  EXPECT_EQ(w.restarts, 1);
  EXPECT_EQ(w.failed, 1);
  ASSERT_TRUE(w.last_failure.has_value());
  EXPECT_EQ(*w.last_failure, (api::FailureInfo{"tj-worker-1", 1, "Error", "boom", kNow}));
  EXPECT_EQ(plan.status.counted_failures, std::vector<std::string>{"tj-worker-1-uid"});
  EXPECT_EQ(plan.status.state, "Restarting");
  EXPECT_FALSE(plan.status.IsTrue(ConditionType::kRunning));
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "RestartingReplica");
}

TEST(PlannerRestartTest, AlwaysRecreatesAFailedPodLikeOnFailure) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-ps-0").phase = PodPhase::kFailed;
  Plan plan = PlanJob(Job(RestartPolicy::kAlways), o, Input());
  EXPECT_EQ(DeletedPods(plan), std::vector<std::string>{"tj-ps-0"});
  EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kPS).restarts, 1);
}

TEST(PlannerRestartTest, AlwaysRecreatesAPsThatExitedZero) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-ps-0").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(Job(RestartPolicy::kAlways), o, Input());
  EXPECT_EQ(DeletedPods(plan), std::vector<std::string>{"tj-ps-0"});
  EXPECT_EQ(plan.status.state, "Restarting");
}

TEST(PlannerRestartTest, AlwaysRestartsOfZeroExitsCountTowardTheBackoffLimit) {
  api::TrainingJob job = Job(RestartPolicy::kAlways);
  job.spec.run_policy.backoff_limit = 1;
  job.status.replica_statuses[ReplicaType::kPS].restarts = 1;
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-ps-0").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(job, o, Input());
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "BackoffLimitExceeded");
}

TEST(PlannerRestartTest, OnFailureKeepsAPsThatExitedZero) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-ps-0").phase = PodPhase::kSucceeded;
  Plan plan = PlanJob(Job(RestartPolicy::kOnFailure), o, Input());
  EXPECT_TRUE(plan.deletes.empty());
  EXPECT_TRUE(plan.creates.empty());
}

TEST(PlannerRestartTest, SameFailedPodSeenAgainIsNotCountedTwice) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-1").phase = PodPhase::kFailed;
  api::TrainingJob job = Job();
  Plan first = PlanJob(job, o, Input());
  // The delete is not visible yet: the cache still shows the failed pod.
  Plan second = PlanJob(After(job, first), o, Input(kNow + seconds(1)));
  EXPECT_EQ(second.status.replica_statuses.at(ReplicaType::kWorker).restarts, 1);
  EXPECT_EQ(DeletedPods(second), std::vector<std::string>{"tj-worker-1"});  // idempotent
  EXPECT_TRUE(second.events.empty());
  EXPECT_TRUE(second.creates.empty());
  EXPECT_FALSE(second.status_changed);
}

TEST(PlannerRestartTest, FailedPodIsRecreatedOnceGone) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-1").phase = PodPhase::kFailed;
  api::TrainingJob job = Job();
  Plan first = PlanJob(job, o, Input());
  std::erase_if(o.pods, [](const ObservedPod& p) { return p.name == "tj-worker-1"; });
  Plan second = PlanJob(After(job, first), o, Input(kNow + kRestartBackoffBase));
  EXPECT_EQ(CreatedNames(second), std::vector<std::string>{"Pod/tj-worker-1"});
  EXPECT_TRUE(second.status.counted_failures.empty());  // its UID can never come back
  EXPECT_EQ(second.status.replica_statuses.at(ReplicaType::kWorker).restarts, 1);
  EXPECT_EQ(second.status.state, "Restarting");
  // Once every replica runs again, Restarting gives way to Running.
  Plan third = PlanJob(After(job, second), All(PodPhase::kRunning), Input(kNow + seconds(2)));
  EXPECT_EQ(third.status.state, "Running");
  EXPECT_FALSE(third.status.IsTrue(ConditionType::kRestarting));
}

// ---- Crash-loop backoff ---------------------------------------------------------

// Fails worker 1 (which must be running) at `now` and plans; then plans again
// with its pod gone at `gone`.
std::pair<Plan, Plan> FailWorker1(api::TrainingJob& job, api::Time now, api::Time gone,
                                  std::optional<api::Time> created = std::nullopt) {
  ObservedChildren o = All(PodPhase::kRunning);
  ObservedPod& w = Find(o, "tj-worker-1");
  w.phase = PodPhase::kFailed;
  w.exit_code = 137;
  w.uid = "w1-" + std::to_string(now.time_since_epoch().count());
  w.creation_timestamp = created ? *created : now;
  Plan failed = PlanJob(job, o, Input(now));
  job = After(job, failed);
  std::erase_if(o.pods, [](const ObservedPod& p) { return p.name == "tj-worker-1"; });
  Plan later = PlanJob(job, o, Input(gone));
  job = After(job, later);
  return {std::move(failed), std::move(later)};
}

TEST(PlannerBackoffTest, ARestartWaitsTenSecondsThenDoublesUpToFiveMinutes) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  api::Time now = kNow;
  const std::vector<int> want = {10, 20, 40, 80, 160, 300, 300};
  for (size_t i = 0; i < want.size(); ++i) {
    auto [failed, waiting] = FailWorker1(job, now, now + seconds(1));
    ASSERT_EQ(failed.events.size(), 1u);
    EXPECT_NE(failed.events[0].message.find("recreating it in " + std::to_string(want[i]) + "s"),
              std::string::npos)
        << failed.events[0].message;
    const auto& backoff = failed.status.replica_statuses.at(ReplicaType::kWorker).backoff;
    ASSERT_EQ(backoff.size(), 1u);
    EXPECT_EQ(backoff[0],
              (api::RestartBackoff{1, static_cast<int32_t>(i + 1), now + seconds(want[i])}));
    // The pod is gone but the replica waits: no create, a timer for the rest.
    EXPECT_TRUE(CreatedNames(waiting).empty());
    ASSERT_TRUE(waiting.requeue_after.has_value());
    EXPECT_EQ(*waiting.requeue_after, seconds(want[i] - 1));
    // Due: the pod is created (the Secret is not: it exists).
    ObservedChildren o = All(PodPhase::kRunning);
    std::erase_if(o.pods, [](const ObservedPod& p) { return p.name == "tj-worker-1"; });
    Plan due = PlanJob(job, o, Input(now + seconds(want[i])));
    EXPECT_EQ(CreatedNames(due), std::vector<std::string>{"Pod/tj-worker-1"});
    job = After(job, due);
    now += seconds(want[i] + 1);  // it fails one second after it starts
  }
}

TEST(PlannerBackoffTest, OnlyTheFailingReplicaWaits) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  FailWorker1(job, kNow, kNow + seconds(1));
  ObservedChildren o = All(PodPhase::kRunning);
  std::erase_if(o.pods, [](const ObservedPod& p) {
    return p.name == "tj-worker-1" || p.name == "tj-ps-0";  // ps-0 deleted by someone
  });
  Plan plan = PlanJob(job, o, Input(kNow + seconds(2)));
  EXPECT_EQ(CreatedNames(plan), std::vector<std::string>{"Pod/tj-ps-0"});
}

TEST(PlannerBackoffTest, AReplicaThatRanCleanlyStartsAgainFromTenSeconds) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  job.status.replica_statuses[ReplicaType::kWorker].backoff = {{1, 5, kNow - seconds(700)}};
  // It failed again after running for 10 minutes: the count starts over.
  auto [failed, waiting] = FailWorker1(job, kNow, kNow + seconds(1), kNow - kRestartBackoffReset);
  EXPECT_EQ(failed.status.replica_statuses.at(ReplicaType::kWorker).backoff,
            (std::vector<api::RestartBackoff>{{1, 1, kNow + seconds(10)}}));
  // A replica running cleanly for 10 minutes leaves the backoff list.
  ObservedChildren o = All(PodPhase::kRunning);
  for (ObservedPod& p : o.pods) p.creation_timestamp = kNow;
  Plan early = PlanJob(job, o, Input(kNow + seconds(599)));
  EXPECT_EQ(early.status.replica_statuses.at(ReplicaType::kWorker).backoff.size(), 1u);
  Plan clean = PlanJob(job, o, Input(kNow + kRestartBackoffReset));
  EXPECT_TRUE(clean.status.replica_statuses.at(ReplicaType::kWorker).backoff.empty());
}

TEST(PlannerBackoffTest, BackoffSurvivesTheStatusRoundTrip) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  auto [failed, waiting] = FailWorker1(job, kNow, kNow + seconds(1));
  auto parsed = api::ParseTrainingJobStatus(api::StatusToJson(failed.status));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, failed.status);
  EXPECT_EQ(api::StatusToJson(failed.status)["replicaStatuses"]["Worker"]["backoff"],
            json::parse(R"([{"index":1,"failures":1,"notBefore":")" +
                        api::FormatTime(kNow + seconds(10)) + R"("}])"));
}

// The issue's scenario as data: a worker that fails with a retryable code as
// soon as it runs, planned every second (a controller woken by each change and
// by its timers): at most 5 pods in its first 70 s.
TEST(PlannerBackoffTest, AnAlwaysFailingWorkerGetsAtMostFivePodsInSeventySeconds) {
  api::TrainingJob job = Job(RestartPolicy::kExitCode);
  ObservedChildren o = All(PodPhase::kRunning);
  std::erase_if(o.pods, [](const ObservedPod& p) { return p.name == "tj-worker-1"; });
  int creates = 0;
  for (int t = 0; t < 70; ++t) {
    Plan plan = PlanJob(job, o, Input(kNow + seconds(t)));
    job = After(job, plan);
    for (const ChildRef& d : plan.deletes) {
      std::erase_if(o.pods, [&](const ObservedPod& p) { return p.name == d.name; });
    }
    for (const ChildCreate& created : plan.creates) {
      const json& c = created.object;
      if (c["kind"] != "Pod") continue;
      ++creates;
      ObservedPod p = Pod(ReplicaType::kWorker, 1, PodPhase::kFailed, 137);
      p.uid = "w1-" + std::to_string(t);
      p.creation_timestamp = kNow + seconds(t);
      o.pods.push_back(p);  // running and failed by the next look
    }
  }
  EXPECT_GE(creates, 3);
  EXPECT_LE(creates, 5);
}

TEST(PlannerBackoffTest, SuspendClearsTheBackoff) {
  api::TrainingJob job = Job(RestartPolicy::kOnFailure);
  FailWorker1(job, kNow, kNow + seconds(1));
  job.spec.run_policy.suspend = true;
  Plan plan = PlanJob(job, All(PodPhase::kRunning), Input(kNow + seconds(2)));
  EXPECT_TRUE(plan.status.replica_statuses.at(ReplicaType::kWorker).backoff.empty());
}

// ---- The auth Secret -------------------------------------------------------------

TEST(PlannerSecretTest, TheSecretIsPlannedOnlyAlongWithPods) {
  ObservedChildren o = All(PodPhase::kRunning);
  o.secret_exists = false;  // an executor that cannot observe Secrets
  Plan plan = PlanJob(Job(), o, Input());
  EXPECT_TRUE(plan.creates.empty());
  std::erase_if(o.pods, [](const ObservedPod& p) { return p.name == "tj-ps-1"; });
  plan = PlanJob(Job(), o, Input());
  EXPECT_EQ(CreatedNames(plan), (std::vector<std::string>{"Pod/tj-ps-1"}));
  EXPECT_NE(Created(plan, "Secret", "tj-auth-job-uid"), nullptr);  // with every batch of pods
}

// ---- Where pods read CLUSTER_CONFIG: the Secret, or the ConfigMap -----------------

// The pods `plan` creates as the executor observes them once they run.
ObservedChildren Observed(const Plan& plan) {
  ObservedChildren o;
  o.secret_exists = true;
  for (const ChildCreate& c : plan.creates) {
    if (c.ref.kind == ChildRef::Kind::kService) o.services.push_back({c.ref.name, std::nullopt});
    if (c.ref.kind != ChildRef::Kind::kPod) continue;
    ObservedPod p = Pod(*c.ref.role, c.ref.index, PodPhase::kRunning);
    p.spec_hash = c.object["metadata"]["annotations"]["kubetrain.io/spec-hash"];
    p.cluster_config_in_secret = ClusterConfigInSecret(c.object);
    o.pods.push_back(std::move(p));
  }
  return o;
}

std::string ClusterSource(const json& pod) {
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] != "CLUSTER_CONFIG") continue;
    const json& from = e["valueFrom"];
    if (from.contains("secretKeyRef"))
      return "Secret/" + from["secretKeyRef"]["name"].get<std::string>();
    if (from.contains("configMapKeyRef"))
      return "ConfigMap/" + from["configMapKeyRef"]["name"].get<std::string>();
  }
  return "<none>";
}

TEST(PlannerClusterConfigTest, ANewJobKeepsTheClusterInItsSecretAndHasNoConfigMap) {
  const Plan plan = PlanJob(Job(), {}, Input());
  EXPECT_EQ(Created(plan, "ConfigMap", "tj-cluster"), nullptr);
  const json* secret = Created(plan, "Secret", "tj-auth-job-uid");
  ASSERT_NE(secret, nullptr);
  const std::string cluster =
      ClusterConfigJson(BuildClusterSpec(Job(), "cluster.local", api::ServiceMode::kPerReplica));
  EXPECT_EQ((*secret)["stringData"], json({{"cluster", cluster}}));
  EXPECT_EQ((*secret)["data"].size(), 1u);  // the key, base64
  for (const ChildCreate& c : plan.creates) {
    if (c.ref.kind == ChildRef::Kind::kPod) {
      EXPECT_EQ(ClusterSource(c.object), "Secret/tj-auth-job-uid") << c.ref.name;
      EXPECT_EQ(ProcessEnv(plan, c.object, "CLUSTER_CONFIG"), cluster) << c.ref.name;
    }
  }
}

TEST(PlannerClusterConfigTest, ARestartedReplicaReadsTheSecretLikeItsPeers) {
  api::TrainingJob job = Job();
  const Plan first = PlanJob(job, {}, Input());
  job = After(job, first);
  ObservedChildren o = Observed(first);
  Find(o, "tj-worker-1").phase = PodPhase::kFailed;
  Find(o, "tj-worker-1").exit_code = 137;
  job = After(job, PlanJob(job, o, Input(kNow + seconds(1))));  // deletes it, counts a restart
  std::erase_if(o.pods, [](const ObservedPod& p) { return p.name == "tj-worker-1"; });
  const Plan plan = PlanJob(job, o, Input(kNow + seconds(60)));
  const json* pod = Created(plan, "Pod", "tj-worker-1");
  ASSERT_NE(pod, nullptr);
  EXPECT_EQ(ClusterSource(*pod), "Secret/tj-auth-job-uid");
  EXPECT_EQ(Created(plan, "ConfigMap", "tj-cluster"), nullptr);
}

// An operator upgrade: the pods an earlier operator made read CLUSTER_CONFIG from
// the ConfigMap, and their Secret has no "cluster" key. A replica recreated now
// reads the ConfigMap too (which the plan keeps up to date), and no running pod
// is recreated (the spec hash does not depend on where the cluster is read).
TEST(PlannerClusterConfigTest, AJobWhosePodsReadTheConfigMapKeepsIt) {
  api::TrainingJob job = Job();
  const Plan first = PlanJob(job, {}, Input());
  job = After(job, first);
  ObservedChildren o = Observed(first);
  for (ObservedPod& p : o.pods) p.cluster_config_in_secret = false;  // the old operator's pods
  std::erase_if(o.pods, [](const ObservedPod& p) { return p.name == "tj-ps-1"; });
  const Plan plan = PlanJob(job, o, Input(kNow + seconds(1)));
  EXPECT_TRUE(plan.deletes.empty());
  EXPECT_EQ(CreatedNames(plan), (std::vector<std::string>{"Pod/tj-ps-1"}));
  const json* pod = Created(plan, "Pod", "tj-ps-1");
  ASSERT_NE(pod, nullptr);
  EXPECT_EQ(ClusterSource(*pod), "ConfigMap/tj-cluster");
  EXPECT_NE(Created(plan, "ConfigMap", "tj-cluster"), nullptr);
  EXPECT_EQ(
      ProcessEnv(plan, *pod, "CLUSTER_CONFIG"),
      ClusterConfigJson(BuildClusterSpec(job, "cluster.local", api::ServiceMode::kPerReplica)));
}

// The Secret is written once and never updated: a job reshaped while suspended
// (a new cluster) reads the new cluster from the ConfigMap.
TEST(PlannerClusterConfigTest, AReshapedJobReadsTheNewClusterFromTheConfigMap) {
  api::TrainingJob job = Job();
  const Plan first = PlanJob(job, {}, Input());
  job = After(job, first);
  ObservedChildren o = Observed(first);  // read from the Secret, built from 2 workers
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 3;
  Plan plan = PlanJob(job, o, Input(kNow + seconds(1)));
  EXPECT_EQ(DeletedPods(plan).size(), 4u);  // every pod is outdated
  const json* added = Created(plan, "Pod", "tj-worker-2");
  ASSERT_NE(added, nullptr);
  EXPECT_EQ(ClusterSource(*added), "ConfigMap/tj-cluster");
  const std::string cluster =
      ClusterConfigJson(BuildClusterSpec(job, "cluster.local", api::ServiceMode::kPerReplica));
  EXPECT_EQ(ProcessEnv(plan, *added, "CLUSTER_CONFIG"), cluster);
  // Once the old pods are gone, their replacements read the ConfigMap as well.
  job = After(job, plan);
  o.pods.clear();
  plan = PlanJob(job, o, Input(kNow + seconds(2)));
  ASSERT_NE(Created(plan, "Pod", "tj-ps-0"), nullptr);
  EXPECT_EQ(ClusterSource(*Created(plan, "Pod", "tj-ps-0")), "ConfigMap/tj-cluster");
}

// A job that ran before and has no pod to tell (suspended, then resumed): the
// Secret may be an earlier operator's, so the pods read the ConfigMap.
TEST(PlannerClusterConfigTest, AResumedJobWithNoPodsReadsTheConfigMap) {
  api::TrainingJob job = Job();
  job = After(job, PlanJob(job, {}, Input()));
  job.spec.run_policy.suspend = true;
  job = After(job, PlanJob(job, {}, Input(kNow + seconds(1))));
  job.spec.run_policy.suspend = false;
  const Plan plan = PlanJob(job, {}, Input(kNow + seconds(2)));
  ASSERT_NE(Created(plan, "Pod", "tj-ps-0"), nullptr);
  EXPECT_EQ(ClusterSource(*Created(plan, "Pod", "tj-ps-0")), "ConfigMap/tj-cluster");
  EXPECT_NE(Created(plan, "ConfigMap", "tj-cluster"), nullptr);
  // A job suspended before it ever ran has its Secret made now, with the cluster.
  api::TrainingJob fresh = Job();
  fresh.spec.run_policy.suspend = true;
  fresh = After(fresh, PlanJob(fresh, {}, Input()));
  fresh.spec.run_policy.suspend = false;
  const Plan resumed = PlanJob(fresh, {}, Input(kNow + seconds(1)));
  EXPECT_EQ(Created(resumed, "ConfigMap", "tj-cluster"), nullptr);
  EXPECT_EQ(ClusterSource(*Created(resumed, "Pod", "tj-ps-0")), "Secret/tj-auth-job-uid");
}

TEST(PlannerSecretTest, AReplacedSecretFailsTheJobWithAClearReason) {
  PlanInput in = Input();
  in.auth_secret_replaced = true;
  Plan plan = PlanJob(Job(), All(PodPhase::kRunning), in);
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(plan.status.Find(ConditionType::kFailed)->reason, "AuthSecretDeleted");
  EXPECT_NE(plan.status.Find(ConditionType::kFailed)->message.find("tj-auth-job-uid"),
            std::string::npos);
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_EQ(DeletedPods(plan).size(), 4u);  // cleanPodPolicy Running
}

TEST(PlannerRestartTest, ExitCodeRestartsOnRetryableCodes) {
  for (int code : {128, 137, 255}) {
    ObservedChildren o = All(PodPhase::kRunning);
    Find(o, "tj-worker-0") = Pod(ReplicaType::kWorker, 0, PodPhase::kFailed, code);
    Plan plan = PlanJob(Job(RestartPolicy::kExitCode), o, Input());
    EXPECT_EQ(DeletedPods(plan), std::vector<std::string>{"tj-worker-0"}) << code;
    EXPECT_FALSE(plan.status.Finished()) << code;
  }
}

TEST(PlannerRestartTest, ExitCodeFailsTheJobOnPermanentCodes) {
  for (int code : {1, 2, 127}) {
    ObservedChildren o = All(PodPhase::kRunning);
    Find(o, "tj-worker-0") = Pod(ReplicaType::kWorker, 0, PodPhase::kFailed, code);
    Plan plan = PlanJob(Job(RestartPolicy::kExitCode), o, Input());
    EXPECT_TRUE(plan.status.IsTrue(ConditionType::kFailed)) << code;
    EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "ReplicaFailed");
    EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kWorker).restarts, 0);
    EXPECT_TRUE(plan.creates.empty());
  }
}

TEST(PlannerRestartTest, ExitCodeRestartsAFailureWithoutExitCode) {
  // An evicted pod has no container exit: infrastructure, so retryable.
  ObservedChildren o = All(PodPhase::kRunning);
  ObservedPod& p = Find(o, "tj-ps-1");
  p.phase = PodPhase::kFailed;
  p.reason = "Evicted";
  Plan plan = PlanJob(Job(RestartPolicy::kExitCode), o, Input());
  EXPECT_EQ(DeletedPods(plan), std::vector<std::string>{"tj-ps-1"});
}

TEST(PlannerRestartTest, NeverFailsTheJobAndCleansUpRunningPods) {
  ObservedChildren o = All(PodPhase::kRunning);
  ObservedPod& p = Find(o, "tj-worker-1");
  p = Pod(ReplicaType::kWorker, 1, PodPhase::kFailed, 3);
  p.message = "bad input";
  Plan plan = PlanJob(Job(RestartPolicy::kNever), o, Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(plan.status.state, "Failed");
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->reason, "ReplicaFailed");
  EXPECT_EQ(Cond(plan, ConditionType::kFailed)->message,
            "Worker 1 (pod tj-worker-1) failed with exit code 3 (Error): bad input; "
            "restartPolicy is Never");
  EXPECT_EQ(plan.status.completion_time, kNow);
  // cleanPodPolicy Running (default): the running pods go, the failed one stays.
  EXPECT_EQ(DeletedPods(plan), (std::vector<std::string>{"tj-ps-0", "tj-ps-1", "tj-worker-0"}));
  EXPECT_TRUE(plan.creates.empty());
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].type, EventType::kWarning);
  EXPECT_EQ(plan.events[0].reason, "ReplicaFailed");
}

TEST(PlannerRestartTest, APodBeingDeletedIsNotAFailure) {
  ObservedChildren o = All(PodPhase::kRunning);
  ObservedPod& p = Find(o, "tj-worker-0");
  p = Pod(ReplicaType::kWorker, 0, PodPhase::kFailed, 143);
  p.deletion_timestamp = kNow;
  Plan plan = PlanJob(Job(RestartPolicy::kNever), o, Input());
  EXPECT_FALSE(plan.status.Finished());
  EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kWorker).restarts, 0);
  EXPECT_TRUE(plan.deletes.empty());
}

TEST(PlannerRestartTest, APodThatVanishedIsRecreatedWithoutCountingARestart) {
  ObservedChildren o = All(PodPhase::kRunning);
  o.pods.pop_back();  // tj-worker-1, deleted by someone
  Plan plan = PlanJob(Job(RestartPolicy::kNever), o, Input());
  EXPECT_EQ(CreatedNames(plan), std::vector<std::string>{"Pod/tj-worker-1"});
  EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kWorker).restarts, 0);
}

}  // namespace
}  // namespace kubetrain::planner
