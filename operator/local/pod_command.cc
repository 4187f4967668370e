#include "operator/local/pod_command.h"

#include <algorithm>

#include "operator/local/process.h"

namespace kubetrain::local {
namespace {

using nlohmann::json;

std::string Str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool PathChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
         c == '/';
}

// Volume name -> local directory, for the volume types that exist locally.
std::map<std::string, std::string> LocalVolumes(const json& spec, const CommandContext& ctx,
                                                std::vector<std::string>* warnings) {
  std::map<std::string, std::string> out;
  if (!spec.contains("volumes") || !spec["volumes"].is_array()) return out;
  for (const json& v : spec["volumes"]) {
    const std::string name = Str(v, "name");
    if (v.contains("emptyDir")) {
      out[name] = ctx.volume_root + "/" + name;
    } else if (v.contains("hostPath")) {
      out[name] = Str(v["hostPath"], "path");
    } else if (warnings) {
      warnings->push_back("volume " + name +
                          " is not mounted locally (only emptyDir and hostPath)");
    }
  }
  return out;
}

// The Secret or ConfigMap `name` from the job file, or null.
const std::map<std::string, std::string>* LookUp(const CommandContext& ctx, bool secret,
                                                 const std::string& name) {
  if (ctx.objects == nullptr) return nullptr;
  const auto& all = secret ? ctx.objects->secrets : ctx.objects->config_maps;
  auto it = all.find(name);
  return it == all.end() ? nullptr : &it->second;
}

StatusOr<LocalCommand> CommandOf(const json& pod, const json& c, const std::string& where,
                                 const std::map<std::string, std::string>& volumes,
                                 const CommandContext& ctx) {
  LocalCommand cmd;
  cmd.container = Str(c, "name");
  cmd.fallback_to_logs = Str(c, "terminationMessagePolicy") == "FallbackToLogsOnError";
  std::vector<LocalMount> mounts;
  for (const json& m : c.value("volumeMounts", json::array())) {
    auto it = volumes.find(Str(m, "name"));
    if (it == volumes.end()) continue;
    std::string local = it->second;
    if (!Str(m, "subPath").empty()) local += "/" + Str(m, "subPath");
    mounts.push_back({Str(m, "mountPath"), local});
  }

  // envFrom first: env entries below override what it sets.
  for (const json& from : c.value("envFrom", json::array())) {
    const bool secret = from.contains("secretRef");
    const json& ref = secret ? from["secretRef"] : from.value("configMapRef", json::object());
    if (!secret && !from.contains("configMapRef")) {
      cmd.warnings.push_back(where + ".envFrom " + from.dump() + " is not available locally");
      continue;
    }
    const std::string kind = secret ? "Secret" : "ConfigMap";
    const auto* found = LookUp(ctx, secret, Str(ref, "name"));
    if (found == nullptr) {
      if (ref.value("optional", false)) continue;
      return InvalidArgument(where + ".envFrom: " + kind + " " + Str(ref, "name") +
                             " is not defined in the job file");
    }
    for (const auto& [k, v] : *found) cmd.env[Str(from, "prefix") + k] = v;
  }

  const std::string pod_name = Str(pod["metadata"], "name");
  const std::string ns =
      pod["metadata"].contains("namespace") ? Str(pod["metadata"], "namespace") : "default";
  for (const json& e : c.value("env", json::array())) {
    const std::string name = Str(e, "name");
    if (e.contains("value")) {
      cmd.env[name] = MapPaths(ExpandVars(Str(e, "value"), cmd.env), mounts);
      continue;
    }
    if (!e.contains("valueFrom")) {
      cmd.env[name] = "";
      continue;
    }
    const json& from = e["valueFrom"];
    if (from.contains("secretKeyRef") && Str(from["secretKeyRef"], "name") == ctx.auth_secret &&
        Str(from["secretKeyRef"], "key") == "key") {
      cmd.env[name] = ctx.auth_key_text;
      continue;
    }
    if (from.contains("secretKeyRef") && Str(from["secretKeyRef"], "name") == ctx.auth_secret &&
        Str(from["secretKeyRef"], "key") == "cluster") {
      cmd.env[name] = ctx.cluster_config;  // then $(CLUSTER_CONFIG) in later values expands
      continue;
    }
    if (from.contains("configMapKeyRef") &&
        Str(from["configMapKeyRef"], "name") == ctx.cluster_config_map &&
        Str(from["configMapKeyRef"], "key") == "cluster") {
      cmd.env[name] = ctx.cluster_config;  // then $(CLUSTER_CONFIG) in later values expands
      continue;
    }
    if (from.contains("secretKeyRef") || from.contains("configMapKeyRef")) {
      const bool secret = from.contains("secretKeyRef");
      const json& ref = secret ? from["secretKeyRef"] : from["configMapKeyRef"];
      const std::string kind = secret ? "Secret" : "ConfigMap";
      const auto* found = LookUp(ctx, secret, Str(ref, "name"));
      const auto it = found ? found->find(Str(ref, "key")) : decltype(found->end()){};
      if (found != nullptr && it != found->end()) {
        cmd.env[name] = it->second;
        continue;
      }
      if (ref.value("optional", false)) continue;
      return InvalidArgument("env " + name + ": " + kind + " " + Str(ref, "name") +
                             (found ? " has no key " + Str(ref, "key")
                                    : std::string(" is not defined in the job file")));
    }
    if (from.contains("fieldRef")) {
      const std::string field = Str(from["fieldRef"], "fieldPath");
      if (field == "metadata.name") {
        cmd.env[name] = pod_name;
        continue;
      }
      if (field == "metadata.namespace") {
        cmd.env[name] = ns;
        continue;
      }
      if (field == "status.podIP" || field == "status.hostIP") {
        cmd.env[name] = "127.0.0.1";
        continue;
      }
    }
    cmd.warnings.push_back("env " + name + ": valueFrom " + from.dump() +
                           " is not available locally; not set");
  }

  std::vector<std::string> command, args;
  for (const json& a : c.value("command", json::array())) {
    command.push_back(
        MapPaths(a.is_string() ? ExpandVars(a.get<std::string>(), cmd.env) : a.dump(), mounts));
  }
  for (const json& a : c.value("args", json::array())) {
    args.push_back(
        MapPaths(a.is_string() ? ExpandVars(a.get<std::string>(), cmd.env) : a.dump(), mounts));
  }
  const std::string image = Str(c, "image");
  cmd.is_trainer = IsTrainerImage(image);
  if (cmd.is_trainer && (command.empty() || Basename(command[0]) == "kubetrain-trainer")) {
    cmd.path = ctx.trainer_path;
    cmd.argv.push_back(command.empty() ? std::string("kubetrain-trainer") : command[0]);
    if (!command.empty()) cmd.argv.insert(cmd.argv.end(), command.begin() + 1, command.end());
    for (auto& a : args) {
      // Ours wins: the file the runner reads the termination message from.
      if (a.rfind("--termination-log", 0) == 0 || a.rfind("--metrics-port", 0) == 0 ||
          a.rfind("--metrics-final-wait", 0) == 0) {
        continue;
      }
      cmd.argv.push_back(a);
    }
    cmd.argv.push_back("--metrics-port=" + std::to_string(ctx.metrics_port));
    // The coordinator's last step must be read before it exits: a run
    // shorter than the runner's read interval still reports its progress.
    if (ctx.metrics_port > 0) cmd.argv.push_back("--metrics-final-wait=10");
    cmd.argv.push_back("--termination-log=" + ctx.termination_log);
    return cmd;
  }
  if (command.empty()) {
    return InvalidArgument(where + ": image " + image +
                           " has no command; locally, only kubetrain-trainer images run without "
                           "`command` (the image's entrypoint is unknown here)");
  }
  auto path = ResolveExecutable(command[0], ctx.path_env);
  if (!path) {
    return NotFound(where + ": command \"" + command[0] + "\" not found" +
                    (command[0].find('/') == std::string::npos ? " on PATH" : ""));
  }
  cmd.path = *path;
  cmd.argv = command;
  cmd.argv.insert(cmd.argv.end(), args.begin(), args.end());
  return cmd;
}

}  // namespace

