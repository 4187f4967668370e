#include "operator/local/runner.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/utf8.h"
#include "common/workload_contract.h"
#include "operator/local/console.h"
#include "operator/local/local_progress.h"
#include "operator/local/pod_command.h"
#include "operator/local/process.h"

namespace kubetrain::local {
namespace {

using nlohmann::json;
using planner::ObservedPod;
using planner::PodPhase;

constexpr size_t kMaxTerminationMessage = 4096;  // the kubelet's limit
constexpr size_t kFallbackLines = 80;            // FallbackToLogsOnError: last 80 lines...
constexpr size_t kFallbackBytes = 2048;          // ...at most 2048 bytes
constexpr size_t kMaxPartialLine = 64 * 1024;

std::string Errno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// One replica's process: the local stand-in for a Pod.
struct LocalPod {
  ObservedPod observed;          // what the planner sees
  std::string short_name;        // "worker-0"
  pid_t pid = -1;                // also the process group; -1 once reaped
  int fd = -1;                   // output pipe; -1 at EOF
  std::string partial;           // output not yet ended by '\n'
  std::deque<std::string> tail;  // last lines, for FallbackToLogsOnError
  std::string termination_log;
  bool fallback_to_logs = false;
  std::chrono::seconds grace{10};
  std::optional<Clock::TimePoint> kill_at;  // SIGKILL the group then
  std::vector<LocalCommand> commands;       // init containers, then the main one
  size_t current = 0;                       // the one running or last run
  int64_t total_steps = 0;                  // for the progress bar (trainer workers only)
  int64_t train_step = 0;
  double loss = 0;
};

// The trainer's --steps from its argv (its default when absent).
int64_t StepsFromArgv(const std::vector<std::string>& argv) {
  int64_t steps = 1000;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    try {
      if (a.rfind("--steps=", 0) == 0) steps = std::stoll(a.substr(8));
      if (a == "--steps" && i + 1 < argv.size()) steps = std::stoll(argv[i + 1]);
    } catch (const std::exception&) {
    }
  }
  return steps;
}

class Runner {
 public:
  Runner(api::TrainingJob job, const RunOptions& options)
      : job_(std::move(job)),
        opt_(options),
        console_(options.out, options.color, options.progress, [this] { return Progress(); }),
        progress_(options.progress_interval, options.clock) {}
  ~Runner();

  StatusOr<RunResult> Run();

 private:
  Status Setup();
  Status Preflight(const planner::Plan& first);
  planner::ObservedChildren Observe() const;
  void Apply(const planner::Plan& plan);
  void StartPod(const planner::ChildCreate& pod);
  // Starts pod.commands[pod.current]; false (and the pod failed) if it cannot.
  bool StartCommand(LocalPod& pod);
  void DeletePod(const std::string& name);
  // Waits until something happens or `timeout` passes; returns false on error.
  void Wait(std::optional<Clock::TimePoint> until);
  void ReadOutput(LocalPod& pod, bool drain);
  void Reap();
  void OnExit(LocalPod& pod, int wait_status);
  void HandleSignals();
  void StopAll();
  void AnnounceStatus(const api::TrainingJobStatus& before, const api::TrainingJobStatus& after);

  // Output.
  void Say(const std::string& text) { console_.Say(text); }
  std::vector<ReplicaProgress> Progress() const;

  // Constant after Setup.
  api::TrainingJob job_;
  const RunOptions opt_;
  std::array<uint8_t, 32> key_{};
  planner::ClusterSpec cluster_;
  int signal_fd_ = -1;
  sigset_t old_mask_{};
  bool mask_changed_ = false;
  struct sigaction old_sigpipe_ {};
  Watchdog watchdog_;
  Console console_;

