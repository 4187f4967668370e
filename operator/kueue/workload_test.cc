#include "operator/kueue/workload.h"

#include <gtest/gtest.h>

namespace kubetrain::kueue {
namespace {

using api::ReplicaType;
using json = nlohmann::json;
using std::chrono::seconds;
using Action = Decision::Action;

const api::Time kNow{seconds(1'800'000'000)};

api::TrainingJob Job() {
  api::TrainingJob job;
  job.metadata.name = "tj";
  job.metadata.namespace_ = "ml";
  job.metadata.uid = "0b1c2d3e-0000-4000-8000-000000000001";
  job.metadata.labels[std::string(kQueueNameLabel)] = "team-a";
  for (auto [type, n] : {std::pair{ReplicaType::kPS, 2}, std::pair{ReplicaType::kWorker, 3}}) {
    api::ReplicaSpec& r = job.spec.replica_specs[type];
    r.replicas = n;
    r.pod_template = {
        {"spec",
         {{"containers", json::array({{{"name", "trainer"},
                                       {"image", "kubetrain-trainer"},
                                       {"resources", {{"requests", {{"cpu", "1"}}}}}}})}}}};
  }
  return job;
}

json Condition(std::string type, bool status, std::string reason = "R", std::string msg = "") {
  return {{"type", type},
          {"status", status ? "True" : "False"},
          {"reason", reason},
          {"message", msg},
          {"lastTransitionTime", "2027-01-15T08:00:00Z"}};
}

json Workload(const api::TrainingJob& job, std::vector<json> conditions = {}) {
  json wl = BuildWorkload(job, "team-a", std::nullopt);
  wl["metadata"]["generation"] = 1;
  wl["status"]["conditions"] = conditions;
  return wl;
}

json Admitted(const api::TrainingJob& job) {
  json wl = Workload(job, {Condition("QuotaReserved", true), Condition("Admitted", true)});
  wl["status"]["admission"] = {
      {"clusterQueue", "cq"},
      {"podSetAssignments",
       json::array({{{"name", "ps"}, {"flavors", {{"cpu", "fast"}, {"memory", "fast"}}}},
                    {{"name", "worker"}, {"flavors", {{"cpu", "fast"}}}}})}};
  return wl;
}

TEST(KueueWorkload, NameIsKueuesOwnerNameWithAFiveDigitHash) {
  api::TrainingJob job = Job();
  const std::string name = WorkloadName(job);
  EXPECT_EQ(name.rfind("trainingjob-tj-", 0), 0u) << name;
  EXPECT_EQ(name.size(), 20u) << "trainingjob-tj- and 5 hex digits";
  job.metadata.uid = "another-uid";
  EXPECT_NE(WorkloadName(job), name) << "a new job of the same name gets a new Workload";
}

TEST(KueueWorkload, NameOfSha1OverKindGroupNameUid) {
  // Computed independently:
  // python3 -c 'import hashlib;print(hashlib.sha1(
  //   b"TrainingJob\nkubetrain.io\ntj\n6a1f0c5e-2b9d-4c3e-9f7a-1d2e3f4a5b6c").hexdigest())'
  // starts f98bd (Kueue's getHash writes kind, group, name and UID, '\n' apart).
  api::TrainingJob job = Job();
  job.metadata.uid = "6a1f0c5e-2b9d-4c3e-9f7a-1d2e3f4a5b6c";
  EXPECT_EQ(WorkloadName(job), "trainingjob-tj-f98bd");
}

TEST(KueueWorkload, OnePodSetPerRoleOwnedByTheJob) {
  const api::TrainingJob job = Job();
  Priority prio{"high", 1000};
  const json wl = BuildWorkload(job, "team-a", prio);
  EXPECT_EQ(wl["apiVersion"], "kueue.x-k8s.io/v1beta1");
  EXPECT_EQ(wl["kind"], "Workload");
  EXPECT_EQ(wl["metadata"]["namespace"], "ml");
  EXPECT_EQ(wl["metadata"]["labels"][std::string(kJobUidLabel)], job.metadata.uid);
  EXPECT_EQ(wl["metadata"]["finalizers"], json::array({kResourceInUseFinalizer}));
  const json& owner = wl["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "TrainingJob");
  EXPECT_EQ(owner["uid"], job.metadata.uid);
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(wl["spec"]["queueName"], "team-a");
  ASSERT_EQ(wl["spec"]["podSets"].size(), 2u);
  EXPECT_EQ(wl["spec"]["podSets"][0]["name"], "ps");
  EXPECT_EQ(wl["spec"]["podSets"][0]["count"], 2);
  EXPECT_EQ(wl["spec"]["podSets"][1]["name"], "worker");
  EXPECT_EQ(wl["spec"]["podSets"][1]["count"], 3);
  EXPECT_EQ(
      wl["spec"]["podSets"][1]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"],
      "1");
  EXPECT_EQ(wl["spec"]["priorityClassName"], "high");
  EXPECT_EQ(wl["spec"]["priority"], 1000);
  EXPECT_EQ(wl["spec"]["priorityClassSource"], kWorkloadPriorityClassSource);
  EXPECT_FALSE(BuildWorkload(job, "q", std::nullopt)["spec"].contains("priority"));
}

TEST(KueueWorkload, APodPriorityClassIsNamedAsItsSource) {
  const json wl = BuildWorkload(Job(), "q", Priority{"batch-high", 500, kPodPriorityClassSource});
  EXPECT_EQ(wl["spec"]["priorityClassName"], "batch-high");
  EXPECT_EQ(wl["spec"]["priority"], 500);
  EXPECT_EQ(wl["spec"]["priorityClassSource"], "scheduling.k8s.io/priorityclass");
}

TEST(KueueWorkload, PodPriorityClassIsThePolicysElseTheFirstTemplatesThatNamesOne) {
  api::TrainingJob job = Job();
  EXPECT_EQ(PodPriorityClassName(job), std::nullopt);
  job.spec.replica_specs[ReplicaType::kWorker].pod_template["spec"]["priorityClassName"] = "w";
  EXPECT_EQ(PodPriorityClassName(job), "w");
  job.spec.replica_specs[ReplicaType::kPS].pod_template["spec"]["priorityClassName"] = "p";
  EXPECT_EQ(PodPriorityClassName(job), "p");              // PS comes before Worker in kRoles
  job.spec.replica_specs[ReplicaType::kPS].replicas = 0;  // a role with no pods names none
  EXPECT_EQ(PodPriorityClassName(job), "w");
  job.spec.run_policy.scheduling_policy.emplace().priority_class_name = "policy";
  EXPECT_EQ(PodPriorityClassName(job), "policy");  // the planner puts it on every pod
}

TEST(KueueWorkload, PodSetsMatchUntilReplicasOrRequestsChange) {
  api::TrainingJob job = Job();
  json wl = Workload(job);
  // The apiserver defaults template fields: those are not compared.
  wl["spec"]["podSets"][0]["template"]["spec"]["restartPolicy"] = "Always";
  EXPECT_TRUE(PodSetsMatch(wl, job));
  api::TrainingJob more = job;
  more.spec.replica_specs[ReplicaType::kWorker].replicas = 4;
  EXPECT_FALSE(PodSetsMatch(wl, more));
  api::TrainingJob bigger = job;
  bigger.spec.replica_specs[ReplicaType::kPS]
      .pod_template["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2";
  EXPECT_FALSE(PodSetsMatch(wl, bigger));
  api::TrainingJob chief = job;
  chief.spec.replica_specs[ReplicaType::kChief] = job.spec.replica_specs[ReplicaType::kPS];
  EXPECT_FALSE(PodSetsMatch(wl, chief));
}

TEST(KueueDecide, NoWorkloadHoldsAndCreatesOnceNoPodIsActive) {
  const api::TrainingJob job = Job();
  Decision d = Decide(job, "team-a", nullptr, /*pods_active=*/false);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.hold->reason, kReasonWaitingForAdmission);
  EXPECT_NE(d.hold->message.find("team-a"), std::string::npos);
  EXPECT_EQ(d.action, Action::kCreateWorkload);
  d = Decide(job, "team-a", nullptr, /*pods_active=*/true);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.action, Action::kNone) << "pods from before the queue label must go first";
}

TEST(KueueDecide, PendingWorkloadHoldsWithKueuesReason) {
  const api::TrainingJob job = Job();
  const json wl = Workload(
      job, {Condition("QuotaReserved", false, "Pending", "insufficient quota for cpu in flavor")});
  Decision d = Decide(job, "team-a", &wl, false);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.hold->reason, kReasonWaitingForAdmission);
  EXPECT_NE(d.hold->message.find("insufficient quota"), std::string::npos) << d.hold->message;
  EXPECT_EQ(d.action, Action::kNone);
}

TEST(KueueDecide, QuotaReservedButNotAdmittedStillHolds) {
  const api::TrainingJob job = Job();
  const json wl = Workload(job, {Condition("QuotaReserved", true)});
  EXPECT_TRUE(Decide(job, "team-a", &wl, false).hold);
}

TEST(KueueDecide, AdmittedRuns) {
  const api::TrainingJob job = Job();
  const json wl = Admitted(job);
  Decision d = Decide(job, "team-a", &wl, true);
  EXPECT_FALSE(d.hold);
  EXPECT_EQ(d.action, Action::kNone);
}

// Kueue's waitForPodsReady evicts an admitted Workload whose PodsReady is not
// True in time: the operator reports it from the job's Running condition, and
// writes only transitions.
TEST(KueueDecide, AdmittedJobReportsPodsReadyTransitions) {
  api::TrainingJob job = Job();
  json wl = Admitted(job);
  EXPECT_EQ(Decide(job, "team-a", &wl, true).action, Action::kNone)
      << "not running yet: no PodsReady is WaitForStart already";

  job.status.conditions.push_back({api::ConditionType::kRunning, true, "TrainingJobRunning", ""});
  Decision d = Decide(job, "team-a", &wl, true);
  EXPECT_FALSE(d.hold);
  ASSERT_EQ(d.action, Action::kSetPodsReady);
  wl["status"] = PodsReadyStatus(wl, true, kNow);
  const auto cond = [&](std::string_view field) -> std::string {
    for (const json& c : wl["status"]["conditions"]) {
      if (c["type"] == "PodsReady") return c[std::string(field)];
    }
    return "";
  };
  EXPECT_EQ(cond("status"), "True");
  EXPECT_EQ(cond("reason"), "Started");
  EXPECT_EQ(Decide(job, "team-a", &wl, true).action, Action::kNone) << "written once";

  job.status.conditions.back().status = false;  // a replica failed and is recreated
  ASSERT_EQ(Decide(job, "team-a", &wl, true).action, Action::kSetPodsReady);
  wl["status"] = PodsReadyStatus(wl, false, kNow);
  EXPECT_EQ(cond("status"), "False");
  EXPECT_EQ(cond("reason"), "WaitForRecovery");
  EXPECT_EQ(Decide(job, "team-a", &wl, true).action, Action::kNone);

  job.status.conditions.back().status = true;
  ASSERT_EQ(Decide(job, "team-a", &wl, true).action, Action::kSetPodsReady);
  wl["status"] = PodsReadyStatus(wl, true, kNow);
  EXPECT_EQ(cond("reason"), "Recovered");

  // An eviction's cleared admission starts the next admission afresh.
  wl["status"]["conditions"].push_back(Condition("Evicted", true, "Preempted", "p"));
  wl["status"] = ClearedAdmissionStatus(wl, kNow);
  EXPECT_EQ(cond("status"), "False");
  EXPECT_EQ(cond("reason"), "WaitForStart");
}

TEST(KueueDecide, EvictedHoldsAndClearsTheAdmissionOnlyOncePodsAreGone) {
  const api::TrainingJob job = Job();
  json wl = Admitted(job);
  wl["status"]["conditions"].push_back(
      Condition("Evicted", true, "Preempted", "Preempted to accommodate a higher priority"));
  Decision d = Decide(job, "team-a", &wl, /*pods_active=*/true);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.hold->reason, kReasonEvicted);
  EXPECT_NE(d.hold->message.find("Preempted"), std::string::npos);
  EXPECT_EQ(d.action, Action::kNone) << "pods still run: keep the quota";
  d = Decide(job, "team-a", &wl, /*pods_active=*/false);
  EXPECT_EQ(d.action, Action::kClearAdmission);

  // Cleared: still evicted (Kueue resets that on the next admission), nothing to do.
  wl["status"] = ClearedAdmissionStatus(wl, kNow);
  d = Decide(job, "team-a", &wl, false);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.action, Action::kNone);
}

TEST(KueueDecide, SuspendedJobDeactivatesItsWorkloadAndReleasesTheQuota) {
  api::TrainingJob job = Job();
  job.spec.run_policy.suspend = true;
  json wl = Admitted(job);
  Decision d = Decide(job, "team-a", &wl, /*pods_active=*/true);
  EXPECT_FALSE(d.hold) << "the planner says why a suspended job holds";
  EXPECT_EQ(d.action, Action::kDeactivate);

  wl = WithActive(wl, false);
  EXPECT_EQ(wl["spec"]["active"], false);
  EXPECT_EQ(wl["metadata"]["annotations"][std::string(kDeactivatedForSuspendAnnotation)], "true");
  // Kueue evicts it (reason Deactivated); the quota goes once the pods are gone.
  wl["status"]["conditions"].push_back(
      Condition("Evicted", true, "Deactivated", "The workload is deactivated"));
  d = Decide(job, "team-a", &wl, /*pods_active=*/true);
  EXPECT_EQ(d.action, Action::kNone) << "pods still run: keep the quota";
  d = Decide(job, "team-a", &wl, /*pods_active=*/false);
  EXPECT_EQ(d.action, Action::kClearAdmission);
  wl["status"] = ClearedAdmissionStatus(wl, kNow);
  d = Decide(job, "team-a", &wl, false);
  EXPECT_EQ(d.action, Action::kNone);
  EXPECT_FALSE(d.hold);
}

TEST(KueueDecide, SuspendedJobWithoutAWorkloadCreatesNone) {
  api::TrainingJob job = Job();
  job.spec.run_policy.suspend = true;
  const Decision d = Decide(job, "team-a", nullptr, false);
  EXPECT_EQ(d.action, Action::kNone);
  EXPECT_FALSE(d.hold);
}

TEST(KueueDecide, ResumedJobReactivatesItsWorkloadAndWaitsForAdmission) {
  const api::TrainingJob job = Job();
  json wl = WithActive(Admitted(job), false);
  wl["status"]["conditions"].push_back(
      Condition("Evicted", true, "Deactivated", "The workload is deactivated"));
  wl["status"] = ClearedAdmissionStatus(wl, kNow);
  Decision d = Decide(job, "team-a", &wl, false);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.hold->reason, kReasonWaitingForAdmission);
  EXPECT_EQ(d.action, Action::kActivate);

