#include "operator/planner/planner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "operator/api/json.h"
#include "operator/api/sweep.h"
#include "operator/api/validation.h"
#include "operator/api/yaml.h"
#include "operator/planner/children.h"
#include "operator/planner/planner_test_util.h"

namespace kubetrain::planner {
namespace {

using namespace planner_testing;  // NOLINT(google-build-using-namespace): the tests' vocabulary

// ---- What gets created -------------------------------------------------------

// Executors act on a create's ref and never parse the object back: the two must agree.
TEST(PlannerCreateTest, EveryCreateCarriesItsKindNameAndReplica) {
  PlanInput in = Input();
  in.network_policy = true;
  Plan plan = PlanJob(Job(), {}, in);
  ASSERT_EQ(plan.creates.size(), 10u);
  const std::map<ChildRef::Kind, std::string> kinds = {
      {ChildRef::Kind::kPod, "Pod"},
      {ChildRef::Kind::kService, "Service"},
      {ChildRef::Kind::kSecret, "Secret"},
      {ChildRef::Kind::kConfigMap, "ConfigMap"},
      {ChildRef::Kind::kNetworkPolicy, "NetworkPolicy"}};
  for (const ChildCreate& c : plan.creates) {
    EXPECT_EQ(c.object["kind"], kinds.at(c.ref.kind)) << c.ref.name;
    EXPECT_EQ(c.object["metadata"]["name"], c.ref.name);
    const json& labels = c.object["metadata"]["labels"];
    if (c.ref.kind == ChildRef::Kind::kPod || c.ref.kind == ChildRef::Kind::kService) {
      ASSERT_TRUE(c.ref.role.has_value()) << c.ref.name;
      EXPECT_EQ(labels["kubetrain.io/replica-type"], api::Role(*c.ref.role).lower) << c.ref.name;
      EXPECT_EQ(labels["kubetrain.io/replica-index"], std::to_string(c.ref.index)) << c.ref.name;
      EXPECT_EQ(c.ref.name, api::ChildName("tj", *c.ref.role, c.ref.index));
    } else {
      EXPECT_FALSE(c.ref.role.has_value()) << c.ref.name;
      EXPECT_FALSE(labels.contains("kubetrain.io/replica-type")) << c.ref.name;
    }
  }
}

TEST(PlannerCreateTest, PodDeletesCarryTheirReplica) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-1") = Pod(ReplicaType::kWorker, 1, PodPhase::kFailed, 137);
  Plan plan = PlanJob(Job(), o, Input());
  ASSERT_EQ(plan.deletes.size(), 1u);
  EXPECT_EQ(plan.deletes[0],
            (ChildRef{ChildRef::Kind::kPod, "tj-worker-1", ReplicaType::kWorker, 1}));
}

TEST(PlannerCreateTest, NewJobGetsSecretThenServicesThenPods) {
  Plan plan = PlanJob(Job(), {}, Input());
  ASSERT_EQ(plan.creates.size(), 9u);
  EXPECT_EQ(plan.creates[0].object["kind"], "Secret");
  EXPECT_EQ(plan.creates[0].object["metadata"]["name"], "tj-auth-job-uid");
  EXPECT_EQ(CreatedNames(plan),
            (std::vector<std::string>{"Service/tj-ps-0", "Service/tj-ps-1", "Service/tj-worker-0",
                                      "Service/tj-worker-1", "Pod/tj-ps-0", "Pod/tj-ps-1",
                                      "Pod/tj-worker-0", "Pod/tj-worker-1"}));
  EXPECT_TRUE(plan.deletes.empty());
  EXPECT_TRUE(plan.status_changed);
  EXPECT_EQ(plan.status.state, "Created");
  EXPECT_EQ(plan.status.start_time, kNow);
  EXPECT_EQ(plan.status.observed_generation, 3);
  ASSERT_NE(Cond(plan, ConditionType::kCreated), nullptr);
  EXPECT_TRUE(Cond(plan, ConditionType::kCreated)->status);
  EXPECT_EQ(Cond(plan, ConditionType::kCreated)->last_transition_time, kNow);
  EXPECT_FALSE(plan.requeue_after.has_value());
}

// ---- The NetworkPolicy ------------------------------------------------------------

TEST(PlannerNetworkPolicyTest, ComesAfterTheSecretAndBeforeEveryPodOnlyWhenAsked) {
  EXPECT_EQ(Created(PlanJob(Job(), {}, Input()), "NetworkPolicy", "tj-training-job-uid"), nullptr);
  PlanInput in = Input();
  in.network_policy = true;
  Plan plan = PlanJob(Job(), {}, in);
  ASSERT_GE(plan.creates.size(), 3u);
  EXPECT_EQ(plan.creates[0].ref.kind, ChildRef::Kind::kSecret);
  EXPECT_EQ(plan.creates[1].ref, (ChildRef{ChildRef::Kind::kNetworkPolicy, "tj-training-job-uid"}));
  EXPECT_EQ(plan.creates[2].ref.kind, ChildRef::Kind::kService);
  // Nothing else changes.
  std::vector<std::string> with = CreatedNames(plan);
  ASSERT_EQ(with[0], "NetworkPolicy/tj-training-job-uid");
  with.erase(with.begin());
  EXPECT_EQ(with, CreatedNames(PlanJob(Job(), {}, Input())));
}

// A policy the executor knows is there is not sent again with the pods.
TEST(PlannerNetworkPolicyTest, AKnownPolicyIsLeftOutOfThePlan) {
  PlanInput in = Input();
  in.network_policy = true;
  ObservedChildren observed;
  observed.network_policy_exists = true;
  Plan plan = PlanJob(Job(), observed, in);
  EXPECT_EQ(Created(plan, "NetworkPolicy", "tj-training-job-uid"), nullptr);
  EXPECT_EQ(CreatedNames(plan), CreatedNames(PlanJob(Job(), {}, Input())));
}

// What the policy admits: children_test.cc (JobNetworkPolicyTest).

TEST(PlannerCreateTest, PodCarriesLabelsOwnerAndTheEnvContract) {
  Plan plan = PlanJob(Job(), {}, Input());
  const json* pod = Created(plan, "Pod", "tj-worker-1");
  ASSERT_NE(pod, nullptr);
  EXPECT_EQ((*pod)["apiVersion"], "v1");
  EXPECT_EQ((*pod)["metadata"]["namespace"], "ml");
  EXPECT_EQ((*pod)["metadata"]["labels"], json({{"kubetrain.io/job-name", "tj"},
                                                {"kubetrain.io/replica-type", "worker"},
                                                {"kubetrain.io/replica-index", "1"}}));
  EXPECT_EQ((*pod)["metadata"]["ownerReferences"],
            json::parse(R"([{"apiVersion": "kubetrain.io/v1alpha1", "kind": "TrainingJob",
                "name": "tj", "uid": "job-uid", "controller": true,
                "blockOwnerDeletion": true}])"));
  EXPECT_EQ((*pod)["spec"]["restartPolicy"], "Never");
  const std::string cluster =
      R"({"ps":["tj-ps-0.ml.svc.cluster.local:2222","tj-ps-1.ml.svc.cluster.local:2222"],)"
      R"("worker":["tj-worker-0.ml.svc.cluster.local:2222","tj-worker-1.ml.svc.cluster.local:2222"]})";
  EXPECT_EQ(ProcessEnv(plan, *pod, "CLUSTER_CONFIG"), cluster);
  EXPECT_EQ(EnvValue(*pod, "POD_NAME"), "worker-1");
  EXPECT_EQ(
      ProcessEnv(plan, *pod, "TF_CONFIG"),
      R"({"cluster":)" + cluster + R"(,"environment":"cloud","task":{"index":1,"type":"worker"}})");
  EXPECT_EQ(
      EnvValue(*pod, "KUBETRAIN_AUTH_KEY"),
      R"({"name":"KUBETRAIN_AUTH_KEY","valueFrom":{"secretKeyRef":{"key":"key","name":"tj-auth-job-uid"}}})");
  EXPECT_EQ((*pod)["spec"]["containers"][0]["ports"],
            json::parse(R"([{"containerPort": 2222, "name": "kubetrain", "protocol": "TCP"},
                            {"containerPort": 9090, "name": "metrics", "protocol": "TCP"}])"));
  EXPECT_EQ((*pod)["spec"]["containers"][0]["image"], "kubetrain-trainer");
}

