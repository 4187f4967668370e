#include "operator/planner/tfjob_v1.h"

#include <gtest/gtest.h>

#include "operator/api/json.h"
#include "operator/api/yaml.h"

namespace kubetrain::planner::tfjob_v1 {
namespace {

using nlohmann::json;

Shape Job(std::string ns, std::vector<Replica> replicas, bool dynamic = false) {
  return Shape{"test-tfjob", std::move(ns), std::move(replicas), dynamic};
}

TEST(TFJobV1Test, ChildNamesAreJobTypeLowerIndexAsV1) {
  EXPECT_EQ(ChildName("mnist", "Worker", 3), "mnist-worker-3");
  EXPECT_EQ(ChildName("mnist", "PS", 0), "mnist-ps-0");
  // Master keeps its own name (kubetrain's TrainingJob would say chief).
  EXPECT_EQ(ChildName("mnist", "Master", 0), "mnist-master-0");
  EXPECT_EQ(ChildName("a/b", "Evaluator", 0), "a-b-evaluator-0");
}

TEST(TFJobV1Test, PodLabelsCarryJobRoleMasterOnChiefOrElseWorkerZero) {
  const Shape ps_worker = Job("ns", {{"PS", 1, 2222}, {"Worker", 2, 2222}});
  auto w0 = Labels(ps_worker, "Worker", 0, true);
  EXPECT_EQ(w0, (std::map<std::string, std::string>{
                    {"training.kubeflow.org/operator-name", "tfjob-controller"},
                    {"training.kubeflow.org/job-name", "test-tfjob"},
                    {"training.kubeflow.org/replica-type", "worker"},
                    {"training.kubeflow.org/replica-index", "0"},
                    {"training.kubeflow.org/job-role", "master"}}));
  EXPECT_FALSE(Labels(ps_worker, "Worker", 1, true).contains(std::string(kJobRoleLabel)));
  EXPECT_FALSE(Labels(ps_worker, "PS", 0, true).contains(std::string(kJobRoleLabel)));
  // Services never get job-role.
  EXPECT_FALSE(Labels(ps_worker, "Worker", 0, false).contains(std::string(kJobRoleLabel)));

  const Shape with_chief = Job("ns", {{"Chief", 1, 2222}, {"Worker", 2, 2222}});
  EXPECT_EQ(Labels(with_chief, "Chief", 0, true).at(std::string(kJobRoleLabel)), "master");
  EXPECT_FALSE(Labels(with_chief, "Worker", 0, true).contains(std::string(kJobRoleLabel)));
  const Shape with_master = Job("ns", {{"Master", 1, 2222}, {"Worker", 1, 2222}});
  EXPECT_TRUE(IsMasterRole(with_master, "Master", 0));
  EXPECT_EQ(Labels(with_master, "Master", 0, true).at(std::string(kReplicaTypeLabel)), "master");
}

TEST(TFJobV1Test, SingleReplicaJobGetsNoTfConfig) {
  EXPECT_EQ(TfConfig(Job("ns0", {{"Worker", 1, 2222}}), "Worker", 0, ""), std::nullopt);
  EXPECT_EQ(TfConfig(Job("ns1", {{"Worker", 1, 2222}}), "Worker", 0, "example.org"), std::nullopt);
  EXPECT_EQ(TfConfig(Job("ns1", {{"Chief", 1, 2222}}), "Chief", 0, ""), std::nullopt);
  EXPECT_TRUE(TfConfig(Job("ns1", {{"Worker", 2, 2222}}), "Worker", 1, "").has_value());
}

TEST(TFJobV1Test, TfConfigIsV1sBytesWithTheEvaluatorAndNoDefaultDomain) {
  // Keys sorted as Go marshals a map, task before environment, evaluator in the cluster.
  EXPECT_EQ(
      TfConfig(Job("ns3", {{"Worker", 1, 2222}, {"PS", 1, 2222}, {"Evaluator", 1, 2222}}), "Worker",
               0, ""),
      R"({"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc:2222"],)"
      R"("ps":["test-tfjob-ps-0.ns3.svc:2222"],"worker":["test-tfjob-worker-0.ns3.svc:2222"]},)"
      R"("task":{"type":"worker","index":0},"environment":"cloud"})");
  // CUSTOM_CLUSTER_DOMAIN is appended after ".svc".
  EXPECT_EQ(TfConfig(Job("ns2", {{"PS", 1, 2222}, {"Worker", 2, 2222}}), "PS", 0, "tf.example.org"),
            R"({"cluster":{"ps":["test-tfjob-ps-0.ns2.svc.tf.example.org:2222"],)"
            R"("worker":["test-tfjob-worker-0.ns2.svc.tf.example.org:2222",)"
            R"("test-tfjob-worker-1.ns2.svc.tf.example.org:2222"]},)"
            R"("task":{"type":"ps","index":0},"environment":"cloud"})");
  // Master is "master" in the map and the task; each type has its own port.
  EXPECT_EQ(TfConfig(Job("d", {{"Master", 1, 3333}, {"Worker", 1, 2222}}), "Master", 0, ""),
            R"({"cluster":{"master":["test-tfjob-master-0.d.svc:3333"],)"
            R"("worker":["test-tfjob-worker-0.d.svc:2222"]},)"
            R"("task":{"type":"master","index":0},"environment":"cloud"})");
}

TEST(TFJobV1Test, DynamicWorkerTfConfigIsSparse) {
  const Shape s = Job("default", {{"PS", 2, 2222}, {"Worker", 2, 2222}}, true);
  EXPECT_EQ(TfConfig(s, "Worker", 1, ""),
            R"({"cluster":{"worker":{"1":"test-tfjob-worker-1.default.svc:2222"},)"
            R"("ps":["test-tfjob-ps-0.default.svc:2222","test-tfjob-ps-1.default.svc:2222"]},)"
            R"("task":{"type":"worker","index":1}})");
  EXPECT_EQ(TfConfig(s, "PS", 0, ""),
            R"({"cluster":{"worker":{},"ps":["test-tfjob-ps-0.default.svc:2222"]},)"
            R"("task":{"type":"ps","index":0}})");
}

TEST(TFJobV1Test, ShapeOfAConvertedTFJobKeepsV1TypesAndPort) {
  auto docs = api::ParseYamlDocuments(R"(
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: legacy, namespace: team}
spec:
  tfReplicaSpecs:
    master:
      template: {spec: {containers: [{name: tensorflow, image: tf, ports: [{name: tfjob-port, containerPort: 3333}]}]}}
    WORKER:
      replicas: 3
      template: {spec: {containers: [{name: tensorflow, image: tf, ports: [{name: tfjob-port, containerPort: 3333}]}]}}
)");
  ASSERT_TRUE(docs.ok());
  auto c = api::ConvertTFJob(docs->front().value);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto job = api::ParseTrainingJob(c->job);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const Shape s = ShapeOf(*c, *job);
  EXPECT_EQ(s.name, "legacy");
  EXPECT_EQ(s.namespace_, "team");
  EXPECT_EQ(s.replicas, (std::vector<Replica>{{"Master", 1, 3333}, {"Worker", 3, 3333}}));
}

TEST(TFJobV1Test, PodIsTheTemplateWithV1sNameLabelsPortTfConfigAndRestartPolicy) {
  const Shape s = Job("team", {{"PS", 1, 2222}, {"Worker", 2, 2222}});
  const json tmpl = {
      {"metadata", {{"labels", {{"app", "mnist"}, {"training.kubeflow.org/job-name", "spoofed"}}}}},
      {"spec",
       {{"restartPolicy", "Always"},
        {"containers",
         {{{"name", "sidecar"}, {"image", "s"}},
          {{"name", "tensorflow"},
           {"image", "tf"},
           {"env", {{{"name", "A"}, {"value", "1"}}}}}}}}}};
  const json pod = Pod(s, "Worker", 1, tmpl, "OnFailure", "");
  EXPECT_EQ(pod["metadata"]["name"], "test-tfjob-worker-1");
  EXPECT_EQ(pod["metadata"]["labels"],
            (json{{"app", "mnist"},
                  {"training.kubeflow.org/operator-name", "tfjob-controller"},
                  {"training.kubeflow.org/job-name", "test-tfjob"},
                  {"training.kubeflow.org/replica-type", "worker"},
                  {"training.kubeflow.org/replica-index", "1"}}));
  EXPECT_EQ(pod["spec"]["restartPolicy"], "OnFailure");  // the replica's, not the template's
  const json& tf = pod["spec"]["containers"][1];
  EXPECT_EQ(tf["ports"], (json::array({{{"name", "tfjob-port"}, {"containerPort", 2222}}})));
  ASSERT_EQ(tf["env"].size(), 2u);
  EXPECT_EQ(tf["env"][0]["name"], "A");
  EXPECT_EQ(tf["env"][1]["name"], "TF_CONFIG");
  EXPECT_EQ(tf["env"][1]["value"], *TfConfig(s, "Worker", 1, ""));
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("env"));
  // ExitCode is not a pod policy: Never.
  EXPECT_EQ(Pod(s, "PS", 0, tmpl, "ExitCode", "")["spec"]["restartPolicy"], "Never");
  // Worker 0 of a job without a chief is the master.
  EXPECT_EQ(Pod(s, "Worker", 0, tmpl, "Never",
                "")["metadata"]["labels"]["training.kubeflow.org/job-role"],
            "master");
  // One replica in all: no TF_CONFIG.
  const json single = Pod(Job("team", {{"Worker", 1, 2222}}), "Worker", 0, tmpl, "Never", "");
  EXPECT_EQ(single["spec"]["containers"][1]["env"].size(), 1u);
}