  wl = WithActive(wl, true);
  EXPECT_EQ(wl["spec"]["active"], true);
  EXPECT_FALSE(
      wl["metadata"]["annotations"].contains(std::string(kDeactivatedForSuspendAnnotation)));
  // Active again, the old Evicted (Deactivated) stays until Kueue readmits it:
  // the job queues; it was not evicted by anyone.
  d = Decide(job, "team-a", &wl, false);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.hold->reason, kReasonWaitingForAdmission);
  EXPECT_EQ(d.action, Action::kNone);
}

TEST(KueueDecide, WorkloadDeactivatedBySomeoneElseStaysSoAndTheJobSaysWhy) {
  const api::TrainingJob job = Job();
  json wl = Admitted(job);
  wl["spec"]["active"] = false;  // an admin, not us: no annotation
  wl["status"]["conditions"].push_back(
      Condition("Evicted", true, "Deactivated", "The workload is deactivated"));
  Decision d = Decide(job, "team-a", &wl, /*pods_active=*/true);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.hold->reason, kReasonEvicted);
  EXPECT_NE(d.hold->message.find("deactivated"), std::string::npos) << d.hold->message;
  EXPECT_EQ(d.action, Action::kNone);
  d = Decide(job, "team-a", &wl, /*pods_active=*/false);
  EXPECT_EQ(d.action, Action::kClearAdmission);
}

