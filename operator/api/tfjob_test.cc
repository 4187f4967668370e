#include "operator/api/tfjob.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "operator/api/json.h"
#include "operator/api/validation.h"
#include "operator/api/yaml.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

json Yaml(std::string_view text) {
  auto docs = ParseYamlDocuments(text);
  EXPECT_TRUE(docs.ok()) << docs.status().ToString();
  EXPECT_EQ(docs->size(), 1u);
  return docs->front().value;
}

json ReadTestdata(const std::string& name) {
  std::ifstream in(std::string(KUBETRAIN_API_TESTDATA_DIR) + "/tfjob/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return Yaml(text.str());
}

// The conversion parses and validates as a TrainingJob.
TrainingJob MustConvertToValidJob(const json& tf, TFJobConversion* out = nullptr) {
  auto c = ConvertTFJob(tf);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return {};
  auto job = ParseTrainingJob(c->job);
  EXPECT_TRUE(job.ok()) << job.status().ToString() << "\n" << c->job.dump(2);
  if (!job.ok()) return {};
  EXPECT_TRUE(Validate(*job).empty()) << ToStatus(Validate(*job)).ToString();
  if (out != nullptr) *out = *c;
  return *job;
}

bool HasNote(const TFJobConversion& c, std::string_view path) {
  for (const auto& n : c.notes) {
    if (n.path == path) return true;
  }
  return false;
}

constexpr std::string_view kMinimal = R"(
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: tfjob-simple, namespace: kubeflow}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: tensorflow
              image: tf:latest
              command: [python, /var/tf_mnist/mnist_with_summaries.py]
)";

TEST(TFJobTest, RecognisesOnlyKubeflowV1TFJob) {
  EXPECT_TRUE(IsTFJob(Yaml(kMinimal)));
  EXPECT_FALSE(IsTFJob(json{{"apiVersion", "kubeflow.org/v1"}, {"kind", "PyTorchJob"}}));
  EXPECT_FALSE(IsTFJob(json{{"apiVersion", "kubetrain.io/v1alpha1"}, {"kind", "TFJob"}}));
  EXPECT_FALSE(IsTFJob(json::array()));
  EXPECT_FALSE(ConvertTFJob(json{{"kind", "TFJob"}}).ok());
}

TEST(TFJobTest, MinimalWorkerJobKeepsNameReplicasPolicyAndTemplate) {
  TFJobConversion c;
  TrainingJob job = MustConvertToValidJob(Yaml(kMinimal), &c);
  EXPECT_EQ(c.job["apiVersion"], "kubetrain.io/v1alpha1");
  EXPECT_EQ(c.job["kind"], "TrainingJob");
  EXPECT_EQ(job.metadata.name, "tfjob-simple");
  EXPECT_EQ(job.metadata.namespace_, "kubeflow");
  ASSERT_EQ(job.spec.replica_specs.size(), 1u);
  const ReplicaSpec& w = job.spec.replica_specs.at(ReplicaType::kWorker);
  EXPECT_EQ(w.replicas, 2);
  EXPECT_EQ(w.restart_policy, RestartPolicy::kOnFailure);
  EXPECT_EQ(w.pod_template["spec"]["containers"][0]["command"][1],
            "/var/tf_mnist/mnist_with_summaries.py");
  EXPECT_EQ(job.spec.port, kTFJobDefaultPort);
  EXPECT_EQ(job.spec.success_policy, SuccessPolicy::kChiefOrWorker0);
  // v1's default cleanPodPolicy (None) is not kubetrain's (Running): said so.
  EXPECT_EQ(job.spec.run_policy.clean_pod_policy, CleanPodPolicy::kRunning);
  EXPECT_TRUE(HasNote(c, "spec.runPolicy.cleanPodPolicy"));
  EXPECT_FALSE(c.managed_by.has_value());
}

TEST(TFJobTest, DefaultsReplicasToOneAndRestartPolicyToNeverAsV1Does) {
  TrainingJob job = MustConvertToValidJob(ReadTestdata("ps-worker.yaml"));
  const ReplicaSpec& ps = job.spec.replica_specs.at(ReplicaType::kPS);
  EXPECT_EQ(ps.replicas, 1);
  EXPECT_EQ(ps.restart_policy, RestartPolicy::kNever);
  EXPECT_EQ(job.spec.replica_specs.at(ReplicaType::kWorker).replicas, 4);
  EXPECT_EQ(job.metadata.labels.at("team"), "a");
  // The template's own metadata passes through.
  EXPECT_EQ(job.spec.replica_specs.at(ReplicaType::kWorker)
                .pod_template["metadata"]["annotations"]["sidecar.istio.io/inject"],
            "false");
}

