#include "operator/sweep/local_sweep.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "operator/api/json.h"
#include "operator/local/process.h"
#include "operator/sweep/planner.h"

namespace kubetrain::sweep {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

struct Child {
  std::string name;
  pid_t pid = -1;
  int fd = -1;
  std::ofstream log;
  std::string status_file;
  bool stopping = false;
};

std::string Params(const std::map<std::string, std::string>& params) {
  std::string out;
  for (const auto& [k, v] : params) out += (out.empty() ? "" : " ") + k + "=" + v;
  return out;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.5g", v);
  return buf;
}

// The trial's final status from its runner's --status-file; a Failed status
// saying why when the runner left none.
api::TrainingJobStatus FinalStatus(const Child& c, int wait_status) {
  std::ifstream in(c.status_file);
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    json j = json::parse(text.str(), nullptr, false);
    if (!j.is_discarded()) {
      auto s = api::ParseTrainingJobStatus(j);
      if (s.ok() && s->Finished()) return *s;
    }
  }
  api::TrainingJobStatus s;
  s.conditions.push_back({api::ConditionType::kFailed, true, "TrialRunnerFailed",
                          "kubetrain run of the trial exited with code " +
                              std::to_string(local::ExitCodeFromWaitStatus(wait_status)) +
                              " without a final status (see " + c.name + ".log)",
                          api::Now()});
  return s;
}

// The running trial's progress from the status file its runner rewrites as it changes; nullopt
// when there is none yet (or the file is being replaced: the next read has it).
std::optional<api::Progress> LiveProgress(const Child& c) {
  std::ifstream in(c.status_file);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  auto s = api::ParseTrainingJobStatus(j);
  // A finished trial is judged by its final status, once its runner exits.
  if (!s.ok() || s->Finished()) return std::nullopt;
  return s->progress;
}

}  // namespace

std::string FormatTrialTable(const api::TrainingSweep& sweep) {
  const api::TrainingSweepStatus& s = sweep.status;
  size_t name_w = 5, params_w = 10;
  for (const auto& row : s.trials) {
    name_w = std::max(name_w, row.name.size());
    params_w = std::max(params_w, Params(row.parameters).size());
  }
  auto pad = [](std::string text, size_t w) {
    text.resize(std::max(text.size(), w), ' ');
    return text;
  };
  std::string out = pad("TRIAL", name_w) + "  " + pad("PARAMETERS", params_w) + "  " +
                    pad("PHASE", 12) + "  " + sweep.spec.objective.metric + "\n";
  for (const auto& row : s.trials) {
    std::string value = row.value ? Number(*row.value) : row.reason;
    if (row.early_stop) {
      value = "stopped at step " + std::to_string(row.early_stop->step) + ": loss " +
              Number(row.early_stop->value) + " > median " + Number(row.early_stop->median) +
              " of " + std::to_string(row.early_stop->trials);
    }
    if (s.best_trial && s.best_trial->name == row.name) value += "  *best";
    out += pad(row.name, name_w) + "  " + pad(Params(row.parameters), params_w) + "  " +
           pad(std::string(api::Name(row.phase)), 12) + "  " + value + "\n";
  }
  if (s.omitted.Total() != 0) {
    // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false
    // positive) on "(" + std::to_string(...) here.
    out += '(';
    out += std::to_string(s.omitted.Total());
    out += " older trials not listed: " + std::to_string(s.omitted.succeeded) + " succeeded, " +
           std::to_string(s.omitted.failed) + " failed, " + std::to_string(s.omitted.stopped) +
           " stopped, " + std::to_string(s.omitted.early_stopped) + " early stopped)\n";
  }
  out += "sweep " + sweep.metadata.name + ": " + (s.state.empty() ? "Created" : s.state) + ", " +
         s.trial_progress + " trials finished";
  if (s.best_trial) {
    out += ", best " + s.best_trial->name + " (" + Params(s.best_trial->parameters) + ") " +
           sweep.spec.objective.metric + "=" + Number(s.best_trial->value);
  }
  return out + "\n";
}