  // Run state (single-threaded).
  std::map<std::string, LocalPod> pods_;  // by Pod name
  std::map<std::string, bool> services_;
  bool secret_exists_ = false;
  std::string cluster_config_;  // the "cluster" key of the job's Secret (or ConfigMap)
  int uid_counter_ = 0;
  int interrupted_ = 0;     // the signal
  LocalProgress progress_;  // status.progress from the coordinator's metrics
  std::map<std::string, std::string> termination_messages_;
};

Runner::~Runner() {
  StopAll();
  watchdog_.Stop();
  if (mask_changed_) sigaction(SIGPIPE, &old_sigpipe_, nullptr);
  if (signal_fd_ >= 0) close(signal_fd_);
  if (mask_changed_) sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
}

Status Runner::Setup() {
  if (job_.metadata.namespace_.empty()) job_.metadata.namespace_ = "default";
  if (job_.metadata.uid.empty()) job_.metadata.uid = "local";
  if (job_.metadata.generation == 0) job_.metadata.generation = 1;
  if (!job_.metadata.creation_timestamp) job_.metadata.creation_timestamp = api::Now(*opt_.clock);
  if (sodium_init() < 0) return Internal("libsodium initialisation failed");
  randombytes_buf(key_.data(), key_.size());
  KT_ASSIGN_OR_RETURN(cluster_, AllocateLocalCluster(job_, opt_.base_port));
  size_t name_width = 9;
  for (const auto& [type, spec] : job_.spec.replica_specs) {
    for (int32_t i = 0; i < spec.replicas; ++i) {
      name_width = std::max(name_width, planner::PodNameEnv(type, i).size());
    }
  }
  console_.SetNameWidth(name_width);
  std::error_code ec;
  std::filesystem::create_directories(opt_.work_dir, ec);
  if (ec) return Internal("cannot create " + opt_.work_dir + ": " + ec.message());

  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  if (sigprocmask(SIG_BLOCK, &set, &old_mask_) != 0) return Internal(Errno("sigprocmask"));
  mask_changed_ = true;
  signal_fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd_ < 0) return Internal(Errno("signalfd"));
  // A reader that goes away (`kubetrain run ... | head`) must not kill the
  // runner before it has stopped the replicas.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old_sigpipe_);
  return watchdog_.Start();
}

// Every pod of the first plan must map to a local command before anything
// starts: a bad command fails the run with nothing to clean up.
Status Runner::Preflight(const planner::Plan& first) {
  const char* path_env = getenv("PATH");
  for (const planner::ChildCreate& c : first.creates) {
    if (c.ref.kind != planner::ChildRef::Kind::kPod) continue;
    CommandContext ctx{opt_.trainer_path,
                       planner::AuthSecretName(job_.metadata.name, job_.metadata.uid),
                       planner::AuthKeyText(key_),
                       "/dev/null",
                       path_env ? path_env : "",
                       opt_.work_dir,
                       planner::ClusterConfigMapName(job_.metadata.name),
                       cluster_config_};
    ctx.objects = &opt_.objects;
    auto cmds = LocalCommandsFor(c.object, ctx);
    const std::string& name = c.ref.name;
    if (!cmds.ok()) {
      return Status(cmds.status().code(), "pod " + name + ": " + cmds.status().message());
    }
    for (const auto& cmd : *cmds) {
      if (cmd.is_trainer && access(opt_.trainer_path.c_str(), X_OK) != 0) {
        return NotFound("pod " + name +
                        " runs the kubetrain-trainer image, but the trainer binary " +
                        (opt_.trainer_path.empty() ? std::string("was not found")
                                                   : opt_.trainer_path + " is not executable") +
                        " (pass --trainer=<path> or put kubetrain-trainer on PATH)");
      }
      for (const auto& w : cmd.warnings) Say("warning: pod " + name + ": " + w);
    }
  }
  return Status::Ok();
}

planner::ObservedChildren Runner::Observe() const {
  planner::ObservedChildren o;
  for (const auto& [name, pod] : pods_) o.pods.push_back(pod.observed);
  for (const auto& [name, gone] : services_) o.services.push_back({name, std::nullopt});
  o.secret_exists = secret_exists_;
  return o;
}