// A pod carried the whole host list twice (CLUSTER_CONFIG and TF_CONFIG), so it
// grew with the job. Now the list is in the job's ConfigMap once and the pod's
// size does not depend on the number of replicas.
TEST(PlannerCreateTest, ATemplateSettingContractVariablesGetsAWarning) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kWorker].pod_template = json::parse(
      R"({"spec": {"containers": [{"name": "trainer", "env": [{"name": "TF_CONFIG", "value": "{}"},
          {"name": "LR", "value": "0.1"}, {"name": "POD_NAME", "value": "me"}]}]}})");
  Plan plan = PlanJob(job, {}, Input());
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].type, EventType::kWarning);
  EXPECT_EQ(plan.events[0].reason, "EnvOverridden");
  EXPECT_EQ(plan.events[0].message,
            "spec.replicaSpecs.Worker.template sets TF_CONFIG, POD_NAME: replaced by the "
            "operator's values (the workload contract)");
  EXPECT_EQ(ProcessEnv(plan, *Created(plan, "Pod", "tj-worker-0"), "POD_NAME"), "worker-0");
}

TEST(PlannerScaleTest, PodSizeDoesNotGrowWithTheJob) {
  auto pod_size = [](int32_t workers) {
    api::TrainingJob job = Job();
    job.spec.replica_specs[ReplicaType::kWorker].replicas = workers;
    Plan plan = PlanJob(job, {}, Input());
    const json* pod = Created(plan, "Pod", "tj-worker-1");
    EXPECT_NE(pod, nullptr);
    return pod == nullptr ? size_t{0} : pod->dump().size();
  };
  EXPECT_EQ(pod_size(2), pod_size(400));
}