StatusOr<LocalSweepResult> RunSweepLocally(api::TrainingSweep sweep,
                                           const LocalSweepOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(options.work_dir, ec);
  if (ec) return Internal("create " + options.work_dir + ": " + ec.message());

  sigset_t set, old_mask;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  if (sigprocmask(SIG_BLOCK, &set, &old_mask) != 0) return Internal("sigprocmask failed");
  const int sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) {
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    return Internal(std::string("signalfd: ") + std::strerror(errno));
  }

  LocalSweepResult result;
  std::map<int32_t, Child> running;           // by trial index
  std::map<int32_t, ObservedTrial> finished;  // final statuses
  std::string last_table;
  size_t drawn_lines = 0;
  Status error;

  auto draw = [&] {
    const std::string table = FormatTrialTable(sweep);
    if (table == last_table) return;
    last_table = table;
    if (options.tty && drawn_lines > 0) std::fprintf(options.out, "\033[%zuA\033[J", drawn_lines);
    std::fputs(table.c_str(), options.out);
    if (!options.tty) std::fputs("\n", options.out);
    std::fflush(options.out);
    drawn_lines = static_cast<size_t>(std::count(table.begin(), table.end(), '\n'));
  };
  auto stop_all = [&] {
    for (auto& [i, c] : running) {
      if (!c.stopping) local::KillGroup(c.pid, SIGTERM);
      c.stopping = true;
    }
  };

  while (true) {
    std::vector<ObservedTrial> observed;
    for (const auto& [i, t] : finished) observed.push_back(t);
    for (const auto& [i, c] : running) {
      if (c.stopping) continue;
      ObservedTrial t;
      t.name = c.name;
      t.index = i;
      t.status.conditions.push_back({api::ConditionType::kRunning, true, "", "", api::Now()});
      if (sweep.spec.early_stopping) t.status.progress = LiveProgress(c);
      observed.push_back(std::move(t));
    }
    SweepPlan plan = PlanSweep(sweep, observed, api::Now());
    sweep.status = plan.status;
    for (const std::string& name : plan.deletes) {
      for (auto& [i, c] : running) {
        if (c.name != name || c.stopping) continue;
        local::KillGroup(c.pid, SIGTERM);
        c.stopping = true;
      }
    }
    if (!result.interrupted && error.ok()) {
      for (const api::TrainingJob& trial : plan.creates) {
        const int32_t index = std::stoi(trial.metadata.labels.at(std::string(kTrialIndexLabel)));
        if (running.contains(index) || finished.contains(index)) continue;
        const std::string base = (fs::path(options.work_dir) / trial.metadata.name).string();
        {
          std::ofstream f(base + ".json");
          f << api::ToJson(trial).dump(2) << "\n";
          if (!f) {
            error = Internal("cannot write " + base + ".json");
            break;
          }
        }
        local::SpawnSpec spec;
        spec.path = options.self_path;
        spec.argv = {options.self_path,
                     "run",
                     "-f",
                     base + ".json",
                     "--work-dir",
                     base,
                     "--status-file",
                     base + ".status.json",
                     "--color",
                     "never",
                     "-o",
                     "json"};
        for (const std::string& a : options.run_args) spec.argv.push_back(a);
        for (char** e = environ; *e != nullptr; ++e) spec.env.emplace_back(*e);
        auto spawned = local::Spawn(spec);
        if (!spawned.ok()) {
          error = spawned.status();
          break;
        }
        Child& c = running[index];
        c.name = trial.metadata.name;
        c.pid = spawned->pid;
        c.fd = spawned->output_fd;
        c.log.open(base + ".log");
        c.status_file = base + ".status.json";
      }
    }
    if (!error.ok()) stop_all();
    draw();
    if (running.empty() && (sweep.status.Finished() || result.interrupted || !error.ok() ||
                            (plan.creates.empty() && !plan.status_changed))) {
      break;
    }

    std::vector<pollfd> fds{{sfd, POLLIN, 0}};
    for (const auto& [i, c] : running) {
      if (c.fd >= 0) fds.push_back({c.fd, POLLIN, 0});
    }
    if (poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) {
      error = Internal(std::string("poll: ") + std::strerror(errno));
      stop_all();
    }
    // Drain outputs into the logs.
    for (auto& [i, c] : running) {
      if (c.fd < 0) continue;
      char buf[4096];
      while (true) {
        const ssize_t n = read(c.fd, buf, sizeof buf);
        if (n > 0) {
          c.log.write(buf, n);
          continue;
        }
        if (n == 0) {
          close(c.fd);
          c.fd = -1;
        }
        break;
      }
      c.log.flush();
    }
    signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      if (si.ssi_signo == SIGCHLD) continue;
      if (!result.interrupted) {
        result.interrupted = true;
        result.signal = static_cast<int>(si.ssi_signo);
        std::fprintf(options.out, "received signal %d: stopping every trial\n", result.signal);
      }
      stop_all();
    }
    // Reap.
    for (auto it = running.begin(); it != running.end();) {
      int wait_status = 0;
      Child& c = it->second;
      if (waitpid(c.pid, &wait_status, WNOHANG) != c.pid) {
        ++it;
        continue;
      }
      if (c.fd >= 0) {
        char buf[4096];
        ssize_t n;
        while ((n = read(c.fd, buf, sizeof buf)) > 0) c.log.write(buf, n);
        close(c.fd);
      }
      if (!c.stopping) {
        ObservedTrial t;
        t.name = c.name;
        t.index = it->first;
        t.status = FinalStatus(c, wait_status);
        finished[it->first] = std::move(t);
      }
      it = running.erase(it);
    }
  }
  close(sfd);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  result.status = sweep.status;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!error.ok()) return error;
  return result;
}

}  // namespace kubetrain::sweep
