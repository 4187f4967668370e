#include "operator/api/json.h"

#include <gtest/gtest.h>

namespace kubetrain::api {
namespace {

using nlohmann::json;

json Minimal() {
  return json::parse(R"({
    "apiVersion": "kubetrain.io/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "mnist", "namespace": "ml"},
    "spec": {"replicaSpecs": {"Worker": {"template": {"spec": {"containers": [{"name": "t"}]}}}}}
  })");
}

std::string ErrorOf(const json& j) {
  StatusOr<TrainingJob> job = ParseTrainingJob(j);
  return job.ok() ? "OK" : job.status().message();
}

TEST(ParseTest, AbsentFieldsTakeTheCrdDefaults) {
  StatusOr<TrainingJob> job = ParseTrainingJob(Minimal());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const ReplicaSpec& w = job->spec.replica_specs.at(ReplicaType::kWorker);
  EXPECT_EQ(w.replicas, 1);
  EXPECT_EQ(w.restart_policy, RestartPolicy::kNever);
  EXPECT_EQ(job->spec.port, 2222);
  EXPECT_EQ(job->spec.success_policy, SuccessPolicy::kChiefOrWorker0);
  EXPECT_EQ(job->spec.run_policy.clean_pod_policy, CleanPodPolicy::kRunning);
  EXPECT_FALSE(job->spec.run_policy.suspend);
  EXPECT_FALSE(job->spec.run_policy.backoff_limit.has_value());
  EXPECT_FALSE(job->spec.cluster_domain.has_value());
  EXPECT_EQ(job->metadata.namespace_, "ml");
}

TEST(ParseTest, DefaultedJsonMatchesWhatTheApiserverStores) {
  StatusOr<TrainingJob> job = ParseTrainingJob(Minimal());
  ASSERT_TRUE(job.ok());
  json spec = ToJson(*job)["spec"];
  EXPECT_EQ(spec, json::parse(R"({
    "port": 2222, "successPolicy": "ChiefOrWorker0",
    "runPolicy": {"cleanPodPolicy": "Running", "suspend": false},
    "replicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never",
                                "template": {"spec": {"containers": [{"name": "t"}]}}}}})"));
}

TEST(ParseTest, RoundTripsEveryField) {
  json j = Minimal();
  j["metadata"]["uid"] = "u-1";
  j["metadata"]["generation"] = 3;
  j["metadata"]["creationTimestamp"] = "2026-01-02T03:04:05Z";
  j["spec"]["replicaSpecs"]["PS"] = {
      {"replicas", 2}, {"restartPolicy", "ExitCode"}, {"template", json::object()}};
  j["spec"]["runPolicy"] = json::parse(R"({"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60,
      "activeDeadlineSeconds": 600, "backoffLimit": 4, "suspend": true,
      "schedulingPolicy": {"minAvailable": 3, "queue": "q", "priorityClassName": "high",
                           "schedulerName": "volcano"}})");
  j["spec"]["successPolicy"] = "AllWorkers";
  j["spec"]["port"] = 3000;
  j["spec"]["clusterDomain"] = "example.org";
  j["spec"]["serviceMode"] = "PerReplica";
  j["status"] = json::parse(R"({"state": "Failed",
      "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                      "message": "m", "lastTransitionTime": "2026-01-02T03:04:05Z"}],
      "replicaStatuses": {"PS": {"active": 1, "succeeded": 0, "failed": 1, "restarts": 2,
          "lastFailure": {"pod": "mnist-ps-1", "exitCode": 137, "reason": "OOMKilled",
                          "message": "oom", "time": "2026-01-02T03:04:05Z"}}},
      "startTime": "2026-01-02T03:04:05Z", "completionTime": "2026-01-02T03:05:05Z",
      "observedGeneration": 3, "countedFailures": ["uid-a"],
      "metrics": {"steps": 400, "train_loss": 0.45, "eval": {"auc": 0.757, "log_loss": 0.5},
                  "target_reached": true, "tags": ["a", null]},
      "running": 3, "restarts": 2,
      "progress": {"step": 250, "totalSteps": 1000, "percent": 25, "samplesPerSecond": 5120,
                   "eta": "4m10s", "replica": "worker-0", "updateTime": "2026-01-02T03:04:35Z"}})");
  StatusOr<TrainingJob> job = ParseTrainingJob(j);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  StatusOr<TrainingJob> again = ParseTrainingJob(ToJson(*job));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*job, *again);
  EXPECT_EQ(ToJson(*job)["status"], j["status"]);
  EXPECT_EQ(job->status.replica_statuses.at(ReplicaType::kPS).last_failure->exit_code, 137);
  ASSERT_TRUE(job->status.metrics.has_value());
  EXPECT_EQ((*job->status.metrics)["eval"]["auc"], 0.757);
  EXPECT_EQ(job->status.restarts, 2);
  ASSERT_TRUE(job->status.progress);
  EXPECT_EQ(job->status.progress->eta, "4m10s");
  EXPECT_EQ(job->spec.service_mode, ServiceMode::kPerReplica);
  EXPECT_EQ(ToJson(*job)["spec"]["serviceMode"], "PerReplica");
}