TEST(PlannerScaleTest, TfConfigExpandsToTheContractByteForByte) {
  Plan plan = PlanJob(Job(), {}, Input());
  ClusterSpec cluster = BuildClusterSpec(Job(), "cluster.local", api::ServiceMode::kPerReplica);
  for (const auto& [role, index] :
       {std::pair{ReplicaType::kPS, 1}, std::pair{ReplicaType::kWorker, 0}}) {
    const json* pod = Created(plan, "Pod", api::ChildName("tj", role, index));
    ASSERT_NE(pod, nullptr);
    EXPECT_EQ(ProcessEnv(plan, *pod, "TF_CONFIG"), TfConfigJson(cluster, role, index));
    EXPECT_EQ(ProcessEnv(plan, *pod, "CLUSTER_CONFIG"), ClusterConfigJson(cluster));
  }
  EXPECT_EQ(Created(plan, "ConfigMap", "tj-cluster"), nullptr);  // in the Secret
  const json* secret = Created(plan, "Secret", "tj-auth-job-uid");
  ASSERT_NE(secret, nullptr);
  EXPECT_EQ((*secret)["metadata"]["ownerReferences"][0]["uid"], "job-uid");
  EXPECT_EQ((*secret)["metadata"]["labels"], json({{"kubetrain.io/job-name", "tj"}}));
}

TEST(PlannerScaleTest, PodsAreCreatedInBoundedBatches) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 1200;
  ObservedChildren o;
  o.secret_exists = true;
  size_t total = 0;
  PlanInput in = Input();
  in.max_pod_creates = kMaxPodCreatesPerPlan;  // as the Kubernetes executor plans
  EXPECT_EQ(CreatedNames(PlanJob(job, o, Input())).size(), 2u + 1200u + 1202u);  // 0: all
  for (int round = 0; round < 5 && total < 1202; ++round) {
    in.now = kNow + seconds(round);
    Plan plan = PlanJob(job, o, in);
    job = After(job, plan);
    size_t pods = 0;
    for (const ChildCreate& created : plan.creates) {
      const json& c = created.object;
      if (c["kind"] == "Service") o.services.push_back({c["metadata"]["name"], std::nullopt});
      if (c["kind"] != "Pod") continue;
      ++pods;
      auto labels = c["metadata"]["labels"].get<std::map<std::string, std::string>>();
      auto replica = ReplicaFromLabels(labels);
      ObservedPod p = Pod(replica->first, replica->second, PodPhase::kPending);
      o.pods.push_back(p);
    }
    EXPECT_LE(pods, kMaxPodCreatesPerPlan);
    total += pods;
    if (total < 1202) {
      ASSERT_TRUE(plan.requeue_after.has_value());
      EXPECT_EQ(*plan.requeue_after, seconds(1));
    }
  }
  EXPECT_EQ(total, 1202u);  // 2 PS + 1200 workers, in three plans
}

TEST(PlannerCreateTest, ClusterListsChiefButNotEvaluatorsAndUsesPortAndDomain) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kChief].pod_template = Template();
  job.spec.replica_specs[ReplicaType::kEvaluator].pod_template = Template();
  job.spec.replica_specs.erase(ReplicaType::kPS);
  job.spec.port = 3000;
  job.spec.cluster_domain = "corp.example";
  Plan plan = PlanJob(job, {}, Input());
  const json* eval = Created(plan, "Pod", "tj-evaluator-0");
  ASSERT_NE(eval, nullptr);
  const std::string cluster =
      R"({"chief":["tj-chief-0.ml.svc.corp.example:3000"],)"
      R"("worker":["tj-worker-0.ml.svc.corp.example:3000","tj-worker-1.ml.svc.corp.example:3000"]})";
  EXPECT_EQ(ProcessEnv(plan, *eval, "CLUSTER_CONFIG"), cluster);
  EXPECT_EQ(EnvValue(*eval, "POD_NAME"), "evaluator-0");
  EXPECT_EQ(json::parse(ProcessEnv(plan, *eval, "TF_CONFIG"))["task"],
            json({{"type", "evaluator"}, {"index", 0}}));
  EXPECT_NE(Created(plan, "Service", "tj-evaluator-0"), nullptr);
}

TEST(PlannerCreateTest, DefaultDomainComesFromTheInputAndNamespaceDefaults) {
  api::TrainingJob job = Job();
  job.metadata.namespace_.clear();
  PlanInput in = Input();
  in.default_cluster_domain = "k8s.local";
  Plan plan = PlanJob(job, {}, in);
  const json* pod = Created(plan, "Pod", "tj-ps-0");
  ASSERT_NE(pod, nullptr);
  EXPECT_EQ(json::parse(ProcessEnv(plan, *pod, "CLUSTER_CONFIG"))["ps"][0],
            "tj-ps-0.default.svc.k8s.local:2222");
}

