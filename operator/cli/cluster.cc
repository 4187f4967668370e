#include "operator/cli/cluster.h"

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <thread>
#include <vector>

#include "operator/api/resources.h"
#include "operator/api/sweep.h"
#include "operator/api/types.h"
#include "operator/cli/exit_codes.h"
#include "operator/cli/logs.h"
#include "operator/cli/printer.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"

namespace kubetrain::cli {
namespace {

using nlohmann::json;

const kube::ResourceRef kJobs{std::string(api::kGroup), std::string(api::kVersion),
                              std::string(api::kTrainingJobsPlural), true};
const kube::ResourceRef kSweeps{std::string(api::kGroup), std::string(api::kVersion),
                                std::string(api::kTrainingSweepsPlural), true};

struct Session {
  std::unique_ptr<kube::Client> client;
  std::string ns;
};

StatusOr<Session> Connect(const ClusterFlags& f) {
  auto cfg = kube::LoadDefaultConfig(f.kubeconfig, f.context);
  if (!cfg.ok()) return cfg.status();
  cfg->request_timeout = f.request_timeout;
  cfg->connect_timeout = std::min(cfg->connect_timeout, f.request_timeout);
  cfg->on_credential_error = [](const Status& error) {
    std::fprintf(stderr, "kube client: refreshing the exec credential failed: %s\n",
                 error.ToString().c_str());
  };
  Session s;
  s.ns = f.ns.empty() ? cfg->ns : f.ns;
  auto client = kube::Client::Create(*std::move(cfg));
  if (!client.ok()) return client.status();
  s.client = std::move(*client);
  return s;
}

// A TrainingJob or TrainingSweep as served, with which of the two it is.
struct Found {
  const kube::ResourceRef* ref = nullptr;
  std::string kind;      // "TrainingJob"
  std::string resource;  // "trainingjob.kubetrain.io", as kubectl names it
  json object;
};

std::string ResourceName(const kube::ResourceRef& r) {
  // "trainingjobs" -> "trainingjob.kubetrain.io"
  return r.resource.substr(0, r.resource.size() - 1) + "." + r.group;
}

// The job called `name`, else the sweep. NotFound names both.
StatusOr<Found> FindJobOrSweep(kube::Client& client, const std::string& ns,
                               const std::string& name) {
  for (const auto* ref : {&kJobs, &kSweeps}) {
    auto obj = client.Get(*ref, ns, name);
    if (obj.ok()) {
      Found f;
      f.ref = ref;
      f.kind = ref == &kJobs ? "TrainingJob" : std::string(api::kSweepKind);
      f.resource = ResourceName(*ref);
      f.object = std::move(*obj);
      return f;
    }
    if (obj.status().code() != StatusCode::kNotFound) return obj.status();
  }
  return NotFound("no TrainingJob or TrainingSweep \"" + name + "\" in namespace \"" + ns + "\"");
}

int Report(const Status& s) {
  std::cerr << "error: " << s.message() << "\n";
  return ExitCodeFor(s);
}

// A kubeconfig that cannot be loaded (even a missing file) is an error of
// the environment, not a missing job.
int ReportConnect(const Status& s) {
  std::cerr << "error: " << s.message() << "\n";
  return kExitError;
}

std::string DumpSafe(const json& j, int indent = -1) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

}  // namespace

// ---------------------------------------------------------------- get

int GetCommand(const ClusterFlags& flags, const std::string& name, const std::string& output,
               bool all_namespaces) {
  auto job_columns = TrainingJobColumns();
  auto sweep_columns = TrainingSweepColumns();
  if (!job_columns.ok() || !sweep_columns.ok()) {
    return Report(job_columns.ok() ? sweep_columns.status() : job_columns.status());
  }
  auto session = Connect(flags);
  if (!session.ok()) return ReportConnect(session.status());
  kube::Client& client = *session->client;
  const std::string ns = all_namespaces ? "" : session->ns;
  std::vector<json> jobs, sweeps;
  if (!name.empty()) {
    auto found = FindJobOrSweep(client, session->ns, name);
    if (!found.ok()) return Report(found.status());
    (found->ref == &kJobs ? jobs : sweeps).push_back(std::move(found->object));
  } else {
    auto list = client.ListAll(kJobs, ns);
    if (!list.ok()) return Report(list.status());
    for (auto& item : (*list)["items"]) jobs.push_back(std::move(item));
    // A cluster without the sweep CRD (404) simply has no sweeps.
    auto sweep_list = client.ListAll(kSweeps, ns);
    if (!sweep_list.ok() && sweep_list.status().code() != StatusCode::kNotFound) {
      return Report(sweep_list.status());
    }
    if (sweep_list.ok()) {
      for (auto& item : (*sweep_list)["items"]) sweeps.push_back(std::move(item));
    }
  }
  if (jobs.empty() && sweeps.empty()) {
    std::cerr << (all_namespaces ? std::string("No resources found\n")
                                 : "No resources found in " + ns + " namespace.\n");
    return kExitOk;
  }
  if (output == "json" && !name.empty()) {
    std::cout << DumpSafe(jobs.empty() ? sweeps.front() : jobs.front(), 2) << "\n";
    return kExitOk;
  }
  if (output == "json") {
    json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", json::array()}};
    for (auto* v : {&jobs, &sweeps}) {
      for (auto& o : *v) list["items"].push_back(std::move(o));
    }
    std::cout << DumpSafe(list, 2) << "\n";
    return kExitOk;
  }
  if (output == "name") {
    for (const auto& o : jobs)
      std::cout << ResourceName(kJobs) << "/" << o["metadata"]["name"].get<std::string>() << "\n";
    for (const auto& o : sweeps)
      std::cout << ResourceName(kSweeps) << "/" << o["metadata"]["name"].get<std::string>() << "\n";
    return kExitOk;
  }
  const auto now = std::chrono::system_clock::now();
  const bool wide = output == "wide";
  // Both kinds: each name says its kind, as `kubectl get kubetrain` prints them.
  if (!jobs.empty() && !sweeps.empty()) {
    for (auto& [list, ref] : {std::pair{&jobs, &kJobs}, std::pair{&sweeps, &kSweeps}}) {
      for (auto& o : *list) {
        o["metadata"]["name"] = ResourceName(*ref) + "/" + o["metadata"].value("name", "");
      }
    }
  }
  std::string text = FormatTable(*job_columns, jobs, wide, all_namespaces, now);
  const std::string sweep_text = FormatTable(*sweep_columns, sweeps, wide, all_namespaces, now);
  if (!text.empty() && !sweep_text.empty()) text += "\n";
  std::cout << text << sweep_text;
  return kExitOk;
}

// ---------------------------------------------------------------- wait

namespace {

// Succeeded/Failed from a served object's conditions; nullopt while it runs.
struct Verdict {
  bool succeeded = false;
  std::string reason;
  std::string message;
};

std::optional<Verdict> Finished(const json& obj) {
  const json status = obj.value("status", json::object());
  if (!status.is_object()) return std::nullopt;
  const json conditions = status.value("conditions", json::array());
  if (!conditions.is_array()) return std::nullopt;
  for (const char* type : {"Failed", "Succeeded"}) {
    for (const json& c : conditions) {
      if (!c.is_object() || c.value("type", "") != type || c.value("status", "") != "True")
        continue;
      return Verdict{std::string_view(type) == "Succeeded", c.value("reason", ""),
                     c.value("message", "")};
    }
  }
  return std::nullopt;
}

std::string StateOf(const json& obj) {
  const json status = obj.value("status", json::object());
  std::string state = status.is_object() ? status.value("state", "") : "";
  return state.empty() ? "not started (no status yet)" : state;
}

std::string Seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", static_cast<double>(d.count()) / 1000.0);
  return std::string(buf) + "s";
}

}  // namespace

