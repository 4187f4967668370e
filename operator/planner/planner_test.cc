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

namespace kubetrain::controller {
namespace {

using api::ConditionType;
using api::ReplicaType;
using api::RestartPolicy;
using nlohmann::json;
using std::chrono::seconds;

const api::Time kNow{seconds(1'800'000'000)};

json Template(std::string image = "kubetrain-trainer") {
  return {{"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", image}}})}}}};
}

// tj in namespace ml: 2 PS + 2 workers, restartPolicy as given.
api::TrainingJob Job(RestartPolicy policy = RestartPolicy::kOnFailure) {
  api::TrainingJob job;
  job.metadata.name = "tj";
  job.metadata.namespace_ = "ml";
  job.metadata.uid = "job-uid";
  job.metadata.generation = 3;
  // Most tests here predate spec.serviceMode; JobWide has its own tests below.
  job.spec.service_mode = api::ServiceMode::kPerReplica;
  for (ReplicaType t : {ReplicaType::kPS, ReplicaType::kWorker}) {
    api::ReplicaSpec& r = job.spec.replica_specs[t];
    r.replicas = 2;
    r.restart_policy = policy;
    r.pod_template = Template();
  }
  return job;
}

PlanInput Input(api::Time now = kNow) {
  PlanInput in;
  in.now = now;
  in.auth_key.fill(0xab);
  return in;
}

ObservedPod Pod(ReplicaType role, int32_t index, PodPhase phase,
                std::optional<int32_t> exit_code = std::nullopt) {
  ObservedPod p;
  p.name = api::ChildName("tj", role, index);
  p.uid = p.name + "-uid";
  p.role = role;
  p.index = index;
  p.phase = phase;
  p.exit_code = exit_code;
  if (exit_code) p.reason = *exit_code == 0 ? "Completed" : "Error";
  return p;
}

// Everything of tj exists: secret, services, and one pod per replica in `phase`.
ObservedChildren All(PodPhase phase) {
  ObservedChildren o;
  o.secret_exists = true;
  for (ReplicaType t : {ReplicaType::kPS, ReplicaType::kWorker}) {
    for (int i = 0; i < 2; ++i) {
      o.pods.push_back(Pod(t, i, phase));
      o.services.push_back({api::ChildName("tj", t, i), std::nullopt});
    }
  }
  return o;
}

ObservedPod& Find(ObservedChildren& o, const std::string& name) {
  for (ObservedPod& p : o.pods) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no pod " << name;
  return o.pods[0];
}

const json* Created(const Plan& plan, const std::string& kind, const std::string& name) {
  for (const ChildCreate& created : plan.creates) {
    const json& c = created.object;
    if (c["kind"] == kind && c["metadata"]["name"] == name) return &c;
  }
  return nullptr;
}

// Every create but the Secret (and the ConfigMap of a job that has one), which
// come with every batch of pods (checked by NewJobGetsSecretThenServicesThenPods
// and the PlannerClusterConfigTest cases).
std::vector<std::string> CreatedNames(const Plan& plan) {
  std::vector<std::string> out;
  for (const ChildCreate& created : plan.creates) {
    const json& c = created.object;
    if (c["kind"] == "ConfigMap" || c["kind"] == "Secret") continue;
    out.push_back(c["kind"].get<std::string>() + "/" + c["metadata"]["name"].get<std::string>());
  }
  return out;
}

std::vector<std::string> DeletedPods(const Plan& plan) {
  std::vector<std::string> out;
  for (const ChildRef& d : plan.deletes) {
    if (d.kind == ChildRef::Kind::kPod) out.push_back(d.name);
  }
  return out;
}

std::string EnvValue(const json& pod, const std::string& name, size_t container = 0) {
  for (const json& e : pod["spec"]["containers"][container]["env"]) {
    if (e["name"] == name) return e.contains("value") ? e["value"].get<std::string>() : e.dump();
  }
  return "<unset>";
}

// The variable `name` as the container's process sees it, resolved like the
// kubelet does: configMapKeyRef from the plan's ConfigMap, secretKeyRef to key
// "cluster" from the plan's Secret, then $(VAR) of the variables defined before it.
std::string ProcessEnv(const Plan& plan, const json& pod, const std::string& name,
                       size_t container = 0) {
  std::map<std::string, std::string> env;
  for (const json& e : pod["spec"]["containers"][container]["env"]) {
    std::string value;
    if (e.contains("value")) {
      const std::string text = e["value"];
      for (size_t i = 0; i < text.size(); ++i) {
        size_t close = text.find(')', i);
        if (text.compare(i, 2, "$(") == 0 && close != std::string::npos &&
            env.count(text.substr(i + 2, close - i - 2))) {
          value += env[text.substr(i + 2, close - i - 2)];
          i = close;
        } else {
          value += text[i];
        }
      }
    } else if (e.contains("valueFrom") && e["valueFrom"].contains("configMapKeyRef")) {
      const json& ref = e["valueFrom"]["configMapKeyRef"];
      const json* cm = Created(plan, "ConfigMap", ref["name"]);
      if (cm == nullptr) return "<no ConfigMap " + ref["name"].get<std::string>() + ">";
      value = (*cm)["data"][ref["key"].get<std::string>()];
    } else if (e.contains("valueFrom") && e["valueFrom"].contains("secretKeyRef") &&
               e["valueFrom"]["secretKeyRef"]["key"] == "cluster") {
      const json& ref = e["valueFrom"]["secretKeyRef"];
      const json* secret = Created(plan, "Secret", ref["name"]);
      if (secret == nullptr) return "<no Secret " + ref["name"].get<std::string>() + ">";
      value = (*secret)["stringData"]["cluster"];
    } else {
      value = e.dump();
    }
    env[e["name"]] = value;
  }
  return env.count(name) ? env[name] : "<unset>";
}

const api::Condition* Cond(const Plan& plan, ConditionType t) {
  return plan.status.Find(t);
}

// Feeds a plan's status back, as the executor would after writing it.
api::TrainingJob After(api::TrainingJob job, const Plan& plan) {
  job.status = plan.status;
  return job;
}

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

// ---- disruptions ------------------------------------------------------

// A pod the kubelet evicted for node pressure, as the apiserver serves it.
ObservedPod Evicted(ReplicaType role, int32_t index) {
  ObservedPod p = Pod(role, index, PodPhase::kFailed);
  p.reason = "Evicted";
  p.message = "The node was low on resource: memory.";
  p.disruption = "Evicted";
  return p;
}

const api::ReplicaStatus& Worker(const Plan& plan) {
  return plan.status.replica_statuses.at(ReplicaType::kWorker);
}

const Event* EventWith(const Plan& plan, const std::string& reason) {
  for (const Event& e : plan.events) {
    if (e.reason == reason) return &e;
  }
  return nullptr;
}

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

// Issue 27 item 13: after training the evaluator runs alone; a replacement in
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

// What the trainer's coordinator writes to its termination message.
constexpr char kTrainerMetrics[] =
    R"({"task":"worker-0","steps":400,"train_loss":0.45,"samples_per_second":5120.5,)"
    R"("eval":{"examples":2000,"log_loss":0.51,"accuracy":0.77,"auc":0.757},"target_reached":true})"
    "\n";

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

}  // namespace
}  // namespace kubetrain::controller

namespace kubetrain::controller {
namespace {

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
}  // namespace kubetrain::controller
