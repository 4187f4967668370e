#include "trainer/roles.h"

#include <spdlog/spdlog.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "common/workload_contract.h"
#include "kubetrain/version.h"
#include "trainer/cluster/cluster.h"
#include "trainer/data/generator.h"
#include "trainer/data/reader.h"
#include "trainer/export/export.h"
#include "trainer/metrics/metrics.h"
#include "trainer/model/model.h"
#include "trainer/net/transport.h"
#include "trainer/observe/log_tail.h"
#include "trainer/observe/summaries.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/ps/server.h"
#include "trainer/stop/stop.h"
#include "trainer/storage/files.h"
#include "trainer/worker/evaluator.h"
#include "trainer/worker/params.h"
#include "trainer/worker/remote.h"
#include "trainer/worker/train.h"

namespace kubetrain::trainer {
namespace {

using contract::kExitPermanent;
using contract::kExitRetryable;
using contract::kExitTargetMissed;

int ExitCodeFor(const Status& s) {
  if (s.ok()) return 0;
  switch (s.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return kExitRetryable;
    default:
      return kExitPermanent;
  }
}

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

// Writes synthetic train/eval files unless they exist. Several processes may do this at
// once: the files are written atomically and are identical, so any winner is fine.
Status MaybeGenerateData(const Config& c) {
  if (c.generate_data <= 0) return Status::Ok();
  if (storage::IsS3Path(c.data_dir)) {
    return InvalidArgument("--generate-data writes local files; --data-dir is " + c.data_dir);
  }
  if (c.data_format != DataFormat::kCriteoTsv) {
    return InvalidArgument("--generate-data writes criteo_tsv");
  }
  std::error_code ec;
  std::filesystem::create_directories(c.data_dir, ec);
  if (ec) return InvalidArgument("cannot create --data-dir " + c.data_dir + ": " + ec.message());
  const struct {
    std::string name;
    int64_t n;
    uint64_t sample_seed;
  } files[] = {
      {"train.tsv", c.generate_data, c.data_seed * 2 + 1},
      {"eval.tsv",
       c.generate_eval > 0 ? c.generate_eval : std::max<int64_t>(1000, c.generate_data / 5),
       c.data_seed * 2 + 2}};
  for (const auto& file : files) {
    const std::string path = c.data_dir + "/" + file.name;
    if (std::filesystem::exists(path)) continue;
    GeneratorOptions g;
    g.profile = c.generate_profile;
    g.model_seed = c.data_seed;
    g.sample_seed = file.sample_seed;
    KT_ASSIGN_OR_RETURN(auto auc, WriteSyntheticCriteo(path, file.n, g));
    spdlog::info("generated {} lines in {} (ground-truth AUC {:.4f})", file.n, path, auc);
  }
  return Status::Ok();
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

using observe::TrainingSummaries;

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
  }
  t.loss_curve_path = c.loss_curve;
  t.stop = StopRequested;
  return t;
}

// Writes the final metrics where Kubernetes picks them up; a failure is only a warning.
void WriteTerminationMessage(const Config& c, const nlohmann::json& j);

// A process stopped on SIGTERM tells the operator what the stop cost (its termination
// message's "stopped": the PodDisrupted event and lastDisruption), then exits 143.
int StoppedSaying(const Config& c, const std::string& cost) {
  WriteTerminationMessage(c, {{std::string(contract::kTerminationStopped), cost}});
  return kExitStopped;
}

// A process that stopped on SIGTERM: what it leaves behind (logged, and said to the
// operator), then 143.
int Stopped(const Config& c, const TrainResult& r) {
  std::string cost;
  if (c.checkpoint_dir.empty()) {
    cost = fmt::format(
        "stopped by SIGTERM at step {}: no --checkpoint-dir, so this progress is lost (the job "
        "starts over)",
        r.last_step);
    spdlog::warn("{}", cost);
  } else if (r.last_saved >= 0) {
    cost = fmt::format("stopped by SIGTERM at step {}; checkpoint {} committed in {}", r.last_step,
                       r.last_saved, c.checkpoint_dir);
    spdlog::info("{}", cost);
  } else {
    cost =
        fmt::format("stopped by SIGTERM at step {} (the checkpoint it started from)", r.last_step);
    spdlog::info("{}", cost);
  }
  return StoppedSaying(c, cost);
}

// Writes the final metrics where Kubernetes picks them up; a failure is only a warning.
void WriteTerminationMessage(const Config& c, const nlohmann::json& j) {
  if (c.termination_log.empty()) return;
  std::ofstream out(c.termination_log, std::ios::trunc);
  out << j.dump() << "\n";
  out.flush();
  if (!out) spdlog::warn("cannot write metrics to {}", c.termination_log);
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

// --predict / --export: one-shot tools on the model in --checkpoint-dir.
int RunModelTool(const Config& c, Model& model) {
  if (c.checkpoint_dir.empty()) {
    spdlog::error("--predict and --export read the model from --checkpoint-dir");
    return kExitPermanent;
  }
  if (!c.export_dir.empty()) {
    std::string unexportable;
    Status s = ExportOnnx(c, c.checkpoint_dir, c.export_dir, &unexportable);
    if (s.ok() && !unexportable.empty()) s = InvalidArgument(unexportable);
    if (!s.ok()) {
      spdlog::error("export: {}", s.ToString());
      return ExitCodeFor(s);
    }
  }
  if (c.predict.empty()) return 0;
  auto m = ReadTrainedModel(SpecFrom(c), c.Optimizer(), c.checkpoint_dir);
  auto ro = Reader(c, c.EvalDir(), c.eval_match, 0, 1, /*loop=*/false);
  if (!m.ok() || !ro.ok()) {
    const Status& s = !m.ok() ? m.status() : ro.status();
    spdlog::error("predict: {}", s.ToString());
    return ExitCodeFor(s);
  }
  StripeReader reader(*ro, Source(c, c.EvalDir()));
  std::ofstream file;
  if (c.predict != "-") {
    file.open(c.predict, std::ios::trunc);
    if (!file) {
      spdlog::error("predict: cannot write {}", c.predict);
      return kExitPermanent;
    }
  }
  auto n =
      WritePredictions(model, *m, reader, c.eval_examples, c.predict == "-" ? std::cout : file);
  if (n.ok()) file.close();
  if (!n.ok() || (c.predict != "-" && !file)) {
    spdlog::error("predict: {}",
                  n.ok() ? "writing " + c.predict + " failed" : n.status().ToString());
    return n.ok() ? kExitPermanent : ExitCodeFor(n.status());
  }
  spdlog::info("wrote predictions for {} examples (model step {}) to {}", *n, m->step, c.predict);
  return 0;
}

// Evaluates (unless disabled), writes the metrics and checks the targets.
int Finish(const Config& c, Model& model, ParamClient& params, const TrainResult& r,
           nlohmann::json metrics, TrainingSummaries* summaries) {
  metrics["steps"] = r.last_step;
  metrics["train_loss"] = r.last_loss;
  metrics["samples_per_second"] = r.samples_per_s;
  metrics["samples_per_cpu_second"] = r.samples_per_cpu_s;
  if (const auto e = params.embedding_stats(); e) metrics["embedding"] = EmbeddingJson(*e);
  bool target_ok = true;
  if (!c.no_eval) {
    auto ro = Reader(c, c.EvalDir(), c.eval_match, 0, 1, /*loop=*/false);
    if (!ro.ok()) {
      spdlog::error("evaluation data: {}", ro.status().ToString());
      return ExitCodeFor(ro.status());
    }
    StripeReader eval(*ro, Source(c, c.EvalDir()));
    auto m = Evaluate(model, eval, params, c.eval_examples);
    if (!m.ok()) {
      spdlog::error("evaluation failed: {}", m.status().ToString());
      return ExitCodeFor(m.status());
    }
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
    if (!s.ok()) {
      spdlog::error("writing --output {}: {}", c.output, s.ToString());
      return ExitCodeFor(s);
    }
    spdlog::info("wrote the model (step {}) and metrics.json to {}", r.last_step, c.output);
  }
  WriteTerminationMessage(c, metrics);
  return target_ok ? 0 : kExitTargetMissed;
}

// Trains in this process with every parameter local: no cluster, or a cluster whose only
// training replica is this one and which has no PS (`task` names it in the metrics). Its
// checkpoints have one shard; the last one is marked FINAL, so an evaluator beside it
// evaluates it as the end of training.
int RunSingleProcess(const Config& c, Model& model, const OptimizerConfig& opt,
                     const std::string& task, TrainingSummaries* summaries) {
  auto embedding = BuildEmbeddingOptions(c, 1);
  if (!embedding.ok()) {
    spdlog::error("{}", embedding.status().message());
    return kExitPermanent;
  }
  LocalParams params(model, c.seed, opt, *embedding);
  TrainerMetrics::Global().SetEmbeddingSource(
      [&params] { return EmbeddingArray(params.shard().embedding_stats()); });
  struct Unset {
    ~Unset() { TrainerMetrics::Global().ClearEmbeddingSource(); }
  } unset;
  int64_t start = 0;
  std::optional<int64_t> restored;  // the committed checkpoint this run starts from
  if (!c.checkpoint_dir.empty()) {
    auto latest = params.Restore(c.checkpoint_dir);
    if (!latest.ok()) {
      spdlog::error("restore: {}", latest.status().ToString());
      return ExitCodeFor(latest.status());
    }
    restored = *latest;
    if (latest->has_value()) {
      start = **latest;
      spdlog::info("resumed from checkpoint {} in {}", start, c.checkpoint_dir);
    }
  }
  auto reader = OpenTrainingData(c, 0, 1, model.batch_size(), start);
  if (!reader.ok()) {
    spdlog::error("training data: {}", reader.status().ToString());
    return ExitCodeFor(reader.status());
  }
  auto r =
      Train(model, **reader, params, TrainOptionsFrom(c, /*checkpoints=*/true, summaries), start);
  if (!r.ok()) {
    spdlog::error("training failed: {}", r.status().ToString());
    return ExitCodeFor(r.status());
  }
  if (r->stopped) return Stopped(c, *r);
  if (!c.checkpoint_dir.empty()) {
    Status s;
    if (r->last_step > start) {
      s = params.SaveCheckpoint(c.checkpoint_dir, r->last_step);
    } else if (restored != r->last_step) {
      s = FailedPrecondition("no committed checkpoint at step " + std::to_string(r->last_step));
    }
    if (s.ok()) s = WriteFinalMarker(c.checkpoint_dir, r->last_step);
    if (!s.ok()) spdlog::warn("final checkpoint: {}", s.ToString());
  }
  return Finish(c, model, params, *r, {{"task", task}}, summaries);
}

int RunPs(const Config& c, const ClusterInfo& cluster, Model& model, const OptimizerConfig& opt,
          const AuthKey& key) {
  const int k = cluster.index, n = cluster.NumPs();
  std::vector<float> init(model.NumDenseParams());
  model.InitDense(c.seed, init.data());
  auto embedding = BuildEmbeddingOptions(c, c.sync ? 1 : cluster.NumTrainers());
  if (!embedding.ok()) {
    spdlog::error("{}", embedding.status().message());
    return kExitPermanent;
  }
  const ShardConfig sc = MakeShardConfig(model, k, n, c.seed, opt, *embedding);
  ParamShard shard(sc, init.data() + sc.dense_begin);
  TrainerMetrics::Global().SetEmbeddingSource(
      [&shard] { return EmbeddingArray(shard.embedding_stats()); });
  struct Unset {
    ~Unset() { TrainerMetrics::Global().ClearEmbeddingSource(); }
  } unset;
  if (!c.checkpoint_dir.empty()) {
    auto latest = FindCheckpoint(c.checkpoint_dir, n);
    if (!latest.ok()) {
      spdlog::error("{}", latest.status().ToString());
      return ExitCodeFor(latest.status());
    }
    if (latest->has_value()) {
      Status s = LoadShard(shard, c.checkpoint_dir, **latest, k, n);
      if (!s.ok()) {
        spdlog::error("restore: {}", s.ToString());
        return ExitCodeFor(s);
      }
      spdlog::info("restored shard from checkpoint {} ({} rows)", (*latest)->step,
                   shard.num_rows());
    }
  }
  int port = c.listen_port;
  if (port < 0) {
    auto hp = SplitHostPort(cluster.Members("ps")[k]);
    if (!hp.ok()) return ExitCodeFor(hp.status());
    port = hp->port;
  }
  auto listener = Listener::Listen(port);
  if (!listener.ok()) {
    spdlog::error("{}", listener.status().ToString());
    return ExitCodeFor(listener.status());
  }
  PsServerOptions o;
  o.shard_index = k;
  o.num_shards = n;
  o.num_trainers = cluster.NumTrainers();
  o.sync = c.sync;
  o.checkpoint_dir = c.checkpoint_dir;
  o.key = key;
  o.total_dense = model.NumDenseParams();
  o.stop_requested = StopRequested;
  o.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.stop_timeout_s * 500));
  PsServer server(&shard, std::move(*listener), o);
  Status s = server.Serve();
  if (server.stopped_on_signal()) {
    std::string cost;
    if (server.saved_on_stop() >= 0) {
      cost =
          fmt::format("stopped by SIGTERM; this shard is in checkpoint {}", server.saved_on_stop());
      spdlog::info("{}", cost);
    } else {
      cost = c.checkpoint_dir.empty()
                 ? "stopped by SIGTERM: no --checkpoint-dir, so this shard's training is lost "
                   "(the job starts over)"
                 : "stopped by SIGTERM without a checkpoint request: this shard's updates since "
                   "its last checkpoint are lost";
    }
    return StoppedSaying(c, cost);
  }
  if (!s.ok()) {
    spdlog::error("{}", s.ToString());
    return ExitCodeFor(s);
  }
  // Each push applied once (ps/ledger.h): per worker rank, what was applied and what was
  // a re-sent duplicate, acknowledged and not applied again.
  const PushCounts pushes = shard.Pushes();
  nlohmann::json by_rank = nlohmann::json::object();
  for (const auto& [rank, counts] : shard.PushesByRank()) {
    by_rank[std::to_string(rank)] = {{"applied", counts.applied},
                                     {"duplicate", counts.duplicate}};
  }
  WriteTerminationMessage(c, {{"task", cluster.TaskName()},
                              {"embedding_rows", shard.num_rows()},
                              {"embedding", EmbeddingJson(shard.embedding_stats())},
                              {"updates", shard.updates()},
                              {"pushes_applied", pushes.applied},
                              {"pushes_duplicate", pushes.duplicate},
                              {"pushes_by_worker", by_rank}});
  spdlog::info(
      "done: {} embedding rows, {} dense updates, {} pushes applied, {} duplicates not "
      "applied",
      shard.num_rows(), shard.updates(), pushes.applied, pushes.duplicate);
  return 0;
}