TEST(TFJobV1Test, ServiceIsHeadlessWithTheTensorflowContainersPorts) {
  const Shape s = Job("team", {{"PS", 1, 2222}, {"Worker", 2, 2222}});
  const json tmpl = {{"spec",
                      {{"containers",
                        {{{"name", "tensorflow"},
                          {"image", "tf"},
                          {"ports",
                           {{{"name", "tfjob-port"}, {"containerPort", 2222}},
                            {{"name", "debug"}, {"containerPort", 6006}}}}}}}}}};
  const json svc = Service(s, "PS", 0, tmpl);
  EXPECT_EQ(svc["metadata"]["name"], "test-tfjob-ps-0");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["selector"], svc["metadata"]["labels"]);
  EXPECT_FALSE(svc["metadata"]["labels"].contains("training.kubeflow.org/job-role"));
  EXPECT_EQ(svc["spec"]["ports"], (json::array({{{"name", "debug"}, {"port", 6006}},
                                                {{"name", "tfjob-port"}, {"port", 2222}}})));
  // Built from what Pod() defaulted: the tfjob-port is there.
  const json pod = Pod(s, "Worker", 0, json{{"spec", {{"containers", {{{"name", "tensorflow"}}}}}}},
                       "Never", "");
  EXPECT_EQ(Service(s, "Worker", 0, pod)["spec"]["ports"],
            (json::array({{{"name", "tfjob-port"}, {"port", 2222}}})));
}

