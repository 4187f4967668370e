#include "operator/api/validation.h"

#include <gtest/gtest.h>

namespace kubetrain::api {
namespace {

TrainingJob Job(std::string name = "job") {
  TrainingJob job;
  job.metadata.name = std::move(name);
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 2;
  return job;
}

// The single error of `job`, "OK" if none; fails the test if there are several.
std::string OnlyError(const std::vector<FieldError>& errors) {
  if (errors.empty()) return "OK";
  EXPECT_EQ(errors.size(), 1u) << ToStatus(errors).ToString();
  return errors[0].path + ": " + errors[0].message;
}

TEST(ValidateTest, AcceptsAPlainJob) {
  EXPECT_EQ(OnlyError(Validate(Job())), "OK");
}

TEST(ValidateTest, NameMustBeADns1035Label) {
  for (const char* bad : {"Job", "1job", "job.v2", "job_x", "job-"}) {
    EXPECT_EQ(OnlyError(Validate(Job(bad))).substr(0, 40),
              "metadata.name: must be a DNS-1035 label ")
        << bad;
  }
  EXPECT_EQ(OnlyError(Validate(Job(""))), "metadata.name: required field is missing");
  EXPECT_EQ(OnlyError(Validate(Job("a-b-9"))), "OK");
}

TEST(ValidateTest, LongestChildNameMustFit63Characters) {
  // "<name>-worker-1": 58 + 1 + 6 + 1 + 1 = 67 > 63; 54 characters fit exactly.
  TrainingJob ok = Job(std::string(54, 'a'));
  EXPECT_EQ(ChildName(ok.metadata.name, ReplicaType::kWorker, 1).size(), 63u);
  EXPECT_EQ(OnlyError(Validate(ok)), "OK");
  TrainingJob bad = Job(std::string(55, 'a'));
  EXPECT_EQ(OnlyError(Validate(bad)),
            "metadata.name: the longest child name <job>-<role>-<index> would exceed 63 "
            "characters; shorten metadata.name");
}

TEST(ValidateTest, NameBudgetCountsTheDigitsOfTheLastIndex) {
  // Ten workers: the last is worker-9 (one digit); eleven: worker-10 (two).
  TrainingJob job = Job(std::string(54, 'a'));
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 10;
  EXPECT_EQ(OnlyError(Validate(job)), "OK");
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 11;
  EXPECT_NE(OnlyError(Validate(job)), "OK");
}

TEST(ValidateTest, NameBudgetIgnoresRolesWithZeroReplicas) {
  TrainingJob job = Job(std::string(54, 'a'));
  job.spec.replica_specs[ReplicaType::kEvaluator].replicas = 0;  // "evaluator" is longer
  EXPECT_EQ(OnlyError(Validate(job)), "OK");
  job.spec.replica_specs[ReplicaType::kEvaluator].replicas = 1;
  EXPECT_NE(OnlyError(Validate(job)), "OK");
}

TEST(ValidateTest, ReplicasMustBeBetween0And10000) {
  TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kEvaluator].replicas = -1;
  EXPECT_EQ(OnlyError(Validate(job)),
            "spec.replicaSpecs.Evaluator.replicas: should be greater than or equal to 0");
  job.spec.replica_specs[ReplicaType::kEvaluator].replicas = 10001;
  EXPECT_EQ(OnlyError(Validate(job)),
            "spec.replicaSpecs.Evaluator.replicas: should be less than or equal to 10000");
}

TEST(ValidateTest, AtMostOneChief) {
  TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kChief].replicas = 2;
  EXPECT_EQ(OnlyError(Validate(job)),
            "spec.replicaSpecs: spec.replicaSpecs.Chief.replicas must be 0 or 1");
  job.spec.replica_specs[ReplicaType::kChief].replicas = 1;
  EXPECT_EQ(OnlyError(Validate(job)), "OK");
}

TEST(ValidateTest, PsNeedsAWorkerOrAChief) {
  TrainingJob job = Job();
  job.spec.replica_specs.clear();
  job.spec.replica_specs[ReplicaType::kPS].replicas = 1;
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 0;
  std::vector<FieldError> errors = Validate(job);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].message, "spec.replicaSpecs.PS needs at least one Worker or Chief replica");
  job.spec.replica_specs[ReplicaType::kChief].replicas = 1;
  EXPECT_EQ(OnlyError(Validate(job)), "OK");
}

