// `kubetrain-trainer`: the oneDNN parameter-server trainer (the default workload).
//
// This file parses the flags; the role drivers (parameter server, worker, single
// process) and the exit-code contract are in roles.h.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>

#include "kubetrain/version.h"
#include "trainer/roles.h"

int main(int argc, char** argv) {
  // OpenMP threads spin while they wait by default. Next to other busy processes (a PS and
  // workers sharing a node, `kubetrain run` on a laptop, CFS quota) that spinning starves
  // the threads doing work: 7x slower measured on a shared 2-core machine. The policy is
  // read once when libgomp loads, before main, so set it and re-execute this binary (same
  // PID) unless the user chose a policy. Passive costs little on dedicated cores: a few
  // wake-ups per layer per step against tens of milliseconds of GEMM.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && ::setenv("OMP_WAIT_POLICY", "passive", 1) == 0) {
    ::execv("/proc/self/exe", argv);
    // exec failed (no /proc): carry on with the default policy.
  }
  using kubetrain::trainer::Flags;
  Flags f;
  CLI::App app{"kubetrain-trainer: parameter-server training with oneDNN"};
  app.set_version_flag("--version", std::string("kubetrain-trainer ") + kubetrain::kVersion);
  app.add_option("--model", f.model, "wide_deep (Criteo) or mlp (dense CSV)")
      ->capture_default_str();
  app.add_option("--data-dir,--data", f.data_dir,
                 "directory or s3://bucket/prefix/ with the data files (default /data; with "
                 "--generate-data, a new directory under $TMPDIR or /tmp, removed at exit)");
  app.add_option("--data-cache", f.data_cache,
                 "S3 data: keep a local copy of each object here after the first full read");
  app.add_option(
      "--output", f.output,
      "directory or s3://bucket/prefix/ for the final metrics.json, model/ (a checkpoint) "
      "and model.onnx + model.json (for serving)");
  app.add_option("--data-format", f.data_format, "criteo_tsv, criteo_csv or dense_csv")
      ->capture_default_str();
  app.add_option("--train-files", f.train_match, "training files: names containing this")
      ->capture_default_str();
  app.add_option("--eval-files", f.eval_match, "evaluation files: names containing this")
      ->capture_default_str();
  app.add_option("--generate-data", f.generate_data,
                 "write N synthetic Criteo training lines (and N/5 evaluation lines) to "
                 "--data-dir first, unless present (no --data-dir: a temporary directory)");
  app.add_option("--generate-eval", f.generate_eval, "evaluation lines to generate");
  app.add_option("--generate-profile", f.generate_profile,
                 "small (200 values per field) or criteo-kaggle (Kaggle's 26 cardinalities, "
                 "33.8M values, Zipf-like)")
      ->capture_default_str();
  app.add_option("--data-seed", f.data_seed, "seed of the synthetic ground truth")
      ->capture_default_str();
  app.add_option("--steps", f.steps, "training steps per worker")->capture_default_str();
  app.add_option("--batch-size", f.batch_size, "examples per step and worker")
      ->capture_default_str();
  app.add_option("--layers", f.layers, "hidden layer sizes")->capture_default_str();
  app.add_option("--embedding-dim", f.embedding_dim, "embedding dimension")->capture_default_str();
  app.add_option("--num-features", f.num_features, "mlp: dense features per line");
  app.add_option("--num-classes", f.num_classes, "mlp: classes")->capture_default_str();
  app.add_option("--optimizer", f.optimizer, "sgd, adagrad or adam")->capture_default_str();
  app.add_option("--lr", f.lr, "learning rate")->capture_default_str();
  app.add_option("--adagrad-initial", f.adagrad_initial, "Adagrad initial accumulator")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "parameter initialisation seed")->capture_default_str();
  app.add_flag("--sync", f.sync, "synchronous training (default asynchronous)");
  app.add_flag("--no-pipeline", f.no_pipeline,
               "asynchronous workers: pull and push in step, not one step behind the compute "
               "(pipelining overlaps communication with compute; its pulls lack the worker's own "
               "last push)");
  app.add_option("--checkpoint-dir", f.checkpoint_dir,
                 "checkpoint directory shared by all replicas, or s3://bucket/prefix/");
  app.add_option("--checkpoint-every", f.checkpoint_every,
                 "steps between checkpoints (0: only at the end)");
  app.add_option("--checkpoint-full-every", f.checkpoint_full_every,
                 "every Kth checkpoint is a full snapshot, the others write only the embedding "
                 "rows changed since the previous one (1: every checkpoint is full)")
      ->capture_default_str();
  app.add_option("--embedding-admit-count", f.embedding_admit_count,
                 "an id gets an embedding row only at its Nth update; before, it reads its "
                 "initial row and its updates are counted, not stored (0 or 1: off; at most 255)")
      ->capture_default_str();
  app.add_option("--embedding-evict-steps", f.embedding_evict_steps,
                 "at each checkpoint, drop the embedding rows not updated in the last S steps "
                 "(0: never)")
      ->capture_default_str();
  app.add_option("--embedding-capacity", f.embedding_capacity,
                 "at most this many embedding rows per parameter server (or in one process), "
                 "evicting the least recently updated (0: unbounded)")
      ->capture_default_str();
  app.add_option("--eval-examples", f.eval_examples, "evaluate on at most N examples (0: all)");
  app.add_flag("--no-eval", f.no_eval, "skip evaluation");
  app.add_option("--eval-data", f.eval_data,
                 "evaluation data directory or s3:// prefix (default: --data-dir)");
  app.add_option("--eval-poll", f.eval_poll_s,
                 "evaluator: seconds between looks at --checkpoint-dir")
      ->capture_default_str();
  app.add_option("--eval-timeout", f.eval_timeout_s,
                 "evaluator: seconds to wait for the first checkpoint, and then for each next "
                 "one or the end of training, before failing")
      ->capture_default_str();
  app.add_option("--stop-timeout", f.stop_timeout_s,
                 "on SIGTERM, save a checkpoint at the current step and exit 143 within this "
                 "many seconds (keep it below the pod's terminationGracePeriodSeconds)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--logdir", f.logdir,
                 "TensorBoard event files go to <logdir>/<replica>/ (a directory or "
                 "s3://bucket/prefix/; default <--output>/tensorboard, none without --output)");
  app.add_option("--summary-every", f.summary_every,
                 "steps between TensorBoard points (loss, learning rate, samples/s, PS bytes)")
      ->capture_default_str();
  app.add_option("--summary-flush", f.summary_flush_s,
                 "seconds between writes of the TensorBoard event file (S3: each write PUTs "
                 "the whole file again); it is also written at exit and after each evaluation")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--termination-log", f.termination_log, "where the final metrics JSON goes")
      ->capture_default_str();
  app.add_option("--target-auc", f.target_auc, "exit 3 if the final AUC is lower");
  app.add_option("--target-accuracy", f.target_accuracy, "exit 3 if the final accuracy is lower");
  app.add_option("--threads", f.threads, "compute threads (0: the container's CPU limit)");
  app.add_option(
         "--precision", f.precision,
         "fp32, or bf16: BF16 inner products with FP32 weights and optimizer (needs AVX-512 "
         "BF16 or AMX; FP32 with a warning where the CPU has neither)")
      ->capture_default_str();
  app.add_option("--wire-precision", f.wire_precision,
                 "parameter-server mode: fp32, or bf16: workers push gradients and pull "
                 "parameters as BF16, half the bytes (the PS keeps FP32 weights and optimizer)")
      ->capture_default_str();
  app.add_option("--log-every", f.log_every, "steps between progress lines")->capture_default_str();
  app.add_option("--loss-curve", f.loss_curve, "append step,loss lines to this file");
  app.add_option("--max-bad-lines", f.max_bad_lines, "malformed lines tolerated")
      ->capture_default_str();
  app.add_option("--startup-timeout", f.startup_timeout_s, "seconds to wait for peers at startup")
      ->capture_default_str();
  app.add_option("--reconnect-timeout", f.reconnect_timeout_s,
                 "seconds to keep reconnecting to a lost PS")
      ->capture_default_str();
  app.add_option("--finish-timeout", f.finish_timeout_s,
                 "coordinator: seconds to wait for the other workers to finish")
      ->capture_default_str();
  app.add_option("--listen-port", f.listen_port,
                 "ps: port to listen on (default: from the cluster)");
  app.add_option("--metrics-port", f.metrics_port,
                 "serve Prometheus metrics (step, loss, samples/s, ...) at GET /metrics on this "
                 "port; 0: off")
      ->capture_default_str();
  app.add_option("--metrics-final-wait", f.metrics_final_wait_s,
                 "training replicas that succeed wait up to this many seconds for a GET /metrics "
                 "after their last step before exiting (kubetrain run sets it; 0: exit at once)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--predict", f.predict,
                 "write the predictions of the model in --checkpoint-dir for the --eval-files "
                 "examples in --data-dir (at most --eval-examples) to this file as JSON lines "
                 "('-': stdout), then exit");
  app.add_option("--export", f.export_dir,
                 "write the model in --checkpoint-dir as model.onnx + model.json to this "
                 "directory or s3://bucket/prefix/, then exit (--output does this after training)");
  app.add_option("--onnx-external-threshold", f.onnx_external_threshold,
                 "ONNX export (--export, --output): tensors of at least this many bytes go to "
                 "model.onnx.data beside model.onnx (ONNX external data); 0: only when the model "
                 "would not fit in one 2 GiB ONNX file")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return kubetrain::trainer::Run(f);
}
