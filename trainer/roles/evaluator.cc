#include "trainer/worker/evaluator.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>

#include "common/storage/files.h"
#include "trainer/metrics/metrics.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/roles/role.h"

namespace kubetrain::trainer::roles {

// The side-car evaluator: evaluates every checkpoint the coordinator commits to
// --checkpoint-dir, keeps each one's metrics (<--output or --checkpoint-dir>/<task>/
// ckpt-<step>.json, final.json for the last), and exits 0 after the final checkpoint
// (trainer/worker/evaluator.h). It talks to no parameter server.
RoleResult RunEvaluator(const Config& c, const ClusterInfo& cluster, Model& model,
                        const OptimizerConfig& opt, TrainingSummaries* summaries) {
  if (c.checkpoint_dir.empty()) {
    return InvalidArgument(
        "the evaluator evaluates the checkpoints in --checkpoint-dir: give it the "
        "--checkpoint-dir of the chief (or worker 0), on storage both reach (a shared volume or "
        "s3://)");
  }
  // One shard per PS; a lone training replica without PS trains in-process and writes
  // one-shard checkpoints (RunSingleProcess).
  const int num_shards =
      cluster.NumPs() > 0 ? cluster.NumPs() : (cluster.NumTrainers() == 1 ? 1 : 0);
  if (num_shards == 0) {
    return FailedPrecondition(
        "the cluster has no parameter servers: there are no checkpoints to evaluate");
  }
  if (c.no_eval) spdlog::warn("--no-eval is ignored by an evaluator");
  auto ro = Reader(c, c.EvalDir(), c.eval_match, 0, 1, /*loop=*/false);
  if (!ro.ok()) return ro.status().WithContext("evaluation data");
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
  if (!r.ok()) return r.status();
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
  return Ending::kDone;
}

}  // namespace kubetrain::trainer::roles
