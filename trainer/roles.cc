#include "trainer/roles.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/storage/files.h"
#include "common/workload_contract.h"
#include "kubetrain/version.h"
#include "trainer/cluster/cluster.h"
#include "trainer/data/generator.h"
#include "trainer/metrics/metrics.h"
#include "trainer/net/transport.h"
#include "trainer/observe/log_tail.h"
#include "trainer/observe/summaries.h"
#include "trainer/roles/role.h"
#include "trainer/stop/stop.h"

namespace kubetrain::trainer {
namespace {

using observe::TrainingSummaries;
using roles::BuildModel;
using roles::Ending;
using roles::ExitCode;
using roles::RoleResult;
using roles::RunEvaluator;
using roles::RunModelTool;
using roles::RunPs;
using roles::RunSingleProcess;
using roles::RunWorker;
using roles::WriteTerminationMessage;

// Writes synthetic train/eval files unless they exist. Several processes may do this at
// once: the files are written atomically and are identical, so any winner is fine.
Status MaybeGenerateData(const Config& c) {
  if (c.generate_data <= 0) return Status::Ok();
  if (storage::IsS3Path(c.data_dir)) {
    return InvalidArgument("--generate-data writes local files; --data-dir is " + c.data_dir);
  }
  if (c.data_format != DataFormat::kCriteoTsv) {
    return InvalidArgument("--generate-data writes criteo_tsv");
  }
  std::error_code ec;
  std::filesystem::create_directories(c.data_dir, ec);
  if (ec) return InvalidArgument("cannot create --data-dir " + c.data_dir + ": " + ec.message());
  const struct {
    std::string name;
    int64_t n;
    uint64_t sample_seed;
  } files[] = {
      {"train.tsv", c.generate_data, c.data_seed * 2 + 1},
      {"eval.tsv",
       c.generate_eval > 0 ? c.generate_eval : std::max<int64_t>(1000, c.generate_data / 5),
       c.data_seed * 2 + 2}};
  for (const auto& file : files) {
    const std::string path = c.data_dir + "/" + file.name;
    if (std::filesystem::exists(path)) continue;
    GeneratorOptions g;
    g.profile = c.generate_profile;
    g.model_seed = c.data_seed;
    g.sample_seed = file.sample_seed;
    KT_ASSIGN_OR_RETURN(auto auc, WriteSyntheticCriteo(path, file.n, g));
    spdlog::info("generated {} lines in {} (ground-truth AUC {:.4f})", file.n, path, auc);
  }
  return Status::Ok();
}

// The shapes the trainer cannot run: several training replicas share parameters only
// through a PS. Empty when `cluster` is one it runs.
std::string UnsupportedShape(const ClusterInfo& cluster) {
  if (cluster.NumPs() > 0 || cluster.NumTrainers() <= 1) return "";
  return "the cluster has " + std::to_string(cluster.NumTrainers()) + " training replicas (" +
         std::to_string(cluster.Members("chief").size()) + " chief, " +
         std::to_string(cluster.Members("worker").size()) +
         " workers) and no parameter servers: kubetrain-trainer trains without a PS only as one "
         "replica (one Worker or one Chief, in-process); add PS replicas to train with several";
}

// A directory --generate-data made because --data-dir was not given: removed (with the
// data) when the process is done with it.
class GeneratedDataDir {
 public:
  GeneratedDataDir() = default;
  GeneratedDataDir(const GeneratedDataDir&) = delete;
  GeneratedDataDir& operator=(const GeneratedDataDir&) = delete;
  ~GeneratedDataDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  // Creates <$TMPDIR, else /tmp>/kubetrain-data-XXXXXX and returns its path.
  StatusOr<std::string> Create() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/kubetrain-data-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      return InvalidArgument("--generate-data without --data-dir: cannot create " + pattern + ": " +
                             std::strerror(errno) +
                             " (give --data-dir a writable directory, e.g. an emptyDir)");
    }
    path_ = pattern;
    return path_;
  }

 private:
  std::string path_;
};

// How long the teardown after a role's outcome may take (the metrics server's stop, joins,
// removing the generated data, static destructors) before the exit watchdog ends the process
// with that outcome's code. Teardown takes milliseconds; a hang there must not keep the pod
// Running.
constexpr std::chrono::seconds kTeardownTimeout{10};

// Arms the exit watchdog (stop/stop.h) with the outcome when it goes out of scope. Declared
// after the metrics server and the generated data, so it is destroyed first and their
// teardown runs under the deadline.
class TeardownDeadline {
 public:
  TeardownDeadline() = default;
  TeardownDeadline(const TeardownDeadline&) = delete;
  TeardownDeadline& operator=(const TeardownDeadline&) = delete;
  ~TeardownDeadline() { ExitWithin(code_, kTeardownTimeout); }

  // Records the outcome and returns it: `return deadline.Outcome(RunX(...));`.
  int Outcome(int code) {
    code_ = code;
    return code;
  }

 private:
  int code_ = contract::kExitPermanent;
};