// How many pushes this process numbered for each PS (each is applied once there).
nlohmann::json PushesSent(const RemoteParams& params, int num_ps) {
  nlohmann::json out = nlohmann::json::array();
  for (int k = 0; k < num_ps; ++k) out.push_back(params.pushes_to(k));
  return out;
}

int RunWorker(const Config& c, const ClusterInfo& cluster, Model& model, const AuthKey& key,
              TrainingSummaries* summaries) {
  const int rank = cluster.TrainerRank(), trainers = cluster.NumTrainers();
  if (cluster.NumPs() == 0) {
    spdlog::error("the cluster has workers but no parameter servers");
    return kExitPermanent;
  }
  int64_t start = 0;
  std::optional<int64_t> restored;  // the committed checkpoint this run starts from
  if (!c.checkpoint_dir.empty()) {
    auto latest = LatestCheckpoint(c.checkpoint_dir, cluster.NumPs());
    if (!latest.ok()) {
      spdlog::error("{}", latest.status().ToString());
      return ExitCodeFor(latest.status());
    }
    restored = *latest;
    if (latest->has_value()) start = **latest;
  }
  RemoteOptions ro;
  ro.ps_addresses = cluster.Members("ps");
  ro.key = key;
  ro.rank = rank;
  ro.startup_timeout = std::chrono::seconds(c.startup_timeout_s);
  ro.reconnect_timeout = std::chrono::seconds(c.reconnect_timeout_s);
  ro.pipeline = !c.sync && !c.no_pipeline;
  ro.stop = StopRequested;
  ro.wire = c.wire_precision;
  auto params = RemoteParams::Connect(model, ro);
  if (!params.ok() && StopRequested()) {
    spdlog::info("stopped by SIGTERM before training: {}", params.status().message());
    return kExitStopped;
  }
  if (!params.ok()) {
    spdlog::error("{}", params.status().ToString());
    return ExitCodeFor(params.status());
  }
  if (c.sync && (*params)->last_ps_step() > start) {
    // Restarted into a running synchronous job: join the others at their step.
    start = (*params)->last_ps_step();
    spdlog::info("joining the running synchronous job after step {}", start);
  } else if (start > 0) {
    spdlog::info("resuming at step {} from {}", start, c.checkpoint_dir);
  }
  auto reader = OpenTrainingData(c, rank, trainers, model.batch_size(), start);
  if (!reader.ok()) {
    spdlog::error("training data: {}", reader.status().ToString());
    return ExitCodeFor(reader.status());
  }
  // Only the coordinator checkpoints: it asks every PS to save its shard, at its periodic
  // steps and when a PS says it got SIGTERM.
  TrainOptions to = TrainOptionsFrom(c, cluster.IsCoordinator(), summaries);
  if (cluster.IsCoordinator()) to.save_now = [&p = **params] { return p.TakeCheckpointRequest(); };
  auto r = Train(model, **reader, **params, to, start);
  if (!r.ok() && StopRequested()) {
    // A PS went away during the stop (it was stopped too): the last committed checkpoint
    // stays the one to resume from.
    spdlog::warn("stopped by SIGTERM without a new checkpoint: {}", r.status().ToString());
    return kExitStopped;
  }
  if (!r.ok()) {
    spdlog::error("training failed: {}", r.status().ToString());
    return ExitCodeFor(r.status());
  }
  if (r->stopped) {
    // The last push goes in before this process exits (the coordinator's save drained it).
    Status s = (*params)->Flush();
    if (!s.ok()) spdlog::warn("last push on SIGTERM: {}", s.ToString());
    if (cluster.IsCoordinator()) return Stopped(c, *r);
    const std::string cost = fmt::format(
        "stopped by SIGTERM after pushing step {}; the coordinator checkpoints", r->last_step);
    spdlog::info("{}", cost);
    return StoppedSaying(c, cost);
  }
  auto done = (*params)->MarkDone();
  if (!done.ok()) {
    spdlog::error("{}", done.status().ToString());
    return ExitCodeFor(done.status());
  }
  // What training cost on the wire (every push was sent: MarkDone waits for them).
  const TrainerMetrics& wire = TrainerMetrics::Global();
  const nlohmann::json ps_bytes = {{"sent", wire.ps_sent_bytes()},
                                   {"received", wire.ps_received_bytes()},
                                   {"wire_precision", WireFloatName(c.wire_precision)}};
  if (!cluster.IsCoordinator()) {
    WriteTerminationMessage(c, {{"task", cluster.TaskName()},
                                {"steps", r->last_step},
                                {"train_loss", r->last_loss},
                                {"samples_per_second", r->samples_per_s},
                                {"samples_per_cpu_second", r->samples_per_cpu_s},
                                {"pushes", PushesSent(**params, cluster.NumPs())},
                                {"ps_bytes", ps_bytes}});
    spdlog::info("finished {} steps; the coordinator ends the job", r->last_step);
    return 0;
  }
  // The coordinator waits for every worker, evaluates, checkpoints, then stops the PS.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(c.finish_timeout_s);
  int count = *done;
  while (count < trainers) {
    if (StopRequested()) {
      // Training is over here; the others' pushes since then go into this checkpoint too.
      TrainResult stopped = *r;
      if (!c.checkpoint_dir.empty() && r->last_step > start && r->last_saved != r->last_step) {
        Status s = (*params)->SaveCheckpoint(c.checkpoint_dir, r->last_step);
        if (s.ok()) {
          stopped.last_saved = r->last_step;
        } else {
          spdlog::error("checkpoint on SIGTERM: {}", s.ToString());
        }
      }
      return Stopped(c, stopped);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      spdlog::error("only {} of {} workers finished within --finish-timeout", count, trainers);
      return kExitRetryable;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // poll interval
    auto done_now = (*params)->DoneCount();
    if (!done_now.ok()) {
      spdlog::error("{}", done_now.status().ToString());
      return ExitCodeFor(done_now.status());
    }
    count = *done_now;
  }
  spdlog::info("all {} workers finished", trainers);
  if (!c.checkpoint_dir.empty()) {
    // The last checkpoint (unless the run resumed from it), then FINAL, which tells an
    // evaluator that this checkpoint is the end of training.
    Status s;
    if (r->last_step > start) {
      s = (*params)->SaveCheckpoint(c.checkpoint_dir, r->last_step);
    } else if (restored != r->last_step) {
      s = FailedPrecondition("no committed checkpoint at step " + std::to_string(r->last_step));
    }
    if (s.ok()) s = WriteFinalMarker(c.checkpoint_dir, r->last_step);
    if (s.ok()) {
      spdlog::info("checkpoint {} is the final one ({}/FINAL)", r->last_step, c.checkpoint_dir);
    } else {
      spdlog::warn("final checkpoint: {} (an evaluator will not see the end of training)",
                   s.ToString());
    }
  }
  const int code = Finish(c, model, **params, *r,
                          {{"task", cluster.TaskName()},
                           {"pushes", PushesSent(**params, cluster.NumPs())},
                           {"ps_bytes", ps_bytes}},
                          summaries);
  Status s = (*params)->ShutdownAll();
  if (!s.ok()) spdlog::warn("stopping parameter servers: {}", s.ToString());
  return code;
}

// The side-car evaluator: evaluates every checkpoint the coordinator commits to
// --checkpoint-dir, keeps each one's metrics (<--output or --checkpoint-dir>/<task>/
// ckpt-<step>.json, final.json for the last), and exits 0 after the final checkpoint
// (trainer/worker/evaluator.h). It talks to no parameter server.
int RunEvaluator(const Config& c, const ClusterInfo& cluster, Model& model,
                 const OptimizerConfig& opt, TrainingSummaries* summaries) {
  if (c.checkpoint_dir.empty()) {
    spdlog::error(
        "the evaluator evaluates the checkpoints in --checkpoint-dir: give it the "
        "--checkpoint-dir of the chief (or worker 0), on storage both reach (a shared volume or "
        "s3://)");
    return kExitPermanent;
  }
  // One shard per PS; a lone training replica without PS trains in-process and writes
  // one-shard checkpoints (RunSingleProcess).
  const int num_shards =
      cluster.NumPs() > 0 ? cluster.NumPs() : (cluster.NumTrainers() == 1 ? 1 : 0);
  if (num_shards == 0) {
    spdlog::error("the cluster has no parameter servers: there are no checkpoints to evaluate");
    return kExitPermanent;
  }
  if (c.no_eval) spdlog::warn("--no-eval is ignored by an evaluator");
  auto ro = Reader(c, c.EvalDir(), c.eval_match, 0, 1, /*loop=*/false);
  if (!ro.ok()) {
    spdlog::error("evaluation data: {}", ro.status().ToString());
    return ExitCodeFor(ro.status());
  }
  const std::string out =
      storage::JoinPath(c.output.empty() ? c.checkpoint_dir : c.output, cluster.TaskName());
  const bool binary = model.num_outputs() == 1;
  double last_rate = 0;     // examples/s of the last evaluation, for its report
  int64_t gauge_step = -1;  // the step /metrics shows
  WatchOptions w;
  w.checkpoint_dir = c.checkpoint_dir;
  w.num_shards = num_shards;
  w.final_step_at_least = c.steps;
  w.poll_interval = std::chrono::milliseconds(static_cast<int64_t>(c.eval_poll_s * 1000));
  w.wait_timeout = std::chrono::seconds(c.eval_timeout_s);
  WatchCallbacks cb;
  cb.load = [&](const Checkpoint& ckpt) -> StatusOr<std::unique_ptr<ParamClient>> {
    KT_ASSIGN_OR_RETURN(
        auto p, CheckpointParams::Load(model, c.seed, opt, c.checkpoint_dir, ckpt, num_shards));
    return std::unique_ptr<ParamClient>(std::move(p));
  };
  cb.evaluate = [&](ParamClient& params) -> StatusOr<EvalMetrics> {
    StripeReader eval(*ro, Source(c, c.EvalDir()));
    const auto started = std::chrono::steady_clock::now();
    auto m = Evaluate(model, eval, params, c.eval_examples);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (m.ok()) last_rate = m->examples / std::max(s, 1e-9);
    return m;
  };
  cb.report = [&](int64_t step, const EvalMetrics& m, bool final) -> Status {
    nlohmann::json j = {{"task", cluster.TaskName()},
                        {"step", step},
                        {"final", final},
                        {"checkpoint", CheckpointDir(c.checkpoint_dir, step)},
                        {"examples", m.examples},
                        {"log_loss", m.log_loss},
                        {"accuracy", m.accuracy},
                        {"examples_per_second", last_rate}};
    if (binary) j["auc"] = m.auc;
    if (step != gauge_step) {
      TrainerMetrics::Global().CheckpointEvaluated(step, binary ? m.auc : 0, m.log_loss, m.accuracy,
                                                   last_rate);
      if (summaries != nullptr) {
        summaries->Evaluation(step, binary ? std::optional<double>(m.auc) : std::nullopt,
                              m.log_loss, m.accuracy);
      }
      gauge_step = step;
    }
    // ckpt-<step>.json for every checkpoint; the final one also as final.json.
    const std::string text = j.dump(2) + "\n";
    KT_RETURN_IF_ERROR(
        storage::WriteObject(storage::JoinPath(out, "ckpt-" + std::to_string(step) + ".json"), text,
                             storage::WriteMode::kReplace, "application/json"));
    if (!final) return Status::Ok();
    return storage::WriteObject(storage::JoinPath(out, "final.json"), text,
                                storage::WriteMode::kReplace, "application/json");
  };
  spdlog::info("evaluating every checkpoint in {} ({} shards) until the final one; metrics to {}",
               c.checkpoint_dir, num_shards, out);
  auto r = WatchCheckpoints(w, cb);
  if (!r.ok()) {
    spdlog::error("{}", r.status().ToString());
    return ExitCodeFor(r.status());
  }
  nlohmann::json metrics = {{"task", cluster.TaskName()},
                            {"step", r->final_step},
                            {"checkpoints_evaluated", r->evaluated},
                            {"checkpoints_corrupt", r->corrupt},
                            {"eval",
                             {{"examples", r->final_metrics.examples},
                              {"log_loss", r->final_metrics.log_loss},
                              {"accuracy", r->final_metrics.accuracy}}}};
  if (binary) metrics["eval"]["auc"] = r->final_metrics.auc;
  WriteTerminationMessage(c, metrics);
  spdlog::info("evaluated {} checkpoints; the final one (step {}) is in {}", r->evaluated,
               r->final_step, storage::JoinPath(out, "final.json"));
  return 0;
}

// The shapes the trainer cannot run: several training replicas share parameters only
// through a PS. Empty when `cluster` is one it runs.
std::string UnsupportedShape(const ClusterInfo& cluster) {
  if (cluster.NumPs() > 0 || cluster.NumTrainers() <= 1) return "";
  return "the cluster has " + std::to_string(cluster.NumTrainers()) + " training replicas (" +
         std::to_string(cluster.Members("chief").size()) + " chief, " +
         std::to_string(cluster.Members("worker").size()) +
         " workers) and no parameter servers: kubetrain-trainer trains without a PS only as one "
         "replica (one Worker or one Chief, in-process); add PS replicas to train with several";
}

// A directory --generate-data made because --data-dir was not given: removed (with the
// data) when the process is done with it.
class GeneratedDataDir {
 public:
  GeneratedDataDir() = default;
  GeneratedDataDir(const GeneratedDataDir&) = delete;
  GeneratedDataDir& operator=(const GeneratedDataDir&) = delete;
  ~GeneratedDataDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  // Creates <$TMPDIR, else /tmp>/kubetrain-data-XXXXXX and returns its path.
  StatusOr<std::string> Create() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/kubetrain-data-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      return InvalidArgument("--generate-data without --data-dir: cannot create " + pattern + ": " +
                             std::strerror(errno) +
                             " (give --data-dir a writable directory, e.g. an emptyDir)");
    }
    path_ = pattern;
    return path_;
  }

 private:
  std::string path_;
};