TEST(PlannerCreateTest, ClusterOverrideReplacesDnsNames) {
  PlanInput in = Input();
  in.cluster_override = ClusterSpec{{ReplicaType::kPS, {"127.0.0.1:5000", "127.0.0.1:5001"}},
                                    {ReplicaType::kWorker, {"127.0.0.1:5002", "127.0.0.1:5003"}}};
  Plan plan = PlanJob(Job(), {}, in);
  EXPECT_EQ(
      ProcessEnv(plan, *Created(plan, "Pod", "tj-ps-0"), "CLUSTER_CONFIG"),
      R"({"ps":["127.0.0.1:5000","127.0.0.1:5001"],"worker":["127.0.0.1:5002","127.0.0.1:5003"]})");
}

TEST(PlannerCreateTest, EnvGoesToTheTrainerContainerElseTheFirst) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kPS].pod_template = json::parse(
      R"({"spec": {"containers": [{"name": "sidecar"}, {"name": "trainer", "ports": [{"containerPort": 2222}]}]}})");
  job.spec.replica_specs[ReplicaType::kWorker].pod_template =
      json::parse(R"({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}})");
  Plan plan = PlanJob(job, {}, Input());
  const json& ps = *Created(plan, "Pod", "tj-ps-0");
  EXPECT_FALSE(ps["spec"]["containers"][0].contains("env"));
  EXPECT_EQ(EnvValue(ps, "POD_NAME", 1), "ps-0");
  // The template already exposes the port: it is not added twice (the metrics
  // port is).
  EXPECT_EQ(ps["spec"]["containers"][1]["ports"].size(), 2u);
  const json& worker = *Created(plan, "Pod", "tj-worker-0");
  EXPECT_EQ(EnvValue(worker, "POD_NAME", 0), "worker-0");
  EXPECT_FALSE(worker["spec"]["containers"][1].contains("env"));
}

TEST(PlannerCreateTest, TemplateEnvIsKeptButOurVariablesWin) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kWorker].pod_template = json::parse(R"({"spec":
      {"containers": [{"name": "trainer", "env": [{"name": "LR", "value": "0.1"},
                                                  {"name": "POD_NAME", "value": "stale"}]}]}})");
  Plan plan = PlanJob(job, {}, Input());
  const json& pod = *Created(plan, "Pod", "tj-worker-0");
  EXPECT_EQ(EnvValue(pod, "LR"), "0.1");
  EXPECT_EQ(EnvValue(pod, "POD_NAME"), "worker-0");
  EXPECT_EQ(pod["spec"]["containers"][0]["env"].size(), 5u);
}

TEST(PlannerCreateTest, TemplateRestartPolicyIsForcedToNeverWithAWarning) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kWorker].pod_template["spec"]["restartPolicy"] = "OnFailure";
  job.spec.replica_specs[ReplicaType::kPS].pod_template["spec"]["restartPolicy"] = "Never";
  Plan plan = PlanJob(job, {}, Input());
  EXPECT_EQ((*Created(plan, "Pod", "tj-worker-0"))["spec"]["restartPolicy"], "Never");
  ASSERT_EQ(plan.events.size(), 1u);  // once per role, not per pod; none for PS
  EXPECT_EQ(plan.events[0].type, EventType::kWarning);
  EXPECT_EQ(plan.events[0].reason, "RestartPolicyOverridden");
  EXPECT_NE(plan.events[0].message.find("spec.replicaSpecs.Worker.template.spec.restartPolicy"),
            std::string::npos);
}

TEST(PlannerCreateTest, TemplateLabelsAndAnnotationsAreKeptSchedulingPolicyApplied) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kWorker].pod_template["metadata"] = json::parse(
      R"({"labels": {"team": "ads", "kubetrain.io/job-name": "spoof"}, "annotations": {"a": "b"}})");
  job.spec.run_policy.scheduling_policy = api::SchedulingPolicy{};
  job.spec.run_policy.scheduling_policy->scheduler_name = "volcano";
  job.spec.run_policy.scheduling_policy->priority_class_name = "high";
  Plan plan = PlanJob(job, {}, Input());
  const json& pod = *Created(plan, "Pod", "tj-worker-0");
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "ads");
  EXPECT_EQ(pod["metadata"]["labels"]["kubetrain.io/job-name"], "tj");
  EXPECT_EQ(pod["metadata"]["annotations"]["a"], "b");
  EXPECT_EQ(pod["metadata"]["annotations"].size(), 2u);  // and kubetrain.io/spec-hash
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(pod["spec"]["priorityClassName"], "high");
}

TEST(PlannerCreateTest, ServiceIsHeadlessAndSelectsItsReplica) {
  Plan plan = PlanJob(Job(), {}, Input());
  const json& svc = *Created(plan, "Service", "tj-ps-1");
  EXPECT_EQ(svc["spec"], json::parse(R"({"clusterIP": "None", "publishNotReadyAddresses": true,
      "selector": {"kubetrain.io/job-name": "tj", "kubetrain.io/replica-type": "ps",
                   "kubetrain.io/replica-index": "1"},
      "ports": [{"name": "kubetrain", "port": 2222, "targetPort": 2222, "protocol": "TCP"}]})"));
  EXPECT_EQ(svc["metadata"]["ownerReferences"][0]["uid"], "job-uid");
}

