#include "trainer/config.h"

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <limits>

#include "trainer/ps/embedding_store.h"

namespace kubetrain::trainer {

StatusOr<ModelKind> ParseModelKind(std::string_view name) {
  if (name == "wide_deep") return ModelKind::kWideDeep;
  if (name == "mlp") return ModelKind::kMlp;
  return InvalidArgument("unknown --model \"" + std::string(name) +
                         "\" (expected wide_deep or mlp)");
}

const char* ModelKindName(ModelKind kind) {
  return kind == ModelKind::kMlp ? "mlp" : "wide_deep";
}

OptimizerConfig Config::Optimizer() const {
  OptimizerConfig o;
  o.kind = optimizer;
  o.lr = lr;
  o.adagrad_initial = adagrad_initial;
  return o;
}

namespace {

// A CLI11 transform that parses the flag's text with the trainer's own parser (its message
// is the error: "--precision: unknown precision ...") and hands CLI11 the enum's number.
template <typename Enum>
CLI::Validator ParsedBy(StatusOr<Enum> (*parse)(std::string_view), std::string names) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        StatusOr<Enum> v = parse(text);
        if (!v.ok()) return v.status().message();
        text = std::to_string(static_cast<int>(*v));
        return "";
      },
      std::move(names));
}

// One element of --layers: a whole positive int.
CLI::Validator PositiveLayerSize() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        CLI::detail::trim(text);  // "256, 128" as before
        int v = 0;
        const char* end = text.data() + text.size();
        const auto [at, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc() || at != end || v <= 0) {
          return "\"" + text + "\" is not a positive integer";
        }
        return "";
      },
      "POSITIVE,...");
}

CLI::Validator Positive() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v) || !(v > 0)) return "must be positive";
        return "";
      },
      "POSITIVE");
}

}  // namespace

