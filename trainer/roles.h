// The trainer's role drivers: what one process of `kubetrain-trainer` does as a
// parameter server, a worker (or chief), an evaluator or a single process, from
// its flags and the cluster in its environment (CLUSTER_CONFIG + POD_NAME, or
// TF_CONFIG; neither: one process).
//
// The cluster shapes it runs: PS replicas with one or more workers (and at most one
// chief), or one training replica (one Worker, or one Chief) with no PS, which trains
// in-process exactly as a single process does; an evaluator beside either. Several
// training replicas with no PS exit 1 (permanent) with the reason in the termination
// message: only a PS shares parameters between processes.
//
// Exit codes follow the workload contract (common/workload_contract.h): 0 success, 1-127 permanent
// failure (bad flags/config/data, target metric missed), 128-255 retryable (a
// peer unreachable after the startup timeout, a lost parameter server); 143: stopped by
// SIGTERM after saving (a committed checkpoint at the step reached, when there is a
// --checkpoint-dir; see trainer/stop/stop.h).
//
// SIGTERM, by role: the coordinator (chief, else worker 0) and a lone process finish their
// step, save and commit a checkpoint at it, and exit 143; another worker hands in its last
// push and exits 143; a PS keeps serving and flags its push replies until the coordinator's
// checkpoint request (at most --stop-timeout / 2), then exits 143. A PS that alone got
// SIGTERM (kubectl delete pod ps-0) so makes the running coordinator save at its current
// step; when every pod got it at once (suspend, drain) the coordinator's own save serves all.
// The evaluator and --predict/--export keep SIGTERM's default action.
//
// What outlives the process (common/workload_contract.h): every role keeps the last 1 MiB of
// its log and writes it to <--output>/logs/<role>-<index>.log (one process: local-0.log)
// when Run returns, whatever the outcome; training replicas and the evaluator write
// TensorBoard event files (trainer/observe/summaries.h).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/workload_contract.h"
#include "trainer/ps/shard.h"

namespace kubetrain::trainer {

// The command line (trainer/main.cc parses it; see --help for each flag).
struct Flags {
  std::string model = "wide_deep";
  // Empty: /data, except with --generate-data, which then writes to a new directory under
  // $TMPDIR (else /tmp) that is removed when the process exits (images run as a non-root
  // user without a writable /data).
  std::string data_dir;
  std::string data_format = "criteo_tsv";
  std::string train_match = "train";
  std::string eval_match = "eval";
  int64_t generate_data = 0;
  int64_t generate_eval = 0;
  std::string generate_profile = "small";  // small or criteo-kaggle (data/generator.h)
  uint64_t data_seed = 1;
  int64_t steps = 1000;
  int batch_size = 512;
  std::string layers = "1024,512,256";
  int embedding_dim = 16;
  int num_features = 0;
  int num_classes = 2;
  std::string optimizer = "adagrad";
  float lr = 0.05f;
  float adagrad_initial = 0.1f;
  uint64_t seed = 1;
  bool sync = false;
  bool no_pipeline = false;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int checkpoint_full_every = 1;
  int64_t embedding_admit_count = 0;
  int64_t embedding_evict_steps = 0;
  int64_t embedding_capacity = 0;
  int64_t eval_examples = 0;
  bool no_eval = false;
  std::string termination_log = "/dev/termination-log";
  double target_auc = 0;
  double target_accuracy = 0;
  int threads = 0;
  std::string precision = "fp32";
  std::string wire_precision = "fp32";
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
};

// Runs this process's role to the end and returns its exit code.
int Run(const Flags& f);

// The embedding bounds and checkpoint kind from the flags (--embedding-*,
// --checkpoint-full-every), for a shard that gets `updates_per_step` updates per step.
// InvalidArgument naming the flag when one is out of range.
StatusOr<EmbeddingOptions> BuildEmbeddingOptions(const Flags& f, int updates_per_step);

}  // namespace kubetrain::trainer
