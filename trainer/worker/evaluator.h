// The side-car evaluator's loop: watch a checkpoint directory, evaluate every new committed
// checkpoint, and end after the run's final one.
//
// Flow: each round reads <dir>/FINAL first, then lists the committed checkpoints
//   (ListCheckpoints: MANIFEST present and parsed) and evaluates those newer than the last
//   one evaluated, oldest first: load (LoadShard checks every shard against the MANIFEST),
//   evaluate, report. It ends when FINAL names a step of at least `final_step_at_least` and
//   that checkpoint has been evaluated (reported again with final = true if it was
//   evaluated before FINAL appeared). Otherwise it polls every `poll_interval`.
// Guarantees: FINAL is written only after its checkpoint is committed and is read before
//   the listing, so a FINAL seen names a checkpoint the same round lists. Every checkpoint
//   committed while the loop runs is evaluated once, in step order; none is skipped
//   unless it is corrupt (warned, reported nowhere, the loop goes on) or its MANIFEST does
//   not parse. The final checkpoint being corrupt, missing or never written is an error.
// Errors: FailedPrecondition when no new checkpoint and no FINAL arrived within
//   `wait_timeout` (the message says whether any checkpoint ever appeared) or the final
//   checkpoint cannot be used; transient I/O errors (Unavailable, DeadlineExceeded) as they
//   come; the callbacks' errors (other than a corrupt load) as they come.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/worker/params.h"
#include "trainer/worker/train.h"

namespace kubetrain::trainer {

struct WatchOptions {
  std::string checkpoint_dir;
  int num_shards = 1;
  // A FINAL naming an earlier step is left over from an earlier, shorter run in the same
  // directory: it is not this run's end (the job's --steps).
  int64_t final_step_at_least = 0;
  std::chrono::milliseconds poll_interval{2000};
  // The longest wait for the first checkpoint, and then for each next one or FINAL.
  std::chrono::milliseconds wait_timeout{std::chrono::hours(1)};
};

struct WatchCallbacks {
  // Loads a committed checkpoint. Errors other than Unavailable/DeadlineExceeded mean the
  // checkpoint is corrupt (or was removed) and it is skipped.
  std::function<StatusOr<std::unique_ptr<ParamClient>>(const Checkpoint&)> load;
  // Evaluates the loaded parameters.
  std::function<StatusOr<EvalMetrics>(ParamClient&)> evaluate;
  // Keeps one checkpoint's metrics (final: it is the run's last checkpoint).
  std::function<Status(int64_t step, const EvalMetrics& metrics, bool final)> report;
};

struct WatchResult {
  int64_t final_step = 0;
  EvalMetrics final_metrics;
  int evaluated = 0;  // checkpoints evaluated, the final one included
  int corrupt = 0;    // checkpoints skipped as corrupt
};

StatusOr<WatchResult> WatchCheckpoints(const WatchOptions& options, const WatchCallbacks& cb);

}  // namespace kubetrain::trainer