api::Condition Cond(api::ConditionType t, bool status, int64_t at, std::string reason = "",
                    std::string message = "") {
  return api::Condition{t, status, std::move(reason), std::move(message),
                        api::Time{std::chrono::seconds(at)}};
}

std::vector<std::string> Types(const json& status) {
  std::vector<std::string> out;
  for (const json& c : status["conditions"]) {
    out.push_back(c["type"].get<std::string>() + "=" + c["status"].get<std::string>());
  }
  return out;
}

TEST(TFJobV1Test, StatusRunningHasV1ReasonsAndMessagesAndOnlyV1Conditions) {
  const Shape s = Job("ns", {{"PS", 1, 2222}, {"Worker", 2, 2222}});
  api::TrainingJobStatus st;
  st.conditions = {Cond(api::ConditionType::kCreated, true, 100),
                   Cond(api::ConditionType::kRunning, true, 105),
                   Cond(api::ConditionType::kReady, false, 105, "Running"),
                   Cond(api::ConditionType::kReconciling, true, 105)};
  st.replica_statuses[api::ReplicaType::kPS].active = 1;
  st.replica_statuses[api::ReplicaType::kWorker].active = 2;
  st.start_time = api::Time{std::chrono::seconds(100)};
  const json v1 = Status(st, s, {});
  EXPECT_EQ(Types(v1), (std::vector<std::string>{"Created=True", "Running=True"}));
  EXPECT_EQ(v1["conditions"][0]["reason"], "TFJobCreated");
  EXPECT_EQ(v1["conditions"][0]["message"], "TFJob test-tfjob is created.");
  EXPECT_EQ(v1["conditions"][1]["reason"], "TFJobRunning");
  EXPECT_EQ(v1["conditions"][1]["message"], "TFJob ns/test-tfjob is running.");
  EXPECT_EQ(v1["conditions"][1]["lastUpdateTime"], "1970-01-01T00:01:45Z");
  EXPECT_EQ(v1["replicaStatuses"], (json{{"PS", {{"active", 1}}}, {"Worker", {{"active", 2}}}}));
  EXPECT_EQ(v1["startTime"], "1970-01-01T00:01:40Z");
  EXPECT_FALSE(v1.contains("completionTime"));
}