TEST(PlannerServiceModeTest, JobWideMakesOneServiceAndPodsWithHostnameAndSubdomain) {
  api::TrainingJob job = Job();
  job.spec.service_mode = api::ServiceMode::kJobWide;
  Plan plan = PlanJob(job, {}, Input());
  std::vector<std::string> services;
  for (const ChildCreate& c : plan.creates) {
    if (c.ref.kind == ChildRef::Kind::kService) services.push_back(c.ref.name);
  }
  EXPECT_EQ(services, std::vector<std::string>{"tj"});
  const json& svc = *Created(plan, "Service", "tj");
  EXPECT_EQ(svc["spec"], json::parse(R"({"clusterIP": "None", "publishNotReadyAddresses": true,
      "selector": {"kubetrain.io/job-name": "tj"},
      "ports": [{"name": "kubetrain", "port": 2222, "targetPort": 2222, "protocol": "TCP"}]})"));
  EXPECT_EQ(svc["metadata"]["ownerReferences"][0]["uid"], "job-uid");
  const json& pod = *Created(plan, "Pod", "tj-worker-1");
  EXPECT_EQ(pod["spec"]["hostname"], "tj-worker-1");
  EXPECT_EQ(pod["spec"]["subdomain"], "tj");
  EXPECT_EQ(
      ProcessEnv(plan, pod, "CLUSTER_CONFIG"),
      R"({"ps":["tj-ps-0.tj.ml.svc.cluster.local:2222","tj-ps-1.tj.ml.svc.cluster.local:2222"],)"
      R"("worker":["tj-worker-0.tj.ml.svc.cluster.local:2222",)"
      R"("tj-worker-1.tj.ml.svc.cluster.local:2222"]})");
}

TEST(PlannerServiceModeTest, PerReplicaPodsHaveNoHostnameOrSubdomain) {
  Plan plan = PlanJob(Job(), {}, Input());
  const json& pod = *Created(plan, "Pod", "tj-worker-1");
  EXPECT_FALSE(pod["spec"].contains("hostname"));
  EXPECT_FALSE(pod["spec"].contains("subdomain"));
}

TEST(PlannerServiceModeTest, UnsetIsJobWideForANewJob) {
  api::TrainingJob job = Job();
  job.spec.service_mode.reset();
  EXPECT_EQ(EffectiveServiceMode(job, {}), api::ServiceMode::kJobWide);
  Plan plan = PlanJob(job, {}, Input());
  EXPECT_NE(Created(plan, "Service", "tj"), nullptr);
  EXPECT_EQ(Created(plan, "Service", "tj-ps-0"), nullptr);
}

TEST(PlannerServiceModeTest, UnsetKeepsPerReplicaForAJobThatHasPerReplicaServices) {
  // Started by an operator that made a Service per replica: its running pods
  // keep their host names (and spec hashes), so none is recreated.
  api::TrainingJob job = Job();
  ObservedChildren before = All(PodPhase::kRunning);
  const std::string cluster =
      ClusterConfigJson(BuildClusterSpec(job, "cluster.local", api::ServiceMode::kPerReplica));
  for (ObservedPod& p : before.pods) {
    p.spec_hash = SpecHash(job.spec.replica_specs.at(p.role), cluster);
  }
  job.spec.service_mode.reset();
  EXPECT_EQ(EffectiveServiceMode(job, before), api::ServiceMode::kPerReplica);
  Plan plan = PlanJob(job, before, Input());
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_TRUE(plan.deletes.empty());  // no pod outdated, no Service replaced
}

TEST(PlannerServiceModeTest, JobWideDeletesPerReplicaServices) {
  // Switched while suspended, then resumed: the other mode's Services go.
  api::TrainingJob job = Job();
  job.spec.service_mode = api::ServiceMode::kJobWide;
  ObservedChildren o;
  o.services.push_back({"tj-ps-0", std::nullopt});
  o.services.push_back({"tj", std::nullopt});
  Plan plan = PlanJob(job, o, Input());
  EXPECT_EQ(plan.deletes, (std::vector<ChildRef>{{ChildRef::Kind::kService, "tj-ps-0"}}));
  EXPECT_EQ(Created(plan, "Service", "tj"), nullptr);
}

// tj (JobWide) with every pod of All(kPending): what the executor plans with
// services_when_running once its first plan created them.
struct ServiceWhenRunning {
  api::TrainingJob job = Job();
  ObservedChildren observed;
  PlanInput input = Input();

  ServiceWhenRunning() {
    job.spec.service_mode = api::ServiceMode::kJobWide;
    input.services_when_running = true;
    observed = All(PodPhase::kPending);
    observed.services.clear();
  }
  void Run(const std::string& name, api::Time since) {
    ObservedPod& pod = Find(observed, name);
    pod.phase = PodPhase::kRunning;
    pod.running_since = since;
  }
  std::vector<std::string> Services(const Plan& plan) const {
    std::vector<std::string> out;
    for (const ChildCreate& c : plan.creates) {
      if (c.ref.kind == ChildRef::Kind::kService) out.push_back(c.ref.name);
    }
    return out;
  }
};