void Runner::Apply(const planner::Plan& plan) {
  for (const auto& ref : plan.deletes) {
    switch (ref.kind) {
      case planner::ChildRef::Kind::kPod:
        DeletePod(ref.name);
        break;
      case planner::ChildRef::Kind::kService:
        services_.erase(ref.name);
        break;
      case planner::ChildRef::Kind::kSecret:
        secret_exists_ = false;
        break;
      case planner::ChildRef::Kind::kConfigMap:
      case planner::ChildRef::Kind::kNetworkPolicy:
      case planner::ChildRef::Kind::kPodGroup:
        break;
    }
  }
  for (const planner::ChildCreate& c : plan.creates) {
    switch (c.ref.kind) {
      case planner::ChildRef::Kind::kSecret:
        secret_exists_ = true;  // the key goes straight into KUBETRAIN_AUTH_KEY
        // CLUSTER_CONFIG of the pods that follow (secretKeyRef).
        cluster_config_ = c.object["stringData"].value(std::string(planner::kClusterConfigKey), "");
        break;
      case planner::ChildRef::Kind::kConfigMap:
        // CLUSTER_CONFIG of the pods that follow (configMapKeyRef); the same
        // cluster as the Secret's.
        cluster_config_ = c.object["data"].value(std::string(planner::kClusterConfigKey), "");
        break;
      case planner::ChildRef::Kind::kService:
        services_[c.ref.name] = true;  // addresses are 127.0.0.1:<port> from cluster_override
        break;
      case planner::ChildRef::Kind::kPod:
        if (!pods_.count(c.ref.name)) StartPod(c);
        break;
      case planner::ChildRef::Kind::kNetworkPolicy:
        break;  // local processes: no network to police
      case planner::ChildRef::Kind::kPodGroup:
        break;  // local processes all start: no scheduler to gang
    }
  }
}

void Runner::StartPod(const planner::ChildCreate& child) {
  const json& obj = child.object;
  const json& meta = obj["metadata"];
  const api::ReplicaType role = child.ref.role.value_or(api::ReplicaType::kWorker);
  LocalPod pod;
  pod.observed.name = child.ref.name;
  pod.observed.uid = "local-" + std::to_string(++uid_counter_);
  pod.observed.role = role;
  pod.observed.index = child.ref.index;
  pod.observed.phase = PodPhase::kRunning;
  pod.observed.creation_timestamp = api::Now(*opt_.clock);
  if (meta.contains("annotations") &&
      meta["annotations"].contains(std::string(planner::kSpecHashAnnotation))) {
    pod.observed.spec_hash =
        meta["annotations"][std::string(planner::kSpecHashAnnotation)].get<std::string>();
  }
  pod.observed.cluster_config_in_secret = planner::ClusterConfigInSecret(obj);
  pod.observed.legacy_auth_secret = planner::LegacyAuthSecret(obj);
  pod.short_name = planner::PodNameEnv(role, child.ref.index);
  pod.termination_log = opt_.work_dir + "/" + pod.short_name + ".termination-log";
  std::error_code ignored;
  std::filesystem::remove(pod.termination_log, ignored);

  const char* path_env = getenv("PATH");
  const std::string volume_root = opt_.work_dir + "/" + pod.short_name + "-volumes";
  CommandContext ctx{opt_.trainer_path,
                     planner::AuthSecretName(job_.metadata.name, job_.metadata.uid),
                     planner::AuthKeyText(key_),
                     pod.termination_log,
                     path_env ? path_env : "",
                     volume_root,
                     planner::ClusterConfigMapName(job_.metadata.name),
                     cluster_config_};
  ctx.objects = &opt_.objects;
  console_.AddReplica(pod.short_name);
  // The coordinator (chief-0, else worker-0) serves the metrics the
  // status.progress comes from, as in a cluster.
  if (role == api::CoordinatorRole(job_.spec) && child.ref.index == contract::kCoordinatorIndex) {
    if (auto port = LocalProgress::FreePort(); port.ok()) ctx.metrics_port = *port;
  }
  auto cmds = LocalCommandsFor(obj, ctx);
  if (cmds.ok()) {
    // emptyDir: a fresh directory for each pod.
    std::error_code ec;
    std::filesystem::remove_all(volume_root, ec);
    for (const auto& dir : EmptyDirsOf(obj, ctx)) std::filesystem::create_directories(dir, ec);
    pod.commands = std::move(*cmds);
    const LocalCommand& main = pod.commands.back();
    pod.fallback_to_logs = main.fallback_to_logs;
    pod.grace = main.grace_seconds >= 0 ? std::chrono::seconds(main.grace_seconds) : opt_.grace;
    if (main.is_trainer &&
        (role == api::ReplicaType::kWorker || role == api::ReplicaType::kChief)) {
      pod.total_steps = StepsFromArgv(main.argv);
    }
    if (main.is_trainer && ctx.metrics_port > 0) progress_.Watch(pod.short_name, ctx.metrics_port);
    auto it = pods_.emplace(pod.observed.name, std::move(pod)).first;
    StartCommand(it->second);
    return;
  }
  // What the kubelet reports for a container that cannot start.
  pod.observed.phase = PodPhase::kFailed;
  pod.observed.exit_code = 128;
  pod.observed.reason = "StartError";
  pod.observed.message = cmds.status().message();
  Say("cannot start " + pod.short_name + ": " + cmds.status().message());
  pods_.emplace(pod.observed.name, std::move(pod));
}

