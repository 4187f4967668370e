// Gang scheduling in the planner: which jobs get a PodGroup, what it says,
// where it goes in a plan, and how unschedulable pods show in the status.
#include "operator/planner/gang.h"

#include <gtest/gtest.h>

#include "operator/api/validation.h"
#include "operator/planner/planner.h"

namespace kubetrain::planner {
namespace {

using api::ConditionType;
using api::ReplicaType;
using nlohmann::json;
using std::chrono::seconds;

const api::Time kNow{seconds(1'800'000'000)};

json Template(json resources = json::object()) {
  json c = {{"name", "trainer"}, {"image", "kubetrain-trainer"}};
  if (!resources.empty()) c["resources"] = std::move(resources);
  return {{"spec", {{"containers", json::array({c})}}}};
}

// tj in namespace ml: 1 PS (2 cpu, 1Gi) and 3 workers (1 cpu, 512Mi).
api::TrainingJob Job() {
  api::TrainingJob job;
  job.metadata.name = "tj";
  job.metadata.namespace_ = "ml";
  job.metadata.uid = "job-uid";
  job.spec.replica_specs[ReplicaType::kPS].replicas = 1;
  job.spec.replica_specs[ReplicaType::kPS].pod_template =
      Template({{"requests", {{"cpu", "2"}, {"memory", "1Gi"}}}});
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 3;
  job.spec.replica_specs[ReplicaType::kWorker].pod_template =
      Template({{"requests", {{"cpu", "1"}, {"memory", "512Mi"}}}});
  return job;
}

api::TrainingJob GangJob(std::optional<int32_t> min_available = std::nullopt) {
  api::TrainingJob job = Job();
  api::SchedulingPolicy sp;
  sp.scheduler_name = "gang-scheduler";
  sp.min_available = min_available.value_or(4);
  job.spec.run_policy.scheduling_policy = sp;
  return job;
}

PlanInput Input() {
  PlanInput in;
  in.now = kNow;
  in.auth_key.fill(1);
  return in;
}

const ChildCreate* Find(const Plan& plan, ChildRef::Kind kind, const std::string& name) {
  for (const ChildCreate& c : plan.creates) {
    if (c.ref.kind == kind && c.ref.name == name) return &c;
  }
  return nullptr;
}

std::string Text(const ResourceList& r) {
  std::string out;
  for (const auto& [name, q] : r) out += name + "=" + FormatQuantity(q) + " ";
  return out;
}

// ---- Which jobs are gang-scheduled -----------------------------------------------

TEST(GangRuleTest, OperatorSchedulerGangsEveryJob) {
  EXPECT_EQ(GangSchedulerName(Job(), "sp-scheduler"), "sp-scheduler");
}

TEST(GangRuleTest, JobNamingASchedulerAndAGangIsGangedWithoutTheOperatorFlag) {
  EXPECT_EQ(GangSchedulerName(GangJob(), ""), "gang-scheduler");
  EXPECT_EQ(GangSchedulerName(GangJob(), "sp-scheduler"), "gang-scheduler");  // the job's wins
}

TEST(GangRuleTest, SchedulerNameAloneOrNothingIsNoGang) {
  EXPECT_EQ(GangSchedulerName(Job(), ""), std::nullopt);
  api::TrainingJob job = Job();
  job.spec.run_policy.scheduling_policy = api::SchedulingPolicy{};
  job.spec.run_policy.scheduling_policy->scheduler_name = "my-scheduler";
  EXPECT_EQ(GangSchedulerName(job, ""), std::nullopt);  // as before: only the pods' scheduler
  job.spec.run_policy.scheduling_policy = api::SchedulingPolicy{};
  job.spec.run_policy.scheduling_policy->min_available = 2;
  EXPECT_EQ(GangSchedulerName(job, ""), std::nullopt);  // no gang scheduler named anywhere
}

// ---- A pod's requests ---------------------------------------------------------------

TEST(PodRequestsTest, SumsContainersAndLetsALimitStandInForARequest) {
  json tmpl =
      Template({{"requests", {{"cpu", "500m"}}}, {"limits", {{"cpu", "2"}, {"memory", "1Gi"}}}});
  tmpl["spec"]["containers"].push_back(
      {{"name", "side"}, {"resources", {{"requests", {{"cpu", 0.25}, {"nvidia.com/gpu", 1}}}}}});
  auto r = PodRequests(tmpl);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Text(*r), "cpu=750m memory=1073741824 nvidia.com/gpu=1 ");
}

TEST(PodRequestsTest, InitContainersCountAtTheirPeakAndSidecarsThroughout) {
  json tmpl = Template({{"requests", {{"cpu", "1"}, {"memory", "1Gi"}}}});
  tmpl["spec"]["initContainers"] = json::array(
      {{{"name", "proxy"},
        {"restartPolicy", "Always"},
        {"resources", {{"requests", {{"cpu", "100m"}}}}}},
       {{"name", "fetch"}, {"resources", {{"requests", {{"cpu", "3"}, {"memory", "100Mi"}}}}}}});
  tmpl["spec"]["overhead"] = {{"memory", "10Mi"}};
  auto r = PodRequests(tmpl);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // cpu: max(1 + 0.1, 3 + 0.1); memory: max(1Gi, 100Mi) + 10Mi.
  EXPECT_EQ(Text(*r), "cpu=3100m memory=1084227584 ");
}

TEST(PodRequestsTest, NoRequestsIsEmpty) {
  auto r = PodRequests(Template());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST(PodRequestsTest, AMalformedQuantityNamesItsField) {
  auto r = PodRequests(Template({{"requests", {{"cpu", "lots"}}}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("template.spec.containers[0].resources.requests.cpu"),
            std::string::npos)
      << r.status().message();
  EXPECT_FALSE(PodRequests(Template({{"requests", {{"cpu", json::array()}}}})).ok());
}

// ---- The gang -------------------------------------------------------------------------

TEST(PlanGangTest, DefaultsToEveryReplicaAndSumsTheirRequests) {
  api::TrainingJob job = Job();
  auto g = PlanGang(job, "sp");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->scheduler_name, "sp");
  EXPECT_EQ(g->group_name, "tj-job-uid");
  EXPECT_EQ(g->min_member, 4);
  EXPECT_EQ(Text(g->min_resources), "cpu=5 memory=2684354560 ");  // 2 + 3x1 cpu, 1Gi + 3x512Mi
  EXPECT_EQ(g->schedule_timeout_seconds, std::nullopt);
}

TEST(PlanGangTest, MinAvailableTakesReplicasInRoleOrder) {
  auto g = PlanGang(GangJob(2), "sp");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->min_member, 2);
  EXPECT_EQ(Text(g->min_resources), "cpu=3 memory=1610612736 ");  // the PS and one worker
}

TEST(PlanGangTest, MinAvailableAboveTheReplicasIsRefused) {
  auto g = PlanGang(GangJob(5), "sp");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("minAvailable: 5 is more than the job's 4 replicas"),
            std::string::npos)
      << g.status().message();
}

TEST(PlanGangTest, CarriesTheScheduleTimeout) {
  api::TrainingJob job = GangJob();
  job.spec.run_policy.scheduling_policy->schedule_timeout_seconds = 90;
  EXPECT_EQ(PlanGang(job, "sp")->schedule_timeout_seconds, 90);
}

// ---- In the plan ----------------------------------------------------------------------

TEST(GangPlanTest, PodGroupComesBeforeServicesAndPodsOwnedByTheJob) {
  PlanInput in = Input();
  in.gang_scheduler_name = "sp-scheduler";
  Plan plan = PlanJob(Job(), {}, in);
  size_t group_at = plan.creates.size(), first_pod = plan.creates.size();
  for (size_t i = 0; i < plan.creates.size(); ++i) {
    if (plan.creates[i].ref.kind == ChildRef::Kind::kPodGroup) group_at = i;
    if (plan.creates[i].ref.kind == ChildRef::Kind::kPod && first_pod == plan.creates.size())
      first_pod = i;
    if (plan.creates[i].ref.kind == ChildRef::Kind::kService) {
      EXPECT_LT(group_at, i) << "the PodGroup comes before the Services";
    }
  }
  ASSERT_LT(group_at, first_pod);
  const json& pg = plan.creates[group_at].object;
  EXPECT_EQ(plan.creates[group_at].ref, (ChildRef{ChildRef::Kind::kPodGroup, "tj-job-uid"}));
  EXPECT_EQ(pg["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(pg["kind"], "PodGroup");
  EXPECT_EQ(pg["metadata"]["name"], "tj-job-uid");
  EXPECT_EQ(pg["metadata"]["namespace"], "ml");
  EXPECT_EQ(pg["metadata"]["labels"]["kubetrain.io/job-name"], "tj");
  EXPECT_EQ(pg["metadata"]["ownerReferences"][0]["uid"], "job-uid");
  EXPECT_EQ(pg["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(pg["spec"], json::parse(R"({"minMember": 4,
                                         "minResources": {"cpu": "5", "memory": "2684354560"}})"));
}

TEST(GangPlanTest, EveryPodIsLabelledWithItsGroupAndSentToTheGangScheduler) {
  Plan plan = PlanJob(GangJob(), {}, Input());
  int pods = 0;
  for (const ChildCreate& c : plan.creates) {
    if (c.ref.kind != ChildRef::Kind::kPod) continue;
    ++pods;
    EXPECT_EQ(c.object["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "tj-job-uid")
        << c.ref.name;
    EXPECT_EQ(c.object["spec"]["schedulerName"], "gang-scheduler") << c.ref.name;
  }
  EXPECT_EQ(pods, 4);
  ASSERT_NE(Find(plan, ChildRef::Kind::kPodGroup, "tj-job-uid"), nullptr);
  EXPECT_EQ(Find(plan, ChildRef::Kind::kPodGroup, "tj-job-uid")->object["spec"]["minMember"], 4);
}

TEST(GangPlanTest, NoGangNoPodGroupAndNoLabel) {
  Plan plan = PlanJob(Job(), {}, Input());
  for (const ChildCreate& c : plan.creates) {
    EXPECT_NE(c.ref.kind, ChildRef::Kind::kPodGroup);
    if (c.ref.kind == ChildRef::Kind::kPod) {
      EXPECT_FALSE(c.object["metadata"]["labels"].contains("scheduling.x-k8s.io/pod-group"));
      EXPECT_FALSE(c.object["spec"].contains("schedulerName"));
    }
  }
}

TEST(GangPlanTest, APodGroupOnlyWithPodsToCreate) {
  // Every pod exists: nothing to create, so no PodGroup either.
  ObservedChildren all;
  all.secret_exists = true;
  for (const auto& [type, n] : {std::pair{ReplicaType::kPS, 1}, {ReplicaType::kWorker, 3}}) {
    for (int i = 0; i < n; ++i) {
      ObservedPod p;
      p.name = api::ChildName("tj", type, i);
      p.uid = p.name;
      p.role = type;
      p.index = i;
      p.phase = PodPhase::kRunning;
      all.pods.push_back(p);
      all.services.push_back({p.name, std::nullopt});
    }
  }
  EXPECT_TRUE(PlanJob(GangJob(), all, Input()).creates.empty());
  all.pods.pop_back();  // one to recreate: the group comes again (and is brought up to date)
  EXPECT_NE(Find(PlanJob(GangJob(), all, Input()), ChildRef::Kind::kPodGroup, "tj-job-uid"),
            nullptr);
}

// A job deleted and created again under its name must not take the earlier
// job's PodGroup, which the garbage collector deletes soon after: each job's
// group, and its pods' label, carry its own UID.
TEST(GangPlanTest, AJobReCreatedUnderItsNameHasAGroupOfItsOwn) {
  api::TrainingJob first = GangJob(), second = GangJob();
  second.metadata.uid = "second-uid";
  const Plan a = PlanJob(first, {}, Input()), b = PlanJob(second, {}, Input());
  ASSERT_NE(Find(a, ChildRef::Kind::kPodGroup, "tj-job-uid"), nullptr);
  ASSERT_NE(Find(b, ChildRef::Kind::kPodGroup, "tj-second-uid"), nullptr);
  EXPECT_EQ(Find(b, ChildRef::Kind::kPodGroup, "tj-job-uid"), nullptr);
  const ChildCreate* pod = Find(b, ChildRef::Kind::kPod, "tj-worker-0");
  ASSERT_NE(pod, nullptr);
  EXPECT_EQ(pod->object["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "tj-second-uid");
}

TEST(PodGroupNameTest, FitsALabelValueAndKeepsTheWholeUid) {
  const std::string uid = "0f6b3c1e-8f0a-4a4e-9d57-2b1c9a3e7d10";  // 36, as the apiserver makes
  EXPECT_EQ(PodGroupName("tj", uid), "tj-" + uid);
  EXPECT_EQ(PodGroupName("tj", ""), "tj");  // render: no UID
  // The longest valid job name (58 + "-ps-0") is cut to 26 characters; a
  // cut that ends in '-' loses it (a label value ends alphanumeric).
  const std::string long_name = "a" + std::string(57, 'b');
  EXPECT_EQ(PodGroupName(long_name, uid), long_name.substr(0, 26) + "-" + uid);
  EXPECT_EQ(PodGroupName(long_name, uid).size(), 63u);
  EXPECT_EQ(PodGroupName("abcdefghijklmnopqrstuvwxy-z", uid), "abcdefghijklmnopqrstuvwxy-" + uid);
}

// Pods an earlier operator made are in the group named after the job: while
// one lives, the replacements join that group (a second group could never
// gather minMember pods); once none lives, the UID-named group takes over.
TEST(GangPlanTest, ReplacementsJoinTheGroupOfLivePodsFromAnEarlierOperator) {
  ObservedChildren o;
  o.secret_exists = true;
  ObservedPod p;
  p.name = "tj-ps-0";
  p.uid = "p";
  p.role = ReplicaType::kPS;
  p.phase = PodPhase::kRunning;
  p.labels[std::string(kPodGroupLabel)] = "tj";
  o.pods.push_back(p);
  Plan plan = PlanJob(GangJob(), o, Input());
  ASSERT_NE(Find(plan, ChildRef::Kind::kPodGroup, "tj"), nullptr);
  const ChildCreate* pod = Find(plan, ChildRef::Kind::kPod, "tj-worker-0");
  ASSERT_NE(pod, nullptr);
  EXPECT_EQ(pod->object["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "tj");

  api::TrainingJob restarts = GangJob();
  restarts.spec.replica_specs[ReplicaType::kPS].restart_policy = api::RestartPolicy::kOnFailure;
  o.pods[0].phase = PodPhase::kFailed;
  o.pods[0].exit_code = 1;
  plan = PlanJob(restarts, o, Input());
  EXPECT_EQ(Find(plan, ChildRef::Kind::kPodGroup, "tj"), nullptr);
  EXPECT_NE(Find(plan, ChildRef::Kind::kPodGroup, "tj-job-uid"), nullptr);
}

TEST(GangPlanTest, AGangThatCanNeverFormFailsTheJobAsInvalid) {
  Plan plan = PlanJob(GangJob(7), {}, Input());
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(plan.status.Find(ConditionType::kFailed)->reason, "InvalidSpec");
  EXPECT_NE(plan.status.Find(ConditionType::kFailed)->message.find("minAvailable: 7"),
            std::string::npos);
  EXPECT_TRUE(plan.creates.empty());
}

TEST(GangPlanTest, NoPodGroupApiFailsTheJobWithTheExecutorsReason) {
  PlanInput in = Input();
  in.gang_unavailable = "the PodGroup API is not installed";
  Plan plan = PlanJob(GangJob(), {}, in);
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kFailed));
  EXPECT_EQ(plan.status.Find(ConditionType::kFailed)->reason, "GangSchedulingUnavailable");
  EXPECT_EQ(plan.status.Find(ConditionType::kFailed)->message, "the PodGroup API is not installed");
  EXPECT_TRUE(plan.creates.empty());
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "GangSchedulingUnavailable");
}

TEST(GangPlanTest, SuspendDeletesThePodsAndKeepsTheGroup) {
  api::TrainingJob job = GangJob();
  job.spec.run_policy.suspend = true;
  ObservedChildren o;
  ObservedPod p;
  p.name = "tj-worker-0";
  p.uid = "u";
  p.phase = PodPhase::kPending;
  o.pods.push_back(p);
  Plan plan = PlanJob(job, o, Input());
  ASSERT_EQ(plan.deletes.size(), 1u);
  EXPECT_EQ(plan.deletes[0].kind, ChildRef::Kind::kPod);  // never the PodGroup
  EXPECT_TRUE(plan.creates.empty());
}

// ---- Why pods wait ----------------------------------------------------------------------

ObservedChildren Waiting(int unschedulable) {
  ObservedChildren o;
  o.secret_exists = true;
  int i = 0;
  for (const auto& [type, n] : {std::pair{ReplicaType::kPS, 1}, {ReplicaType::kWorker, 3}}) {
    for (int k = 0; k < n; ++k, ++i) {
      ObservedPod p;
      p.name = api::ChildName("tj", type, k);
      p.uid = p.name;
      p.role = type;
      p.index = k;
      p.phase = PodPhase::kPending;
      if (i < unschedulable) p.unschedulable = "0/2 nodes are available: 2 Insufficient cpu.";
      o.pods.push_back(p);
      o.services.push_back({p.name, std::nullopt});
    }
  }
  return o;
}

TEST(UnschedulableTest, PendingPodsTheSchedulerRefusedShowInTheStatusAndOneEvent) {
  Plan plan = PlanJob(GangJob(), Waiting(4), Input());
  const api::Condition* c = plan.status.Find(ConditionType::kUnschedulable);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->status);
  EXPECT_EQ(c->reason, "Unschedulable");
  EXPECT_EQ(c->message,
            "4 of 4 pods cannot be scheduled (gang of 4 for scheduler gang-scheduler: no pod is "
            "placed until all can be); tj-ps-0: 0/2 nodes are available: 2 Insufficient cpu.");
  EXPECT_EQ(plan.status.state, "Created");
  int events = 0;
  for (const Event& e : plan.events) events += e.reason == "Unschedulable";
  EXPECT_EQ(events, 1);

  // Planned again with that status: no second event, nothing changes.
  api::TrainingJob job = GangJob();
  job.status = plan.status;
  Plan again = PlanJob(job, Waiting(4), Input());
  EXPECT_FALSE(again.status_changed);
  for (const Event& e : again.events) EXPECT_NE(e.reason, "Unschedulable");

  // Once every pod is placed, the condition turns False.
  Plan placed = PlanJob(job, Waiting(0), Input());
  c = placed.status.Find(ConditionType::kUnschedulable);
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->status);
  EXPECT_EQ(c->reason, "PodsScheduled");
}

TEST(UnschedulableTest, WithoutAGangItCountsOnlyThePodsLeftOver) {
  Plan plan = PlanJob(Job(), Waiting(1), Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kUnschedulable));
  EXPECT_EQ(plan.status.Find(ConditionType::kUnschedulable)->message,
            "1 of 4 pods cannot be scheduled; tj-ps-0: 0/2 nodes are available: 2 Insufficient "
            "cpu.");
}

TEST(UnschedulableTest, NoConditionWhilePodsAreMerelyPending) {
  Plan plan = PlanJob(Job(), Waiting(0), Input());
  EXPECT_EQ(plan.status.Find(ConditionType::kUnschedulable), nullptr);
}

TEST(UnschedulableTest, ASuspendedJobIsNotUnschedulable) {
  api::TrainingJob job = GangJob();
  job.status = PlanJob(GangJob(), Waiting(4), Input()).status;
  job.spec.run_policy.suspend = true;
  Plan plan = PlanJob(job, Waiting(4), Input());
  ASSERT_NE(plan.status.Find(ConditionType::kUnschedulable), nullptr);
  EXPECT_FALSE(plan.status.Find(ConditionType::kUnschedulable)->status);
}

TEST(UnschedulableTest, AHugeSchedulerMessageIsCut) {
  ObservedChildren o = Waiting(1);
  o.pods[0].unschedulable = std::string(100'000, 'x');
  Plan plan = PlanJob(Job(), o, Input());
  ASSERT_TRUE(plan.status.IsTrue(ConditionType::kUnschedulable));
  EXPECT_LT(plan.status.Find(ConditionType::kUnschedulable)->message.size(), 1200u);
}

}  // namespace
}  // namespace kubetrain::planner