TEST(ValidateTest, NeedsAWorkerOrAChiefToDecideSuccess) {
  TrainingJob job = Job();
  job.spec.replica_specs.clear();
  job.spec.replica_specs[ReplicaType::kEvaluator].replicas = 1;
  EXPECT_EQ(OnlyError(Validate(job)),
            "spec.replicaSpecs: spec.replicaSpecs needs at least one Worker or Chief replica: "
            "the success policy is decided by them");
}

TEST(ValidateTest, ReplicaSpecsMustNotBeEmpty) {
  TrainingJob job = Job();
  job.spec.replica_specs.clear();
  std::vector<FieldError> errors = Validate(job);
  ASSERT_FALSE(errors.empty());
  EXPECT_EQ(errors[0].path, "spec.replicaSpecs");
  EXPECT_EQ(errors[0].message, "should have at least 1 properties");
}

TEST(ValidateTest, RunPolicyMinimums) {
  TrainingJob job = Job();
  job.spec.run_policy.ttl_seconds_after_finished = -1;
  EXPECT_EQ(OnlyError(Validate(job)),
            "spec.runPolicy.ttlSecondsAfterFinished: should be greater than or equal to 0");
  job = Job();
  job.spec.run_policy.active_deadline_seconds = 0;
  EXPECT_EQ(OnlyError(Validate(job)),
            "spec.runPolicy.activeDeadlineSeconds: should be greater than or equal to 1");
  job = Job();
  job.spec.run_policy.backoff_limit = -1;
  EXPECT_EQ(OnlyError(Validate(job)),
            "spec.runPolicy.backoffLimit: should be greater than or equal to 0");
}

// A huge deadline overflowed startTime + activeDeadlineSeconds and failed the
// job at once: capped at 10 years, like the CRD.
TEST(ValidateTest, ActiveDeadlineSecondsHasAMaximum) {
  TrainingJob job = Job();
  job.spec.run_policy.active_deadline_seconds = kMaxActiveDeadlineSeconds;
  EXPECT_EQ(OnlyError(Validate(job)), "OK");
  job.spec.run_policy.active_deadline_seconds = 9'223'372'036'854'775'807;
  EXPECT_EQ(OnlyError(Validate(job)),
            "spec.runPolicy.activeDeadlineSeconds: should be less than or equal to 315360000");
}

TEST(ValidateTest, PortRange) {
  TrainingJob job = Job();
  job.spec.port = 0;
  EXPECT_EQ(OnlyError(Validate(job)), "spec.port: should be greater than or equal to 1");
  job.spec.port = 65536;
  EXPECT_EQ(OnlyError(Validate(job)), "spec.port: should be less than or equal to 65535");
  job.spec.port = 65535;
  EXPECT_EQ(OnlyError(Validate(job)), "OK");
}

TEST(ValidateTest, ClusterDomainMustBeADnsSubdomain) {
  TrainingJob job = Job();
  for (const char* good : {"cluster.local", "a", "k8s.example-1.org"}) {
    job.spec.cluster_domain = good;
    EXPECT_EQ(OnlyError(Validate(job)), "OK") << good;
  }
  for (const char* bad : {"Cluster.local", "cluster..local", ".local", "local.", "-a.b", "a_b"}) {
    job.spec.cluster_domain = bad;
    EXPECT_EQ(OnlyError(Validate(job)),
              "spec.clusterDomain: must be a DNS subdomain (dot-separated lower-case labels)")
        << bad;
  }
  job.spec.cluster_domain = "";
  EXPECT_EQ(OnlyError(Validate(job)), "spec.clusterDomain: should be at least 1 chars long");
}

TEST(ValidateUpdateTest, RunningJobKeepsItsClusterShape) {
  TrainingJob old_job = Job();
  TrainingJob updated = old_job;
  updated.spec.replica_specs[ReplicaType::kWorker].replicas = 3;
  EXPECT_EQ(OnlyError(ValidateUpdate(old_job, updated)),
            "spec: spec.replicaSpecs cannot change while the job is running; suspend it first "
            "(spec.runPolicy.suspend: true)");
  updated = old_job;
  updated.spec.replica_specs[ReplicaType::kWorker].pod_template["metadata"] = {{"x", 1}};
  EXPECT_NE(OnlyError(ValidateUpdate(old_job, updated)), "OK");
  updated = old_job;
  updated.spec.port = 3000;
  EXPECT_NE(OnlyError(ValidateUpdate(old_job, updated)), "OK");
  updated = old_job;
  updated.spec.cluster_domain = "example.org";
  EXPECT_NE(OnlyError(ValidateUpdate(old_job, updated)), "OK");
}

