#include <spdlog/spdlog.h>

#include <optional>

#include "trainer/metrics/metrics.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/roles/role.h"
#include "trainer/stop/stop.h"

namespace kubetrain::trainer::roles {

RoleResult RunWorker(const Config& c, const ClusterInfo& cluster, Model& model, const AuthKey& key,
                     TrainingSummaries* summaries) {
  const int rank = cluster.TrainerRank(), trainers = cluster.NumTrainers();
  if (cluster.NumPs() == 0)
    return FailedPrecondition("the cluster has workers but no parameter servers");
  int64_t start = 0;
  std::optional<int64_t> restored;  // the committed checkpoint this run starts from
  if (!c.checkpoint_dir.empty()) {
    auto latest = LatestCheckpoint(c.checkpoint_dir, cluster.NumPs());
    if (!latest.ok()) return latest.status();
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
    return Ending::kStopped;
  }
  if (!params.ok()) return params.status();
  if (c.sync && (*params)->last_ps_step() > start) {
    // Restarted into a running synchronous job: join the others at their step.
    start = (*params)->last_ps_step();
    spdlog::info("joining the running synchronous job after step {}", start);
  } else if (start > 0) {
    spdlog::info("resuming at step {} from {}", start, c.checkpoint_dir);
  }
  auto reader = OpenTrainingData(c, rank, trainers, model.batch_size(), start);
  if (!reader.ok()) return reader.status().WithContext("training data");
  // Only the coordinator checkpoints: it asks every PS to save its shard, at its periodic
  // steps and when a PS says it got SIGTERM.
  TrainOptions to = TrainOptionsFrom(c, cluster.IsCoordinator(), summaries);
  if (cluster.IsCoordinator()) to.save_now = [&p = **params] { return p.TakeCheckpointRequest(); };
  auto r = Train(model, **reader, **params, to, start);
  if (!r.ok() && StopRequested()) {
    // A PS went away during the stop (it was stopped too): the last committed checkpoint
    // stays the one to resume from.
    spdlog::warn("stopped by SIGTERM without a new checkpoint: {}", r.status().ToString());
    return Ending::kStopped;
  }
  if (!r.ok()) return r.status().WithContext("training failed");
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
  if (!done.ok()) return done.status();
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
    return Ending::kDone;
  }
  return FinishAsCoordinator(c, cluster, model, **params, *r, *done, {start, restored}, ps_bytes,
                             summaries);
}

}  // namespace kubetrain::trainer::roles
