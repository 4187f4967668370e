// `kubetrain-operator`: the TrainingJob controller process.
//
// Flow: options (operator_options.h) -> the manager: client, controllers'
// options, election (operator_manager.h) -> /metrics, /healthz and /readyz
// (runtime/http_endpoints.h), served the whole time -> (optionally) win the
// leader Lease -> start the informers -> run the reconcile workers until
// SIGTERM/SIGINT or lost leadership. /readyz reports this replica's own state
// (runtime::Readiness): a standby waiting for the Lease is ready, a leader once
// its caches synced; only the work is gated by the Lease. Exit codes: 0 after a
// graceful shutdown, 1 on a configuration error or caches that never synced, 2
// when leadership was lost.
#include <sodium.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <stop_token>
#include <string>
#include <thread>

#include "kubetrain/version.h"
#include "operator/cli/operator_manager.h"
#include "operator/cli/operator_options.h"
#include "operator/controller/job_controller.h"
#include "operator/controller/metrics.h"
#include "operator/runtime/events.h"
#include "operator/runtime/http_endpoints.h"
#include "operator/runtime/leader_election.h"
#include "operator/runtime/memory.h"
#include "operator/runtime/metrics.h"
#include "operator/runtime/readiness.h"
#include "operator/runtime/shutdown.h"
#include "operator/sweep/sweep_controller.h"

namespace kubetrain::operator_cli {
namespace {

using ReadyState = runtime::Readiness::State;

void ConfigureLogging(const OperatorOptions& f) {
  if (f.log_format == "json") {
    spdlog::set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","logger":"kubetrain-operator","msg":"%v"})",
        spdlog::pattern_time_type::utc);
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %v");
  }
  spdlog::set_level(spdlog::level::from_str(f.log_level));
}

// Serves the endpoints, then runs the controllers: at once, or whenever this
// replica leads. Returns the process's exit code.
int Serve(const OperatorOptions& f, Manager& m, std::stop_token shutdown) {
  controller::Metrics metrics;
  runtime::DefaultMetrics().Help("kubetrain_thread_errors_total", "counter",
                                 "Exceptions caught at an operator thread's boundary (by "
                                 "thread); the thread carried on instead of ending the process.");
  runtime::EventRecorder recorder(m.client.get());
  runtime::Readiness readiness;
  // Stops the elector (or the lone controller) on SIGTERM/SIGINT, and when the
  // leader cannot start: a leader that does no work must give the Lease up
  // rather than keep renewing it.
  std::stop_source quit;
  std::stop_callback on_shutdown(shutdown, [&] {
    readiness.Set(ReadyState::kStopping);
    quit.request_stop();
  });
  runtime::OperatorEndpoints endpoints([&metrics] { return metrics.Render(); }, &readiness);
  if (Status s = endpoints.Start(f.metrics_addr, f.health_addr); !s.ok()) {
    spdlog::error("{}", s.message());
    return 1;
  }

  int exit_code = 0;
  auto lead_unsafe = [&](std::stop_token stop) {
    readiness.Set(ReadyState::kSyncing);
    controller::JobController jobs(m.client.get(), &recorder, &metrics, m.jobs);
    // The first sync sees the stop token: SIGTERM while it keeps failing (bad
    // kubeconfig, RBAC) exits at once instead of after --cache-sync-timeout.
    const Status started = jobs.Start(std::chrono::seconds(f.sync_timeout_s), stop);
    if (!started.ok() && stop.stop_requested()) {
      spdlog::info("stopped before the caches synced");
      readiness.Set(ReadyState::kStopping);
      return;
    }
    if (!started.ok()) {
      spdlog::error("{}", started.ToString());
      exit_code = 1;
      readiness.Set(ReadyState::kStopping);
      quit.request_stop();  // release the Lease so a standby takes over
      return;
    }
    readiness.Set(ReadyState::kSynced);  // caches never unsync once synced
    spdlog::info("caches synced; reconciling with {} workers", f.workers);
    // TrainingSweeps: their own informers and workers beside the jobs'. Not
    // waited for: a cluster may install the TrainingSweep CRD later.
    sweep::SweepController sweeps(m.client.get(), &recorder, &metrics, m.sweeps);
    sweeps.Start();
    std::jthread sweep_workers([&sweeps, stop] { sweeps.Run(stop); });
    jobs.Run(stop);
    sweep_workers.join();
    // Shutdown or lost leadership: either way this process exits now.
    readiness.Set(ReadyState::kStopping);
    spdlog::info("workers stopped");
  };
  // The leading thread's boundary: nothing may end the process from here
  // without the Lease being released, so an exception stops this replica
  // cleanly (exit 1) and is counted.
  auto lead = [&](std::stop_token stop) {
    try {
      lead_unsafe(stop);
    } catch (const std::exception& e) {
      spdlog::error("controller stopped by an unexpected error: {}", e.what());
      runtime::DefaultMetrics().Add("kubetrain_thread_errors_total", "thread=\"leader\"");
      exit_code = 1;
      readiness.Set(ReadyState::kStopping);
      quit.request_stop();
    }
  };

  if (!f.leader_elect) {
    lead(quit.get_token());
    return exit_code;
  }
  runtime::LeaderElector elector(m.election_client.get(), m.election);
  spdlog::info("waiting to lead {}/{} as {}", m.election.lease_namespace, m.election.lease_name,
               elector.identity());
  readiness.Set(ReadyState::kStandby);
  const Status s = elector.Run(quit.get_token(), lead);
  if (!s.ok()) {
    spdlog::error("leader election: {}", s.ToString());
    return 2;
  }
  return exit_code;
}

}  // namespace
}  // namespace kubetrain::operator_cli

int main(int argc, char** argv) {
  using namespace kubetrain;
  using namespace kubetrain::operator_cli;
  runtime::TuneMalloc();  // before any thread: two malloc arenas, no fast bins (memory.h)
  OperatorOptions f;
  CLI::App app{"kubetrain-operator: reconciles TrainingJobs into pods, services and a secret"};
  app.set_version_flag("--version", std::string("kubetrain-operator ") + kubetrain::kVersion);
  AddOperatorFlags(app, &f);
  CLI11_PARSE(app, argc, argv);
  ConfigureLogging(f);
  if (sodium_init() < 0) {
    spdlog::error("libsodium failed to initialise");
    return 1;
  }
  if (Status s = ValidateOperatorOptions(f); !s.ok()) {
    spdlog::error("{}", s.message());
    return 1;
  }
  ResolveFromEnvironment(&f, [](const char* name) { return std::getenv(name); });
  const std::stop_token shutdown = runtime::InstallShutdownHandler();
  auto manager = BuildManager(f);
  if (!manager.ok()) {
    spdlog::error("{}", manager.status().ToString());
    return 1;
  }
  return Serve(f, *manager, shutdown);
}