void AddTrainerFlags(CLI::App& app, Config* c) {
  app.add_option("--model", c->model, "wide_deep (Criteo) or mlp (dense CSV)")
      ->transform(ParsedBy(ParseModelKind, "wide_deep|mlp"))
      ->default_str("wide_deep");
  app.add_option("--data-dir,--data", c->data_dir,
                 "directory or s3://bucket/prefix/ with the data files (default /data; with "
                 "--generate-data, a new directory under $TMPDIR or /tmp, removed at exit)");
  app.add_option("--data-cache", c->data_cache,
                 "S3 data: keep a local copy of each object here after the first full read");
  app.add_option(
      "--output", c->output,
      "directory or s3://bucket/prefix/ for the final metrics.json, model/ (a checkpoint) "
      "and model.onnx + model.json (for serving)");
  app.add_option("--data-format", c->data_format, "criteo_tsv, criteo_csv or dense_csv")
      ->transform(ParsedBy(ParseDataFormat, "criteo_tsv|criteo_csv|dense_csv"))
      ->default_str("criteo_tsv");
  app.add_option("--train-files", c->train_match, "training files: names containing this")
      ->capture_default_str();
  app.add_option("--eval-files", c->eval_match, "evaluation files: names containing this")
      ->capture_default_str();
  app.add_option("--generate-data", c->generate_data,
                 "write N synthetic Criteo training lines (and N/5 evaluation lines) to "
                 "--data-dir first, unless present (no --data-dir: a temporary directory)");
  app.add_option("--generate-eval", c->generate_eval, "evaluation lines to generate");
  app.add_option("--generate-profile", c->generate_profile,
                 "small (200 values per field) or criteo-kaggle (Kaggle's 26 cardinalities, "
                 "33.8M values, Zipf-like)")
      ->transform(ParsedBy(ParseGeneratorProfile, "small|criteo-kaggle"))
      ->default_str("small");
  app.add_option("--data-seed", c->data_seed, "seed of the synthetic ground truth")
      ->capture_default_str();
  app.add_option("--steps", c->steps, "training steps per worker")->capture_default_str();
  app.add_option("--batch-size", c->batch_size, "examples per step and worker")
      ->capture_default_str();
  app.add_option("--layers", c->layers, "hidden layer sizes, comma-separated")
      ->delimiter(',')
      ->transform(PositiveLayerSize())
      ->default_str("1024,512,256");
  app.add_option("--embedding-dim", c->embedding_dim, "embedding dimension")->capture_default_str();
  app.add_option("--num-features", c->num_features, "mlp: dense features per line");
  app.add_option("--num-classes", c->num_classes, "mlp: classes")->capture_default_str();
  app.add_option("--optimizer", c->optimizer, "sgd, adagrad or adam")
      ->transform(ParsedBy(ParseOptimizerKind, "sgd|adagrad|adam"))
      ->default_str("adagrad");
  app.add_option("--lr", c->lr, "learning rate")->check(Positive())->capture_default_str();
  app.add_option("--adagrad-initial", c->adagrad_initial, "Adagrad initial accumulator")
      ->capture_default_str();
  app.add_option("--seed", c->seed, "parameter initialisation seed")->capture_default_str();
  app.add_flag("--sync", c->sync, "synchronous training (default asynchronous)");
  app.add_flag(
      "--no-pipeline", c->no_pipeline,
      "asynchronous workers: pull and push in step, not one step behind the compute "
      "(pipelining overlaps communication with compute; its pulls lack the worker's own "
      "last push, which cost 0.015 AUC over 10M lines of many rare ids: trainer/README.md)");
  app.add_option("--checkpoint-dir", c->checkpoint_dir,
                 "checkpoint directory shared by all replicas, or s3://bucket/prefix/");
  app.add_option("--checkpoint-every", c->checkpoint_every,
                 "steps between checkpoints (0: only at the end)");
  app.add_option("--checkpoint-full-every", c->checkpoint_full_every,
                 "every Kth checkpoint is a full snapshot, the others write only the embedding "
                 "rows changed since the previous one (1: every checkpoint is full)")
      ->capture_default_str();
  app.add_option("--checkpoint-keep-chains", c->checkpoint_keep_chains,
                 "with --checkpoint-full-every > 1: once a newer full snapshot is committed, "
                 "delete the checkpoints of all but the newest N chains (a full snapshot and its "
                 "deltas; 0 keeps every checkpoint; at least 2 keeps a whole chain to fall back "
                 "to past a corrupt link)")
      ->capture_default_str();
  app.add_option("--embedding-admit-count", c->embedding_admit_count,
                 "an id gets an embedding row only at its Nth update; before, it reads its "
                 "initial row and its updates are counted, not stored (0 or 1: off; at most 255)")
      ->capture_default_str();
  app.add_option("--embedding-evict-steps", c->embedding_evict_steps,
                 "at each checkpoint, drop the embedding rows not updated in the last S steps "
                 "(0: never)")
      ->capture_default_str();
  app.add_option("--embedding-capacity", c->embedding_capacity,
                 "at most this many embedding rows per parameter server (or in one process), "
                 "evicting the least recently updated (0: unbounded)")
      ->capture_default_str();
  app.add_option("--eval-examples", c->eval_examples, "evaluate on at most N examples (0: all)");
  app.add_flag("--no-eval", c->no_eval, "skip evaluation");
  app.add_option("--eval-data", c->eval_data,
                 "evaluation data directory or s3:// prefix (default: --data-dir)");
  app.add_option("--eval-poll", c->eval_poll_s,
                 "evaluator: seconds between looks at --checkpoint-dir")
      ->capture_default_str();
  app.add_option("--eval-timeout", c->eval_timeout_s,
                 "evaluator: seconds to wait for the first checkpoint, and then for each next "
                 "one or the end of training, before failing")
      ->capture_default_str();
  app.add_option("--stop-timeout", c->stop_timeout_s,
                 "on SIGTERM, save a checkpoint at the current step and exit 143 within this "
                 "many seconds (keep it below the pod's terminationGracePeriodSeconds)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--logdir", c->logdir,
                 "TensorBoard event files go to <logdir>/<replica>/ (a directory or "
                 "s3://bucket/prefix/; default <--output>/tensorboard, none without --output)");
  app.add_option("--summary-every", c->summary_every,
                 "steps between TensorBoard points (loss, learning rate, samples/s, PS bytes)")
      ->capture_default_str();
  app.add_option("--summary-flush", c->summary_flush_s,
                 "seconds between writes of the TensorBoard event file (S3: each write PUTs "
                 "the whole file again); it is also written at exit and after each evaluation")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--termination-log", c->termination_log, "where the final metrics JSON goes")
      ->capture_default_str();
  app.add_option("--target-auc", c->target_auc, "exit 3 if the final AUC is lower");
  app.add_option("--target-accuracy", c->target_accuracy, "exit 3 if the final accuracy is lower");
  app.add_option("--threads", c->threads, "compute threads (0: the container's CPU limit)");
  app.add_option(
         "--precision", c->precision,
         "fp32, or bf16: BF16 inner products with FP32 weights and optimizer (needs AVX-512 "
         "BF16 or AMX; FP32 with a warning where the CPU has neither)")
      ->transform(ParsedBy(ParsePrecision, "fp32|bf16"))
      ->default_str("fp32");
  app.add_option("--wire-precision", c->wire_precision,
                 "parameter-server mode: fp32, or bf16: workers push gradients and pull "
                 "parameters as BF16, half the bytes (the PS keeps FP32 weights and optimizer)")
      ->transform(ParsedBy(ParseWireFloat, "fp32|bf16"))
      ->default_str("fp32");
  app.add_option("--log-every", c->log_every, "steps between progress lines")
      ->capture_default_str();
  app.add_option("--loss-curve", c->loss_curve, "append step,loss lines to this file");
  app.add_option("--max-bad-lines", c->max_bad_lines, "malformed lines tolerated")
      ->capture_default_str();
  app.add_option("--startup-timeout", c->startup_timeout_s, "seconds to wait for peers at startup")
      ->capture_default_str();
  app.add_option("--reconnect-timeout", c->reconnect_timeout_s,
                 "seconds to keep reconnecting to a lost PS")
      ->capture_default_str();
  app.add_option("--finish-timeout", c->finish_timeout_s,
                 "coordinator: seconds to wait for the other workers to finish")
      ->capture_default_str();
  app.add_option("--listen-port", c->listen_port,
                 "ps: port to listen on (default: from the cluster)");
  app.add_option("--metrics-port", c->metrics_port,
                 "serve Prometheus metrics (step, loss, samples/s, ...) at GET /metrics on this "
                 "port; 0: off")
      ->capture_default_str();
  app.add_option("--metrics-final-wait", c->metrics_final_wait_s,
                 "training replicas that succeed wait up to this many seconds for a GET /metrics "
                 "after their last step before exiting (kubetrain run sets it; 0: exit at once)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--predict", c->predict,
                 "write the predictions of the model in --checkpoint-dir for the --eval-files "
                 "examples in --data-dir (at most --eval-examples) to this file as JSON lines "
                 "('-': stdout), then exit");
  app.add_option("--export", c->export_dir,
                 "write the model in --checkpoint-dir as model.onnx + model.json to this "
                 "directory or s3://bucket/prefix/, then exit (--output does this after training)");
  app.add_option("--onnx-external-threshold", c->onnx_external_threshold,
                 "ONNX export (--export, --output): tensors of at least this many bytes go to "
                 "model.onnx.data beside model.onnx (ONNX external data); 0: only when the model "
                 "would not fit in one 2 GiB ONNX file")
      ->capture_default_str();
}