TEST(KueueDecide, ChangedRolesReplaceTheWorkload) {
  api::TrainingJob job = Job();
  const json wl = Workload(job);
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 1;
  Decision d = Decide(job, "team-a", &wl, false);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.action, Action::kDeleteWorkload);
}

TEST(KueueDecide, WorkloadBeingDeletedHoldsAndReleasesItsFinalizerWhenNoPodRuns) {
  const api::TrainingJob job = Job();
  json wl = Admitted(job);
  wl["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z";
  Decision d = Decide(job, "team-a", &wl, true);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.action, Action::kNone);
  EXPECT_EQ(Decide(job, "team-a", &wl, false).action, Action::kRemoveFinalizer);
}

TEST(KueueDecide, FinishedJobFinishesTheWorkloadThenDropsTheFinalizer) {
  api::TrainingJob job = Job();
  job.status.conditions.push_back({api::ConditionType::kSucceeded, true, "Done", "ok", kNow});
  json wl = Admitted(job);
  Decision d = Decide(job, "team-a", &wl, false);
  EXPECT_FALSE(d.hold);
  EXPECT_EQ(d.action, Action::kFinishWorkload);
  wl["status"] = FinishedStatus(wl, true, "ok", kNow);
  EXPECT_EQ(Decide(job, "team-a", &wl, false).action, Action::kRemoveFinalizer);
  wl["metadata"]["finalizers"] = FinalizersWithoutOurs(wl);
  EXPECT_EQ(Decide(job, "team-a", &wl, false).action, Action::kNone);
  EXPECT_EQ(Decide(job, "team-a", nullptr, false).action, Action::kNone);
}