bool Runner::StartCommand(LocalPod& pod) {
  const LocalCommand& cmd = pod.commands[pod.current];
  // The runner's environment (PATH, HOME, ...) stands in for the image's; the
  // container's variables win.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string_view::npos) env[std::string(kv.substr(0, eq))] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : cmd.env) env[k] = v;
  SpawnSpec spawn{cmd.path, cmd.argv, {}};
  for (const auto& [k, v] : env) spawn.env.push_back(k + "=" + v);
  auto spawned = Spawn(spawn);
  const std::string what =
      pod.short_name + (cmd.init ? " (init container " + cmd.container + ")" : "");
  if (spawned.ok()) {
    // Pending while init containers run, as the kubelet reports it.
    pod.observed.phase = cmd.init ? PodPhase::kPending : PodPhase::kRunning;
    pod.pid = spawned->pid;
    pod.fd = spawned->output_fd;
    watchdog_.Add(pod.pid);
    std::string line;
    for (const auto& a : cmd.argv) line += (line.empty() ? "" : " ") + a;
    Say("started " + what + " (pid " + std::to_string(pod.pid) + "): " + line);
    return true;
  }
  pod.observed.phase = PodPhase::kFailed;
  if (!cmd.init) pod.observed.exit_code = 128;
  pod.observed.reason = cmd.init ? "Init:StartError" : "StartError";
  pod.observed.message = spawned.status().message();
  Say("cannot start " + what + ": " + spawned.status().message());
  return false;
}

void Runner::DeletePod(const std::string& name) {
  auto it = pods_.find(name);
  if (it == pods_.end()) return;
  LocalPod& pod = it->second;
  if (pod.pid < 0) {  // already terminated: gone at once
    if (pod.fd >= 0) close(pod.fd);
    pods_.erase(it);
    return;
  }
  if (pod.observed.deletion_timestamp) return;
  pod.observed.deletion_timestamp = api::Now(*opt_.clock);
  // The SIGKILL deadline before the line that announces the stop: a reader of
  // the line (a test on a FakeClock) may move the clock past it at once.
  pod.kill_at = opt_.clock->Now() + pod.grace;
  Say("stopping " + pod.short_name + " (SIGTERM to process group " + std::to_string(pod.pid) + ")");
  KillGroup(pod.pid, SIGTERM);
}

std::vector<ReplicaProgress> Runner::Progress() const {
  std::vector<ReplicaProgress> out;
  for (const auto& [name, pod] : pods_) {
    if (pod.total_steps > 0)
      out.push_back({pod.short_name, pod.train_step, pod.total_steps, pod.loss});
  }
  return out;
}

void Runner::ReadOutput(LocalPod& pod, bool drain) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(pod.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // EAGAIN: nothing more now
    if (n == 0) {
      close(pod.fd);
      pod.fd = -1;
      break;
    }
    pod.partial.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    while ((nl = pod.partial.find('\n', start)) != std::string::npos) {
      std::string line = pod.partial.substr(start, nl - start);
      start = nl + 1;
      if (pod.total_steps > 0) ParseStepLine(line, pod.train_step, pod.loss);
      pod.tail.push_back(line);
      if (pod.tail.size() > kFallbackLines) pod.tail.pop_front();
      console_.Line(pod.short_name, line);
    }
    pod.partial.erase(0, start);
    // A process that never ends its lines (a \r progress bar) must not grow
    // this without bound: show what there is as a line of its own.
    if (pod.partial.size() > kMaxPartialLine) {
      console_.Line(pod.short_name, pod.partial);
      pod.partial.clear();
    }
    if (!drain && n < static_cast<ssize_t>(sizeof buf)) break;
  }
  if (pod.fd < 0 && !pod.partial.empty()) {
    console_.Line(pod.short_name, pod.partial);
    pod.partial.clear();
  }
}