bool IsTrainerImage(std::string_view image) {
  if (size_t at = image.find('@'); at != std::string_view::npos) image = image.substr(0, at);
  std::string_view name = Basename(image);
  if (size_t colon = name.find(':'); colon != std::string_view::npos) name = name.substr(0, colon);
  return name == "kubetrain-trainer";
}

std::string ExpandVars(std::string_view text, const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '$' && i + 1 < text.size()) {
      if (text[i + 1] == '$') {
        out += '$';
        ++i;
        continue;
      }
      if (text[i + 1] == '(') {
        size_t close = text.find(')', i + 2);
        if (close != std::string_view::npos) {
          auto it = env.find(std::string(text.substr(i + 2, close - i - 2)));
          if (it != env.end()) {
            out += it->second;
            i = close;
            continue;
          }
        }
      }
    }
    out += text[i];
  }
  return out;
}

std::string MapPaths(std::string_view text, const std::vector<LocalMount>& mounts) {
  std::vector<const LocalMount*> order;
  for (const auto& m : mounts) {
    if (!m.mount_path.empty() && m.mount_path[0] == '/') order.push_back(&m);
  }
  std::sort(order.begin(), order.end(), [](const LocalMount* a, const LocalMount* b) {
    return a->mount_path.size() > b->mount_path.size();
  });
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const LocalMount* hit = nullptr;
    if (text[i] == '/' && (i == 0 || !PathChar(text[i - 1]))) {
      for (const LocalMount* m : order) {
        std::string_view mp = m->mount_path;
        while (mp.size() > 1 && mp.back() == '/') mp.remove_suffix(1);
        if (text.substr(i, mp.size()) != mp) continue;
        const size_t end = i + mp.size();
        if (end < text.size() && text[end] != '/' && PathChar(text[end])) continue;
        hit = m;
        out += m->local_path;
        i = end;
        break;
      }
    }
    if (!hit) out += text[i++];
  }
  return out;
}

