#include "operator/local/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kubetrain::local {
namespace {

// Writes all of `data` (only async-signal-safe calls: used between fork and exec).
void WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// a + ": " + b, built with append: GCC 12 at -O3 reports a false -Wrestrict
// for chained std::string operator+ here.
std::string Join(std::string_view a, std::string_view b) {
  std::string out;
  out.reserve(a.size() + b.size() + 2);
  out.append(a);
  out.append(": ");
  out.append(b);
  return out;
}

}  // namespace

StatusOr<Spawned> Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return InvalidArgument("empty command");
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls are allowed.
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Internal(Join("pipe", strerror(errno)));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return Internal(Join("pipe", strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    return Internal(Join("fork", strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);  // the runner died before prctl
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT}) signal(s, SIG_DFL);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    execve(spec.path.c_str(), argv.data(), envp.data());
    int e = errno;
    WriteAll(err[1], &e, sizeof e);
    _exit(127);
  }
  // Also from the parent, so KillGroup works even before the child ran setpgid.
  setpgid(pid, pid);
  close(out[1]);
  close(err[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(err[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(err[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    close(out[0]);
    int ws;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    std::string msg = Join(spec.path, strerror(child_errno));
    if (child_errno == ENOENT) return NotFound(msg);
    if (child_errno == EACCES) return Status(StatusCode::kPermissionDenied, msg);
    return Internal(msg);
  }
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  return Spawned{pid, out[0]};
}

void KillGroup(pid_t pgid, int sig) {
  if (pgid > 0) kill(-pgid, sig);
}

std::optional<std::string> ResolveExecutable(std::string_view name, std::string_view path_env) {
  auto executable = [](const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string_view::npos) {
    std::string p(name);
    if (executable(p)) return p;
    return std::nullopt;
  }
  size_t start = 0;
  while (start <= path_env.size()) {
    size_t end = path_env.find(':', start);
    if (end == std::string_view::npos) end = path_env.size();
    const std::string_view dir = path_env.substr(start, end - start);
    std::string p(dir.empty() ? std::string_view(".") : dir);
    p.push_back('/');
    p.append(name);
    if (executable(p)) return p;
    start = end + 1;
  }
  return std::nullopt;
}

Status Watchdog::Start() {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return Internal(Join("pipe", strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return Internal(Join("fork", strerror(errno)));
  }
  if (pid == 0) {
    // Survive whatever hits the runner's session or process group.
    setsid();
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) {
      signal(sig, SIG_IGN);
    }
    // Hold nothing else open: a reader of the runner's output must see EOF.
    const int in = 3;
    if (p[0] != in) dup2(p[0], in);  // dup2 clears close-on-exec; nothing is exec'd anyway
    int devnull = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) dup2(devnull, fd);
    close_range(in + 1, ~0U, 0);
    // A fixed-size table: no allocation after fork.
    constexpr int kMax = 4096;
    static int32_t groups[kMax];
    int n = 0;
    int32_t v;
    for (;;) {
      ssize_t r = read(in, &v, sizeof v);
      if (r < 0 && errno == EINTR) continue;
      if (r != static_cast<ssize_t>(sizeof v)) break;  // EOF: the runner is gone
      if (v > 0 && n < kMax) {
        groups[n++] = v;
      } else if (v < 0) {
        for (int i = 0; i < n; ++i) {
          if (groups[i] == -v) {
            groups[i] = groups[--n];
            break;
          }
        }
      }
    }
    for (int i = 0; i < n; ++i) kill(-groups[i], SIGKILL);
    _exit(0);
  }
  close(p[0]);
  pid_ = pid;
  fd_ = p[1];
  return Status::Ok();
}

void Watchdog::Send(int32_t value) {
  if (fd_ >= 0) WriteAll(fd_, &value, sizeof value);
}

void Watchdog::Add(pid_t pgid) {
  Send(static_cast<int32_t>(pgid));
}
void Watchdog::Remove(pid_t pgid) {
  Send(-static_cast<int32_t>(pgid));
}

void Watchdog::Stop() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (pid_ > 0) {
    int ws;
    while (waitpid(pid_, &ws, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

int ExitCodeFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 255;
}

}  // namespace kubetrain::local
