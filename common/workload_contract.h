// The workload contract: everything the operator and the trainer agree on about a
// replica, in one place for both sides (docs/architecture.md, "The workload
// contract"; docs/api.md for users). The operator sets the environment, reads
// the metrics and classifies the exit code; the trainer reads the environment,
// serves the metrics and chooses the exit code. Neither side includes the
// other: both include this header. Constants and pure functions, no I/O;
// thread-safe.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace kubetrain::contract {

// --- Environment of the main container, set by the operator (replacing any of
// the same name in the pod template).
// JSON, role -> ["host:port", ...] of the in-cluster replicas.
inline constexpr std::string_view kEnvClusterConfig = "CLUSTER_CONFIG";
// "<role>-<index>".
inline constexpr std::string_view kEnvPodName = "POD_NAME";
// {"cluster": ..., "task": {"type", "index"}, "environment": "cloud"}, for
// stock TensorFlow images; read when CLUSTER_CONFIG is absent.
inline constexpr std::string_view kEnvTfConfig = "TF_CONFIG";
// The job's 32-byte key as 64 lower-case hex characters.
inline constexpr std::string_view kEnvAuthKey = "KUBETRAIN_AUTH_KEY";
inline constexpr std::array<std::string_view, 4> kContractEnv = {kEnvClusterConfig, kEnvPodName,
                                                                 kEnvTfConfig, kEnvAuthKey};

// --- Roles, as spelled in CLUSTER_CONFIG, POD_NAME, TF_CONFIG, child names and
// labels. Evaluators have an identity but are never listed in the cluster.
inline constexpr std::string_view kRoleChief = "chief";
inline constexpr std::string_view kRolePs = "ps";
inline constexpr std::string_view kRoleWorker = "worker";
inline constexpr std::string_view kRoleEvaluator = "evaluator";

// --- The coordinator: the replica whose success decides the job, that serves
// the job's progress and checkpoints. Chief 0 when the job has a chief, else
// worker 0.
inline constexpr int kCoordinatorIndex = 0;
constexpr std::string_view CoordinatorRole(bool has_chief) {
  return has_chief ? kRoleChief : kRoleWorker;
}
constexpr bool IsCoordinator(std::string_view role, int index, bool has_chief) {
  return role == CoordinatorRole(has_chief) && index == kCoordinatorIndex;
}

// --- Exit codes of the main container. 0 success; 1-127 permanent (the
// ExitCode restart policy fails the job); 128-255 retryable (restarted).
enum class ExitClass { kSuccess, kPermanent, kRetryable };
// Out-of-range codes (negative, > 255) are retryable: no process can return
// them, so they come from a runtime that lost the real one.
ExitClass ClassifyExit(int code);
inline constexpr int kExitSuccess = 0;
inline constexpr int kExitPermanent = 1;
// The trainer's evaluation missed its --target (permanent).
inline constexpr int kExitTargetMissed = 3;
// A transient failure (an unreachable peer, a deadline).
inline constexpr int kExitRetryable = 200;
// Stopped by SIGTERM after saving a checkpoint (128 + 15, retryable): a
// replacement resumes from that checkpoint.
inline constexpr int kExitStoppedAfterCheckpoint = 143;

// --- The termination message (terminationMessagePath): a JSON object. A process
// stopped by SIGTERM writes {"stopped": "<what the stop cost>"} (the checkpoint it
// saved, or that its progress is lost); the operator shows it in the PodDisrupted event
// and status.replicaStatuses[role].lastDisruption.message. Otherwise the final metrics.
inline constexpr std::string_view kTerminationStopped = "stopped";

// --- What a replica leaves in the job's --output (a directory or s3:// prefix) for after its
// pod is gone. The last 1 MiB of its own log, written when it exits (success, failure,
// SIGTERM; not on SIGKILL or an OOM kill) as <output>/logs/<role>-<index>.log (`kubetrain
// logs` reads these names); a trainer with no cluster (one process) is "local-0". Its
// TensorBoard event files under <output>/tensorboard/<role>-<index>/ (--logdir replaces
// <output>/tensorboard).
inline constexpr std::string_view kLogsDir = "logs";
inline constexpr std::string_view kTensorBoardDir = "tensorboard";
inline constexpr std::string_view kLocalReplica = "local-0";
inline std::string ReplicaName(std::string_view role, int index) {
  return std::string(role) + "-" + std::to_string(index);
}
// "logs/<replica>.log", relative to --output.
inline std::string LogTailPath(std::string_view replica) {
  return std::string(kLogsDir) + "/" + std::string(replica) + ".log";
}

// --- Metrics: GET /metrics on this port (the trainer's --metrics-port default),
// Prometheus text; the operator finds it by the container port's name.
inline constexpr int kDefaultMetricsPort = 9090;
inline constexpr std::string_view kMetricsPortName = "metrics";

namespace metric {
// Gauges. A process that serves kStep and kTotalSteps gets status.progress.
inline constexpr std::string_view kStep = "kubetrain_trainer_step";
inline constexpr std::string_view kTotalSteps = "kubetrain_trainer_total_steps";
inline constexpr std::string_view kLoss = "kubetrain_trainer_loss";
inline constexpr std::string_view kSamplesPerSecond = "kubetrain_trainer_samples_per_second";
inline constexpr std::string_view kStepsPerSecond = "kubetrain_trainer_steps_per_second";
inline constexpr std::string_view kCheckpointAge = "kubetrain_trainer_checkpoint_age_seconds";
inline constexpr std::string_view kCheckpointStep = "kubetrain_trainer_checkpoint_step";
// The evaluator's, once it evaluated a checkpoint.
inline constexpr std::string_view kEvalStep = "kubetrain_evaluator_checkpoint_step";
inline constexpr std::string_view kEvalAuc = "kubetrain_evaluator_auc";
inline constexpr std::string_view kEvalLogLoss = "kubetrain_evaluator_log_loss";
inline constexpr std::string_view kEvalAccuracy = "kubetrain_evaluator_accuracy";
inline constexpr std::string_view kEvalExamplesPerSecond =
    "kubetrain_evaluator_examples_per_second";
inline constexpr std::string_view kEvalCheckpoints = "kubetrain_evaluator_checkpoints_total";
// Counters.
inline constexpr std::string_view kPsSentBytes = "kubetrain_trainer_ps_sent_bytes_total";
inline constexpr std::string_view kPsReceivedBytes = "kubetrain_trainer_ps_received_bytes_total";
}  // namespace metric

}  // namespace kubetrain::contract
