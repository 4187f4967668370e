// Child processes for the local runner: spawn in a process group of their own,
// kill the whole group, never outlive the parent.
//
// Guarantees:
//  - Spawn puts the child in a new process group (pgid == pid), so
//    KillGroup reaches everything it forks (a `sh -c` and its children);
//  - the child gets PR_SET_PDEATHSIG(SIGKILL): if the runner dies without
//    cleaning up (SIGKILL), the direct child dies with it;
//  - stdin is /dev/null; stdout and stderr go to one pipe the caller reads;
//  - an exec failure (no such file, not executable) comes back from Spawn as a
//    Status, and the failed child is already reaped.
// Not thread-safe: call from the thread that owns the children (PDEATHSIG is
// tied to the thread that forked).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "operator/common/status.h"

namespace kubetrain::local {

struct SpawnSpec {
  std::string path;               // absolute or relative path of the executable
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "NAME=value", the complete environment
};

struct Spawned {
  pid_t pid = -1;      // also the process group id
  int output_fd = -1;  // read end of the stdout+stderr pipe (non-blocking, close-on-exec)
};

// NotFound / PermissionDenied / Internal with "<path>: <strerror>" on failure.
StatusOr<Spawned> Spawn(const SpawnSpec& spec);

// Sends `sig` to the process group `pgid`; ESRCH (already gone) is not an error.
void KillGroup(pid_t pgid, int sig);

// `name` as execvp would find it: a name with a '/' is used as is; otherwise
// the first executable match in the ':'-separated `path_env`.
std::optional<std::string> ResolveExecutable(std::string_view name, std::string_view path_env);

// Exit status from waitpid as Kubernetes reports it: the exit code, or
// 128 + signal number for a process killed by a signal.
int ExitCodeFromWaitStatus(int wait_status);

}  // namespace kubetrain::local
