#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "trainer/roles/role.h"
#include "trainer/stop/stop.h"

namespace kubetrain::trainer::roles {

// The end of training, run by the coordinator (chief, else worker 0) once its own steps are
// done: it waits for every worker, saves the final checkpoint and marks it FINAL, evaluates
// and writes --output (Finish), then stops the parameter servers.
RoleResult FinishAsCoordinator(const Config& c, const ClusterInfo& cluster, Model& model,
                               RemoteParams& params, const TrainResult& r, int done,
                               const RunStart& from, const nlohmann::json& ps_bytes,
                               TrainingSummaries* summaries) {
  const int trainers = cluster.NumTrainers();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(c.finish_timeout_s);
  int count = done;
  while (count < trainers) {
    if (StopRequested()) {
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
    if (std::chrono::steady_clock::now() > deadline) {
      return DeadlineExceeded("only " + std::to_string(count) + " of " + std::to_string(trainers) +
                              " workers finished within --finish-timeout");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // poll interval
    auto done_now = params.DoneCount();
    if (!done_now.ok()) return done_now.status();
    count = *done_now;
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