void Runner::OnExit(LocalPod& pod, int wait_status) {
  // The container's main process is gone: like the kubelet tearing the
  // container down, nothing else of it may keep running.
  KillGroup(pod.pid, SIGKILL);
  watchdog_.Remove(pod.pid);
  pod.pid = -1;
  pod.kill_at.reset();
  if (pod.fd >= 0) ReadOutput(pod, /*drain=*/true);
  if (pod.fd >= 0) {
    close(pod.fd);
    pod.fd = -1;
  }
  const int code = ExitCodeFromWaitStatus(wait_status);
  const LocalCommand& cmd = pod.commands[pod.current];
  if (cmd.init) {
    Say(pod.short_name + " init container " + cmd.container + " exited with code " +
        std::to_string(code));
    if (pod.observed.deletion_timestamp) {  // deleted while initialising: gone
      pods_.erase(pod.observed.name);
      return;
    }
    if (code == 0) {
      ++pod.current;
      StartCommand(pod);
      return;
    }
    // Like the kubelet: the pod failed and its main container never ran, so
    // there is no exit code of the main container.
    pod.observed.phase = PodPhase::kFailed;
    pod.observed.reason = "Init:Error";
    pod.observed.message =
        "init container " + cmd.container + " exited with code " + std::to_string(code);
    return;
  }
  pod.observed.exit_code = code;
  pod.observed.phase = code == 0 ? PodPhase::kSucceeded : PodPhase::kFailed;
  pod.observed.reason = code == 0 ? "Completed" : "Error";
  std::ifstream in(pod.termination_log, std::ios::binary);
  std::string log;
  if (in) log.assign(std::istreambuf_iterator<char>(in), {});
  const std::string msg = TerminationMessage(log, pod.tail, pod.fallback_to_logs, code);
  pod.observed.message = msg;
  if (!msg.empty()) termination_messages_[pod.short_name] = msg;
  std::string how = WIFSIGNALED(wait_status)
                        ? "killed by signal " + std::to_string(WTERMSIG(wait_status)) +
                              " (exit code " + std::to_string(code) + ")"
                        : "exited with code " + std::to_string(code);
  Say(pod.short_name + " " + how);
  if (pod.observed.deletion_timestamp) {  // a deleted pod is gone once terminated
    if (pod.fd >= 0) close(pod.fd);
    pods_.erase(pod.observed.name);
  }
}

void Runner::Reap() {
  for (;;) {
    int ws = 0;
    pid_t pid = waitpid(-1, &ws, WNOHANG);
    if (pid <= 0) return;
    for (auto& [name, pod] : pods_) {
      if (pod.pid == pid) {
        OnExit(pod, ws);
        break;
      }
    }
  }
}

void Runner::HandleSignals() {
  signalfd_siginfo si;
  while (read(signal_fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    const int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) continue;  // Reap() below sees every exited child
    if (interrupted_) {
      // A second Ctrl-C: no more grace.
      Say("received signal " + std::to_string(sig) + " again: killing every replica now");
      for (auto& [name, pod] : pods_) {
        if (pod.pid > 0) KillGroup(pod.pid, SIGKILL);
      }
    } else {
      interrupted_ = sig;
    }
  }
  Reap();
}

void Runner::Wait(std::optional<Clock::TimePoint> until) {
  for (auto& [name, pod] : pods_) {
    if (pod.kill_at && (!until || *pod.kill_at < *until)) until = pod.kill_at;
  }
  std::vector<pollfd> fds;
  std::vector<LocalPod*> owners;
  fds.push_back({signal_fd_, POLLIN, 0});
  owners.push_back(nullptr);
  for (auto& [name, pod] : pods_) {
    if (pod.fd >= 0) {
      fds.push_back({pod.fd, POLLIN, 0});
      owners.push_back(&pod);
    }
  }
  int timeout_ms = -1;
  if (until) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*until - opt_.clock->Now());
    timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60 * 60 * 1000));
  }
  if (auto read = progress_.NextRead()) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*read - opt_.clock->Now());
    const int ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60 * 60 * 1000));
    timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
  }
  if (opt_.clock != &RealClock()) {  // another clock moves on its own: look at it again soon
    const int look = static_cast<int>(kFakeClockLook.count());
    timeout_ms = timeout_ms < 0 ? look : std::min(timeout_ms, look);
  }
  int n = poll(fds.data(), fds.size(), timeout_ms);
  if (n > 0) {
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents) ReadOutput(*owners[i], /*drain=*/false);
    }
    if (fds[0].revents) HandleSignals();
  }
  const auto now = opt_.clock->Now();
  progress_.Poll(now);  // the next plan carries a new reading into the status
  for (auto& [name, pod] : pods_) {
    if (pod.pid > 0 && pod.kill_at && *pod.kill_at <= now) {
      Say(pod.short_name + " did not stop within " + std::to_string(pod.grace.count()) +
          "s: SIGKILL");
      KillGroup(pod.pid, SIGKILL);
      pod.kill_at.reset();
    }
  }
  Reap();
}