TEST(TFJobV1Test, StatusRestartingReplacesRunningAndBackAgain) {
  const Shape s = Job("ns", {{"Worker", 2, 2222}});
  api::TrainingJobStatus st;
  st.conditions = {
      Cond(api::ConditionType::kCreated, true, 100),
      Cond(api::ConditionType::kRunning, false, 110, "Restarting"),
      Cond(api::ConditionType::kRestarting, true, 110, "PodFailed", "worker-1 exited 137")};
  json v1 = Status(st, s, {});
  EXPECT_EQ(Types(v1), (std::vector<std::string>{"Created=True", "Restarting=True"}));
  EXPECT_EQ(v1["conditions"][1]["reason"], "TFJobRestarting");
  EXPECT_EQ(v1["conditions"][1]["message"], "worker-1 exited 137");  // kubetrain's, says more
  st.conditions[1] = Cond(api::ConditionType::kRunning, true, 120);
  st.conditions[2] = Cond(api::ConditionType::kRestarting, false, 120);
  v1 = Status(st, s, {});
  EXPECT_EQ(Types(v1), (std::vector<std::string>{"Created=True", "Running=True"}));
}

TEST(TFJobV1Test, StatusSucceededIsLastWithRunningFalseAndActiveCountedSucceeded) {
  const Shape s = Job("ns", {{"Master", 1, 2222}, {"PS", 1, 2222}});
  api::TrainingJobStatus st;
  st.conditions = {Cond(api::ConditionType::kCreated, true, 100),
                   Cond(api::ConditionType::kSucceeded, true, 200, "ChiefSucceeded"),
                   Cond(api::ConditionType::kRunning, false, 200, "Succeeded")};
  st.replica_statuses[api::ReplicaType::kChief].succeeded = 1;
  st.replica_statuses[api::ReplicaType::kPS].active = 1;  // deleted by cleanPodPolicy next
  st.completion_time = api::Time{std::chrono::seconds(200)};
  const json v1 = Status(st, s, {{api::ReplicaType::kChief, "Master"}});
  EXPECT_EQ(Types(v1),
            (std::vector<std::string>{"Created=True", "Running=False", "Succeeded=True"}));
  EXPECT_EQ(v1["conditions"][1]["reason"], "TFJobRunning");
  EXPECT_EQ(v1["conditions"][2]["reason"], "TFJobSucceeded");
  EXPECT_EQ(v1["conditions"][2]["message"], "TFJob ns/test-tfjob successfully completed.");
  EXPECT_EQ(v1["replicaStatuses"],
            (json{{"Master", {{"succeeded", 1}}}, {"PS", {{"succeeded", 1}}}}));
  EXPECT_EQ(v1["completionTime"], "1970-01-01T00:03:20Z");
}

