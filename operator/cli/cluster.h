// The `kubetrain` subcommands that talk to a cluster: get, wait, logs,
// suspend and resume. Each returns its exit code (exit_codes.h) and prints
// what it found to stdout, problems to stderr.
//
// The kubeconfig is read as kubectl reads it (kube::LoadDefaultConfig:
// --kubeconfig, else $KUBECONFIG merged, else in-cluster, else
// ~/.kube/config), the namespace is -n, else the context's, else "default".
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kubetrain::cli {

struct ClusterFlags {
  std::string kubeconfig;
  std::string context;
  std::string ns;  // "" = the context's
  // Per-request bound (the client's request timeout); not the watch's.
  std::chrono::milliseconds request_timeout{30'000};
};

// `kubetrain get [NAME]`: TrainingJobs, then TrainingSweeps, with the CRDs'
// printer columns. `output` is "" (table), "wide", "name" or "json".
int GetCommand(const ClusterFlags& flags, const std::string& name, const std::string& output,
               bool all_namespaces);

// `kubetrain wait NAME`: until the job or sweep Succeeded (kExitOk), Failed
// (kExitFailed, with its reason and message on stderr), was deleted
// (kExitNotFound) or `timeout` passed (kExitTimeout; zero: no limit). Reads
// with a watch from the object's resourceVersion; a 410 Gone re-reads.
int WaitCommand(const ClusterFlags& flags, const std::string& name,
                std::chrono::milliseconds timeout);

// `kubetrain suspend|resume NAME`: a merge patch of spec.runPolicy.suspend
// (TrainingJob) or spec.suspend (TrainingSweep).
int SuspendCommand(const ClusterFlags& flags, const std::string& name, bool suspend);

inline constexpr int64_t kDefaultLogLimitBytes = int64_t{10} << 20;

struct LogsFlags {
  std::string name;    // the job; "" with `dir`
  std::string dir;     // print the saved tails under <dir>/logs/ (a local run's --output)
  std::string output;  // the trainer's --output, when the job no longer says
  bool follow = false;
  int64_t tail = -1;  // lines per replica; -1: all
  // Bytes per replica; 0: kDefaultLogLimitBytes without `follow`, no limit with it
  // (a follow holds one line at a time, kMaxLineBytes at most).
  int64_t limit_bytes = 0;
  std::string container;  // "" = each pod's first container
};

// `kubetrain logs NAME`: every replica's log, each line prefixed with its
// replica ("worker-0 | "). A replica whose pod is present (running or
// finished) is read from the apiserver (streamed with `follow`); one whose pod
// is gone, or whose node no longer serves its log, from its saved tail under
// the trainer's --output. With `dir`: the saved tails there, no cluster.
int LogsCommand(const ClusterFlags& flags, const LogsFlags& logs);

// "90s", "2m", "1h30m", "500ms", "1.5h" (Go's time.ParseDuration units
// h, m, s, ms) or a plain number of seconds. InvalidArgument otherwise.
[[nodiscard]] StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text);

}  // namespace kubetrain::cli
