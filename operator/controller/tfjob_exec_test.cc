// The TFJob side of the executor as pure functions: which TFJobs a mode takes,
// reading a served TFJob, and a plan's children renamed and dressed as v1's.
// The executor's use of them runs against a fake apiserver in
// job_controller_test.cc.
#include "operator/controller/tfjob_exec.h"

#include <gtest/gtest.h>

#include "operator/api/json.h"

namespace kubetrain::controller {

using planner::ChildCreate;
using planner::ChildRef;
using planner::ObservedChildren;
using planner::ObservedPod;
using planner::Plan;
namespace {

using nlohmann::json;

json TFJob(const json& replica_specs, const json& run_policy = json::object()) {
  json spec = {{"tfReplicaSpecs", replica_specs}};
  if (!run_policy.empty()) spec["runPolicy"] = run_policy;
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", "mnist"}, {"namespace", "ml"}, {"uid", "tf-uid"}}},
          {"spec", spec}};
}

json Replica(int replicas) {
  return {
      {"replicas", replicas},
      {"template", {{"spec", {{"containers", {{{"name", "tensorflow"}, {"image", "tf:2"}}}}}}}}};
}

// The cache keeps a TFJob without kubectl's copy of the applied manifest, and
// reads the same TFJob from what it keeps.
TEST(TFJobExecTest, TheCacheDropsKubectlsLastAppliedCopy) {
  json tf = json::parse(R"({"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
    "metadata": {"name": "mnist", "namespace": "ml", "uid": "u1", "resourceVersion": "5",
                 "annotations": {"team": "a"}},
    "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec":
      {"containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}}})");
  tf["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = tf.dump();
  auto cached = ToCachedTFJob(tf);
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  EXPECT_EQ(cached->text.find("last-applied"), std::string::npos) << cached->text;
  EXPECT_LT(cached->text.size(), tf.dump().size() / 2 + 64);
  const json kept = cached->Object();
  EXPECT_EQ(kept["metadata"]["annotations"], (json{{"team", "a"}}));
  EXPECT_EQ(cached->meta.resource_version, "5");
  auto whole = ReadTFJob(tf), read = ReadTFJob(kept);
  ASSERT_TRUE(whole.ok() && read.ok());
  EXPECT_EQ(api::ToJson(read->job), api::ToJson(whole->job));
}

TEST(TFJobExecTest, ModesTakeOnlyTheirTFJobs) {
  const std::optional<std::string> unset, ours = std::string(api::kTFJobManagedByKubetrain),
                                          peer = std::string(kTrainingOperatorManagedBy),
                                          kueue = std::string("kueue.x-k8s.io/multikueue");
  EXPECT_FALSE(TakesTFJob(TFJobMode::kOff, ours));
  EXPECT_TRUE(TakesTFJob(TFJobMode::kManaged, ours));
  EXPECT_FALSE(TakesTFJob(TFJobMode::kManaged, unset));
  EXPECT_FALSE(TakesTFJob(TFJobMode::kManaged, peer));
  EXPECT_TRUE(TakesTFJob(TFJobMode::kAll, unset));
  EXPECT_TRUE(TakesTFJob(TFJobMode::kAll, ours));
  // Never another controller's, whatever the mode.
  EXPECT_FALSE(TakesTFJob(TFJobMode::kAll, peer));
  EXPECT_FALSE(TakesTFJob(TFJobMode::kAll, kueue));
}

TEST(TFJobExecTest, ManagedByIsReadFromTheJobAsServed) {
  json tf = TFJob({{"Worker", Replica(1)}}, {{"managedBy", "kubeflow.org/training-operator"}});
  EXPECT_EQ(TFJobManagedBy(tf), std::string(kTrainingOperatorManagedBy));
  tf["spec"]["runPolicy"]["managedBy"] = 3;  // does not convert; still not ours to judge
  EXPECT_EQ(TFJobManagedBy(tf), std::nullopt);
  EXPECT_EQ(TFJobManagedBy(json::object()), std::nullopt);
}

TEST(TFJobExecTest, OnlyAJobFinishedWithoutThePlannersStateIsFinishedElsewhere) {
  json tf = TFJob({{"Worker", Replica(1)}});
  EXPECT_FALSE(FinishedElsewhere(tf));
  tf["status"]["conditions"] = {{{"type", "Running"}, {"status", "True"}}};
  EXPECT_FALSE(FinishedElsewhere(tf));  // running: taken over (docs: move between runs)
  tf["status"]["conditions"].push_back({{"type", "Failed"}, {"status", "True"}});
  EXPECT_TRUE(FinishedElsewhere(tf));
  tf["metadata"]["annotations"][std::string(kTFJobStateAnnotation)] = "{}";
  EXPECT_FALSE(FinishedElsewhere(tf));  // ours: the planner decides (TTL, cleanup)
}

TEST(TFJobExecTest, KeysOfTheTwoKindsNeverCollide) {
  EXPECT_EQ(TFJobKey("ml", "a"), "tfjob:ml/a");
  EXPECT_TRUE(IsTFJobKey(TFJobKey("ml", "a")));
  EXPECT_FALSE(IsTFJobKey("ml/a"));
  EXPECT_EQ(StripTFJobKey("tfjob:ml/a"), "ml/a");
}

TEST(TFJobExecTest, ReadTFJobKeepsIdentityAndThePlannersState) {
  json tf = TFJob({{"PS", Replica(1)}, {"Worker", Replica(2)}});
  tf["metadata"]["resourceVersion"] = "7";
  api::TrainingJobStatus state;
  state.restarts = 3;
  tf["metadata"]["annotations"][std::string(kTFJobStateAnnotation)] =
      api::StatusToJson(state).dump();
  auto view = ReadTFJob(tf);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->job.metadata.uid, "tf-uid");
  EXPECT_EQ(view->job.metadata.resource_version, "7");
  EXPECT_EQ(view->job.spec.service_mode, api::ServiceMode::kPerReplica);
  EXPECT_EQ(view->job.status.restarts, 3);
  EXPECT_TRUE(view->to_v1.empty());  // PS and Worker: the same names
  // A state edited into nonsense starts afresh rather than failing the job.
  tf["metadata"]["annotations"][std::string(kTFJobStateAnnotation)] = "{not json";
  view = ReadTFJob(tf);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->job.status.restarts, 0);
}

TEST(TFJobExecTest, UnconvertibleTFJobSaysWhyInItsTFJobPaths) {
  json tf = TFJob({{"Worker", Replica(1)}});
  tf["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main";
  auto view = ReadTFJob(tf);
  ASSERT_FALSE(view.ok());
  EXPECT_NE(view.status().message().find("spec.tfReplicaSpecs.Worker"), std::string::npos)
      << view.status().message();
  const auto status = UnconvertibleStatus(tf, view.status().message(), api::Time{});
  ASSERT_TRUE(status.has_value());
  const json& failed = (*status)["conditions"].back();
  EXPECT_EQ(failed["type"], "Failed");
  EXPECT_EQ(failed["reason"], "TFJobFailed");
  EXPECT_NE(failed["message"].get<std::string>().find("tensorflow"), std::string::npos);
  tf["status"] = *status;  // written: not again
  EXPECT_FALSE(UnconvertibleStatus(tf, "again", api::Time{}).has_value());
}

TEST(TFJobExecTest, MasterChildrenKeepV1sNamesBothWays) {
  auto view = ReadTFJob(TFJob({{"Master", Replica(1)}, {"Worker", Replica(1)}}));
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->to_v1.at("mnist-chief-0"), "mnist-master-0");
  ObservedChildren observed;
  observed.pods.push_back(ObservedPod{});
  observed.pods.back().name = "mnist-master-0";
  observed.services.push_back({"mnist-master-0", std::nullopt});
  ToPlannerNames(*view, observed);
  EXPECT_EQ(observed.pods[0].name, "mnist-chief-0");
  EXPECT_EQ(observed.services[0].name, "mnist-chief-0");

  Plan plan;
  plan.deletes.push_back({ChildRef::Kind::kPod, "mnist-chief-0", api::ReplicaType::kChief, 0});
  ChildCreate config_map;
  config_map.ref.kind = ChildRef::Kind::kConfigMap;
  config_map.ref.name = "mnist-cluster";
  config_map.object = {
      {"metadata", {{"name", "mnist-cluster"}}},
      {"data", {{"cluster", R"({"chief":["mnist-chief-0.ml.svc.cluster.local:2222"]})"}}}};
  plan.creates.push_back(std::move(config_map));
  ToV1Children(*view, plan, "");
  EXPECT_EQ(plan.deletes[0].name, "mnist-master-0");
  EXPECT_EQ(plan.creates[0].object["data"]["cluster"],
            R"({"chief":["mnist-master-0.ml.svc.cluster.local:2222"]})");
}

// v1 stops counting replicas once a TFJob has finished: cleanup deleting its pods
// (cleanPodPolicy All or Running) leaves replicaStatuses as they were at the end.
// Before, the next status write recounted the deleted pods as nothing.
TEST(TFJobExecTest, AFinishedTFJobKeepsItsReplicaStatusesThroughCleanup) {
  auto view = ReadTFJob(TFJob({{"PS", Replica(2)}, {"Worker", Replica(4)}}));
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  api::TrainingJobStatus status;
  status.conditions.push_back({api::ConditionType::kSucceeded, true, "", "", api::Time{}});
  status.replica_statuses[api::ReplicaType::kPS] = {};  // its pods are gone
  status.replica_statuses[api::ReplicaType::kWorker] = {};
  const json served = {
      {"conditions", {{{"type", "Succeeded"}, {"status", "True"}, {"reason", "TFJobSucceeded"}}}},
      {"replicaStatuses", {{"PS", {{"succeeded", 2}}}, {"Worker", {{"succeeded", 4}}}}}};
  const json v1 = V1Status(*view, status, served);
  EXPECT_EQ(v1["replicaStatuses"], served["replicaStatuses"]);

  // Not finished as served (the write that finishes it): counted from the pods.
  status.replica_statuses[api::ReplicaType::kWorker].succeeded = 4;
  status.replica_statuses[api::ReplicaType::kPS].active = 2;
  const json counted = V1Status(*view, status, json{{"replicaStatuses", json::object()}});
  EXPECT_EQ(counted["replicaStatuses"]["PS"], (json{{"succeeded", 2}}));
  EXPECT_EQ(counted["replicaStatuses"]["Worker"], (json{{"succeeded", 4}}));
}

}  // namespace
}  // namespace kubetrain::controller
