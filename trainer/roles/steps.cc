#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>

#include "common/storage/files.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/roles/role.h"
#include "trainer/stop/stop.h"
#include "trainer/worker/evaluator.h"

namespace kubetrain::trainer::roles {

StatusOr<std::unique_ptr<Model>> BuildModel(const Config& c, Precision precision) {
  if (c.model == ModelKind::kWideDeep) {
    WideDeepConfig w;
    w.batch_size = c.batch_size;
    w.embedding_dim = c.embedding_dim;
    w.hidden = c.layers;
    w.precision = precision;
    return CreateWideDeep(w);
  }
  MlpClassifierConfig m;
  m.batch_size = c.batch_size;
  m.num_features = c.num_features;
  m.num_classes = c.num_classes;
  m.hidden = c.layers;
  m.precision = precision;
  return CreateMlpClassifier(m);
}

// The architecture as the exporter sees it.
ModelSpec SpecFrom(const Config& c) {
  ModelSpec s;
  s.kind = ModelKindName(c.model);
  s.hidden = c.layers;
  s.embedding_dim = c.embedding_dim;
  s.num_features = c.num_features;
  s.num_classes = c.num_classes;
  return s;
}

nlohmann::json EmbeddingJson(const EmbeddingStats& e) {
  return {{"rows", e.rows},
          {"bytes", e.bytes},
          {"admitted", e.admitted},
          {"filtered", e.filtered},
          {"evicted", e.evicted}};
}

std::array<uint64_t, 5> EmbeddingArray(const EmbeddingStats& e) {
  return {e.rows, e.bytes, e.admitted, e.filtered, e.evicted};
}

StatusOr<ReaderOptions> Reader(const Config& c, const std::string& dir, const std::string& match,
                               int stripe, int stripes, bool loop) {
  KT_ASSIGN_OR_RETURN(auto files, ListDataFiles(dir, match));
  ReaderOptions o;
  o.files = std::move(files);
  o.format = c.data_format;
  o.num_features = c.num_features;
  o.stripe = stripe;
  o.num_stripes = stripes;
  o.max_bad_lines = c.max_bad_lines;
  o.loop = loop;
  return o;
}

// S3 data: each worker streams whole objects of its own (see StripeReader).
SourceOptions Source(const Config& c, const std::string& dir) {
  SourceOptions s;
  s.stripe_by_file = storage::IsS3Path(dir);
  s.stream.cache_dir = c.data_cache;
  return s;
}

namespace {

// On resume, skips the batches this process already trained on before the checkpoint, so
// the input order continues where it stopped (exactly so in one process or with --sync).
Status SkipConsumed(StripeReader& reader, int batch_size, int64_t steps) {
  if (steps <= 0) return Status::Ok();
  spdlog::info("skipping the {} batches trained on before step {}", steps, steps);
  Batch skip;
  for (int64_t i = 0; i < steps; ++i) {
    KT_RETURN_IF_ERROR(reader.Next(batch_size, &skip).status());
  }
  return Status::Ok();
}

}  // namespace

// Opens this process's stripe of the training data (looping), positioned after the `start`
// batches it already trained on.
StatusOr<std::unique_ptr<StripeReader>> OpenTrainingData(const Config& c, int stripe, int stripes,
                                                         int batch_size, int64_t start) {
  KT_ASSIGN_OR_RETURN(ReaderOptions o,
                      Reader(c, c.data_dir, c.train_match, stripe, stripes, /*loop=*/true));
  auto reader = std::make_unique<StripeReader>(o, Source(c, c.data_dir));
  KT_RETURN_IF_ERROR(SkipConsumed(*reader, batch_size, start));
  return reader;
}

// The training loop's options from the flags; periodic checkpoints only when `checkpoints`;
// TensorBoard points to `summaries` (may be null).
TrainOptions TrainOptionsFrom(const Config& c, bool checkpoints, TrainingSummaries* summaries) {
  TrainOptions t;
  if (summaries != nullptr) {
    t.on_step = [summaries](int64_t step, float loss, int examples) {
      summaries->Step(step, loss, examples);
    };
  }
  t.steps = c.steps;
  t.log_every = c.log_every;
  if (checkpoints) {
    t.checkpoint_dir = c.checkpoint_dir;
    t.checkpoint_every = c.checkpoint_every;
    if (c.checkpoint_full_every > 1) t.checkpoint_keep_chains = c.checkpoint_keep_chains;
  }
  t.loss_curve_path = c.loss_curve;
  t.stop = StopRequested;
  return t;
}

// Reads the model in the checkpoint root `model_dir` and writes model.onnx + model.json
// to `dir` (large tensors in model.onnx.data past 2 GiB or --onnx-external-threshold). A
// model that ONNX cannot hold even so is not an error here: its reason goes to
// `*unexportable` (the checkpoint stays the trained model).
Status ExportOnnx(const Config& c, const std::string& model_dir, const std::string& dir,
                  std::string* unexportable) {
  const auto start = std::chrono::steady_clock::now();
  KT_ASSIGN_OR_RETURN(const TrainedModel m,
                      ReadTrainedModel(SpecFrom(c), c.Optimizer(), model_dir));
  OnnxExportOptions options;
  options.external_threshold = c.onnx_external_threshold;
  KT_ASSIGN_OR_RETURN(const OnnxExportFiles files, WriteOnnxExport(m, dir, options, unexportable));
  if (!unexportable->empty()) return Status::Ok();
  if (files.external) {
    spdlog::info("model.onnx ({} bytes) keeps its large tensors in {} ({} bytes)",
                 files.model_bytes, kOnnxDataFile, files.data_bytes);
  }
  spdlog::info("exported the model (step {}, {} embedding rows) as ONNX to {} in {:.2f} s", m.step,
               m.ids.size(), dir,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Status::Ok();
}

// Evaluates (unless disabled), writes the metrics and checks the targets.
RoleResult Finish(const Config& c, Model& model, ParamClient& params, const TrainResult& r,
                  nlohmann::json metrics, TrainingSummaries* summaries) {
  metrics["steps"] = r.last_step;
  metrics["train_loss"] = r.last_loss;
  metrics["samples_per_second"] = r.samples_per_s;
  metrics["samples_per_cpu_second"] = r.samples_per_cpu_s;
  if (const auto e = params.embedding_stats(); e) metrics["embedding"] = EmbeddingJson(*e);
  bool target_ok = true;
  if (!c.no_eval) {
    auto ro = Reader(c, c.EvalDir(), c.eval_match, 0, 1, /*loop=*/false);
    if (!ro.ok()) return ro.status().WithContext("evaluation data");
    StripeReader eval(*ro, Source(c, c.EvalDir()));
    auto m = Evaluate(model, eval, params, c.eval_examples);
    if (!m.ok()) return m.status().WithContext("evaluation failed");
    metrics["eval"] = {
        {"examples", m->examples}, {"log_loss", m->log_loss}, {"accuracy", m->accuracy}};
    if (summaries != nullptr) {
      summaries->Evaluation(r.last_step,
                            model.num_outputs() == 1 ? std::optional<double>(m->auc) : std::nullopt,
                            m->log_loss, m->accuracy);
    }
    if (model.num_outputs() == 1) {
      metrics["eval"]["auc"] = m->auc;
      spdlog::info("evaluation on {} examples: log loss {:.5f} AUC {:.5f} accuracy {:.5f}",
                   m->examples, m->log_loss, m->auc, m->accuracy);
    } else {
      spdlog::info("evaluation on {} examples: log loss {:.5f} accuracy {:.5f}", m->examples,
                   m->log_loss, m->accuracy);
    }
    if (c.target_auc > 0 && m->auc < c.target_auc) {
      spdlog::error("AUC {:.5f} is below --target-auc {:.5f}", m->auc, c.target_auc);
      target_ok = false;
    }
    if (c.target_accuracy > 0 && m->accuracy < c.target_accuracy) {
      spdlog::error("accuracy {:.5f} is below --target-accuracy {:.5f}", m->accuracy,
                    c.target_accuracy);
      target_ok = false;
    }
  } else if (c.target_auc > 0 || c.target_accuracy > 0) {
    spdlog::error("a target metric was set but evaluation is disabled");
    target_ok = false;
  }
  metrics["target_reached"] = target_ok;
  if (!c.output.empty()) {
    // The trained model (a checkpoint: every PS's shard, then the MANIFEST), then the metrics.
    const std::string model_dir = storage::JoinPath(c.output, "model");
    Status s = params.SaveCheckpoint(model_dir, r.last_step);
    std::string unexportable;
    if (s.ok()) s = ExportOnnx(c, model_dir, c.output, &unexportable);
    if (!unexportable.empty()) {
      // Training succeeded and model/ holds the result: the job does not fail for this.
      spdlog::error("no model.onnx: {}", unexportable);
      metrics["onnx_export_error"] = unexportable;
    }
    if (s.ok()) {
      s = storage::WriteObject(storage::JoinPath(c.output, "metrics.json"), metrics.dump(2) + "\n",
                               storage::WriteMode::kReplace, "application/json");
    }
    if (!s.ok()) return s.WithContext("writing --output " + c.output);
    spdlog::info("wrote the model (step {}) and metrics.json to {}", r.last_step, c.output);
  }
  WriteTerminationMessage(c, metrics);
  return target_ok ? Ending::kDone : Ending::kTargetMissed;
}

Status SaveFinalCheckpoint(const Config& c, ParamClient& params, const TrainResult& r,
                           const RunStart& from) {
  Status s;
  if (r.last_step > from.step) {
    s = params.SaveCheckpoint(c.checkpoint_dir, r.last_step);
  } else if (from.restored != r.last_step) {
    s = FailedPrecondition("no committed checkpoint at step " + std::to_string(r.last_step));
  }
  if (s.ok()) s = WriteFinalMarker(c.checkpoint_dir, r.last_step);
  return s;
}

nlohmann::json PushesSent(const RemoteParams& params, int num_ps) {
  nlohmann::json out = nlohmann::json::array();
  for (int k = 0; k < num_ps; ++k) out.push_back(params.pushes_to(k));
  return out;
}

}  // namespace kubetrain::trainer::roles