TEST(PlannerServiceWhenRunningTest, ANewJobsPodsComeWithoutTheirService) {
  ServiceWhenRunning t;
  Plan plan = PlanJob(t.job, {}, t.input);
  EXPECT_TRUE(t.Services(plan).empty());
  EXPECT_NE(Created(plan, "Pod", "tj-worker-1"), nullptr);
  EXPECT_FALSE(plan.requeue_after);  // the pods' updates wake it, no timer
  // Without it (render, the local runner), the Service comes with them.
  t.input.services_when_running = false;
  EXPECT_EQ(t.Services(PlanJob(t.job, {}, t.input)), std::vector<std::string>{"tj"});
}

TEST(PlannerServiceWhenRunningTest, TheJobWideServiceComesOnceEveryPodRuns) {
  ServiceWhenRunning t;
  EXPECT_TRUE(t.Services(PlanJob(t.job, t.observed, t.input)).empty());
  t.Run("tj-ps-0", kNow);
  t.Run("tj-ps-1", kNow);
  t.Run("tj-worker-0", kNow);
  Plan plan = PlanJob(t.job, t.observed, t.input);
  EXPECT_TRUE(t.Services(plan).empty());
  EXPECT_EQ(plan.requeue_after, kServiceGrace);  // the fallback's timer
  t.Run("tj-worker-1", kNow + seconds(2));
  t.input.now = kNow + seconds(2);
  plan = PlanJob(t.job, t.observed, t.input);
  EXPECT_EQ(t.Services(plan), std::vector<std::string>{"tj"});
  EXPECT_EQ(plan.creates.size(), 1u);
}

TEST(PlannerServiceWhenRunningTest, APodStuckPendingDelaysTheServiceByTheGraceAtMost) {
  ServiceWhenRunning t;
  t.Run("tj-ps-0", kNow - seconds(4));
  t.Run("tj-worker-0", kNow - seconds(3));
  Plan plan = PlanJob(t.job, t.observed, t.input);
  EXPECT_TRUE(t.Services(plan).empty());
  EXPECT_EQ(plan.requeue_after, kServiceGrace - seconds(4));
  t.input.now = kNow - seconds(4) + kServiceGrace;
  EXPECT_EQ(t.Services(PlanJob(t.job, t.observed, t.input)), std::vector<std::string>{"tj"});
}

TEST(PlannerServiceWhenRunningTest, AStartTimeAheadOfTheOperatorsClockWaitsForNothing) {
  ServiceWhenRunning t;
  t.Run("tj-ps-0", kNow + seconds(3600));  // its node's clock is an hour ahead
  EXPECT_EQ(t.Services(PlanJob(t.job, t.observed, t.input)), std::vector<std::string>{"tj"});
}

TEST(PlannerServiceWhenRunningTest, AMissingServiceOfARunningJobComesAtOnce) {
  // Deleted behind the job's back, or a replica in crash-loop backoff while
  // the others run: the peers must resolve one another again.
  ServiceWhenRunning t;
  for (ObservedPod& p : t.observed.pods) t.Run(p.name, kNow - seconds(600));
  EXPECT_EQ(t.Services(PlanJob(t.job, t.observed, t.input)), std::vector<std::string>{"tj"});
  std::erase_if(t.observed.pods, [](const ObservedPod& p) { return p.name == "tj-worker-1"; });
  EXPECT_EQ(t.Services(PlanJob(t.job, t.observed, t.input)), std::vector<std::string>{"tj"});
}

TEST(PlannerServiceWhenRunningTest, APerReplicaServiceComesOnceItsPodRuns) {
  ServiceWhenRunning t;
  t.job.spec.service_mode = api::ServiceMode::kPerReplica;
  EXPECT_TRUE(t.Services(PlanJob(t.job, {}, t.input)).empty());
  t.Run("tj-worker-1", kNow);
  Find(t.observed, "tj-ps-0").phase = PodPhase::kFailed;
  Plan plan = PlanJob(t.job, t.observed, t.input);
  EXPECT_EQ(t.Services(plan), (std::vector<std::string>{"tj-ps-0", "tj-worker-1"}));
}

TEST(PlannerStatusTest, OnlyLiveCountsDifferIsTrueForActiveAndRunningAlone) {
  api::TrainingJobStatus a;
  a.state = "Created";
  a.replica_statuses[ReplicaType::kWorker].active = 1;
  api::TrainingJobStatus b = a;
  EXPECT_FALSE(OnlyLiveCountsDiffer(a, b));  // nothing differs
  b.replica_statuses[ReplicaType::kWorker].active = 2;
  b.running = 1;
  EXPECT_TRUE(OnlyLiveCountsDiffer(a, b));
  api::TrainingJobStatus c = b;
  c.state = "Running";
  EXPECT_FALSE(OnlyLiveCountsDiffer(a, c));
  c = b;
  c.replica_statuses[ReplicaType::kWorker].restarts = 1;
  EXPECT_FALSE(OnlyLiveCountsDiffer(a, c));
  c = b;
  c.replica_statuses[ReplicaType::kPS].active = 1;  // a new role
  EXPECT_FALSE(OnlyLiveCountsDiffer(a, c));
}