// Stops every process still running: SIGTERM to each group, SIGKILL after the
// grace period (or at once on a second signal), and reaps all of them.
void Runner::StopAll() {
  bool any = false;
  for (auto& [name, pod] : pods_) {
    if (pod.pid > 0 && !pod.observed.deletion_timestamp) {
      pod.observed.deletion_timestamp = api::Now(*opt_.clock);
      KillGroup(pod.pid, SIGTERM);
      pod.kill_at = opt_.clock->Now() + pod.grace;
    }
    any = any || pod.pid > 0;
  }
  while (any) {
    if (signal_fd_ >= 0) {
      Wait(std::nullopt);  // kill_at deadlines bound the wait
    } else {
      for (auto& [name, pod] : pods_) {
        if (pod.pid > 0) KillGroup(pod.pid, SIGKILL);
      }
      int ws;
      while (waitpid(-1, &ws, 0) > 0 || errno == EINTR) {
      }
      break;
    }
    any = false;
    for (auto& [name, pod] : pods_) any = any || pod.pid > 0;
  }
  for (auto& [name, pod] : pods_) {
    if (pod.fd >= 0) {
      close(pod.fd);
      pod.fd = -1;
    }
  }
}

void Runner::AnnounceStatus(const api::TrainingJobStatus& before,
                            const api::TrainingJobStatus& after) {
  if (after.progress && before.progress != after.progress) {
    Say("progress: " + DescribeProgress(*after.progress));
  }
  // The reason of the condition behind the state: a job can stay Running for a new
  // reason (WaitingForEvaluator), which is worth a line.
  auto reason = [](const api::TrainingJobStatus& s) {
    for (const auto& c : s.conditions) {
      if (c.status && Name(c.type) == s.state) return c.reason;
    }
    return std::string();
  };
  if (before.state != after.state || reason(before) != reason(after)) {
    std::string msg = "job " + job_.metadata.name + ": " + after.state;
    for (const auto& c : after.conditions) {
      if (c.status && Name(c.type) == after.state && !c.message.empty()) {
        msg += " (" + c.reason + ": " + c.message + ")";
      }
    }
    Say(msg);
  }
}

