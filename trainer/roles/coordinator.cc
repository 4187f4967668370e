#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <string>

#include "trainer/roles/role.h"
#include "trainer/stop/stop.h"

namespace kubetrain::trainer::roles {

StatusOr<WorkersWaitEnd> WaitForWorkers(const WorkersWait& w,
                                        const std::function<StatusOr<int>()>& done_count,
                                        const std::function<bool()>& stop_requested) {
  const Clock::TimePoint deadline = w.clock->Now() + w.timeout;
  int count = w.done;
  while (count < w.trainers) {
    if (stop_requested()) return WorkersWaitEnd::kStopRequested;
    if (w.clock->Now() > deadline) {
      return DeadlineExceeded("only " + std::to_string(count) + " of " +
                              std::to_string(w.trainers) +
                              " workers finished within --finish-timeout");
    }
    w.clock->SleepFor(w.poll);
    auto done_now = done_count();
    if (!done_now.ok()) return done_now.status();
    count = *done_now;
  }
  return WorkersWaitEnd::kAllFinished;
}

// The end of training, run by the coordinator (chief, else worker 0) once its own steps are
// done: it waits for every worker, saves the final checkpoint and marks it FINAL, evaluates
// and writes --output (Finish), then stops the parameter servers.
RoleResult FinishAsCoordinator(const Config& c, const ClusterInfo& cluster, Model& model,
                               RemoteParams& params, const TrainResult& r, int done,
                               const RunStart& from, const nlohmann::json& ps_bytes,
                               TrainingSummaries* summaries) {
  const int trainers = cluster.NumTrainers();
  WorkersWait wait;
  wait.trainers = trainers;
  wait.done = done;
  wait.timeout = std::chrono::seconds(c.finish_timeout_s);
  const auto waited = WaitForWorkers(
      wait, [&params] { return params.DoneCount(); }, [] { return StopRequested(); });
  if (!waited.ok()) return waited.status();
  if (*waited == WorkersWaitEnd::kStopRequested) {
    // Training is over here; the others' pushes since then go into this checkpoint too.
    TrainResult stopped = r;
    if (!c.checkpoint_dir.empty() && r.last_step > from.step && r.last_saved != r.last_step) {
      Status s = params.SaveCheckpoint(c.checkpoint_dir, r.last_step);
      if (s.ok()) {
        stopped.last_saved = r.last_step;
      } else {
        spdlog::error("checkpoint on SIGTERM: {}", s.ToString());
      }
    }
    return Stopped(c, stopped);
  }
  spdlog::info("all {} workers finished", trainers);
  if (!c.checkpoint_dir.empty()) {
    const Status s = SaveFinalCheckpoint(c, params, r, from);
    if (s.ok()) {
      spdlog::info("checkpoint {} is the final one ({}/FINAL)", r.last_step, c.checkpoint_dir);
    } else {
      spdlog::warn("final checkpoint: {} (an evaluator will not see the end of training)",
                   s.ToString());
    }
  }
  const RoleResult result = Finish(c, model, params, r,
                                   {{"task", cluster.TaskName()},
                                    {"pushes", PushesSent(params, cluster.NumPs())},
                                    {"ps_bytes", ps_bytes}},
                                   summaries);
  Status s = params.ShutdownAll();
  if (!s.ok()) spdlog::warn("stopping parameter servers: {}", s.ToString());
  return result;
}

}  // namespace kubetrain::trainer::roles