int WaitCommand(const ClusterFlags& flags, const std::string& name,
                std::chrono::milliseconds timeout) {
  auto session = Connect(flags);
  if (!session.ok()) return ReportConnect(session.status());
  kube::Client& client = *session->client;
  const std::string& ns = session->ns;

  // The deadline is a stop request made by a timer thread; the watch ends
  // when it sees it (libcurl's progress callback, about once a second).
  std::stop_source deadline;
  std::jthread timer;
  if (timeout.count() > 0) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    timer = std::jthread([&deadline, until](std::stop_token own) {
      std::mutex mu;
      std::condition_variable_any cv;
      std::unique_lock lock(mu);
      if (!cv.wait_until(lock, own, until, [] { return false; }) && !own.stop_requested()) {
        deadline.request_stop();
      }
    });
  }
  std::string last_state;
  std::string what = name;
  auto timed_out = [&] {
    std::cerr << "error: timed out after " << Seconds(timeout) << " waiting for " << what
              << " to finish; it is " << last_state << "\n";
    return kExitTimeout;
  };
  auto verdict_exit = [&](const Verdict& v) {
    if (v.succeeded) {
      std::cout << what << " Succeeded" << (v.reason.empty() ? "" : " (" + v.reason + ")") << "\n";
      return kExitOk;
    }
    std::cerr << what << " Failed: " << v.reason << (v.message.empty() ? "" : ": " + v.message)
              << "\n";
    return kExitFailed;
  };
  for (;;) {
    if (deadline.stop_requested()) return timed_out();
    auto found = FindJobOrSweep(client, ns, name);
    if (!found.ok()) return Report(found.status());
    what = found->resource + "/" + name;
    last_state = StateOf(found->object);
    if (auto v = Finished(found->object)) return verdict_exit(*v);

    kube::ListOptions opts;
    opts.field_selector = "metadata.name=" + name;
    opts.resource_version = found->object["metadata"].value("resourceVersion", std::string());
    opts.timeout_seconds = 300;  // then read it again and watch on
    std::optional<int> result;
    Status s = client.Watch(
        *found->ref, ns, opts,
        [&](kube::WatchEvent&& ev) -> Status {
          if (ev.type == kube::WatchEventType::kBookmark) return Status::Ok();
          if (ev.type == kube::WatchEventType::kDeleted) {
            std::cerr << "error: " << what << " was deleted while waiting\n";
            result = kExitNotFound;
            return Status(StatusCode::kFailedPrecondition, "done");
          }
          last_state = StateOf(ev.object);
          if (auto v = Finished(ev.object)) {
            result = verdict_exit(*v);
            return Status(StatusCode::kFailedPrecondition, "done");
          }
          return Status::Ok();
        },
        deadline.get_token());
    if (result) return *result;
    if (deadline.stop_requested()) return timed_out();
    // The server ended the watch (its timeout) or the version expired: read again.
    if (s.ok() || s.code() == StatusCode::kGone) continue;
    return Report(s);
  }
}