// This replica's TensorBoard summaries, or null: no --logdir and no --output, or the event
// file cannot be created (a warning: TensorBoard is not worth failing training for).
std::unique_ptr<TrainingSummaries> OpenSummaries(const Config& c, const std::string& replica,
                                                 bool ps_mode) {
  const std::string root = !c.logdir.empty() ? c.logdir
                           : !c.output.empty()
                               ? storage::JoinPath(c.output, contract::kTensorBoardDir)
                               : "";
  if (root.empty()) return nullptr;
  observe::EventWriter::Options w;
  w.dir = storage::JoinPath(root, replica);
  w.flush_interval = std::chrono::milliseconds(static_cast<int64_t>(c.summary_flush_s * 1000));
  auto writer = observe::EventWriter::Open(std::move(w));
  if (!writer.ok()) {
    spdlog::warn("no TensorBoard events: {}", writer.status().ToString());
    return nullptr;
  }
  spdlog::info("TensorBoard events to {}", (*writer)->path());
  TrainingSummaries::Options o;
  o.every = c.summary_every;
  o.learning_rate = c.lr;
  if (ps_mode) {
    o.ps_bytes = [] {
      const TrainerMetrics& m = TrainerMetrics::Global();
      return std::pair<uint64_t, uint64_t>{m.ps_sent_bytes(), m.ps_received_bytes()};
    };
  }
  return std::make_unique<TrainingSummaries>(std::move(*writer), std::move(o));
}

// This process's name in the files it leaves behind (common/workload_contract.h).
std::string ReplicaName() {
  auto cluster = ClusterFromEnv([](const char* name) { return std::getenv(name); });
  return cluster.ok() ? cluster->TaskName() : std::string(contract::kLocalReplica);
}

// Live metrics (status.progress, Prometheus) on --metrics-port, unless 0 or this parameter
// server's own port (`cluster` null: one process). Optional: a port in use costs the metrics,
// not the training. Returns the port it serves on, 0 for none.
int StartMetrics(const Config& c, const ClusterInfo* cluster, MetricsServer& metrics) {
  int ps_port = c.listen_port;  // a PS's own port goes to the PS, never to the metrics
  if (cluster != nullptr && cluster->role == "ps" && ps_port < 0) {
    auto hp = SplitHostPort(cluster->Members("ps")[cluster->index]);
    if (hp.ok()) ps_port = hp->port;
  }
  if (c.metrics_port <= 0) return 0;
  if (c.metrics_port == ps_port) {
    spdlog::warn("--metrics-port {} is this parameter server's port; no metrics endpoint",
                 c.metrics_port);
    return 0;
  }
  auto port = metrics.Start(c.metrics_port);
  if (!port.ok()) {
    spdlog::warn("{}; training without a metrics endpoint", port.status().message());
    return 0;
  }
  spdlog::info("metrics on port {} (GET /metrics)", *port);
  return *port;
}

// The job's key for parameter-server traffic (KUBETRAIN_AUTH_KEY).
StatusOr<AuthKey> AuthKeyFromEnv() {
  const char* text = std::getenv(contract::kEnvAuthKey.data());
  if (text == nullptr || *text == '\0') {
    return FailedPrecondition(
        "KUBETRAIN_AUTH_KEY is not set: parameter-server traffic must be authenticated");
  }
  return ParseAuthKey(text);
}

// Logs a role's error (the one place it is logged) and returns the exit code for its result.
int Conclude(const RoleResult& r) {
  if (!r.ok()) spdlog::error("{}", r.status().ToString());
  return ExitCode(r);
}

int RunRole(const Config& config);

}  // namespace

// Flow: the log tail's sink joins the default logger before anything logs; the role runs
// to its outcome (its own teardown under the exit watchdog, which stays armed while the
// tail is written, so a hung upload cannot keep the pod Running); then the tail goes to
// <--output>/logs/<replica>.log. A SIGTERM that a role turns into an exit code passes
// through here too; the exit watchdog's _exit after --stop-timeout, SIGKILL and the OOM
// killer do not.
int Run(const Config& config) {
  auto tail = std::make_shared<observe::LogTail>();
  spdlog::default_logger()->sinks().push_back(observe::MakeLogTailSink(tail));
  const int code = RunRole(config);
  if (config.output.empty() || config.IsModelTool()) return code;
  const std::string path = storage::JoinPath(config.output, contract::LogTailPath(ReplicaName()));
  spdlog::info("exit code {}; the last {} KiB of this log go to {}", code,
               observe::kLogTailBytes / 1024, path);
  Status s = storage::WriteObject(path, tail->Contents(), storage::WriteMode::kReplace,
                                  "text/plain; charset=utf-8");
  if (!s.ok()) spdlog::warn("saving this log to {}: {}", path, s.ToString());
  return code;
}

