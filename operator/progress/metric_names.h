// The trainer's Prometheus metrics that the operator and `kubetrain run` read
// (the workload contract: docs/api.md, "Metrics"). Header-only, no
// dependencies: the trainer (which serves them) and the progress reader (which
// reads them) share these names.
#pragma once

#include <string_view>

namespace kubetrain::progress {

// The default port of the trainer's metrics endpoint (GET /metrics), and the
// name of the container port the operator reads it from.
inline constexpr int kDefaultMetricsPort = 9090;
inline constexpr std::string_view kMetricsPortName = "metrics";

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

}  // namespace kubetrain::progress