// Pods placed one by one change the Unschedulable message ("3 of 5 pods ..."),
// not what the job is: that waits like a count. Turning it True or False does not.
TEST(PlannerStatusTest, OnlyLiveCountsDifferCoversTheUnschedulableMessageAlone) {
  api::TrainingJobStatus a;
  a.conditions.push_back({ConditionType::kUnschedulable, true, "Unschedulable",
                          "5 of 5 pods cannot be scheduled", kNow});
  api::TrainingJobStatus b = a;
  b.conditions[0].message = "3 of 5 pods cannot be scheduled";
  b.running = 2;
  EXPECT_TRUE(OnlyLiveCountsDiffer(a, b));
  api::TrainingJobStatus c = a;
  c.conditions[0].status = false;
  c.conditions[0].reason = "PodsScheduled";
  EXPECT_FALSE(OnlyLiveCountsDiffer(a, c));
  api::TrainingJobStatus none;
  EXPECT_FALSE(OnlyLiveCountsDiffer(none, a));  // turning True is news
}

TEST(PlannerStatusTest, OnlyPendingCountsDifferIsActiveAlone) {
  api::TrainingJobStatus a;
  a.replica_statuses[ReplicaType::kWorker].active = 0;
  api::TrainingJobStatus b = a;
  EXPECT_FALSE(OnlyPendingCountsDiffer(a, b));
  b.replica_statuses[ReplicaType::kWorker].active = 4;  // pods created, Pending
  EXPECT_TRUE(OnlyPendingCountsDiffer(a, b));
  EXPECT_TRUE(OnlyLiveCountsDiffer(a, b));
  b.running = 1;  // one runs: the RUNNING column moves
  EXPECT_FALSE(OnlyPendingCountsDiffer(a, b));
  EXPECT_TRUE(OnlyLiveCountsDiffer(a, b));
}

TEST(PlannerCreateTest, SecretHoldsTheInputKeyAsHex) {
  Plan plan = PlanJob(Job(), {}, Input());
  const json& secret = *Created(plan, "Secret", "tj-auth-job-uid");
  EXPECT_EQ(secret["type"], "Opaque");
  // base64("abab...ab"): the 32 bytes 0xab as 64 hex characters.
  EXPECT_EQ(
      secret["data"]["key"],
      "YWJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiYWJhYg==");
  EXPECT_EQ(secret["metadata"]["labels"], json({{"kubetrain.io/job-name", "tj"}}));
  EXPECT_EQ(secret["metadata"]["ownerReferences"][0]["controller"], true);
}

TEST(PlannerCreateTest, AuthKeyTextIsLowerCaseHex) {
  std::array<uint8_t, 32> key{};
  key[0] = 0x0f;
  key[31] = 0xa0;
  EXPECT_EQ(AuthKeyText(key), "0f" + std::string(60, '0') + "a0");
}

TEST(PlannerCreateTest, JobWithoutUidGetsNoOwnerReferences) {
  api::TrainingJob job = Job();
  job.metadata.uid.clear();
  Plan plan = PlanJob(job, {}, Input());
  for (const ChildCreate& c : plan.creates) {
    EXPECT_FALSE(c.object["metadata"].contains("ownerReferences"));
  }
}

TEST(PlannerCreateTest, SamePlanForTheSameInput) {
  Plan a = PlanJob(Job(), {}, Input());
  Plan b = PlanJob(Job(), {}, Input());
  EXPECT_EQ(a.creates, b.creates);
  EXPECT_EQ(a.status, b.status);
}

TEST(PlannerCreateTest, PodRecordsTheHashOfItsSpec) {
  Plan plan = PlanJob(Job(), {}, Input());
  const json& ps = *Created(plan, "Pod", "tj-ps-0");
  const std::string hash = ps["metadata"]["annotations"]["kubetrain.io/spec-hash"];
  EXPECT_EQ(hash.size(), 16u);
  EXPECT_EQ((*Created(plan, "Pod", "tj-ps-1"))["metadata"]["annotations"]["kubetrain.io/spec-hash"],
            hash);  // same template, same cluster
  api::TrainingJob other = Job();
  other.spec.port = 3000;
  Plan moved = PlanJob(other, {}, Input());
  EXPECT_NE(
      (*Created(moved, "Pod", "tj-ps-0"))["metadata"]["annotations"]["kubetrain.io/spec-hash"],
      hash);
}

// All(phase), each pod annotated with the hash `job` gives it now.
ObservedChildren AllBuiltFrom(const api::TrainingJob& job, PodPhase phase) {
  Plan plan = PlanJob(job, {}, Input());
  ObservedChildren o = All(phase);
  for (ObservedPod& p : o.pods) {
    if (const json* pod = Created(plan, "Pod", p.name)) {
      p.spec_hash = (*pod)["metadata"]["annotations"]["kubetrain.io/spec-hash"];
    }
  }
  return o;
}

