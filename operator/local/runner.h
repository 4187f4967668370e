// The local backend of the planner: `kubetrain run` runs every replica of a
// TrainingJob as a process on this machine.
//
// Flow: plan (planner::PlanJob) -> carry out the plan (Secret/Service creates
// are recorded, Pod creates start processes, Pod deletes SIGTERM the process
// group and SIGKILL it after the grace period) -> wait for a process to exit, a
// line of output, a signal or the plan's requeue_after -> plan again. The
// planner owns every lifecycle rule; this file only observes processes and
// reports them as ObservedPods (phase, exit code, termination message).
//
// Guarantees: when RunLocally returns (any path: finished, interrupted by
// SIGINT/SIGTERM/SIGHUP, error), every process it started has been killed and
// reaped, process group included. A child whose runner is SIGKILLed gets
// SIGKILL itself (PR_SET_PDEATHSIG).
// Assumptions: called from the main thread, with no other code in the process
// expecting SIGCHLD/SIGINT/SIGTERM/SIGHUP (they are blocked and read through a
// signalfd while it runs, and restored afterwards).
#pragma once

#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"
#include "operator/api/types.h"
#include "operator/local/pod_command.h"
#include "operator/planner/planner.h"

namespace kubetrain::local {

struct RunOptions {
  std::string trainer_path;  // the kubetrain-trainer binary (for kubetrain-trainer images)
  std::string work_dir;      // termination-message files go here; created if missing
  int base_port = 0;         // 0: free ports from the kernel; else base_port, base_port+1, ...
  bool color = false;        // ANSI colours in the output
  bool progress = false;     // a progress bar line (needs a terminal)
  std::chrono::seconds grace{10};  // SIGTERM -> SIGKILL, unless the pod sets its own
  std::FILE* out = stdout;
  // Secrets and ConfigMaps defined in the job file, for the pods' env/envFrom references.
  LocalObjects objects;
  // How often status.progress may change (LocalProgress); a sweep with early stopping asks
  // for its trials' readings more often than a person does.
  std::chrono::milliseconds progress_interval{std::chrono::seconds(2)};
  // Called from the runner's loop with every new status (progress readings included), the
  // final one last. Unset: nothing is called.
  std::function<void(const api::TrainingJobStatus&)> on_status;
  // What the runner's timers (SIGTERM -> SIGKILL, the plan's requeue_after, progress reads)
  // and timestamps (the planner's now, creation and deletion times) read; must outlive the
  // run. The runner waits on its children's pipes and signals (poll); on any clock but
  // RealClock() a wait also ends every kFakeClockLook, so a test's Advance is seen.
  Clock* clock = &RealClock();
};

// How often the runner looks at a clock other than RealClock() while it waits.
inline constexpr std::chrono::milliseconds kFakeClockLook{50};

struct RunResult {
  api::TrainingJobStatus status;  // as the operator would write it
  bool interrupted = false;       // stopped by a signal before the job finished
  int signal = 0;                 // which one
  // The last termination message of each replica ("worker-0" -> metrics JSON).
  std::map<std::string, std::string> termination_messages;
  planner::ClusterSpec cluster;  // the addresses the replicas got
  double seconds = 0;
};

// 127.0.0.1:<port> for every in-cluster replica. With base_port 0, ports the
// kernel reports free; otherwise consecutive ports from base_port, each checked
// (FailedPrecondition "port N is in use").
StatusOr<planner::ClusterSpec> AllocateLocalCluster(const api::TrainingJob& job, int base_port);

// A finished container's termination message as the kubelet reports it: the
// termination log (`log`) cut to 4096 bytes, trailing space trimmed; if that is
// empty, the container failed and `fallback_to_logs`, the last of `tail_lines`
// (at most 2048 bytes). The workload wrote these bytes, so the result is valid
// UTF-8: cut on code-point boundaries, ill-formed bytes replaced by U+FFFD.
std::string TerminationMessage(std::string_view log, const std::deque<std::string>& tail_lines,
                               bool fallback_to_logs, int exit_code);

// Runs `job` (already parsed and validated) to completion or interruption.
// Errors: InvalidArgument/NotFound for a job that cannot run locally (found
// before any process starts), Internal for system call failures.
StatusOr<RunResult> RunLocally(api::TrainingJob job, const RunOptions& options);

}  // namespace kubetrain::local