TEST(TFJobTest, EveryRoleAndRunPolicyFieldCarriesOver) {
  TFJobConversion c;
  TrainingJob job = MustConvertToValidJob(ReadTestdata("chief-ps-worker-evaluator.yaml"), &c);
  EXPECT_EQ(job.spec.Replicas(ReplicaType::kChief), 1);
  EXPECT_EQ(job.spec.Replicas(ReplicaType::kPS), 2);
  EXPECT_EQ(job.spec.Replicas(ReplicaType::kWorker), 2);
  EXPECT_EQ(job.spec.Replicas(ReplicaType::kEvaluator), 1);
  EXPECT_EQ(job.spec.replica_specs.at(ReplicaType::kPS).restart_policy, RestartPolicy::kExitCode);
  const RunPolicy& rp = job.spec.run_policy;
  EXPECT_EQ(rp.clean_pod_policy, CleanPodPolicy::kRunning);
  EXPECT_EQ(rp.backoff_limit, 3);
  EXPECT_EQ(rp.active_deadline_seconds, 3600);
  EXPECT_EQ(rp.ttl_seconds_after_finished, 600);
  // An explicit cleanPodPolicy means the same in both: no note.
  EXPECT_FALSE(HasNote(c, "spec.runPolicy.cleanPodPolicy"));
  EXPECT_TRUE(c.notes.empty());
}

TEST(TFJobTest, MasterCustomPortSidecarAndFieldsWithoutEquivalent) {
  TFJobConversion c;
  TrainingJob job = MustConvertToValidJob(ReadTestdata("master-custom-port.yaml"), &c);
  // "master" (any case, as v1 folds it) becomes Chief, "worker" Worker.
  EXPECT_EQ(job.spec.Replicas(ReplicaType::kChief), 1);
  EXPECT_EQ(job.spec.Replicas(ReplicaType::kWorker), 2);
  EXPECT_EQ(c.role_keys.at("Chief"), "master");
  EXPECT_TRUE(HasNote(c, "spec.tfReplicaSpecs.master"));
  // The tfjob-port is the job's port.
  EXPECT_EQ(job.spec.port, 3333);
  // "tensorflow" gets the environment contract: first, since none is "trainer".
  const json& cs =
      job.spec.replica_specs.at(ReplicaType::kChief).pod_template["spec"]["containers"];
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0]["name"], "tensorflow");
  EXPECT_EQ(cs[1]["name"], "log-shipper");
  EXPECT_TRUE(HasNote(c, "spec.tfReplicaSpecs.master.template.spec.containers"));
  // successPolicy, suspend and the scheduling policy carry over.
  EXPECT_EQ(job.spec.success_policy, SuccessPolicy::kAllWorkers);
  EXPECT_TRUE(job.spec.run_policy.suspend);
  const auto& sp = job.spec.run_policy.scheduling_policy;
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(sp->min_available, 3);
  EXPECT_EQ(sp->queue, "research");
  EXPECT_EQ(sp->priority_class_name, "high");
  EXPECT_EQ(sp->schedule_timeout_seconds, 120);
  // What has no field is named in a note.
  EXPECT_EQ(c.managed_by, "kubetrain.io/operator");
  EXPECT_TRUE(HasNote(c, "spec.runPolicy.managedBy"));
  EXPECT_TRUE(HasNote(c, "spec.enableDynamicWorker"));
  EXPECT_TRUE(HasNote(c, "spec.runPolicy.schedulingPolicy.minResources"));
  EXPECT_EQ(job.metadata.annotations.at("owner"), "ml-platform");
}

TEST(TFJobTest, DropsStatusAndServerMetadata) {
  json tf = Yaml(kMinimal);
  tf["metadata"]["uid"] = "u-1";
  tf["metadata"]["resourceVersion"] = "42";
  tf["metadata"]["annotations"] = {{"kubectl.kubernetes.io/last-applied-configuration", "{}"},
                                   {"keep", "me"}};
  tf["status"] = {{"conditions", json::array()}};
  auto c = ConvertTFJob(tf);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->job.contains("status"));
  EXPECT_EQ(c->job["metadata"], (json{{"name", "tfjob-simple"},
                                      {"namespace", "kubeflow"},
                                      {"annotations", {{"keep", "me"}}}}));
}

