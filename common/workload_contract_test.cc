#include "common/workload_contract.h"

#include <gtest/gtest.h>

namespace kubetrain::contract {
namespace {

TEST(WorkloadContractTest, CoordinatorIsChiefZeroElseWorkerZero) {
  EXPECT_TRUE(IsCoordinator("chief", 0, /*has_chief=*/true));
  EXPECT_FALSE(IsCoordinator("worker", 0, /*has_chief=*/true));
  EXPECT_TRUE(IsCoordinator("worker", 0, /*has_chief=*/false));
  EXPECT_FALSE(IsCoordinator("worker", 1, /*has_chief=*/false));
  EXPECT_FALSE(IsCoordinator("ps", 0, /*has_chief=*/false));
  EXPECT_FALSE(IsCoordinator("evaluator", 0, /*has_chief=*/true));
  EXPECT_EQ(CoordinatorRole(true), kRoleChief);
  EXPECT_EQ(CoordinatorRole(false), kRoleWorker);
}

TEST(WorkloadContractTest, ExitCodesClassifyAsSuccessPermanentOrRetryable) {
  EXPECT_EQ(ClassifyExit(0), ExitClass::kSuccess);
  EXPECT_EQ(ClassifyExit(1), ExitClass::kPermanent);
  EXPECT_EQ(ClassifyExit(127), ExitClass::kPermanent);
  EXPECT_EQ(ClassifyExit(128), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExit(255), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExit(-1), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExit(256), ExitClass::kRetryable);
}

TEST(WorkloadContractTest, NamedExitCodesFallInTheirClass) {
  EXPECT_EQ(ClassifyExit(kExitSuccess), ExitClass::kSuccess);
  EXPECT_EQ(ClassifyExit(kExitPermanent), ExitClass::kPermanent);
  EXPECT_EQ(ClassifyExit(kExitTargetMissed), ExitClass::kPermanent);
  EXPECT_EQ(ClassifyExit(kExitRetryable), ExitClass::kRetryable);
  // SIGTERM after a checkpoint: 128 + SIGTERM(15), and a replacement may resume.
  EXPECT_EQ(kExitStoppedAfterCheckpoint, 128 + 15);
  EXPECT_EQ(ClassifyExit(kExitStoppedAfterCheckpoint), ExitClass::kRetryable);
}

TEST(WorkloadContractTest, ContractEnvListsEveryVariableOnce) {
  EXPECT_EQ(kContractEnv.size(), 4u);
  for (size_t i = 0; i < kContractEnv.size(); ++i) {
    for (size_t j = i + 1; j < kContractEnv.size(); ++j)
      EXPECT_NE(kContractEnv[i], kContractEnv[j]);
  }
  EXPECT_EQ(kEnvClusterConfig, "CLUSTER_CONFIG");
  EXPECT_EQ(kEnvPodName, "POD_NAME");
  EXPECT_EQ(kEnvTfConfig, "TF_CONFIG");
  EXPECT_EQ(kEnvAuthKey, "KUBETRAIN_AUTH_KEY");
}

// The names `kubetrain logs` reads: <output>/logs/<role>-<index>.log.
TEST(WorkloadContractTest, LogTailIsLogsSlashRoleDashIndexDotLog) {
  EXPECT_EQ(LogTailPath(ReplicaName(kRoleWorker, 0)), "logs/worker-0.log");
  EXPECT_EQ(LogTailPath(ReplicaName(kRolePs, 1)), "logs/ps-1.log");
  EXPECT_EQ(LogTailPath(ReplicaName(kRoleEvaluator, 0)), "logs/evaluator-0.log");
  EXPECT_EQ(LogTailPath(ReplicaName(kRoleChief, 0)), "logs/chief-0.log");
  EXPECT_EQ(LogTailPath(kLocalReplica), "logs/local-0.log");
  EXPECT_EQ(kTensorBoardDir, "tensorboard");
}

}  // namespace
}  // namespace kubetrain::contract