// How long the teardown after a role's outcome may take (the metrics server's stop, joins,
// removing the generated data, static destructors) before the exit watchdog ends the process
// with that outcome's code. Teardown takes milliseconds; a hang there must not keep the pod
// Running.
constexpr std::chrono::seconds kTeardownTimeout{10};

// Arms the exit watchdog (stop/stop.h) with the outcome when it goes out of scope. Declared
// after the metrics server and the generated data, so it is destroyed first and their
// teardown runs under the deadline.
class TeardownDeadline {
 public:
  TeardownDeadline() = default;
  TeardownDeadline(const TeardownDeadline&) = delete;
  TeardownDeadline& operator=(const TeardownDeadline&) = delete;
  ~TeardownDeadline() { ExitWithin(code_, kTeardownTimeout); }

  // Records the outcome and returns it: `return deadline.Outcome(RunX(...));`.
  int Outcome(int code) {
    code_ = code;
    return code;
  }

 private:
  int code_ = kExitPermanent;
};

// This replica's TensorBoard summaries, or null: no --logdir and no --output, or the event
// file cannot be created (a warning: TensorBoard is not worth failing training for).
std::unique_ptr<TrainingSummaries> OpenSummaries(const Config& c, const std::string& replica,
                                                 bool ps_mode) {
  const std::string root = !c.logdir.empty() ? c.logdir
                           : !c.output.empty()
                               ? storage::JoinPath(c.output, contract::kTensorBoardDir)
                               : "";
  if (root.empty()) return nullptr;
  observe::EventWriter::Options w;
  w.dir = storage::JoinPath(root, replica);
  w.flush_interval = std::chrono::milliseconds(static_cast<int64_t>(c.summary_flush_s * 1000));
  auto writer = observe::EventWriter::Open(std::move(w));
  if (!writer.ok()) {
    spdlog::warn("no TensorBoard events: {}", writer.status().ToString());
    return nullptr;
  }
  spdlog::info("TensorBoard events to {}", (*writer)->path());
  TrainingSummaries::Options o;
  o.every = c.summary_every;
  o.learning_rate = c.lr;
  if (ps_mode) {
    o.ps_bytes = [] {
      const TrainerMetrics& m = TrainerMetrics::Global();
      return std::pair<uint64_t, uint64_t>{m.ps_sent_bytes(), m.ps_received_bytes()};
    };
  }
  return std::make_unique<TrainingSummaries>(std::move(*writer), std::move(o));
}