// The queue label of a job that has a Workload no longer decides
// whether Kueue holds it. Removed, the job waits in its Workload's queue.
TEST(KueueDecide, JobWhoseQueueLabelWasRemovedStaysHeldUntilAdmitted) {
  const api::TrainingJob job = Job();
  const json pending = Workload(job, {Condition("QuotaReserved", false, "Pending", "no quota")});
  Decision d = Decide(job, "", &pending, false);
  ASSERT_TRUE(d.hold) << "a job with a pending Workload must not run unadmitted";
  EXPECT_EQ(d.hold->reason, kReasonWaitingForAdmission);
  EXPECT_NE(d.hold->message.find("label was removed"), std::string::npos) << d.hold->message;
  EXPECT_NE(d.hold->message.find("team-a"), std::string::npos) << d.hold->message;
  EXPECT_EQ(d.action, Action::kNone) << "no move to an empty queue";

  const json admitted = Admitted(job);
  d = Decide(job, "", &admitted, true);
  EXPECT_FALSE(d.hold) << "admitted: it runs";
  EXPECT_EQ(d.action, Action::kNone);

  // Neither a label nor a Workload: not Kueue's.
  d = Decide(job, "", nullptr, false);
  EXPECT_FALSE(d.hold);
  EXPECT_EQ(d.action, Action::kNone);
}