// ---------------------------------------------------------------- suspend / resume

int SuspendCommand(const ClusterFlags& flags, const std::string& name, bool suspend) {
  auto session = Connect(flags);
  if (!session.ok()) return ReportConnect(session.status());
  kube::Client& client = *session->client;
  auto found = FindJobOrSweep(client, session->ns, name);
  if (!found.ok()) return Report(found.status());
  // A TrainingJob's field is spec.runPolicy.suspend, a TrainingSweep's spec.suspend (crds/).
  const bool job = found->ref == &kJobs;
  const json spec = found->object.value("spec", json::object());
  bool now = false;
  if (job && spec.contains("runPolicy") && spec["runPolicy"].is_object()) {
    now = spec["runPolicy"].value("suspend", false);
  } else if (!job) {
    now = spec.value("suspend", false);
  }
  const std::string what = found->resource + "/" + name;
  const char* done = suspend ? "suspended" : "resumed";
  if (now == suspend) {
    std::cout << what << " already " << (suspend ? "suspended" : "running (not suspended)") << "\n";
    return kExitOk;
  }
  const json patch = job ? json{{"spec", {{"runPolicy", {{"suspend", suspend}}}}}}
                         : json{{"spec", {{"suspend", suspend}}}};
  auto patched = client.Patch(*found->ref, session->ns, name, kube::PatchType::kMerge, patch);
  if (!patched.ok()) return Report(patched.status());
  std::cout << what << " " << done << "\n";
  return kExitOk;
}

// ---------------------------------------------------------------- logs

namespace {

// Orders "ps-1" < "worker-0" < "worker-10" as kRoles and numbers do.
bool ReplicaLess(const std::string& a, const std::string& b) {
  auto key = [](const std::string& r) {
    const size_t dash = r.rfind('-');
    const std::string role = r.substr(0, dash == std::string::npos ? r.size() : dash);
    size_t rank = api::kRoles.size();
    for (size_t i = 0; i < api::kRoles.size(); ++i) {
      if (api::kRoles[i].lower == role) rank = i;
    }
    long long index = 0;
    if (dash != std::string::npos) {
      std::from_chars(r.data() + dash + 1, r.data() + r.size(), index);
    }
    return std::make_tuple(rank, role, index, r);
  };
  return key(a) < key(b);
}

// Writes whole prefixed lines to stdout; shared by the follow threads.
class Printer {
 public:
  void Write(std::string_view text) {
    if (text.empty()) return;
    std::lock_guard lock(mu_);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }

 private:
  std::mutex mu_;
};

int PrintSaved(const std::map<std::string, std::string>& saved, const std::string& output) {
  if (saved.empty()) {
    std::cerr << "error: no saved logs under " << output << "/logs/\n";
    return kExitNotFound;
  }
  std::vector<std::string> names;
  size_t width = 0;
  for (const auto& [replica, text] : saved) {
    names.push_back(replica);
    width = std::max(width, replica.size());
  }
  std::sort(names.begin(), names.end(), ReplicaLess);
  Printer out;
  for (const auto& r : names) {
    LinePrefixer p(r, width);
    out.Write(p.Add(saved.at(r)));
    out.Write(p.Flush());
  }
  return kExitOk;
}

std::string LogPath(const std::string& ns, const std::string& pod, const std::string& container,
                    const LogsFlags& f) {
  std::string q = "?container=" + container;
  if (f.follow) q += "&follow=true";
  if (f.tail >= 0) q += "&tailLines=" + std::to_string(f.tail);
  const int64_t limit = f.limit_bytes > 0 ? f.limit_bytes : f.follow ? 0 : kDefaultLogLimitBytes;
  if (limit > 0) q += "&limitBytes=" + std::to_string(limit);
  return kube::ResourcePath(kube::kPods, ns, pod, "log") + q;
}

// Whether a pod ever started a container (a Pending pod has no log to read).
bool EverStarted(const json& pod) {
  const json status = pod.value("status", json::object());
  if (!status.is_object()) return false;
  for (const json& cs : status.value("containerStatuses", json::array())) {
    if (!cs.is_object()) continue;
    const json state = cs.value("state", json::object());
    if (state.contains("running") || state.contains("terminated")) return true;
    if (cs.value("restartCount", 0) > 0) return true;
  }
  return false;
}

}  // namespace