StatusOr<RunResult> Runner::Run() {
  const auto started = opt_.clock->Now();
  KT_RETURN_IF_ERROR(Setup());
  planner::PlanInput input;
  input.auth_key = key_;
  input.cluster_override = cluster_;
  bool first = true;
  for (;;) {
    input.now = api::Now(*opt_.clock);
    input.progress = progress_.published();
    planner::Plan plan = planner::PlanJob(job_, Observe(), input);
    if (first) {
      KT_RETURN_IF_ERROR(Preflight(plan));
      first = false;
    }
    for (const auto& e : plan.events) {
      Say((e.type == planner::EventType::kWarning ? "Warning " : "") + e.reason + ": " + e.message);
    }
    // Status first, then the deletes (planner.h: counted failures live in it).
    if (plan.status_changed) {
      // The status file before the line announcing it (a sweep wakes on the line).
      if (opt_.on_status) opt_.on_status(plan.status);
      AnnounceStatus(job_.status, plan.status);
      job_.status = plan.status;
    }
    Apply(plan);
    if (job_.status.Finished() || interrupted_) break;
    const bool acted = !plan.creates.empty() || !plan.deletes.empty() || plan.status_changed;
    std::optional<Clock::TimePoint> until;
    if (plan.requeue_after) {
      until = opt_.clock->Now() + std::max<std::chrono::milliseconds>(
                                      *plan.requeue_after, std::chrono::milliseconds(200));
    }
    if (acted) until = opt_.clock->Now();  // plan again at once: one more step may follow
    if (!acted && !until) {
      // Nothing runs, nothing is planned and no timer is set: no event can
      // ever move the job on (a suspended job, say). Waiting would hang.
      bool running = false;
      for (const auto& [name, pod] : pods_) running = running || pod.pid > 0;
      if (!running) {
        Say(job_.spec.run_policy.suspend
                ? "the job is suspended (spec.runPolicy.suspend): nothing to run"
                : "no replica is running and the job is not finished (state " + job_.status.state +
                      "): stopping");
        break;
      }
    }
    Wait(until);
    if (interrupted_) {
      Say("received signal " + std::to_string(interrupted_) +
          ": stopping every replica (again to kill at once)");
      break;
    }
  }
  StopAll();
  // The status the operator ends with: the pods this runner stopped are gone,
  // the ones that terminated on their own remain.
  if (!interrupted_) {
    for (auto it = pods_.begin(); it != pods_.end();) {
      it = it->second.observed.deletion_timestamp ? pods_.erase(it) : std::next(it);
    }
    input.now = api::Now(*opt_.clock);
    planner::Plan last = planner::PlanJob(job_, Observe(), input);
    if (last.status_changed) job_.status = last.status;
  }
  console_.ClearProgress();
  console_.Flush();
  RunResult result;
  result.status = job_.status;
  result.interrupted = interrupted_ != 0 && !job_.status.Finished();
  result.signal = interrupted_;
  result.termination_messages = termination_messages_;
  result.cluster = cluster_;
  result.seconds = std::chrono::duration<double>(opt_.clock->Now() - started).count();
  return result;
}

}  // namespace

StatusOr<planner::ClusterSpec> AllocateLocalCluster(const api::TrainingJob& job, int base_port) {
  planner::ClusterSpec cluster;
  std::vector<int> held;  // kept open until every port is chosen, so none repeats
  auto cleanup = [&] {
    for (int fd : held) close(fd);
  };
  int next = base_port;
  for (const auto& role : api::kRoles) {
    if (!role.in_cluster) continue;
    const int32_t n = job.spec.Replicas(role.type);
    if (n <= 0) continue;
    auto& list = cluster[role.type];
    for (int32_t i = 0; i < n; ++i) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        cleanup();
        return Internal(Errno("socket"));
      }
      held.push_back(fd);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      const int want = base_port > 0 ? next++ : 0;
      if (want > 65535) {
        cleanup();
        return InvalidArgument("--base-port " + std::to_string(base_port) + ": not enough ports");
      }
      addr.sin_port = htons(static_cast<uint16_t>(want));
      if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        const int e = errno;
        cleanup();
        if (e == EADDRINUSE) {
          return FailedPrecondition("port " + std::to_string(want) +
                                    " on 127.0.0.1 is in use (for " +
                                    planner::PodNameEnv(role.type, i) + ")");
        }
        return Internal("bind 127.0.0.1:" + std::to_string(want) + ": " + std::strerror(e));
      }
      socklen_t len = sizeof addr;
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      list.push_back("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
    }
  }
  cleanup();
  return cluster;
}

std::string TerminationMessage(std::string_view log, const std::deque<std::string>& tail_lines,
                               bool fallback_to_logs, int exit_code) {
  std::string msg = CleanText(log, kMaxTerminationMessage);
  while (!msg.empty() && std::isspace(static_cast<unsigned char>(msg.back()))) msg.pop_back();
  if (msg.empty() && fallback_to_logs && exit_code != 0) {
    std::string tail;
    for (const auto& l : tail_lines) tail += l + "\n";
    tail = CleanText(tail, std::string::npos);
    size_t start = tail.size() > kFallbackBytes ? tail.size() - kFallbackBytes : 0;
    // Keep the tail: skip the continuation bytes of a character cut at the front.
    while (start < tail.size() && start > 0 &&
           (static_cast<unsigned char>(tail[start]) & 0xC0) == 0x80) {
      ++start;
    }
    msg = tail.substr(start);
  }
  return msg;
}

StatusOr<RunResult> RunLocally(api::TrainingJob job, const RunOptions& options) {
  Runner runner(std::move(job), options);
  return runner.Run();
}

}  // namespace kubetrain::local