TEST(KueueDecide, ChangedRolesWithoutAQueueKeepTheWorkloadAndHold) {
  api::TrainingJob job = Job();
  const json wl = Workload(job);
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 1;
  const Decision d = Decide(job, "", &wl, false);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.action, Action::kNone) << "a new Workload could not be queued anywhere";
}

// jobframework's QueueNameChange: a Workload that holds no quota follows the
// job's new queue label; an admitted one stays until it gives the quota back.
TEST(KueueDecide, ChangedQueueMovesAWorkloadThatHoldsNoQuota) {
  const api::TrainingJob job = Job();
  json wl = Workload(job, {Condition("QuotaReserved", false, "Pending", "no quota")});
  Decision d = Decide(job, "team-b", &wl, false);
  ASSERT_TRUE(d.hold);
  EXPECT_EQ(d.hold->reason, kReasonWaitingForAdmission);
  EXPECT_NE(d.hold->message.find("team-b"), std::string::npos) << d.hold->message;
  EXPECT_EQ(d.action, Action::kMoveQueue);
  wl = WithQueue(wl, "team-b");
  EXPECT_EQ(QueueOf(wl), "team-b");
  d = Decide(job, "team-b", &wl, false);
  EXPECT_EQ(d.action, Action::kNone);
  ASSERT_TRUE(d.hold);

  const json reserved = Workload(job, {Condition("QuotaReserved", true)});
  EXPECT_EQ(Decide(job, "team-b", &reserved, false).action, Action::kNone);
  const json admitted = Admitted(job);
  d = Decide(job, "team-b", &admitted, true);
  EXPECT_FALSE(d.hold) << "an admitted job keeps running in the queue that admitted it";
  EXPECT_EQ(d.action, Action::kNone);

  // Suspended, its quota given back: it moves too.
  api::TrainingJob suspended = Job();
  suspended.spec.run_policy.suspend = true;
  json inactive = WithActive(Workload(job), false);
  EXPECT_EQ(Decide(suspended, "team-b", &inactive, false).action, Action::kMoveQueue);
}

