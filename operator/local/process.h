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

#include "common/status.h"

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

// The backstop for a runner that dies without cleaning up (SIGKILL, a crash):
// a small process, in a session of its own and deaf to job-control signals,
// that knows the process groups of the running replicas and SIGKILLs all of
// them once the runner's end of a pipe closes. PR_SET_PDEATHSIG covers only
// a replica's first process; this covers what it forked too.
// Flow: Start() before the first Spawn; Add(pgid) after each Spawn;
// Remove(pgid) once the group is reaped and killed (so a pgid the kernel may
// reuse is never signalled); Stop() (or the destructor) at the end: the
// watchdog sees EOF, kills what is still registered (nothing, normally) and exits.
// Not thread-safe.
class Watchdog {
 public:
  Watchdog() = default;
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() { Stop(); }

  Status Start();
  void Add(pid_t pgid);
  void Remove(pid_t pgid);
  void Stop();
  pid_t pid() const { return pid_; }

 private:
  void Send(int32_t value);
  pid_t pid_ = -1;
  int fd_ = -1;  // write end
};

// Exit status from waitpid as Kubernetes reports it: the exit code, or
// 128 + signal number for a process killed by a signal.
int ExitCodeFromWaitStatus(int wait_status);

}  // namespace kubetrain::local
