// The training loop and evaluation, shared by single-process and parameter-server runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/data/reader.h"
#include "trainer/model/model.h"
#include "trainer/worker/params.h"

namespace kubetrain::trainer {

struct TrainOptions {
  int64_t steps = 1000;  // the last step number (steps are 1-based)
  int log_every = 100;
  // Checkpoints (coordinator only; empty dir = none).
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  // After each checkpoint committed here, delete those of all but the newest N chains
  // (PruneCheckpointChains; a failure is a warning, never the run's end). 0: keep all.
  int checkpoint_keep_chains = 0;
  std::string loss_curve_path;  // "step,loss" per step, for tests; empty = none
  // Polled after every step (and before the first). `stop`: this process got SIGTERM
  // (stop/stop.h): with a checkpoint_dir, the step just finished is saved and committed
  // (unless it is already), then Train returns with `stopped`; without one it returns at
  // once (the progress since the last checkpoint is lost). `save_now`: a PS got SIGTERM
  // and asks the coordinator for a checkpoint (ParamClient::TakeCheckpointRequest): the
  // step is saved and training goes on. Null: never.
  std::function<bool()> stop;
  std::function<bool()> save_now;
  // Called after every step with its loss and batch size (TensorBoard summaries). Null: none.
  std::function<void(int64_t step, float loss, int examples)> on_step;
};

struct TrainResult {
  int64_t last_step = 0;
  bool stopped = false;      // ended by options.stop before options.steps
  int64_t last_saved = -1;   // the last checkpoint this call committed (-1: none)
  double last_loss = 0;      // mean over the last min(100, steps) steps
  double samples_per_s = 0;  // over the whole run
  // Per CPU-second of this process (every thread) over the run: what the steps cost, where
  // samples_per_s also says how much CPU the machine gave.
  double samples_per_cpu_s = 0;
  std::vector<float> losses;
  // Where the run's wall-clock time went (seconds): waiting for the next batch (it is read
  // and parsed on a background thread while a step computes), pulling parameters, the
  // model's forward and backward pass, pushing gradients. The *_cpu fields are the CPU
  // seconds the whole process (every thread) used during each phase: cpu / wall is how
  // many threads were busy on average, so a phase that runs on one thread while the other
  // compute threads wait shows about 1.
  struct Phases {
    double read = 0, pull = 0, compute = 0, push = 0;
    double read_cpu = 0, pull_cpu = 0, compute_cpu = 0, push_cpu = 0;
  } phases;
};

// Runs steps start_step+1 .. options.steps: read a batch, pull, forward/backward, push.
StatusOr<TrainResult> Train(Model& model, StripeReader& reader, ParamClient& params,
                            const TrainOptions& options, int64_t start_step);

struct EvalMetrics {
  int64_t examples = 0;
  double log_loss = 0;
  double auc = 0.5;  // binary models only
  double accuracy = 0;
};

// Evaluates the current parameters on up to max_examples examples of `reader` (a one-pass
// reader; 0 = all of it).
StatusOr<EvalMetrics> Evaluate(Model& model, StripeReader& reader, ParamClient& params,
                               int64_t max_examples);

}  // namespace kubetrain::trainer