// This process's name in the files it leaves behind (common/workload_contract.h).
std::string ReplicaName() {
  auto cluster = ClusterFromEnv([](const char* name) { return std::getenv(name); });
  return cluster.ok() ? cluster->TaskName() : std::string(contract::kLocalReplica);
}

int RunRole(const Config& config);

}  // namespace

// Flow: the log tail's sink joins the default logger before anything logs; the role runs
// to its outcome (its own teardown under the exit watchdog, which stays armed while the
// tail is written, so a hung upload cannot keep the pod Running); then the tail goes to
// <--output>/logs/<replica>.log. A SIGTERM that a role turns into an exit code passes
// through here too; the exit watchdog's _exit after --stop-timeout, SIGKILL and the OOM
// killer do not.
int Run(const Config& config) {
  auto tail = std::make_shared<observe::LogTail>();
  spdlog::default_logger()->sinks().push_back(observe::MakeLogTailSink(tail));
  const int code = RunRole(config);
  if (config.output.empty() || !config.predict.empty() || !config.export_dir.empty()) return code;
  const std::string path = storage::JoinPath(config.output, contract::LogTailPath(ReplicaName()));
  spdlog::info("exit code {}; the last {} KiB of this log go to {}", code,
               observe::kLogTailBytes / 1024, path);
  Status s = storage::WriteObject(path, tail->Contents(), storage::WriteMode::kReplace,
                                  "text/plain; charset=utf-8");
  if (!s.ok()) spdlog::warn("saving this log to {}: {}", path, s.ToString());
  return code;
}