TEST(ValidateUpdateTest, SuspendedJobMayBeReshaped) {
  TrainingJob old_job = Job();
  old_job.spec.run_policy.suspend = true;
  TrainingJob updated = old_job;
  updated.spec.replica_specs[ReplicaType::kWorker].replicas = 3;
  updated.spec.port = 3000;
  updated.spec.run_policy.suspend = false;  // resume with the new shape in one update
  EXPECT_EQ(OnlyError(ValidateUpdate(old_job, updated)), "OK");
  // Suspending and reshaping in the same update is allowed too.
  TrainingJob running = Job();
  updated = running;
  updated.spec.run_policy.suspend = true;
  updated.spec.replica_specs[ReplicaType::kWorker].replicas = 1;
  EXPECT_EQ(OnlyError(ValidateUpdate(running, updated)), "OK");
}

TEST(ValidateUpdateTest, RunPolicyMayChangeWhileRunning) {
  TrainingJob old_job = Job();
  TrainingJob updated = old_job;
  updated.spec.run_policy.active_deadline_seconds = 100;
  updated.spec.run_policy.backoff_limit = 3;
  updated.spec.run_policy.ttl_seconds_after_finished = 10;
  EXPECT_EQ(OnlyError(ValidateUpdate(old_job, updated)), "OK");
}

TEST(ValidateUpdateTest, SuccessPolicyIsImmutable) {
  TrainingJob old_job = Job();
  old_job.spec.run_policy.suspend = true;
  TrainingJob updated = old_job;
  updated.spec.success_policy = SuccessPolicy::kAllWorkers;
  EXPECT_EQ(OnlyError(ValidateUpdate(old_job, updated)), "spec: spec.successPolicy is immutable");
}

TEST(ValidateUpdateTest, ServiceModeChangesOnlyWhileSuspended) {
  TrainingJob old_job = Job();
  TrainingJob updated = old_job;
  updated.spec.service_mode = ServiceMode::kJobWide;
  EXPECT_EQ(OnlyError(ValidateUpdate(old_job, updated)),
            "spec: spec.serviceMode cannot change while the job is running; suspend it first "
            "(spec.runPolicy.suspend: true)");
  old_job.spec.run_policy.suspend = true;
  updated.spec.run_policy.suspend = true;
  EXPECT_EQ(OnlyError(ValidateUpdate(old_job, updated)), "OK");
}

TEST(ToStatusTest, JoinsErrorsWithPaths) {
  EXPECT_TRUE(ToStatus({}).ok());
  Status s = ToStatus({{"a", "x"}, {"b.c", "y"}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "a: x; b.c: y");
}

// Several training replicas and no PS: valid for the CRD, refused by kubetrain-trainer.
TEST(TrainerWarningsTest, SeveralTrainersWithoutPsAreWarnedAbout) {
  TrainingJob job = Job();  // 2 workers, no PS
  auto w = TrainerWarnings(job.spec);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].path, "spec.replicaSpecs.Worker.replicas");
  EXPECT_NE(w[0].message.find("2 training replicas (Chief + Worker) and no PS"), std::string::npos)
      << w[0].message;
  // A chief and one worker: two trainers too; the path names the replica specs.
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 1;
  job.spec.replica_specs[ReplicaType::kChief].replicas = 1;
  w = TrainerWarnings(job.spec, "spec.trialTemplate");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].path, "spec.trialTemplate.replicaSpecs");
  // The job itself stays valid: a warning, not an error.
  EXPECT_EQ(OnlyError(Validate(job)), "OK");
}

TEST(TrainerWarningsTest, ShapesTheTrainerRunsAreNot) {
  TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kPS].replicas = 1;
  EXPECT_TRUE(TrainerWarnings(job.spec).empty()) << "PS + 2 workers";
  job.spec.replica_specs.erase(ReplicaType::kPS);
  job.spec.replica_specs[ReplicaType::kWorker].replicas = 1;
  EXPECT_TRUE(TrainerWarnings(job.spec).empty()) << "one worker";
  job.spec.replica_specs[ReplicaType::kEvaluator].replicas = 1;
  EXPECT_TRUE(TrainerWarnings(job.spec).empty()) << "one worker and an evaluator";
  job.spec.replica_specs.erase(ReplicaType::kWorker);
  job.spec.replica_specs[ReplicaType::kChief].replicas = 1;
  EXPECT_TRUE(TrainerWarnings(job.spec).empty()) << "one chief";
}

}  // namespace
}  // namespace kubetrain::api