TEST(TFJobV1Test, StatusFailedKeepsKubetrainsMessageUnderV1sReason) {
  const Shape s = Job("ns", {{"Worker", 1, 2222}});
  api::TrainingJobStatus st;
  st.conditions = {Cond(api::ConditionType::kCreated, true, 100),
                   Cond(api::ConditionType::kRunning, false, 150, "Failed"),
                   Cond(api::ConditionType::kFailed, true, 150, "BackoffLimitExceeded",
                        "worker-0 failed 4 times (backoffLimit 3): exit code 1")};
  st.replica_statuses[api::ReplicaType::kWorker].failed = 1;
  const json v1 = Status(st, s, {});
  EXPECT_EQ(Types(v1), (std::vector<std::string>{"Created=True", "Running=False", "Failed=True"}));
  EXPECT_EQ(v1["conditions"][2]["reason"], "TFJobFailed");
  EXPECT_EQ(v1["conditions"][2]["message"],
            "worker-0 failed 4 times (backoffLimit 3): exit code 1");
  EXPECT_EQ(v1["replicaStatuses"], (json{{"Worker", {{"failed", 1}}}}));
}

TEST(TFJobV1Test, StatusSuspendedAndResumed) {
  const Shape s = Job("ns", {{"Worker", 2, 2222}});
  api::TrainingJobStatus st;
  st.conditions = {Cond(api::ConditionType::kCreated, true, 100),
                   Cond(api::ConditionType::kRunning, false, 130, "Suspended"),
                   Cond(api::ConditionType::kSuspended, true, 130, "Suspended")};
  json v1 = Status(st, s, {});
  EXPECT_EQ(Types(v1),
            (std::vector<std::string>{"Created=True", "Running=False", "Suspended=True"}));
  EXPECT_EQ(v1["conditions"][1]["reason"], "TFJobSuspended");
  EXPECT_EQ(v1["conditions"][2]["reason"], "TFJobSuspended");
  EXPECT_EQ(v1["conditions"][2]["message"], "TFJob test-tfjob is suspended.");
  st.conditions[1] = Cond(api::ConditionType::kRunning, true, 140);
  st.conditions[2] = Cond(api::ConditionType::kSuspended, false, 140, "Resumed");
  v1 = Status(st, s, {});
  EXPECT_EQ(Types(v1),
            (std::vector<std::string>{"Created=True", "Suspended=False", "Running=True"}));
  EXPECT_EQ(v1["conditions"][1]["reason"], "TFJobResumed");
  EXPECT_EQ(v1["conditions"][1]["message"], "TFJob test-tfjob is resumed.");
}

// Within one second, Created stays first as in v1 (it is set when v1 first
// sees the job): a job created suspended, or one that succeeds in the second
// it was created, lists Running=False after it, not before.
TEST(TFJobV1Test, CreatedStaysFirstWithinTheSecondOfAFalseCondition) {
  const Shape s = Job("ns", {{"Worker", 1, 2222}});
  api::TrainingJobStatus st;
  st.conditions = {Cond(api::ConditionType::kCreated, true, 100),
                   Cond(api::ConditionType::kRunning, false, 100, "Suspended"),
                   Cond(api::ConditionType::kSuspended, true, 100, "Suspended")};
  EXPECT_EQ(Types(Status(st, s, {})),
            (std::vector<std::string>{"Created=True", "Running=False", "Suspended=True"}));
  st.conditions = {Cond(api::ConditionType::kCreated, true, 100),
                   Cond(api::ConditionType::kSucceeded, true, 100, "AllWorkersSucceeded"),
                   Cond(api::ConditionType::kRunning, false, 100, "Succeeded")};
  EXPECT_EQ(Types(Status(st, s, {})),
            (std::vector<std::string>{"Created=True", "Running=False", "Succeeded=True"}));
}

}  // namespace
}  // namespace kubetrain::planner::tfjob_v1
