#include <spdlog/spdlog.h>

#include <fstream>

#include "common/workload_contract.h"
#include "trainer/roles/role.h"
#include "trainer/stop/stop.h"

namespace kubetrain::trainer::roles {

int ExitCode(const RoleResult& r) {
  if (r.ok()) {
    switch (*r) {
      case Ending::kDone:
        return contract::kExitSuccess;
      case Ending::kStopped:
        return kExitStopped;
      case Ending::kTargetMissed:
        return contract::kExitTargetMissed;
    }
  }
  switch (r.status().code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return contract::kExitRetryable;
    default:
      return contract::kExitPermanent;
  }
}

// A process stopped on SIGTERM tells the operator what the stop cost (its termination
// message's "stopped": the PodDisrupted event and lastDisruption).
Ending StoppedSaying(const Config& c, const std::string& cost) {
  WriteTerminationMessage(c, {{std::string(contract::kTerminationStopped), cost}});
  return Ending::kStopped;
}

// A process that stopped on SIGTERM: what it leaves behind (logged, and said to the
// operator).
Ending Stopped(const Config& c, const TrainResult& r) {
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

}  // namespace kubetrain::trainer::roles