namespace {

int RunRole(const Config& config) {
  auto cluster = ClusterFromEnv([](const char* name) { return std::getenv(name); });
  const bool distributed = cluster.ok();
  if (!cluster.ok() && cluster.status().code() != StatusCode::kNotFound) {
    spdlog::error("{}", cluster.status().message());
    return kExitPermanent;
  }
  if (config.predict.empty() && config.export_dir.empty() &&
      (!distributed || cluster->role != "evaluator")) {
    // Training roles save on SIGTERM; the evaluator and the one-shot tools have nothing to
    // save and keep the default action. First, before this process starts any thread.
    InstallStopHandler(
        std::chrono::milliseconds(static_cast<int64_t>(config.stop_timeout_s * 1000)));
  }
  const std::string task = distributed ? cluster->TaskName() : "local";
  spdlog::set_pattern("[%Y-%m-%dT%H:%M:%S.%e] [%l] [" + task + "] %v");
  if (Status s = CheckConfig(config); !s.ok()) {
    spdlog::error("{}", s.message());
    return kExitPermanent;
  }
  Config c = config;
  if (distributed) {
    if (const std::string why = UnsupportedShape(*cluster); !why.empty()) {
      spdlog::error("{}", why);
      WriteTerminationMessage(c, {{"task", task}, {"error", why}});
      return kExitPermanent;
    }
  }
  // A lone training replica with no PS trains in-process, as a single process does.
  const bool in_process = !distributed || (cluster->NumPs() == 0 && cluster->role != "evaluator");
  GeneratedDataDir generated;
  if (c.data_dir.empty()) {
    const bool generates = c.generate_data > 0 && (!distributed || cluster->role != "ps");
    if (!generates || !c.predict.empty() || !c.export_dir.empty()) {
      c.data_dir = "/data";
    } else if (auto dir = generated.Create(); dir.ok()) {
      c.data_dir = *dir;
    } else {
      spdlog::error("{}", dir.status().message());
      WriteTerminationMessage(c, {{"task", task}, {"error", dir.status().message()}});
      return kExitPermanent;
    }
  }
  if (!c.predict.empty() || !c.export_dir.empty()) {
    SetComputeThreads(c.threads > 0 ? c.threads : DefaultThreadCount());
    auto model = BuildModel(c, Precision::kFp32);
    if (!model.ok()) {
      spdlog::error("{}", model.status().message());
      return kExitPermanent;
    }
    return RunModelTool(c, **model);
  }
  const int threads = c.threads > 0 ? c.threads : DefaultThreadCount();
  SetComputeThreads(threads);
  // A PS only stores and updates FP32 parameters: the precision is the trainers' concern.
  const bool computes = !distributed || cluster->role != "ps";
  const PrecisionChoice precision = ResolvePrecision(computes ? c.precision : Precision::kFp32);
  if (!precision.fallback.empty()) spdlog::warn("{}", precision.fallback);
  const std::string mode = !distributed ? "single process"
                           : in_process ? task + " alone, no parameter servers: one process"
                                        : "parameter-server mode";
  spdlog::info("kubetrain-trainer {} ({}), {} compute threads{}", kVersion, mode, threads,
               precision.precision == Precision::kBf16 ? ", BF16 inner products" : "");

  auto model = BuildModel(c, precision.precision);
  if (!model.ok()) {
    spdlog::error("{}", model.status().message());
    return kExitPermanent;
  }
  const OptimizerConfig opt = c.Optimizer();
  if (!distributed || cluster->role != "ps") {
    Status s = MaybeGenerateData(c);
    if (!s.ok()) {
      spdlog::error("{}", s.ToString());
      return ExitCodeFor(s);
    }
  }
  // Live metrics (status.progress, Prometheus). Optional: a port in use costs
  // the metrics, not the training.
  MetricsServer metrics(&TrainerMetrics::Global());
  int metrics_port = 0;         // where it serves, once started
  int ps_port = c.listen_port;  // a PS's own port goes to the PS, never to the metrics
  if (distributed && cluster->role == "ps" && ps_port < 0) {
    auto hp = SplitHostPort(cluster->Members("ps")[cluster->index]);
    if (hp.ok()) ps_port = hp->port;
  }
  if (c.metrics_port > 0 && c.metrics_port == ps_port) {
    spdlog::warn("--metrics-port {} is this parameter server's port; no metrics endpoint",
                 c.metrics_port);
  } else if (c.metrics_port > 0) {
    auto port = metrics.Start(c.metrics_port);
    if (port.ok()) {
      metrics_port = *port;
      spdlog::info("metrics on port {} (GET /metrics)", *port);
    } else {
      spdlog::warn("{}; training without a metrics endpoint", port.status().message());
    }
  }
  // A successful trainer waits (at most --metrics-final-wait) until its last
  // step has been read, so a job shorter than the reader's interval still
  // reports how far it got.
  const bool serving = metrics_port > 0;
  auto read_last_step = [&](int code) {
    if (code != 0 || !serving || c.metrics_final_wait_s <= 0) return code;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(c.metrics_final_wait_s));
    if (!metrics.WaitUntilServed(TrainerMetrics::Global().version(), deadline)) {
      spdlog::info("nobody read the final metrics within --metrics-final-wait {}s",
                   c.metrics_final_wait_s);
    }
    return code;
  };
  // TensorBoard: the training replicas and the evaluator (a PS has no curve of its own).
  const std::string replica = distributed ? task : std::string(contract::kLocalReplica);
  const std::unique_ptr<TrainingSummaries> summaries =
      distributed && cluster->role == "ps"
          ? nullptr
          : OpenSummaries(c, replica, /*ps_mode=*/!in_process && cluster->role != "evaluator");
  // From here every return is the outcome; what runs after it is bounded.
  TeardownDeadline deadline;
  if (in_process) {
    return deadline.Outcome(
        read_last_step(RunSingleProcess(c, **model, opt, task, summaries.get())));
  }
  if (cluster->role == "evaluator")
    return deadline.Outcome(RunEvaluator(c, *cluster, **model, opt, summaries.get()));

  const char* key_text = std::getenv(contract::kEnvAuthKey.data());
  if (key_text == nullptr || *key_text == '\0') {
    spdlog::error("KUBETRAIN_AUTH_KEY is not set: parameter-server traffic must be authenticated");
    return deadline.Outcome(kExitPermanent);
  }
  auto key = ParseAuthKey(key_text);
  if (!key.ok()) {
    spdlog::error("{}", key.status().message());
    return deadline.Outcome(kExitPermanent);
  }
  if (cluster->role == "ps") return deadline.Outcome(RunPs(c, *cluster, **model, opt, *key));
  return deadline.Outcome(read_last_step(RunWorker(c, *cluster, **model, *key, summaries.get())));
}

}  // namespace
}  // namespace kubetrain::trainer
