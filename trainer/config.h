// The trainer's configuration: its command line parsed once into typed values (enums,
// the layer list, numbers) and checked, then handed to every role as one value. No role
// reads a flag as text again.
//
// Two kinds of checks, both before any role starts:
//   - per flag, in the parse (AddTrainerFlags): names of enums, the layer list, ranges. A
//     bad value fails CLI11's parse, "--flag: why"; the trainer exits 1 (permanent).
//   - across flags (CheckConfig): a model and its data format, the embedding bounds. An
//     InvalidArgument naming the flags; the trainer exits 1 (permanent).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/workload_contract.h"
#include "trainer/data/generator.h"
#include "trainer/data/reader.h"
#include "trainer/model/layers.h"
#include "trainer/ps/optimizer.h"
#include "trainer/ps/shard.h"
#include "trainer/rpc/protocol.h"

namespace CLI {
class App;
}  // namespace CLI

namespace kubetrain::trainer {

enum class ModelKind { kWideDeep, kMlp };
StatusOr<ModelKind> ParseModelKind(std::string_view name);  // "wide_deep" | "mlp"
// The name the exported model.json carries (ModelSpec::kind).
const char* ModelKindName(ModelKind kind);

// What one `kubetrain-trainer` process was told (see --help for each flag). Constant once
// parsed, except data_dir, which Run resolves (/data, or a generated directory) before the
// roles start.
struct Config {
  ModelKind model = ModelKind::kWideDeep;
  // Empty: /data, except with --generate-data, which then writes to a new directory under
  // $TMPDIR (else /tmp) that is removed when the process exits (images run as a non-root
  // user without a writable /data).
  std::string data_dir;
  DataFormat data_format = DataFormat::kCriteoTsv;
  std::string train_match = "train";
  std::string eval_match = "eval";
  int64_t generate_data = 0;
  int64_t generate_eval = 0;
  GeneratorProfile generate_profile = GeneratorProfile::kSmall;
  uint64_t data_seed = 1;
  int64_t steps = 1000;
  int batch_size = 512;
  std::vector<int> layers = {1024, 512, 256};  // hidden layer sizes, each positive
  int embedding_dim = 16;
  int num_features = 0;
  int num_classes = 2;
  OptimizerKind optimizer = OptimizerKind::kAdagrad;
  float lr = 0.05f;  // positive
  float adagrad_initial = 0.1f;
  uint64_t seed = 1;
  bool sync = false;
  bool no_pipeline = false;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int checkpoint_full_every = 1;
  int checkpoint_keep_chains = 2;  // with checkpoint_full_every > 1 (PruneCheckpointChains)
  int64_t embedding_admit_count = 0;
  int64_t embedding_evict_steps = 0;
  int64_t embedding_capacity = 0;
  int64_t eval_examples = 0;
  bool no_eval = false;
  std::string termination_log = "/dev/termination-log";
  double target_auc = 0;
  double target_accuracy = 0;
  int threads = 0;
  Precision precision = Precision::kFp32;  // wanted; a CPU without BF16 computes FP32
  WireFloat wire_precision = WireFloat::kF32;
  int log_every = 100;
  std::string loss_curve;
  int64_t max_bad_lines = 1000;
  int startup_timeout_s = 300;
  int reconnect_timeout_s = 300;
  int finish_timeout_s = 86400;
  int listen_port = -1;
  std::string data_cache;
  std::string output;
  int metrics_port = contract::kDefaultMetricsPort;
  double metrics_final_wait_s = 0;  // on success, wait this long for a read of the last step
  // One-shot tools on the model in checkpoint_dir (e.g. --output's model/), then exit:
  std::string predict;     // write the trainer's predictions for the eval files here
  std::string export_dir;  // write model.onnx + model.json here
  // ONNX tensors of at least this many bytes go to model.onnx.data; 0: only past 2 GiB.
  uint64_t onnx_external_threshold = 0;
  // Evaluation data (default --data-dir), and the evaluator's watch of --checkpoint-dir.
  std::string eval_data;
  double eval_poll_s = 2;
  int eval_timeout_s = 3600;
  // SIGTERM (trainer/stop/stop.h): the process exits within this many seconds (143). A PS
  // waits up to half of it for the coordinator's checkpoint request.
  double stop_timeout_s = 25;
  // TensorBoard event files (trainer/observe/summaries.h): under <logdir>/<replica>/;
  // empty: <output>/tensorboard, none without --output.
  std::string logdir;
  int summary_every = 10;       // steps between training points
  double summary_flush_s = 10;  // seconds between writes (S3: PUTs) of the event file

  // --predict or --export: a one-shot tool on the model in checkpoint_dir.
  bool IsModelTool() const { return !predict.empty() || !export_dir.empty(); }
  // The evaluation files' directory: --eval-data, else --data-dir.
  const std::string& EvalDir() const { return eval_data.empty() ? data_dir : eval_data; }
  OptimizerConfig Optimizer() const;
};

// Adds every flag of the trainer to `app`, each writing its field of `*c` (which must
// outlive the parse). Per-flag checks fail the parse with a CLI::ValidationError.
void AddTrainerFlags(CLI::App& app, Config* c);

// The checks that relate several flags: the model against the data format, the embedding
// bounds (as every role applies them). InvalidArgument naming the flags.
Status CheckConfig(const Config& c);

// The embedding bounds and checkpoint kind from the flags (--embedding-*,
// --checkpoint-full-every), for a shard that gets `updates_per_step` updates per step.
// InvalidArgument naming the flag when one is out of range.
StatusOr<EmbeddingOptions> BuildEmbeddingOptions(const Config& c, int updates_per_step);

}  // namespace kubetrain::trainer
