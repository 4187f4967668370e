// `kubetrain`: the command-line front end.
//
//   kubetrain run -f job.yaml        every replica as a local process (operator/local)
//   kubetrain run -f sweep.yaml      a TrainingSweep's trials as local runs (operator/sweep)
//   kubetrain render -f job.yaml     the Pods, Services, Secret and NetworkPolicy the operator
//                                    would create
//   kubetrain validate -f job.yaml   the CRD's rules, with field paths and file lines
//   kubetrain get|wait|logs|suspend|resume JOB    a job or sweep on a cluster (cluster.h)
//   kubetrain convert -f tfjob.yaml  Kubeflow TFJobs as TrainingJobs (convert.h)
//
// validate, render and run also take kubeflow.org/v1 TFJobs, converted first.
//
// Exit codes: one table for every subcommand, exit_codes.h.
#include <sodium.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>

#include "kubetrain/version.h"
#include "operator/api/json.h"
#include "operator/api/sweep.h"
#include "operator/api/tfjob.h"
#include "operator/api/validation.h"
#include "operator/api/yaml.h"
#include "operator/cli/cluster.h"
#include "operator/cli/convert.h"
#include "operator/cli/exit_codes.h"
#include "operator/cli/logs.h"
#include "operator/cli/manifest_files.h"
#include "operator/local/pod_command.h"
#include "operator/local/process.h"
#include "operator/local/runner.h"
#include "operator/local/yaml_out.h"
#include "operator/planner/planner.h"
#include "operator/sweep/local_sweep.h"
#include "operator/sweep/planner.h"

