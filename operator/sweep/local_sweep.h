// `kubetrain run -f sweep.yaml`: the sweep planner with local processes.
//
// Flow: PlanSweep -> each trial to create is written to <work>/<trial>.json and
// run by a child `kubetrain run -f <trial>.json --status-file ...` (the same
// binary, so each trial is exactly a local TrainingJob run: same job planner,
// env contract and restart rules) -> wait for a child to exit, a line of its
// output or a signal -> read its final status -> plan again. Trials to stop
// get SIGTERM (their runner stops every replica). Up to spec.parallelism
// children run at once; each in its own process group, its output in
// <work>/<trial>.log.
//
// Guarantees: when RunSweepLocally returns, every child it started has exited
// and been reaped. SIGINT/SIGTERM/SIGHUP stop every trial and return with
// `interrupted`. Assumptions: called from the main thread; SIGCHLD, SIGINT,
// SIGTERM and SIGHUP are blocked and read through a signalfd while it runs.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/sweep.h"

namespace kubetrain::sweep {

struct LocalSweepOptions {
  std::string self_path;              // the kubetrain binary that runs one trial
  std::vector<std::string> run_args;  // extra `kubetrain run` flags (--trainer ...)
  std::string work_dir;               // trial files and logs; created if missing
  bool tty = false;                   // redraw the table in place
  std::FILE* out = stdout;
};

struct LocalSweepResult {
  api::TrainingSweepStatus status;
  bool interrupted = false;
  int signal = 0;
  double seconds = 0;
};

StatusOr<LocalSweepResult> RunSweepLocally(api::TrainingSweep sweep,
                                           const LocalSweepOptions& options);

// The table of trials and the best one, as printed while the sweep runs.
std::string FormatTrialTable(const api::TrainingSweep& sweep);

}  // namespace kubetrain::sweep