// A job that ends finishes its Workload whatever its labels say.
TEST(KueueDecide, FinishedJobWithoutItsLabelStillFinishesTheWorkload) {
  api::TrainingJob job = Job();
  job.status.conditions.push_back({api::ConditionType::kFailed, true, "Failed", "boom", kNow});
  const json wl = Admitted(job);
  EXPECT_EQ(Decide(job, "", &wl, false).action, Action::kFinishWorkload);
}

TEST(KueueWorkload, CarriesTheJobNameLabelTheCacheSelectsOn) {
  const api::TrainingJob job = Job();
  const json wl = BuildWorkload(job, "team-a", std::nullopt);
  EXPECT_EQ(wl["metadata"]["labels"][std::string(kJobNameLabel)], "tj");
  EXPECT_EQ(wl["metadata"]["labels"][std::string(kJobUidLabel)], job.metadata.uid);
}

// Migration: a Workload an older operator made (no job-name label) is
// recognised by its controller owner and labelled; other kinds' are not.
TEST(KueueWorkload, OlderWorkloadsOfTrainingJobsAreLabelledForTheCache) {
  const api::TrainingJob job = Job();
  json old = BuildWorkload(job, "team-a", std::nullopt);
  old["metadata"]["labels"].erase(std::string(kJobNameLabel));
  ASSERT_TRUE(OwnedByATrainingJob(old));
  EXPECT_EQ(LabelForCache(old)["metadata"]["labels"][std::string(kJobNameLabel)], "tj");

  json batch = old;
  batch["metadata"]["ownerReferences"][0]["apiVersion"] = "batch/v1";
  batch["metadata"]["ownerReferences"][0]["kind"] = "Job";
  EXPECT_FALSE(OwnedByATrainingJob(batch));
  json other_group = old;
  other_group["metadata"]["ownerReferences"][0]["apiVersion"] = "example.com/v1";
  EXPECT_FALSE(OwnedByATrainingJob(other_group));
  json not_controller = old;
  not_controller["metadata"]["ownerReferences"][0]["controller"] = false;
  EXPECT_FALSE(OwnedByATrainingJob(not_controller));
}

TEST(KueueStatus, ClearedAdmissionRequeuesAPreemptedWorkload) {
  const api::TrainingJob job = Job();
  json wl = Admitted(job);
  wl["status"]["conditions"].push_back(Condition("Evicted", true, "Preempted", "by a higher one"));
  const json s = ClearedAdmissionStatus(wl, kNow);
  EXPECT_FALSE(s.contains("admission"));
  auto find = [&](const std::string& type) {
    for (const json& c : s["conditions"])
      if (c["type"] == type) return c;
    return json();
  };
  EXPECT_EQ(find("QuotaReserved")["status"], "False");
  EXPECT_EQ(find("QuotaReserved")["reason"], "Pending");
  EXPECT_EQ(find("QuotaReserved")["lastTransitionTime"], api::FormatTime(kNow));
  EXPECT_EQ(find("Admitted")["status"], "False");
  EXPECT_EQ(find("Requeued")["status"], "True");
  EXPECT_EQ(find("Requeued")["reason"], "Preempted");
  EXPECT_EQ(find("Evicted")["status"], "True") << "kept: Kueue resets it on readmission";
  EXPECT_EQ(find("Evicted")["lastTransitionTime"], "2027-01-15T08:00:00Z");
}