namespace kubetrain::cli {
namespace {

using nlohmann::json;

// The exit code of a LoadJobs error: a file that cannot be read is a usage
// error, one that is not YAML an invalid input.
int LoadExit(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument ? kExitInvalid : kExitUsage;
}

// One TrainingJob document of a file, checked.
struct JobDocument {
  api::TrainingJob job;
  int line = 1;
  std::string_view kind = api::kKind;  // api::kTFJobKind: converted from a TFJob
};

// One TrainingSweep document of a file, checked.
struct SweepDocument {
  api::TrainingSweep sweep;
  int line = 1;
};

// "<path>: <what>" (json.h's format) -> "<file>:<line>: <path>: <what>".
std::string Locate(const std::string& file, const api::YamlDocument& doc, const std::string& msg) {
  const size_t colon = msg.find(": ");
  std::string path = colon == std::string::npos ? "" : msg.substr(0, colon);
  // A CEL rule reports on the object that holds it ("spec.replicaSpecs: ...")
  // and often names the exact field in its message: point at that one.
  if (colon != std::string::npos) {
    std::istringstream words(msg.substr(colon + 2));
    std::string word;
    while (words >> word) {
      while (!word.empty() && std::string_view(",.;:)\"'").find(word.back()) != std::string::npos) {
        word.pop_back();
      }
      if (word.size() > path.size() && word.rfind(path + ".", 0) == 0) path = word;
    }
  }
  return file + ":" + std::to_string(doc.LineOf(path)) + ": " + msg;
}

// Reads every document of `file` and checks each as the apiserver and the
// operator would: structure (ParseTrainingJob), the CRD's rules (Validate) and
// what the planner rejects as InvalidSpec. Problems go to `errors`, one line each.
// Warnings (a valid job the operator will change) go to `warnings` if given.
// A v1 Secret or ConfigMap document: its keys and values (Secret data base64-decoded,
// stringData over data, as the apiserver merges them) go to `objects`.
Status AddLocalObject(const json& doc, local::LocalObjects* objects) {
  const bool secret = doc.value("kind", "") == "Secret";
  const std::string name = doc.contains("metadata") ? doc["metadata"].value("name", "") : "";
  if (name.empty()) return InvalidArgument(doc.value("kind", "") + " without metadata.name");
  auto& out = secret ? objects->secrets[name] : objects->config_maps[name];
  for (const char* field : {"data", "stringData"}) {
    if (!doc.contains(field)) continue;
    if (!doc[field].is_object()) return InvalidArgument(name + ": " + field + " is not a map");
    for (const auto& [k, v] : doc[field].items()) {
      if (!v.is_string())
        return InvalidArgument(name + ": " + field + "." + k + " is not a string");
      std::string value = v.get<std::string>();
      if (secret && std::string_view(field) == "data") {
        std::string bin(value.size(), '\0');
        size_t len = 0;
        if (sodium_base642bin(reinterpret_cast<unsigned char*>(bin.data()), bin.size(),
                              value.data(), value.size(), "\n\r ", &len, nullptr,
                              sodium_base64_VARIANT_ORIGINAL) != 0) {
          return InvalidArgument("Secret " + name + ": data." + k + " is not valid base64");
        }
        bin.resize(len);
        value = std::move(bin);
      }
      out[k] = std::move(value);
    }
  }
  return Status::Ok();
}

// "<file>:<line>: warning: <path>: <message>" for each shape kubetrain-trainer does not run.
void AddTrainerWarnings(const std::string& file, const api::YamlDocument& doc,
                        const api::TrainingJobSpec& spec, std::string_view spec_path,
                        std::vector<std::string>* warnings) {
  if (warnings == nullptr) return;
  for (const auto& w : api::TrainerWarnings(spec, spec_path)) {
    warnings->push_back(file + ":" + std::to_string(doc.LineOf(w.path)) + ": warning: " + w.path +
                        ": " + w.message);
  }
}

StatusOr<std::vector<JobDocument>> LoadJobs(const std::string& file,
                                            std::vector<std::string>& errors,
                                            const std::string& namespace_override = "",
                                            std::vector<std::string>* warnings = nullptr,
                                            std::vector<SweepDocument>* sweeps = nullptr,
                                            local::LocalObjects* objects = nullptr,
                                            std::vector<std::string>* skipped = nullptr) {
  auto read = ReadManifest(file);
  if (!read.ok()) return read.status();
  const std::string& text = *read;
  auto docs = api::ParseYamlDocuments(text);
  if (!docs.ok()) return InvalidArgument(file + ": " + docs.status().message());
  if (docs->empty()) return InvalidArgument(file + ": no YAML documents");
  std::vector<JobDocument> jobs;
  for (const auto& doc : *docs) {
    const size_t before = errors.size();
    // `validate` reads whole directories: another kind is noted and skipped.
    if (const std::string kind = api::KindOf(doc.value);
        skipped != nullptr && !kind.empty() && kind != api::kSweepKind && kind != "TrainingJob" &&
        !api::IsTFJob(doc.value)) {
      skipped->push_back(file + ":" + std::to_string(doc.line) + ": skipped: " + kind +
                         " (not a TrainingJob, TrainingSweep or kubeflow.org/v1 TFJob)");
      continue;
    }
    if (api::KindOf(doc.value) == api::kSweepKind) {
      if (sweeps == nullptr) {
        errors.push_back(file + ":" + std::to_string(doc.line) +
                         ": a TrainingSweep; this command takes TrainingJobs");
        continue;
      }
      auto sweep = api::ParseTrainingSweep(doc.value);
      if (!sweep.ok()) {
        errors.push_back(Locate(file, doc, sweep.status().message()));
        continue;
      }
      for (const auto& e : api::ValidateSweep(*sweep)) {
        errors.push_back(Locate(file, doc, e.path + ": " + e.message));
      }
      // A template the CRD lets through fails the sweep at once (InvalidSpec).
      if (errors.size() == before) {
        if (auto trial = sweep::BuildTrial(*sweep, 0); !trial.ok()) {
          errors.push_back(Locate(file, doc, trial.status().message()));
        }
      }
      if (errors.size() == before) {
        AddTrainerWarnings(file, doc, sweep->spec.trial_template, "spec.trialTemplate", warnings);
        sweeps->push_back({std::move(*sweep), doc.line});
      }
      continue;
    }
    // Secrets and ConfigMaps next to the job: `run` gives them to the local processes.
    if (doc.value.is_object() && doc.value.value("apiVersion", "") == "v1" &&
        (doc.value.value("kind", "") == "Secret" || doc.value.value("kind", "") == "ConfigMap")) {
      local::LocalObjects ignored;
      Status s = AddLocalObject(doc.value, objects ? objects : &ignored);
      if (!s.ok()) errors.push_back(file + ":" + std::to_string(doc.line) + ": " + s.message());
      continue;
    }
    // A TFJob is checked as the TrainingJob it converts to; messages name its own fields.
    std::optional<api::TFJobConversion> tfjob;
    if (api::IsTFJob(doc.value)) {
      auto c = api::ConvertTFJob(doc.value);
      if (!c.ok()) {
        errors.push_back(Locate(file, doc, c.status().message()));
        continue;
      }
      tfjob = std::move(*c);
      for (const auto& n : tfjob->notes) {
        if (warnings == nullptr) break;
        warnings->push_back(file + ":" + std::to_string(doc.LineOf(n.path)) + ": note: " + n.path +
                            ": " + n.message);
      }
    }
    auto located = [&](const std::string& msg) {
      return Locate(file, doc, tfjob ? api::ToTFJobMessage(*tfjob, msg) : msg);
    };
    auto job = api::ParseTrainingJob(tfjob ? tfjob->job : doc.value);
    if (!job.ok()) {
      errors.push_back(located(job.status().message()));
      continue;
    }
    if (!namespace_override.empty()) job->metadata.namespace_ = namespace_override;
    for (const auto& e : api::Validate(*job)) {
      errors.push_back(located(e.path + ": " + e.message));
    }
    if (errors.size() == before) {
      // Template problems the CRD lets through fail the job at once (InvalidSpec).
      planner::PlanInput input;
      input.now = api::Now();
      auto plan = planner::PlanJob(*job, {}, input);
      if (const auto* failed = plan.status.Find(api::ConditionType::kFailed);
          failed && failed->status && failed->reason == "InvalidSpec") {
        errors.push_back(located(failed->message));
      }
      // The planner is the one place that knows the contract variables; its
      // EnvOverridden event is what the operator will record for this job.
      for (const auto& event : plan.events) {
        if (warnings == nullptr || event.reason != "EnvOverridden") continue;
        const std::string message =
            tfjob ? api::ToTFJobMessage(*tfjob, event.message) : event.message;
        const std::string path = message.substr(0, message.find(' '));
        warnings->push_back(file + ":" + std::to_string(doc.LineOf(path)) +
                            ": warning: " + message);
      }
      // A TFJob runs TensorFlow images, not kubetrain-trainer.
      if (!tfjob) AddTrainerWarnings(file, doc, job->spec, "spec", warnings);
    }
    if (errors.size() == before) {
      jobs.push_back({std::move(*job), doc.line, tfjob ? api::kTFJobKind : api::kKind});
    }
  }
  return jobs;
}

std::string SelfDir() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

// --trainer, else $KUBETRAIN_TRAINER, else next to this binary, else the build
// tree's layout (build/operator/cli/kubetrain, build/trainer/kubetrain-trainer),
// else PATH. Empty if none.
std::string FindTrainer(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = getenv("KUBETRAIN_TRAINER"); env && *env) return env;
  const std::string dir = SelfDir();
  for (const std::string& p :
       {dir + "/kubetrain-trainer", dir + "/../../trainer/kubetrain-trainer"}) {
    if (access(p.c_str(), X_OK) == 0) return std::filesystem::weakly_canonical(p).string();
  }
  const char* path = getenv("PATH");
  return local::ResolveExecutable("kubetrain-trainer", path ? path : "").value_or("");
}

// "worker-0: AUC 0.78123, accuracy 0.7, log loss 0.5 (1000 examples)" from a trainer's metrics.
std::string MetricsLine(const std::string& replica, const std::string& message) {
  json m = json::parse(message, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("eval") || !m["eval"].is_object()) return "";
  const json& e = m["eval"];
  char buf[256];
  std::string out = replica + ":";
  if (e.contains("auc") && e["auc"].is_number()) {
    std::snprintf(buf, sizeof buf, " AUC %.4f,", e["auc"].get<double>());
    out += buf;
  }
  std::snprintf(buf, sizeof buf, " accuracy %.4f, log loss %.4f on %lld examples",
                e.value("accuracy", 0.0), e.value("log_loss", 0.0),
                static_cast<long long>(e.value("examples", int64_t{0})));
  out += buf;
  if (m.contains("steps")) out += ", " + m["steps"].dump() + " steps";
  // An evaluator's: the checkpoint its final metrics are of.
  if (m.contains("step") && m["step"].is_number_integer()) {
    out += ", checkpoint " + m["step"].dump();
  }
  return out;
}

struct RunFlags {
  std::string file;
  std::string trainer;
  std::string work_dir;
  std::string output = "yaml";
  std::string color = "auto";
  std::string status_file;
  int base_port = 0;
  int grace = 10;
  double progress_interval = 2;
};

// `kubetrain run` of a TrainingSweep: every trial is a child `kubetrain run`.
int RunSweep(const RunFlags& f, api::TrainingSweep sweep) {
  if (sweep.spec.suspend) {
    // As for a suspended job: nothing may start, and nothing local would resume it.
    std::cout << "the sweep is suspended (spec.suspend): nothing to run\n"
              << "result: TrainingSweep " << sweep.metadata.name << " Suspended\n";
    return kExitFailed;
  }
  sweep::LocalSweepOptions opt;
  std::error_code ec;
  opt.self_path = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) {
    std::cerr << "error: cannot find this binary: " << ec.message() << "\n";
    return kExitError;
  }
  const std::string trainer = FindTrainer(f.trainer);
  if (!trainer.empty()) opt.run_args = {"--trainer", trainer};
  opt.run_args.push_back("--grace-period");
  opt.run_args.push_back(std::to_string(f.grace));
  if (sweep.spec.early_stopping) {
    // The rule judges each reading: more of them, sooner.
    opt.run_args.push_back("--progress-interval");
    opt.run_args.push_back("0.5");
  }
  opt.work_dir = !f.work_dir.empty()
                     ? f.work_dir
                     : (std::filesystem::temp_directory_path() /
                        ("kubetrain-" + sweep.metadata.name + "-" + std::to_string(getpid())))
                           .string();
  opt.tty = isatty(STDOUT_FILENO) != 0;
  const std::string name = sweep.metadata.name;
  const std::string metric = sweep.spec.objective.metric;
  auto result = sweep::RunSweepLocally(std::move(sweep), opt);
  if (!result.ok()) {
    std::cerr << "error: " << result.status().message() << "\n";
    return kExitError;
  }
  const bool succeeded = result->status.IsTrue(api::ConditionType::kSucceeded);
  if (f.work_dir.empty() && succeeded) {
    std::filesystem::remove_all(opt.work_dir, ec);
  } else {
    std::cout << "trial files and logs: " << opt.work_dir << "\n";
  }
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", result->seconds);
  if (result->interrupted) {
    std::cout << "result: interrupted by signal " << result->signal << " after " << secs
              << "s; every trial stopped\n";
    return 128 + result->signal;
  }
  std::string reason;
  for (auto type : {api::ConditionType::kSucceeded, api::ConditionType::kFailed}) {
    if (const auto* c = result->status.Find(type); c != nullptr && c->status) {
      reason = c->reason + ": " + c->message;
    }
  }
  std::cout << "result: TrainingSweep " << name << " " << result->status.state << " in " << secs
            << "s (" << reason << ")\n";
  if (const auto& best = result->status.best_trial) {
    std::cout << "best: " << best->name << " " << metric << "=" << best->value;
    for (const auto& [k, v] : best->parameters) std::cout << " " << k << "=" << v;
    std::cout << "\n";
  }
  std::cout.flush();
  return succeeded ? 0 : kExitFailed;
}