TEST(PlannerReshapeTest, PodsOfTheCurrentSpecAreKept) {
  Plan plan = PlanJob(Job(), AllBuiltFrom(Job(), PodPhase::kRunning), Input());
  EXPECT_TRUE(plan.deletes.empty());
  EXPECT_EQ(plan.status.state, "Running");
}

TEST(PlannerReshapeTest, LivePodsOfAnEarlierSpecAreRecreatedWithoutCountingRestarts) {
  // Suspend, reshape and resume coalesced into one observed update: the running
  // pods still carry the old CLUSTER_CONFIG.
  api::TrainingJob before = Job();
  api::TrainingJob after = Job();
  after.spec.replica_specs[ReplicaType::kWorker].replicas = 3;
  ObservedChildren o = AllBuiltFrom(before, PodPhase::kRunning);
  Plan plan = PlanJob(after, o, Input());
  EXPECT_EQ(DeletedPods(plan),
            (std::vector<std::string>{"tj-ps-0", "tj-ps-1", "tj-worker-0", "tj-worker-1"}));
  EXPECT_EQ(CreatedNames(plan),
            (std::vector<std::string>{"Service/tj-worker-2", "Pod/tj-worker-2"}));
  EXPECT_EQ(plan.status.replica_statuses.at(ReplicaType::kWorker).restarts, 0);
  ASSERT_EQ(plan.events.size(), 2u);
  EXPECT_EQ(plan.events[0].reason, "ReplicaOutdated");
}

TEST(PlannerReshapeTest, PodsWithoutAHashAreLeftAlone) {
  api::TrainingJob after = Job();
  after.spec.port = 3000;
  Plan plan = PlanJob(after, All(PodPhase::kRunning), Input());
  EXPECT_TRUE(plan.deletes.empty());
}

// ---- Lagging cache ------------------------------------------------------------

TEST(PlannerCacheTest, ObservedChildrenAreNeverCreatedAgain) {
  Plan plan = PlanJob(Job(), All(PodPhase::kPending), Input());
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_TRUE(plan.deletes.empty());
}

TEST(PlannerCacheTest, OnlyTheMissingChildrenAreCreated) {
  ObservedChildren o = All(PodPhase::kPending);
  o.pods.erase(o.pods.begin() + 1);  // tj-ps-1
  o.services.pop_back();             // tj-worker-1
  Plan plan = PlanJob(Job(), o, Input());
  EXPECT_EQ(CreatedNames(plan), (std::vector<std::string>{"Service/tj-worker-1", "Pod/tj-ps-1"}));
}

TEST(PlannerCacheTest, APodBeingDeletedBlocksItsReplacement) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-worker-0").deletion_timestamp = kNow;
  Plan plan = PlanJob(Job(), o, Input());
  EXPECT_TRUE(plan.creates.empty());
  EXPECT_TRUE(plan.deletes.empty());
}

TEST(PlannerCacheTest, UnchangedWorldLeavesStatusUnchanged) {
  api::TrainingJob job = Job();
  Plan first = PlanJob(job, All(PodPhase::kRunning), Input());
  EXPECT_TRUE(first.status_changed);
  Plan second = PlanJob(After(job, first), All(PodPhase::kRunning), Input(kNow + seconds(30)));
  EXPECT_FALSE(second.status_changed);
  EXPECT_TRUE(second.events.empty());
}

// ---- Running ------------------------------------------------------------------

TEST(PlannerRunTest, AllReplicasRunningSetsRunning) {
  Plan plan = PlanJob(Job(), All(PodPhase::kRunning), Input());
  EXPECT_EQ(plan.status.state, "Running");
  EXPECT_TRUE(plan.status.IsTrue(ConditionType::kRunning));
  const api::ReplicaStatus& w = plan.status.replica_statuses.at(ReplicaType::kWorker);
  EXPECT_EQ(w.active, 2);
  EXPECT_EQ(w.succeeded, 0);
  EXPECT_EQ(w.failed, 0);
}

TEST(PlannerRunTest, PendingReplicasKeepStateCreated) {
  ObservedChildren o = All(PodPhase::kRunning);
  Find(o, "tj-ps-1").phase = PodPhase::kPending;
  Plan plan = PlanJob(Job(), o, Input());
  EXPECT_EQ(plan.status.state, "Created");
  EXPECT_FALSE(plan.status.IsTrue(ConditionType::kRunning));
}

TEST(PlannerRunTest, PodsOfRemovedReplicasAreDeleted) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 1;
  Plan plan = PlanJob(job, All(PodPhase::kRunning), Input());
  EXPECT_EQ(DeletedPods(plan), std::vector<std::string>{"tj-worker-1"});
  ASSERT_EQ(plan.deletes.size(), 2u);
  EXPECT_EQ(plan.deletes[1], (ChildRef{ChildRef::Kind::kService, "tj-worker-1"}));
}

}  // namespace
}  // namespace kubetrain::planner