// What v1.9.3's CRD or webhook refuses, and what kubetrain cannot express,
// fails with the TFJob's field path.
TEST(TFJobTest, RejectsWhatV1RejectsWithTheFieldPath) {
  struct Case {
    std::string name;
    std::function<void(json&)> edit;
    std::string error_prefix;
  };
  const std::vector<Case> cases = {
      {"no tfReplicaSpecs", [](json& t) { t["spec"].erase("tfReplicaSpecs"); },
       "spec.tfReplicaSpecs: required"},
      {"no containers",
       [](json& t) {
         t["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = json::array();
       },
       "spec.tfReplicaSpecs.Worker.template.spec.containers: must be specified"},
      {"no image",
       [](json& t) {
         t["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].erase("image");
       },
       "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: must be required"},
      {"no tensorflow container",
       [](json& t) {
         t["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "tf";
       },
       "spec.tfReplicaSpecs.Worker.template.spec.containers: must have at least one container "
       "with name tensorflow"},
      {"chief and master",
       [](json& t) {
         t["spec"]["tfReplicaSpecs"]["Chief"] = t["spec"]["tfReplicaSpecs"]["Worker"];
         t["spec"]["tfReplicaSpecs"]["Master"] = t["spec"]["tfReplicaSpecs"]["Worker"];
       },
       "spec.tfReplicaSpecs: must not have more than 1 Chief or Master role"},
      {"unknown role",
       [](json& t) {
         t["spec"]["tfReplicaSpecs"]["Launcher"] = t["spec"]["tfReplicaSpecs"]["Worker"];
       },
       "spec.tfReplicaSpecs.Launcher: unsupported replica type"},
      {"same role twice",
       [](json& t) {
         t["spec"]["tfReplicaSpecs"]["worker"] = t["spec"]["tfReplicaSpecs"]["Worker"];
       },
       "spec.tfReplicaSpecs."},
      {"name not DNS-1035", [](json& t) { t["metadata"]["name"] = "9lives"; },
       "metadata.name: must be a DNS-1035 label"},
      {"unknown spec field", [](json& t) { t["spec"]["replicaSpecs"] = json::object(); },
       "spec.replicaSpecs: unknown field"},
      {"unknown runPolicy field", [](json& t) { t["spec"]["runPolicy"]["cleanup"] = true; },
       "spec.runPolicy.cleanup: unknown field"},
      {"bad cleanPodPolicy", [](json& t) { t["spec"]["runPolicy"]["cleanPodPolicy"] = "Some"; },
       "spec.runPolicy.cleanPodPolicy: unsupported value \"Some\""},
      {"bad restartPolicy",
       [](json& t) { t["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"; },
       "spec.tfReplicaSpecs.Worker.restartPolicy: unsupported value"},
      {"bad successPolicy", [](json& t) { t["spec"]["successPolicy"] = "Chief"; },
       "spec.successPolicy: unsupported value"},
      {"replicas not an integer",
       [](json& t) { t["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "2"; },
       "spec.tfReplicaSpecs.Worker.replicas: must be an integer"},
      {"ports differ per role",
       [](json& t) {
         json ps = t["spec"]["tfReplicaSpecs"]["Worker"];
         ps["template"]["spec"]["containers"][0]["ports"] =
             json::array({{{"name", "tfjob-port"}, {"containerPort", 2223}}});
         t["spec"]["tfReplicaSpecs"]["PS"] = ps;
       },
       "spec.tfReplicaSpecs."},
  };
  for (const Case& c : cases) {
    json tf = Yaml(kMinimal);
    c.edit(tf);
    auto out = ConvertTFJob(tf);
    ASSERT_FALSE(out.ok()) << c.name;
    EXPECT_EQ(out.status().message().rfind(c.error_prefix, 0), 0u)
        << c.name << ": " << out.status().message();
  }
}

TEST(TFJobTest, ErrorsOnTheConvertedJobPointBackAtTheTFJobFields) {
  json tf = ReadTestdata("master-custom-port.yaml");
  auto c = ConvertTFJob(tf);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ToTFJobMessage(*c, "spec.replicaSpecs.Chief.replicas: must be 1"),
            "spec.tfReplicaSpecs.master.replicas: must be 1");
  EXPECT_EQ(ToTFJobMessage(*c, "spec.replicaSpecs: spec.replicaSpecs.Worker.replicas too big"),
            "spec.tfReplicaSpecs: spec.tfReplicaSpecs.worker.replicas too big");
  EXPECT_EQ(ToTFJobMessage(*c, "spec.runPolicy.schedulingPolicy.priorityClassName: x"),
            "spec.runPolicy.schedulingPolicy.priorityClass: x");
  // A converted job the TrainingJob rules refuse: a negative replica count.
  tf["spec"]["tfReplicaSpecs"]["worker"]["replicas"] = -1;
  c = ConvertTFJob(tf);
  ASSERT_TRUE(c.ok());
  auto job = ParseTrainingJob(c->job);
  ASSERT_TRUE(job.ok());
  const auto errors = Validate(*job);
  ASSERT_FALSE(errors.empty());
  EXPECT_EQ(ToTFJobMessage(*c, errors[0].path + ": " + errors[0].message)
                .rfind("spec.tfReplicaSpecs.worker.replicas", 0),
            0u)
      << errors[0].path;
}

}  // namespace
}  // namespace kubetrain::api