int LogsCommand(const ClusterFlags& flags, const LogsFlags& f) {
  if (!f.dir.empty()) {
    auto saved = ReadSavedLogs(f.dir);
    if (!saved.ok()) return Report(saved.status());
    return PrintSaved(*saved, f.dir);
  }
  auto session = Connect(flags);
  if (!session.ok()) return ReportConnect(session.status());
  kube::Client& client = *session->client;
  const std::string& ns = session->ns;

  auto job = client.Get(kJobs, ns, f.name);
  if (!job.ok() && job.status().code() == StatusCode::kNotFound) {
    // The job is gone (its TTL): its saved tails, if --output says where.
    if (!f.output.empty()) {
      auto saved = ReadSavedLogs(f.output);
      if (!saved.ok()) return Report(saved.status());
      return PrintSaved(*saved, f.output);
    }
    if (client.Get(kSweeps, ns, f.name).ok()) {
      std::cerr << "error: " << f.name << " is a TrainingSweep; its trials are TrainingJobs named "
                << f.name << "-<index> (kubetrain get lists them)\n";
      return kExitUsage;
    }
    std::cerr << "error: no TrainingJob \"" << f.name << "\" in namespace \"" << ns
              << "\" (give --output to read the saved logs of a deleted job)\n";
    return kExitNotFound;
  }
  if (!job.ok()) return Report(job.status());
  const std::string output = f.output.empty() ? OutputOfJob(*job) : f.output;

  kube::ListOptions opts;
  opts.label_selector = "kubetrain.io/job-name=" + f.name;
  auto pods = client.ListAll(kube::kPods, ns, opts);
  if (!pods.ok()) return Report(pods.status());
  std::map<std::string, json> pod_of;  // replica -> pod
  for (auto& pod : (*pods)["items"]) {
    const std::string r = ReplicaOfPod(pod);
    if (!r.empty()) pod_of[r] = std::move(pod);
  }
  // Saved tails are read once, and only if some replica needs them.
  std::optional<std::map<std::string, std::string>> saved;
  auto saved_tail = [&](const std::string& replica) -> const std::string* {
    if (output.empty()) return nullptr;
    if (!saved) {
      auto read = ReadSavedLogs(output);
      if (!read.ok()) {
        std::cerr << "warning: cannot read the saved logs under " << output
                  << "/logs/: " << read.status().message() << "\n";
        read = std::map<std::string, std::string>{};
      }
      saved = std::move(*read);
    }
    auto it = saved->find(replica);
    return it == saved->end() ? nullptr : &it->second;
  };

  std::vector<std::string> replicas = ReplicasOfJob(*job);
  for (const auto& [r, pod] : pod_of) {
    if (std::find(replicas.begin(), replicas.end(), r) == replicas.end()) replicas.push_back(r);
  }
  std::sort(replicas.begin(), replicas.end(), ReplicaLess);
  size_t width = 0;
  for (const auto& r : replicas) width = std::max(width, r.size());

  Printer out;
  int shown = 0;
  auto print_saved = [&](const std::string& r, const std::string& why) {
    const std::string* tail = saved_tail(r);
    if (tail == nullptr) {
      std::cerr << "warning: " << r << ": " << why
                << (output.empty() ? " and the job sets no trainer --output to save its log in"
                                   : " and no saved log at " + output + "/logs/" + r + ".log")
                << "\n";
      return;
    }
    std::cerr << "note: " << r << ": " << why << "; its saved log " << output << "/logs/" << r
              << ".log follows\n";
    LinePrefixer p(r, width);
    out.Write(p.Add(*tail));
    out.Write(p.Flush());
    ++shown;
  };
  // Reads one pod's log (streamed with -f) into `out`; false if it could not.
  auto read_pod = [&](const std::string& r, const json& pod, std::stop_token stop,
                      std::string* error) {
    std::string container = f.container;
    if (container.empty()) {
      const json spec = pod.value("spec", json::object());
      const json containers = spec.value("containers", json::array());
      if (containers.is_array() && !containers.empty() && containers[0].is_object()) {
        container = containers[0].value("name", "");
      }
    }
    const std::string pod_name = pod["metadata"].value("name", "");
    LinePrefixer p(r, width);
    int64_t received = 0;
    const int64_t cap = f.limit_bytes > 0 ? f.limit_bytes
                        : f.follow        ? std::numeric_limits<int64_t>::max()
                                          : kDefaultLogLimitBytes;
    Status s = client.Stream(
        LogPath(ns, pod_name, container, f),
        [&](std::string_view chunk) {
          received += static_cast<int64_t>(chunk.size());
          out.Write(p.Add(chunk));
          return received < cap;  // the server's limitBytes, enforced here too
        },
        stop, f.follow ? std::chrono::milliseconds(0) : flags.request_timeout);
    out.Write(p.Flush());
    if (!s.ok()) *error = s.message();
    return s.ok();
  };

  std::vector<std::jthread> followers;
  std::mutex errors_mu;
  for (const auto& r : replicas) {
    auto it = pod_of.find(r);
    if (it == pod_of.end()) {
      print_saved(r, "its pod is gone");
      continue;
    }
    if (!EverStarted(it->second)) {
      print_saved(r, "its pod " + it->second["metadata"].value("name", "") + " has not started");
      continue;
    }
    if (f.follow) {
      followers.emplace_back([&, r, pod = it->second](std::stop_token stop) {
        std::string error;
        if (!read_pod(r, pod, stop, &error)) {
          std::lock_guard lock(errors_mu);
          std::cerr << "warning: " << r << ": cannot follow the log of pod "
                    << pod["metadata"].value("name", "") << ": " << error << "\n";
        }
      });
      ++shown;
      continue;
    }
    std::string error;
    if (read_pod(r, it->second, {}, &error)) {
      ++shown;
    } else {
      print_saved(r, "the apiserver cannot read the log of pod " +
                         it->second["metadata"].value("name", "") + " (" + error + ")");
    }
  }
  // Each follower ends when its container does (or the process is interrupted).
  for (auto& t : followers) t.join();
  if (shown == 0) {
    std::cerr << "error: no logs of " << f.name << " to show\n";
    return kExitNotFound;
  }
  return kExitOk;
}

// ---------------------------------------------------------------- durations

StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  const std::string whole(text);
  auto bad = [&] {
    return InvalidArgument("\"" + whole +
                           "\" is not a duration (e.g. 90s, 2m, 1h30m, 500ms, or seconds)");
  };
  if (text.empty()) return bad();
  double total_ms = 0;
  // A plain number is seconds.
  {
    double v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc() && end == text.data() + text.size()) {
      if (v < 0) return bad();
      return std::chrono::milliseconds(static_cast<int64_t>(v * 1000));
    }
  }
  while (!text.empty()) {
    double v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || v < 0) return bad();
    text.remove_prefix(static_cast<size_t>(end - text.data()));
    double unit = 0;
    if (text.substr(0, 2) == "ms") {
      unit = 1;
      text.remove_prefix(2);
    } else if (!text.empty() && (text[0] == 'h' || text[0] == 'm' || text[0] == 's')) {
      unit = text[0] == 'h' ? 3'600'000 : text[0] == 'm' ? 60'000 : 1000;
      text.remove_prefix(1);
    } else {
      return bad();
    }
    total_ms += v * unit;
  }
  if (total_ms > 1e13) return bad();
  return std::chrono::milliseconds(static_cast<int64_t>(total_ms));
}

}  // namespace kubetrain::cli