namespace {

int RunRole(const Config& config) {
  auto cluster = ClusterFromEnv([](const char* name) { return std::getenv(name); });
  const bool distributed = cluster.ok();
  if (!cluster.ok() && cluster.status().code() != StatusCode::kNotFound) {
    return Conclude(cluster.status());
  }
  if (!config.IsModelTool() && (!distributed || cluster->role != "evaluator")) {
    // Training roles save on SIGTERM; the evaluator and the one-shot tools have nothing to
    // save and keep the default action. First, before this process starts any thread.
    InstallStopHandler(
        std::chrono::milliseconds(static_cast<int64_t>(config.stop_timeout_s * 1000)));
  }
  const std::string task = distributed ? cluster->TaskName() : "local";
  spdlog::set_pattern("[%Y-%m-%dT%H:%M:%S.%e] [%l] [" + task + "] %v");
  if (Status s = CheckConfig(config); !s.ok()) return Conclude(s);
  Config c = config;
  if (distributed) {
    if (const std::string why = UnsupportedShape(*cluster); !why.empty()) {
      WriteTerminationMessage(c, {{"task", task}, {"error", why}});
      return Conclude(FailedPrecondition(why));
    }
  }
  // A lone training replica with no PS trains in-process, as a single process does.
  const bool in_process = !distributed || (cluster->NumPs() == 0 && cluster->role != "evaluator");
  GeneratedDataDir generated;
  if (c.data_dir.empty()) {
    const bool generates = c.generate_data > 0 && (!distributed || cluster->role != "ps");
    if (!generates || c.IsModelTool()) {
      c.data_dir = "/data";
    } else if (auto dir = generated.Create(); dir.ok()) {
      c.data_dir = *dir;
    } else {
      WriteTerminationMessage(c, {{"task", task}, {"error", dir.status().message()}});
      return Conclude(dir.status());
    }
  }
  if (c.IsModelTool()) {
    SetComputeThreads(c.threads > 0 ? c.threads : DefaultThreadCount());
    auto model = BuildModel(c, Precision::kFp32);
    if (!model.ok()) return Conclude(model.status());
    return Conclude(RunModelTool(c, **model));
  }
  const int threads = c.threads > 0 ? c.threads : DefaultThreadCount();
  SetComputeThreads(threads);
  // A PS only stores and updates FP32 parameters: the precision is the trainers' concern.
  const bool computes = !distributed || cluster->role != "ps";
  const PrecisionChoice precision = ResolvePrecision(computes ? c.precision : Precision::kFp32);
  if (!precision.fallback.empty()) spdlog::warn("{}", precision.fallback);
  const std::string mode = !distributed ? "single process"
                           : in_process ? task + " alone, no parameter servers: one process"
                                        : "parameter-server mode";
  spdlog::info("kubetrain-trainer {} ({}), {} compute threads{}", kVersion, mode, threads,
               precision.precision == Precision::kBf16 ? ", BF16 inner products" : "");

  auto model = BuildModel(c, precision.precision);
  if (!model.ok()) return Conclude(model.status());
  const OptimizerConfig opt = c.Optimizer();
  if (!distributed || cluster->role != "ps") {
    if (Status s = MaybeGenerateData(c); !s.ok()) return Conclude(s);
  }
  MetricsServer metrics(&TrainerMetrics::Global());
  const int metrics_port =
      StartMetrics(c, distributed ? &*cluster : static_cast<const ClusterInfo*>(nullptr), metrics);
  // A successful trainer waits (at most --metrics-final-wait) until its last
  // step has been read, so a job shorter than the reader's interval still
  // reports how far it got.
  const bool serving = metrics_port > 0;
  auto read_last_step = [&](RoleResult r) {
    if (!r.ok() || *r != Ending::kDone || !serving || c.metrics_final_wait_s <= 0) return r;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(c.metrics_final_wait_s));
    if (!metrics.WaitUntilServed(TrainerMetrics::Global().version(), deadline)) {
      spdlog::info("nobody read the final metrics within --metrics-final-wait {}s",
                   c.metrics_final_wait_s);
    }
    return r;
  };
  // TensorBoard: the training replicas and the evaluator (a PS has no curve of its own).
  const std::string replica = distributed ? task : std::string(contract::kLocalReplica);
  const std::unique_ptr<TrainingSummaries> summaries =
      distributed && cluster->role == "ps"
          ? nullptr
          : OpenSummaries(c, replica, /*ps_mode=*/!in_process && cluster->role != "evaluator");
  // From here every return is the outcome; what runs after it is bounded.
  TeardownDeadline deadline;
  if (in_process) {
    return deadline.Outcome(
        Conclude(read_last_step(RunSingleProcess(c, **model, opt, task, summaries.get()))));
  }
  if (cluster->role == "evaluator") {
    return deadline.Outcome(Conclude(RunEvaluator(c, *cluster, **model, opt, summaries.get())));
  }

  auto key = AuthKeyFromEnv();
  if (!key.ok()) return deadline.Outcome(Conclude(key.status()));
  if (cluster->role == "ps") {
    return deadline.Outcome(Conclude(RunPs(c, *cluster, **model, opt, *key)));
  }
  return deadline.Outcome(
      Conclude(read_last_step(RunWorker(c, *cluster, **model, *key, summaries.get()))));
}

}  // namespace
}  // namespace kubetrain::trainer