Status CheckConfig(const Config& c) {
  if (c.model == ModelKind::kWideDeep && c.data_format == DataFormat::kDenseCsv) {
    return InvalidArgument("wide_deep needs Criteo data");
  }
  if (c.model == ModelKind::kMlp &&
      (c.data_format != DataFormat::kDenseCsv || c.num_features <= 0)) {
    return InvalidArgument("--model mlp needs --data-format dense_csv and --num-features");
  }
  KT_RETURN_IF_ERROR(BuildEmbeddingOptions(c, 1).status());  // every role refuses bad bounds alike
  if (c.embedding_evict_steps > 0 && c.checkpoint_dir.empty() && c.output.empty()) {
    spdlog::warn(
        "--embedding-evict-steps evicts when a checkpoint is saved; without "
        "--checkpoint-dir or --output none is");
  }
  return Status::Ok();
}

StatusOr<EmbeddingOptions> BuildEmbeddingOptions(const Config& c, int updates_per_step) {
  EmbeddingOptions o;
  if (c.embedding_admit_count < 0 || c.embedding_admit_count > 255) {
    return InvalidArgument(
        "--embedding-admit-count must be between 0 and 255 (its counters are "
        "8 bits), not " +
        std::to_string(c.embedding_admit_count));
  }
  o.limits.admit_count = static_cast<uint32_t>(c.embedding_admit_count);
  const int64_t min_capacity = static_cast<int64_t>(EmbeddingStore::kStripes) * 16;
  if (c.embedding_capacity < 0 ||
      (c.embedding_capacity > 0 && c.embedding_capacity < min_capacity)) {
    return InvalidArgument("--embedding-capacity must be 0 (unbounded) or at least " +
                           std::to_string(min_capacity) + " rows (16 per lock stripe), not " +
                           std::to_string(c.embedding_capacity));
  }
  o.limits.capacity = static_cast<size_t>(c.embedding_capacity);
  // The store counts updates, not steps: a PS gets one per worker and step (asynchronous)
  // or one per step (synchronous), the single process one per step.
  const int64_t per_step = std::max(1, updates_per_step);
  const int64_t max_evict_steps = int64_t{std::numeric_limits<uint32_t>::max()} / per_step / 2;
  if (c.embedding_evict_steps < 0 || c.embedding_evict_steps > max_evict_steps) {
    return InvalidArgument("--embedding-evict-steps must be between 0 and " +
                           std::to_string(max_evict_steps) + ", not " +
                           std::to_string(c.embedding_evict_steps));
  }
  o.evict_after_updates = static_cast<uint32_t>(c.embedding_evict_steps * per_step);
  if (c.checkpoint_full_every < 1 || c.checkpoint_full_every > static_cast<int>(kMaxChainLinks)) {
    return InvalidArgument("--checkpoint-full-every must be between 1 and " +
                           std::to_string(kMaxChainLinks) + ", not " +
                           std::to_string(c.checkpoint_full_every));
  }
  o.full_every = c.checkpoint_full_every;
  if (c.checkpoint_keep_chains < 0) {
    return InvalidArgument("--checkpoint-keep-chains must be 0 (keep all) or more, not " +
                           std::to_string(c.checkpoint_keep_chains));
  }
  return o;
}

}  // namespace kubetrain::trainer
