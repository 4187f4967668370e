#include <spdlog/spdlog.h>

#include <optional>

#include "trainer/metrics/metrics.h"
#include "trainer/roles/role.h"

namespace kubetrain::trainer::roles {

// Trains in this process with every parameter local: no cluster, or a cluster whose only
// training replica is this one and which has no PS (`task` names it in the metrics). Its
// checkpoints have one shard; the last one is marked FINAL, so an evaluator beside it
// evaluates it as the end of training.
RoleResult RunSingleProcess(const Config& c, Model& model, const OptimizerConfig& opt,
                            const std::string& task, TrainingSummaries* summaries) {
  auto embedding = BuildEmbeddingOptions(c, 1);
  if (!embedding.ok()) return embedding.status();
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
    if (!latest.ok()) return latest.status().WithContext("restore");
    restored = *latest;
    if (latest->has_value()) {
      start = **latest;
      spdlog::info("resumed from checkpoint {} in {}", start, c.checkpoint_dir);
    }
  }
  auto reader = OpenTrainingData(c, 0, 1, model.batch_size(), start);
  if (!reader.ok()) return reader.status().WithContext("training data");
  auto r =
      Train(model, **reader, params, TrainOptionsFrom(c, /*checkpoints=*/true, summaries), start);
  if (!r.ok()) return r.status().WithContext("training failed");
  if (r->stopped) return Stopped(c, *r);
  if (!c.checkpoint_dir.empty()) {
    const Status s = SaveFinalCheckpoint(c, params, *r, {start, restored});
    if (!s.ok()) spdlog::warn("final checkpoint: {}", s.ToString());
  }
  return Finish(c, model, params, *r, {{"task", task}}, summaries);
}

}  // namespace kubetrain::trainer::roles