int Run(const RunFlags& f) {
  std::vector<std::string> errors;
  std::vector<SweepDocument> sweeps;
  local::LocalObjects objects;
  auto jobs = LoadJobs(f.file, errors, "", nullptr, &sweeps, &objects);
  if (!jobs.ok()) {
    std::cerr << "error: " << jobs.status().message() << "\n";
    return LoadExit(jobs.status());
  }
  for (const auto& e : errors) std::cerr << "error: " << e << "\n";
  if (!errors.empty()) return kExitInvalid;
  if (sweeps.size() == 1 && jobs->empty()) return RunSweep(f, std::move(sweeps.front().sweep));
  if (jobs->size() != 1 || !sweeps.empty()) {
    std::cerr << "error: " << f.file
              << ": `run` takes exactly one TrainingJob or TrainingSweep, found "
              << jobs->size() + sweeps.size() << " documents\n";
    return kExitUsage;
  }
  api::TrainingJob job = std::move(jobs->front().job);
  local::RunOptions opt;
  opt.trainer_path = FindTrainer(f.trainer);
  opt.work_dir = !f.work_dir.empty()
                     ? f.work_dir
                     : (std::filesystem::temp_directory_path() /
                        ("kubetrain-" + job.metadata.name + "-" + std::to_string(getpid())))
                           .string();
  opt.base_port = f.base_port;
  opt.objects = std::move(objects);
  opt.grace = std::chrono::seconds(f.grace);
  opt.progress_interval =
      std::chrono::milliseconds(static_cast<int64_t>(std::llround(f.progress_interval * 1000)));
  const bool tty = isatty(STDOUT_FILENO) != 0;
  opt.color = f.color == "always" || (f.color == "auto" && tty && !getenv("NO_COLOR"));
  opt.progress = tty;
  const std::string name = job.metadata.name;
  if (!f.status_file.empty()) {
    // The status as it changes, for a sweep's early stopping (local_sweep.cc reads the
    // progress of its running trials here): replaced whole by rename, so a reader never sees
    // half a file.
    opt.on_status = [path = f.status_file](const api::TrainingJobStatus& s) {
      const std::string tmp = path + ".tmp";
      {
        std::ofstream out(tmp, std::ios::trunc);
        out << api::StatusToJson(s).dump() << "\n";
        if (!out) return;
      }
      std::error_code ec;
      std::filesystem::rename(tmp, path, ec);
    };
  }
  auto result = local::RunLocally(std::move(job), opt);
  // The run directory (each replica's termination message and volumes) is removed after a
  // success; a failed run keeps it for a look (a --work-dir is always kept).
  const bool succeeded =
      result.ok() && !result->interrupted && result->status.IsTrue(api::ConditionType::kSucceeded);
  const bool keep = !f.work_dir.empty() || !succeeded;
  if (!keep) {
    std::error_code ec;
    std::filesystem::remove_all(opt.work_dir, ec);
  }
  const auto say_kept = [&](std::ostream& out) {
    if (!succeeded && std::filesystem::exists(opt.work_dir)) {
      out << "run directory kept (termination messages, replica volumes): " << opt.work_dir << "\n";
    }
  };
  if (!result.ok()) {
    // Found before any process started: a port in use, a program that is not there.
    std::cerr << "error: " << result.status().message() << "\n";
    say_kept(std::cerr);
    return kExitError;
  }
  // The summary: the status as the operator would write it, then the metrics.
  json status = {{"status", api::StatusToJson(result->status)}};
  if (!f.status_file.empty()) {
    const std::string tmp = f.status_file + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << status["status"].dump() << "\n";
    out.close();
    std::error_code ec;
    if (out) std::filesystem::rename(tmp, f.status_file, ec);
    if (!out || ec) std::cerr << "error: cannot write " << f.status_file << "\n";
  }
  std::cout << "\n# TrainingJob " << name << ": final status (as the operator writes it)\n";
  if (f.output == "json") {
    std::cout << status.dump(2) << "\n";
  } else {
    std::cout << local::ToYaml(status);
  }
  for (const auto& [replica, message] : result->termination_messages) {
    std::string line = MetricsLine(replica, message);
    if (!line.empty()) std::cout << "metrics " << line << "\n";
  }
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", result->seconds);
  if (result->interrupted) {
    std::cout << "result: interrupted by signal " << result->signal << " after " << secs
              << "s; every replica stopped\n";
    say_kept(std::cout);
    return 128 + result->signal;
  }
  // The runner's own CPU time (children excluded): its overhead next to the job.
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  const long cpu_ms = (self.ru_utime.tv_sec + self.ru_stime.tv_sec) * 1000L +
                      (self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1000L;
  std::cout << "result: " << result->status.state << " in " << secs << "s (runner CPU " << cpu_ms
            << " ms)\n";
  say_kept(std::cout);
  std::cout.flush();
  return result->status.IsTrue(api::ConditionType::kSucceeded) ? 0 : kExitFailed;
}

// Checks every document of every file: other kinds are skipped with a note.
// Exit: kExitOk if all are valid, kExitInvalid if any is not, kExitUsage if a
// file cannot be read (the others are still checked; usage wins).
int Validate(const std::vector<std::string>& paths, bool recursive) {
  int code = kExitOk;
  size_t checked = 0;
  for (const std::string& path : paths) {
    auto files = ManifestFiles(path, recursive);
    if (!files.ok()) {
      std::cerr << "error: " << files.status().message() << "\n";
      code = kExitUsage;
      continue;
    }
    if (files->empty()) std::cout << path << ": no .yaml, .yml or .json files\n";
    for (const std::string& file : *files) {
      std::vector<std::string> errors, warnings, skipped;
      std::vector<SweepDocument> sweeps;
      auto jobs = LoadJobs(file, errors, "", &warnings, &sweeps, nullptr, &skipped);
      if (!jobs.ok()) {
        std::cerr << "error: " << jobs.status().message() << "\n";
        const int c = LoadExit(jobs.status());
        if (code != kExitUsage) code = c;
        continue;
      }
      for (const auto& e : errors) std::cerr << e << "\n";
      for (const auto& w : warnings) std::cerr << w << "\n";
      for (const auto& n : skipped) std::cout << n << "\n";
      for (const auto& j : *jobs) {
        std::cout << file << ":" << j.line << ": " << j.kind << " " << j.job.metadata.name
                  << (j.kind == api::kKind ? " is valid\n"
                                           : " is valid (as the TrainingJob it converts to)\n");
      }
      for (const auto& d : sweeps) {
        std::cout << file << ":" << d.line << ": TrainingSweep " << d.sweep.metadata.name
                  << " is valid\n";
      }
      checked += jobs->size() + sweeps.size();
      if (!errors.empty() && code != kExitUsage) code = kExitInvalid;
    }
  }
  if (code == kExitOk && checked == 0) std::cout << "no TrainingJob or TrainingSweep found\n";
  return code;
}

// The trainer --output of the (first) TrainingJob in a job file, for `logs --file`.
// NotFound when the job sets none; InvalidArgument for a file without a job.
StatusOr<std::string> OutputOfJobFile(const std::string& file) {
  auto text = ReadManifest(file);
  if (!text.ok()) return InvalidArgument(text.status().message());
  auto docs = api::ParseYamlDocuments(*text);
  if (!docs.ok()) return InvalidArgument(file + ": " + docs.status().message());
  for (const auto& doc : *docs) {
    if (api::KindOf(doc.value) != "TrainingJob") continue;
    json pod_spec, container;
    std::string output = OutputOfJob(doc.value, &pod_spec, &container);
    if (output.empty()) {
      return NotFound(file + ": the job's trainer sets no --output, so no logs were saved");
    }
    // A hostPath volume is that path here too, as `kubetrain run` maps it.
    std::vector<local::LocalMount> mounts;
    for (const json& m : container.value("volumeMounts", json::array())) {
      if (!m.is_object()) continue;
      for (const json& v : pod_spec.value("volumes", json::array())) {
        if (v.is_object() && v.value("name", "") == m.value("name", "") && v.contains("hostPath") &&
            v["hostPath"].is_object()) {
          mounts.push_back({m.value("mountPath", ""), v["hostPath"].value("path", "")});
        }
      }
    }
    return local::MapPaths(output, mounts);
  }
  return InvalidArgument(file + ": no TrainingJob");
}

int Render(const std::string& file, const std::string& ns, bool show_secrets, bool network_policy) {
  std::vector<std::string> errors;
  auto jobs = LoadJobs(file, errors, ns);
  if (!jobs.ok()) {
    std::cerr << "error: " << jobs.status().message() << "\n";
    return LoadExit(jobs.status());
  }
  for (const auto& e : errors) std::cerr << "error: " << e << "\n";
  if (!errors.empty()) return kExitInvalid;
  if (sodium_init() < 0) {
    std::cerr << "error: libsodium initialisation failed\n";
    return kExitError;
  }
  bool first = true;
  for (const auto& doc : *jobs) {
    planner::PlanInput input;
    input.now = api::Now();
    randombytes_buf(input.auth_key.data(), input.auth_key.size());
    input.network_policy = network_policy;
    auto plan = planner::PlanJob(doc.job, {}, input);
    for (const planner::ChildCreate& child : plan.creates) {
      if (!first) std::cout << "---\n";
      first = false;
      json obj = child.object;
      if (child.ref.kind == planner::ChildRef::Kind::kSecret && !show_secrets) {
        std::cout << "# data redacted: the operator generates a random key per job "
                     "(--show-secrets prints this one)\n";
        for (auto& [k, v] : obj["data"].items()) v = "";
      }
      std::cout << local::ToYaml(obj);
    }
  }
  return 0;
}

// A subcommand: its CLI11 node (with its flags bound to state the closure owns) and what it
// runs once the command line is parsed.
struct Command {
  CLI::App* cmd = nullptr;
  std::function<int()> run;
};

Command AddRun(CLI::App& app) {
  auto run = std::make_shared<RunFlags>();
  auto* cmd = app.add_subcommand(
      "run",
      "Run every replica of a TrainingJob as a local process, or every trial of a "
      "TrainingSweep as such a run; exit 0 if it succeeds");
  cmd->add_option("-f,--filename", run->file, "job file (YAML; - for stdin)")->required();
  cmd->add_option("--trainer", run->trainer,
                  "kubetrain-trainer binary (default: $KUBETRAIN_TRAINER, next to kubetrain, "
                  "or PATH)");
  cmd->add_option("--work-dir", run->work_dir,
                  "keep termination messages here (default: a temporary directory)");
  cmd->add_option("--base-port", run->base_port,
                  "use consecutive ports from this one (default: free ports)")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--grace-period", run->grace, "seconds between SIGTERM and SIGKILL")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  cmd->add_option("--progress-interval", run->progress_interval,
                  "seconds between changes of status.progress (a sweep with earlyStopping "
                  "runs its trials with 0.5)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("-o,--output", run->output, "format of the final status")
      ->check(CLI::IsMember({"yaml", "json"}))
      ->capture_default_str();
  cmd->add_option("--status-file", run->status_file,
                  "also write the status as JSON to this file: rewritten (by rename) as it "
                  "changes, the final status last");
  cmd->add_option("--color", run->color, "auto, always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  return {cmd, [run]() -> int { return Run(*run); }};
}

Command AddRender(CLI::App& app) {
  struct Flags {
    std::string file, ns;
    bool show_secrets = false;
    bool network_policy = true;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "render",
      "Print the Pods, Services, Secret and NetworkPolicy the operator would create, as YAML");
  cmd->add_option("-f,--filename", f->file, "job file (YAML; - for stdin)")->required();
  cmd->add_option("-n,--namespace", f->ns, "namespace (default: the job's, else none)");
  cmd->add_flag("--show-secrets", f->show_secrets, "print the Secret's key instead of \"\"");
  cmd->add_option("--network-policy", f->network_policy,
                  "include the job's NetworkPolicy, as the operator does unless started "
                  "with --network-policy=false")
      ->capture_default_str();
  return {cmd, [f]() -> int { return Render(f->file, f->ns, f->show_secrets, f->network_policy); }};
}

Command AddValidate(CLI::App& app) {
  struct Flags {
    std::vector<std::string> files;
    bool recursive = false;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "validate",
      "Check job and sweep files against the CRD's rules (field path and line per error); "
      "other kinds are skipped with a note");
  cmd->add_option("-f,--filename", f->files,
                  "file or directory (its *.yaml, *.yml, *.json); repeat for more; - for stdin")
      ->required();
  cmd->add_flag("-R,--recursive", f->recursive, "read directories below -f directories too");
  return {cmd, [f]() -> int { return Validate(f->files, f->recursive); }};
}

Command AddConvert(CLI::App& app) {
  auto f = std::make_shared<ConvertFlags>();
  auto* cmd = app.add_subcommand(
      "convert",
      "Print Kubeflow TFJobs (kubeflow.org/v1) as TrainingJobs, with comments where something "
      "has no equivalent; other documents unchanged");
  cmd->add_option("-f,--filename", f->paths,
                  "files or directories of manifests (YAML or JSON; - for stdin)")
      ->required();
  cmd->add_flag("-R,--recursive", f->recursive, "descend into subdirectories");
  return {cmd, [f]() -> int { return ConvertCommand(*f, std::cout, std::cerr); }};
}

// The cluster subcommands share kubectl's connection flags; --request-timeout is checked
// when one of them runs.
struct ClusterOptions {
  ClusterFlags flags;
  std::string request_timeout = "30s";

  void AddTo(CLI::App* cmd) {
    cmd->add_option("--kubeconfig", flags.kubeconfig,
                    "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)");
    cmd->add_option("--context", flags.context, "kubeconfig context (default: current)");
    cmd->add_option("-n,--namespace", flags.ns, "namespace (default: the context's)");
    cmd->add_option("--request-timeout", request_timeout,
                    "bound on each request (not on a watch or a follow)")
        ->capture_default_str();
  }
  // The flags with the parsed timeout; InvalidArgument "--request-timeout: ..." if it is bad.
  StatusOr<ClusterFlags> Resolved() const {
    auto timeout = ParseDuration(request_timeout);
    if (!timeout.ok()) return InvalidArgument("--request-timeout: " + timeout.status().message());
    if (timeout->count() <= 0) return InvalidArgument("--request-timeout: must be positive");
    ClusterFlags out = flags;
    out.request_timeout = *timeout;
    return out;
  }
};

// A cluster subcommand's run: `body` with the resolved cluster flags.
std::function<int()> WithCluster(std::shared_ptr<ClusterOptions> cluster,
                                 std::function<int(const ClusterFlags&)> body) {
  return [cluster = std::move(cluster), body = std::move(body)]() -> int {
    auto flags = cluster->Resolved();
    if (!flags.ok()) {
      std::cerr << "error: " << flags.status().message() << "\n";
      return kExitUsage;
    }
    return body(*flags);
  };
}

Command AddGet(CLI::App& app, std::shared_ptr<ClusterOptions> cluster) {
  struct Flags {
    std::string name, output;
    bool all_namespaces = false;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "get", "List TrainingJobs and TrainingSweeps (or one) with the CRDs' printer columns");
  cmd->add_option("name", f->name, "a job or sweep (default: all)");
  cmd->add_option("-o,--output", f->output, "wide, name or json")
      ->check(CLI::IsMember({"wide", "name", "json"}));
  cmd->add_flag("-A,--all-namespaces", f->all_namespaces, "every namespace");
  cluster->AddTo(cmd);
  return {cmd, WithCluster(cluster, [f](const ClusterFlags& c) -> int {
            return GetCommand(c, f->name, f->output, f->all_namespaces);
          })};
}

Command AddWait(CLI::App& app, std::shared_ptr<ClusterOptions> cluster) {
  struct Flags {
    std::string name, timeout = "0";
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "wait",
      "Wait until a job or sweep finishes: exit 0 if it Succeeded, 1 with its reason if "
      "it Failed, 5 on --timeout");
  cmd->add_option("name", f->name, "the job or sweep")->required();
  cmd->add_option("--timeout", f->timeout, "give up after this long (90s, 10m, 2h; 0: never)")
      ->capture_default_str();
  cluster->AddTo(cmd);
  return {cmd, WithCluster(cluster, [f](const ClusterFlags& c) -> int {
            auto limit = ParseDuration(f->timeout);
            if (!limit.ok()) {
              std::cerr << "error: --timeout: " << limit.status().message() << "\n";
              return kExitUsage;
            }
            return WaitCommand(c, f->name, *limit);
          })};
}

Command AddLogs(CLI::App& app, std::shared_ptr<ClusterOptions> cluster) {
  struct Flags {
    LogsFlags logs;
    std::string file;
  };
  auto f = std::make_shared<Flags>();
  LogsFlags& logs = f->logs;
  auto* cmd = app.add_subcommand(
      "logs",
      "Print every replica's log, prefixed with its replica; saved tails for replicas "
      "whose pods are gone");
  cmd->add_option("name", logs.name, "the job");
  cmd->add_flag("-f,--follow", logs.follow, "stream the logs of running pods");
  cmd->add_option("--tail", logs.tail, "lines per replica (default: all)");
  cmd->add_option("--limit-bytes", logs.limit_bytes,
                  "bytes per replica (default: 10 MiB without -f, no limit with it)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("-c,--container", logs.container, "container (default: each pod's first)");
  cmd->add_option("--output", logs.output,
                  "the trainer's --output (local or s3://) holding logs/, when the job "
                  "no longer says (deleted)");
  cmd->add_option("--file", f->file,
                  "no cluster: the job file of a local run (`kubetrain run -f FILE`); print "
                  "the saved logs under its trainer --output");
  cmd->add_option("--dir", logs.dir,
                  "no cluster: print the saved logs under DIR/logs/ (a local run's "
                  "--output; local or s3://)");
  cluster->AddTo(cmd);
  return {cmd, WithCluster(cluster, [f](const ClusterFlags& c) -> int {
            LogsFlags flags = f->logs;
            if (int(!flags.name.empty()) + int(!flags.dir.empty()) + int(!f->file.empty()) != 1) {
              std::cerr << "error: logs takes one of a job name, --file or --dir\n";
              return kExitUsage;
            }
            if (!f->file.empty()) {
              auto dir = OutputOfJobFile(f->file);
              if (!dir.ok()) {
                std::cerr << "error: " << dir.status().message() << "\n";
                return dir.status().code() == StatusCode::kNotFound ? kExitNotFound : kExitUsage;
              }
              flags.dir = *dir;
            }
            return LogsCommand(c, flags);
          })};
}

Command AddSuspend(CLI::App& app, std::shared_ptr<ClusterOptions> cluster, bool suspend) {
  auto name = std::make_shared<std::string>();
  auto* cmd = suspend
                  ? app.add_subcommand(
                        "suspend", "Suspend a job or sweep: its pods are removed, its state kept")
                  : app.add_subcommand("resume", "Resume a suspended job or sweep");
  cmd->add_option("name", *name, "the job or sweep")->required();
  cluster->AddTo(cmd);
  return {cmd, WithCluster(cluster, [name, suspend](const ClusterFlags& c) -> int {
            return SuspendCommand(c, *name, suspend);
          })};
}

}  // namespace
}  // namespace kubetrain::cli

int main(int argc, char** argv) {
  using namespace kubetrain::cli;
  CLI::App app{"kubetrain: run distributed ML training jobs on Kubernetes or locally"};
  app.set_version_flag("--version", std::string("kubetrain ") + kubetrain::kVersion);
  app.require_subcommand(0, 1);
  auto cluster = std::make_shared<ClusterOptions>();
  // In the order `kubetrain --help` lists them.
  const std::vector<Command> commands = {
      AddRun(app),
      AddRender(app),
      AddValidate(app),
      AddGet(app, cluster),
      AddWait(app, cluster),
      AddLogs(app, cluster),
      AddSuspend(app, cluster, true),
      AddSuspend(app, cluster, false),
      AddConvert(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  for (const Command& c : commands) {
    if (*c.cmd) return c.run();
  }
  std::cout << app.help();
  return 0;
}
