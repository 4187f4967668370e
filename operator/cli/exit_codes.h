// The exit codes of every `kubetrain` subcommand: one table, so a script (an
// Argo retry step, a CI job) can tell "the job failed" from "the file is
// invalid" from "the cluster could not be reached" whatever the subcommand.
// docs/user-guide.md prints this table; exit_codes_test checks they agree.
#pragma once

#include <array>
#include <string_view>

#include "common/status.h"

namespace kubetrain::cli {

enum ExitCode : int {
  kExitOk = 0,        // the job or sweep Succeeded; the files are valid; done
  kExitFailed = 1,    // the job or sweep Failed (its reason is printed)
  kExitUsage = 2,     // bad flags or arguments; a file or directory that cannot be read
  kExitInvalid = 3,   // a document breaks the CRD's rules or the planner's (InvalidSpec)
  kExitNotFound = 4,  // no such job or sweep in the namespace; no saved logs
  kExitTimeout = 5,   // `wait --timeout` passed before the job finished
  kExitError = 6,     // kubeconfig, apiserver (unreachable, forbidden, ...) or local system
                      // error: nothing was decided, retrying may help
  // 128 + n: interrupted by signal n (130 for Ctrl-C), every local process stopped.
};
inline constexpr int kExitSignalBase = 128;

struct ExitCodeRow {
  int code;
  std::string_view name;
  std::string_view meaning;
};

inline constexpr std::array<ExitCodeRow, 7> kExitCodeTable{{
    {kExitOk, "ok",
     "success: the job or sweep Succeeded (run, wait), the files are valid "
     "(validate), the command did what it was asked (get, logs, suspend, ...)"},
    {kExitFailed, "failed",
     "the job or sweep Failed (run, wait); the reason and message are printed"},
    {kExitUsage, "usage", "bad flags or arguments, or a file or directory that cannot be read"},
    {kExitInvalid, "invalid",
     "a document breaks the CRD's rules or would fail as InvalidSpec (validate, render, run)"},
    {kExitNotFound, "not found",
     "no such TrainingJob or TrainingSweep in the namespace (get, wait, logs, suspend, "
     "resume), or no logs where --dir points"},
    {kExitTimeout, "timeout", "`wait --timeout` passed before the job finished"},
    {kExitError, "error",
     "the kubeconfig, the apiserver (unreachable, forbidden, ...) or the local system (a port "
     "in use, a program that cannot start) failed: nothing was decided, a retry may succeed"},
}};

// The exit code for an error from the Kubernetes client: NotFound ->
// kExitNotFound, anything else (a refused write included) -> kExitError.
inline int ExitCodeFor(const Status& s) {
  if (s.ok()) return kExitOk;
  return s.code() == StatusCode::kNotFound ? kExitNotFound : kExitError;
}

}  // namespace kubetrain::cli