TEST(ParseTest, ParsingAGivenUpDocumentGivesTheSameJob) {
  json j = Minimal();
  j["spec"]["replicaSpecs"]["PS"] = {
      {"replicas", 1}, {"template", json::parse(R"({"metadata": {"labels": {"a": "b"}},
          "spec": {"containers": [{"name": "ps", "image": "i", "env": [{"name": "X"}]}]}})")}};
  j["status"] = json::parse(R"({"conditions": [{"type": "Created", "status": "True",
      "reason": "TrainingJobCreated", "message": "m", "lastTransitionTime": "2026-01-02T03:04:05Z"}]})");
  StatusOr<TrainingJob> copied = ParseTrainingJob(j);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  json given_up = j;
  StatusOr<TrainingJob> taken = ParseTrainingJob(std::move(given_up));
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_TRUE(*taken == *copied);
  EXPECT_EQ(taken->spec.replica_specs.at(ReplicaType::kPS).pod_template,
            j["spec"]["replicaSpecs"]["PS"]["template"]);
  // Errors are the same too.
  j["spec"]["replicaSpecs"]["Worker"]["template"] = json::array();
  json bad = j;
  EXPECT_EQ(ParseTrainingJob(std::move(bad)).status().message(), ErrorOf(j));
}

TEST(ParseTest, StatusMetricsIsReadAsAnObjectAndAnythingElseIsIgnored) {
  StatusOr<TrainingJobStatus> s =
      ParseTrainingJobStatus(json::parse(R"({"metrics": {"eval": {"auc": 0.9}}})"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(s->metrics.has_value());
  EXPECT_EQ(StatusToJson(*s)["metrics"], json::parse(R"({"eval": {"auc": 0.9}})"));
  for (const char* odd : {R"({"metrics": [1]})", R"({"metrics": "auc=0.9"})", R"({"metrics": 0.9})",
                          R"({"metrics": null})"}) {
    s = ParseTrainingJobStatus(json::parse(odd));
    ASSERT_TRUE(s.ok()) << odd << ": " << s.status().ToString();
    EXPECT_FALSE(s->metrics.has_value()) << odd;
  }
  EXPECT_FALSE(StatusToJson(TrainingJobStatus{}).contains("metrics"));
}

TEST(ParseTest, RejectsUnknownRoleWithItsPath) {
  json j = Minimal();
  j["spec"]["replicaSpecs"]["Master"] = {{"template", json::object()}};
  EXPECT_EQ(ErrorOf(j),
            "spec.replicaSpecs.Master: unknown replica type \"Master\" (want PS, Worker, Chief "
            "or Evaluator)");
}

TEST(ParseTest, RejectsUnknownFieldsWithTheirPath) {
  json j = Minimal();
  j["spec"]["replicaSpecs"]["Worker"]["replica"] = 2;
  EXPECT_EQ(ErrorOf(j), "spec.replicaSpecs.Worker.replica: unknown field");
  j = Minimal();
  j["spec"]["runPolicy"] = {{"backOffLimit", 2}};
  EXPECT_EQ(ErrorOf(j), "spec.runPolicy.backOffLimit: unknown field");
  j = Minimal();
  j["spec"]["runPolicy"] = {{"schedulingPolicy", {{"gang", true}}}};
  EXPECT_EQ(ErrorOf(j), "spec.runPolicy.schedulingPolicy.gang: unknown field");
  j = Minimal();
  j["spec"]["ports"] = 1;
  EXPECT_EQ(ErrorOf(j), "spec.ports: unknown field");
  j = Minimal();
  j["extra"] = 1;
  EXPECT_EQ(ErrorOf(j), "extra: unknown field");
}

TEST(ParseTest, ToleratesUnknownMetadataAndStatusFields) {
  json j = Minimal();
  j["metadata"]["managedFields"] = json::array();
  j["status"] = {{"somethingNew", 1}};
  EXPECT_EQ(ErrorOf(j), "OK");
}

TEST(ParseTest, RejectsWrongTypesAndEnumValues) {
  json j = Minimal();
  j["spec"]["replicaSpecs"]["Worker"]["replicas"] = "2";
  EXPECT_EQ(ErrorOf(j), "spec.replicaSpecs.Worker.replicas: must be an integer");
  j = Minimal();
  j["spec"]["replicaSpecs"]["Worker"]["replicas"] = 2.5;
  EXPECT_EQ(ErrorOf(j), "spec.replicaSpecs.Worker.replicas: must be an integer");
  j = Minimal();
  j["spec"]["port"] = 1LL << 40;
  EXPECT_EQ(ErrorOf(j), "spec.port: is out of range");
  j = Minimal();
  j["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes";
  EXPECT_EQ(ErrorOf(j),
            "spec.replicaSpecs.Worker.restartPolicy: unsupported value \"Sometimes\" (want one "
            "of Never, OnFailure, Always, ExitCode)");
  j = Minimal();
  j["spec"]["runPolicy"] = {{"suspend", "yes"}};
  EXPECT_EQ(ErrorOf(j), "spec.runPolicy.suspend: must be a boolean");
  j = Minimal();
  j["spec"]["replicaSpecs"]["Worker"]["template"] = json::array();
  EXPECT_EQ(ErrorOf(j), "spec.replicaSpecs.Worker.template: must be an object");
  j = Minimal();
  j["spec"]["serviceMode"] = "Shared";
  EXPECT_EQ(ErrorOf(j),
            "spec.serviceMode: unsupported value \"Shared\" (want one of PerReplica, JobWide)");
}

TEST(ParseTest, RejectsMissingRequiredFields) {
  json j = Minimal();
  j["spec"]["replicaSpecs"]["Worker"].erase("template");
  EXPECT_EQ(ErrorOf(j), "spec.replicaSpecs.Worker.template: required field is missing");
  j = Minimal();
  j["spec"].erase("replicaSpecs");
  EXPECT_EQ(ErrorOf(j), "spec.replicaSpecs: required field is missing");
  j = Minimal();
  j.erase("spec");
  EXPECT_EQ(ErrorOf(j), "spec: required field is missing");
}

TEST(ParseTest, RejectsOtherKinds) {
  json j = Minimal();
  j["kind"] = "Pod";
  EXPECT_EQ(ErrorOf(j), "kind: must be TrainingJob, got \"Pod\"");
  j = Minimal();
  j["apiVersion"] = "kubetrain.io/v1";
  EXPECT_EQ(ErrorOf(j), "apiVersion: must be kubetrain.io/v1alpha1, got \"kubetrain.io/v1\"");
  EXPECT_FALSE(ParseTrainingJob(json::array()).ok());
}

TEST(ParseTest, NullMeansAbsent) {
  json j = Minimal();
  j["spec"]["port"] = nullptr;
  StatusOr<TrainingJob> job = ParseTrainingJob(j);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->spec.port, 2222);
}

}  // namespace
}  // namespace kubetrain::api
