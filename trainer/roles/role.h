// The trainer's roles, one file each (trainer/roles.h says what each does and how the
// process picks one): the parameter server (ps.cc), a worker (worker.cc) and the end of
// training the coordinator runs (coordinator.cc), the evaluator (evaluator.cc), a single
// process (single_process.cc) and the one-shot tools --predict / --export
// (model_tools.cc); steps.cc holds what several of them share.
//
// Every role returns a RoleResult: an error Status, or how it ended when it did not fail.
// ExitCode is the one mapping from that to the workload contract's exit codes; Run
// (trainer/roles.cc) logs a role's error once and exits with it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "trainer/cluster/cluster.h"
#include "trainer/config.h"
#include "trainer/data/reader.h"
#include "trainer/export/export.h"
#include "trainer/model/model.h"
#include "trainer/net/transport.h"
#include "trainer/observe/summaries.h"
#include "trainer/rpc/remote_params.h"
#include "trainer/worker/params.h"
#include "trainer/worker/train.h"

namespace kubetrain::trainer::roles {

// How a role ended when it did not fail. SIGTERM and a missed --target-* are not errors
// (the run did what it was told) but have exit codes of their own.
enum class Ending {
  kDone,          // 0
  kStopped,       // 143: stopped by SIGTERM, after saving where there is a --checkpoint-dir
  kTargetMissed,  // 3: trained and evaluated, below --target-auc / --target-accuracy
};
using RoleResult = StatusOr<Ending>;

// The workload contract's exit code (common/workload_contract.h) for a role's result: an
// Ending's own code; Unavailable and DeadlineExceeded (a peer unreachable, a deadline)
// retryable; every other error permanent.
int ExitCode(const RoleResult& r);

// --- The roles.
using observe::TrainingSummaries;

// --predict / --export: one-shot tools on the model in --checkpoint-dir.
RoleResult RunModelTool(const Config& c, Model& model);

// Trains in this process with every parameter local: no cluster, or a cluster whose only
// training replica is this one and which has no PS (`task` names it in the metrics).
RoleResult RunSingleProcess(const Config& c, Model& model, const OptimizerConfig& opt,
                            const std::string& task, TrainingSummaries* summaries);

// A parameter server: serves its shard until the coordinator ends the job.
RoleResult RunPs(const Config& c, const ClusterInfo& cluster, Model& model,
                 const OptimizerConfig& opt, const AuthKey& key);

// A worker or the chief: trains against the parameter servers; the coordinator then ends
// the job (FinishAsCoordinator).
RoleResult RunWorker(const Config& c, const ClusterInfo& cluster, Model& model, const AuthKey& key,
                     TrainingSummaries* summaries);

// Where a training run began: the step, and the committed checkpoint it resumed from (none:
// a fresh start).
struct RunStart {
  int64_t step = 0;
  std::optional<int64_t> restored;
};

// The coordinator's end of training once its own steps are done (`done`: the workers
// known to have finished). Its first step is WaitForWorkers on the real clock.
RoleResult FinishAsCoordinator(const Config& c, const ClusterInfo& cluster, Model& model,
                               RemoteParams& params, const TrainResult& r, int done,
                               const RunStart& from, const nlohmann::json& ps_bytes,
                               TrainingSummaries* summaries);

// The coordinator's wait for every training replica to finish, on `clock` so a test
// drives it with a FakeClock. Until `done_count` (RemoteParams::DoneCount) reaches
// `trainers` it polls it every `poll`, after looking at `stop_requested` (SIGTERM) and
// the deadline, `timeout` after the call.
// Returns kAllFinished, kStopRequested (the caller saves and stops), DeadlineExceeded
// (some workers did not finish within --finish-timeout: retryable), or done_count's error.
struct WorkersWait {
  int trainers = 0;
  int done = 0;  // known to have finished before the first poll
  Clock::Duration timeout{};
  Clock::Duration poll = std::chrono::milliseconds(200);
  Clock* clock = &RealClock();
};
enum class WorkersWaitEnd { kAllFinished, kStopRequested };
StatusOr<WorkersWaitEnd> WaitForWorkers(const WorkersWait& w,
                                        const std::function<StatusOr<int>()>& done_count,
                                        const std::function<bool()>& stop_requested);

// The side-car evaluator: evaluates every checkpoint the coordinator commits.
RoleResult RunEvaluator(const Config& c, const ClusterInfo& cluster, Model& model,
                        const OptimizerConfig& opt, TrainingSummaries* summaries);

// --- What the roles share (steps.cc).

// The model the flags describe, computing at `precision`.
StatusOr<std::unique_ptr<Model>> BuildModel(const Config& c, Precision precision);
// The architecture as the exporter sees it.
ModelSpec SpecFrom(const Config& c);

nlohmann::json EmbeddingJson(const EmbeddingStats& e);
std::array<uint64_t, 5> EmbeddingArray(const EmbeddingStats& e);

// The data files in `dir` whose names contain `match`, read as this process's stripe.
StatusOr<ReaderOptions> Reader(const Config& c, const std::string& dir, const std::string& match,
                               int stripe, int stripes, bool loop);
// S3 data: each worker streams whole objects of its own (see StripeReader).
SourceOptions Source(const Config& c, const std::string& dir);
// Opens this process's stripe of the training data (looping), positioned after the `start`
// batches it already trained on.
StatusOr<std::unique_ptr<StripeReader>> OpenTrainingData(const Config& c, int stripe, int stripes,
                                                         int batch_size, int64_t start);

// The training loop's options from the flags; periodic checkpoints only when `checkpoints`;
// TensorBoard points to `summaries` (may be null).
TrainOptions TrainOptionsFrom(const Config& c, bool checkpoints, TrainingSummaries* summaries);

// Writes the final metrics where Kubernetes picks them up; a failure is only a warning.
void WriteTerminationMessage(const Config& c, const nlohmann::json& j);
// A process stopped on SIGTERM tells the operator what the stop cost (its termination
// message's "stopped": the PodDisrupted event and lastDisruption).
Ending StoppedSaying(const Config& c, const std::string& cost);
// A training process that stopped on SIGTERM: what it leaves behind (logged, and said to
// the operator).
Ending Stopped(const Config& c, const TrainResult& r);

// Reads the model in the checkpoint root `model_dir` and writes model.onnx + model.json
// to `dir` (large tensors in model.onnx.data past 2 GiB or --onnx-external-threshold). A
// model that ONNX cannot hold even so is not an error here: its reason goes to
// `*unexportable` (the checkpoint stays the trained model).
Status ExportOnnx(const Config& c, const std::string& model_dir, const std::string& dir,
                  std::string* unexportable);

// The end of a training run that evaluates: evaluates (unless --no-eval), writes --output
// (model, ONNX, metrics.json) and the termination message, and checks the targets.
RoleResult Finish(const Config& c, Model& model, ParamClient& params, const TrainResult& r,
                  nlohmann::json metrics, TrainingSummaries* summaries);

// The last checkpoint of a run (unless the run resumed from it and took no step), then
// FINAL, which tells an evaluator that this checkpoint is the end of training.
Status SaveFinalCheckpoint(const Config& c, ParamClient& params, const TrainResult& r,
                           const RunStart& from);

// How many pushes this process numbered for each PS (each is applied once there).
nlohmann::json PushesSent(const RemoteParams& params, int num_ps);

}  // namespace kubetrain::trainer::roles
