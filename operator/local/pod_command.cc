#include "operator/local/pod_command.h"

#include "operator/local/process.h"

namespace kubetrain::local {
namespace {

using nlohmann::json;

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
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

StatusOr<LocalCommand> LocalCommandFor(const json& pod, const CommandContext& ctx) {
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
  const json& c = containers[main_index];
  const std::string where = "containers[" + std::to_string(main_index) + "]";
  LocalCommand cmd;
  if (spec.contains("terminationGracePeriodSeconds") &&
      spec["terminationGracePeriodSeconds"].is_number_integer()) {
    cmd.grace_seconds = spec["terminationGracePeriodSeconds"].get<int64_t>();
  }
  cmd.fallback_to_logs = Str(c, "terminationMessagePolicy") == "FallbackToLogsOnError";
  if (containers.size() > 1) {
    cmd.warnings.push_back("only container " + Str(c, "name") + " runs locally; " +
                           std::to_string(containers.size() - 1) + " other container(s) skipped");
  }
  if (spec.contains("initContainers") && !spec["initContainers"].empty()) {
    cmd.warnings.push_back("init containers do not run locally");
  }
  if (c.contains("envFrom")) cmd.warnings.push_back(where + ".envFrom is not supported locally");

  const std::string pod_name = Str(pod["metadata"], "name");
  const std::string ns =
      pod["metadata"].contains("namespace") ? Str(pod["metadata"], "namespace") : "default";
  for (const json& e : c.value("env", json::array())) {
    const std::string name = Str(e, "name");
    if (e.contains("value")) {
      cmd.env[name] = ExpandVars(Str(e, "value"), cmd.env);
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
    command.push_back(a.is_string() ? ExpandVars(a.get<std::string>(), cmd.env) : a.dump());
  }
  for (const json& a : c.value("args", json::array())) {
    args.push_back(a.is_string() ? ExpandVars(a.get<std::string>(), cmd.env) : a.dump());
  }
  const std::string image = Str(c, "image");
  cmd.is_trainer = IsTrainerImage(image);
  if (cmd.is_trainer && (command.empty() || Basename(command[0]) == "kubetrain-trainer")) {
    cmd.path = ctx.trainer_path;
    cmd.argv.push_back(command.empty() ? std::string("kubetrain-trainer") : command[0]);
    if (!command.empty()) cmd.argv.insert(cmd.argv.end(), command.begin() + 1, command.end());
    for (auto& a : args) {
      // Ours wins: the file the runner reads the termination message from.
      if (a.rfind("--termination-log", 0) == 0) continue;
      cmd.argv.push_back(a);
    }
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

}  // namespace kubetrain::local