std::vector<std::string> EmptyDirsOf(const json& pod, const CommandContext& ctx) {
  std::vector<std::string> dirs;
  const json spec = pod.value("spec", json::object());
  if (!spec.contains("volumes") || !spec["volumes"].is_array()) return dirs;
  for (const json& v : spec["volumes"]) {
    if (v.contains("emptyDir")) dirs.push_back(ctx.volume_root + "/" + Str(v, "name"));
  }
  return dirs;
}

StatusOr<std::vector<LocalCommand>> LocalCommandsFor(const json& pod, const CommandContext& ctx) {
  const json spec = pod.value("spec", json::object());
  const json containers = spec.value("containers", json::array());
  if (!containers.is_array() || containers.empty()) {
    return InvalidArgument("pod " + Str(pod["metadata"], "name") + " has no containers");
  }
  size_t main_index = 0;
  for (size_t i = 0; i < containers.size(); ++i) {
    if (Str(containers[i], "name") == "trainer") {
      main_index = i;
      break;
    }
  }
  std::vector<std::string> warnings;
  const auto volumes = LocalVolumes(spec, ctx, &warnings);
  std::vector<LocalCommand> out;
  const json inits = spec.value("initContainers", json::array());
  for (size_t i = 0; i < inits.size(); ++i) {
    KT_ASSIGN_OR_RETURN(
        LocalCommand cmd,
        CommandOf(pod, inits[i], "initContainers[" + std::to_string(i) + "]", volumes, ctx));
    cmd.init = true;
    // Only the main container reports a termination message.
    if (cmd.is_trainer) cmd.argv.back() = "--termination-log=/dev/null";
    out.push_back(std::move(cmd));
  }
  KT_ASSIGN_OR_RETURN(LocalCommand main,
                      CommandOf(pod, containers[main_index],
                                "containers[" + std::to_string(main_index) + "]", volumes, ctx));
  if (spec.contains("terminationGracePeriodSeconds") &&
      spec["terminationGracePeriodSeconds"].is_number_integer()) {
    main.grace_seconds = spec["terminationGracePeriodSeconds"].get<int64_t>();
  }
  if (containers.size() > 1) {
    warnings.push_back("only container " + main.container + " runs locally; " +
                       std::to_string(containers.size() - 1) + " other container(s) skipped");
  }
  main.warnings.insert(main.warnings.begin(), warnings.begin(), warnings.end());
  out.push_back(std::move(main));
  return out;
}

}  // namespace kubetrain::local