TEST(KueueStatus, FinishedWorkloadReleasesItsQuota) {
  const api::TrainingJob job = Job();
  const json s = FinishedStatus(Admitted(job), false, "worker-0 failed", kNow);
  EXPECT_FALSE(s.contains("admission"));
  bool finished = false;
  for (const json& c : s["conditions"]) {
    if (c["type"] == "Finished") {
      finished = true;
      EXPECT_EQ(c["status"], "True");
      EXPECT_EQ(c["reason"], "Failed");
      EXPECT_EQ(c["message"], "worker-0 failed");
      EXPECT_EQ(c["observedGeneration"], 1);
    }
    if (c["type"] == "QuotaReserved" || c["type"] == "Admitted") {
      EXPECT_EQ(c["status"], "False");
    }
  }
  EXPECT_TRUE(finished);
}

TEST(KueuePodSetInfo, FlavorsGiveNodeSelectorsTolerationsAndThePodSetLabel) {
  const std::vector<PodSetAssignment> a = Assignments(Admitted(Job()));
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].name, "ps");
  EXPECT_EQ(a[0].flavors, std::vector<std::string>{"fast"}) << "cpu and memory share a flavor";
  const std::map<std::string, json> flavors = {
      {"fast",
       {{"spec",
         {{"nodeLabels", {{"pool", "fast"}}},
          {"tolerations", json::array({{{"key", "fast"}, {"operator", "Exists"}}})}}}}}};
  auto info = InfoFromFlavors(a[0], flavors);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->node_selector.at("pool"), "fast");
  EXPECT_EQ(info->labels.at(std::string(kPodSetLabel)), "ps");
  EXPECT_EQ(info->tolerations.size(), 1u);
  EXPECT_EQ(InfoFromFlavors(a[0], {}).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Assignments(Workload(Job())).empty()) << "not admitted: no assignments";
}

TEST(KueuePodSetInfo, MergedIntoThePodLikePodsetMerge) {
  PodSetInfo info;
  info.labels["kueue.x-k8s.io/podset"] = "worker";
  info.node_selector["pool"] = "fast";
  info.tolerations = json::array({{{"key", "fast"}, {"operator", "Exists"}}});
  json pod = {{"metadata", {{"name", "tj-worker-0"}, {"labels", {{"a", "b"}}}}},
              {"spec",
               {{"nodeSelector", {{"type", "kwok"}}},
                {"tolerations", json::array({{{"key", "fast"}, {"operator", "Exists"}}})}}}};
  ASSERT_TRUE(ApplyPodSetInfo(pod, info).ok());
  EXPECT_EQ(pod["metadata"]["labels"]["a"], "b");
  EXPECT_EQ(pod["metadata"]["labels"]["kueue.x-k8s.io/podset"], "worker");
  EXPECT_FALSE(pod["metadata"].contains("annotations"));
  EXPECT_EQ(pod["spec"]["nodeSelector"]["type"], "kwok");
  EXPECT_EQ(pod["spec"]["nodeSelector"]["pool"], "fast");
  EXPECT_EQ(pod["spec"]["tolerations"].size(), 1u) << "a toleration already there is not repeated";

  json conflicting = {{"metadata", json::object()},
                      {"spec", {{"nodeSelector", {{"pool", "slow"}}}}}};
  const Status s = ApplyPodSetInfo(conflicting, info);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("pool"), std::string::npos);
}

TEST(KueueQueue, QueueNameFromTheLabel) {
  api::TrainingJob job = Job();
  EXPECT_EQ(QueueName(job), "team-a");
  job.metadata.labels[std::string(kQueueNameLabel)] = "";
  EXPECT_FALSE(QueueName(job));
  job.metadata.labels.clear();
  EXPECT_FALSE(QueueName(job));
}

}  // namespace
}  // namespace kubetrain::kueue
