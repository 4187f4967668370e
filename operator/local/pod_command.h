// A planned Pod (the JSON the operator would POST) -> the local process that
// stands in for it. Pure: no I/O besides looking executables up on PATH.
//
// Mapping (docs/local.md has the user-facing version):
//  - only the main container runs (named "trainer", else the first);
//  - an image named kubetrain-trainer (any registry prefix, tag or digest) runs
//    the local trainer binary: no `command` -> the binary with `args`; a
//    `command` whose first word is kubetrain-trainer -> that word replaced by
//    the binary. The trainer also gets --termination-log=<per-replica file>;
//  - any other image needs a `command`; it runs as it is, looked up on PATH;
//  - env: the container's `value`s (with $(VAR) expansion, as the kubelet
//    does), the job's Secret key for KUBETRAIN_AUTH_KEY, and the fieldRefs
//    metadata.name/metadata.namespace/status.podIP; anything else is skipped
//    with a warning.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "operator/common/status.h"

namespace kubetrain::local {

struct CommandContext {
  std::string trainer_path;     // the kubetrain-trainer binary
  std::string auth_secret;      // "<job>-auth"
  std::string auth_key_text;    // AuthKeyText(key)
  std::string termination_log;  // where this replica's termination message goes
  std::string path_env;         // PATH used to resolve commands
};

struct LocalCommand {
  std::string path;                        // resolved executable
  std::vector<std::string> argv;           // argv[0] is the command as written
  std::map<std::string, std::string> env;  // the container's variables
  bool is_trainer = false;
  bool fallback_to_logs = false;      // terminationMessagePolicy FallbackToLogsOnError
  int64_t grace_seconds = -1;         // terminationGracePeriodSeconds, -1 if unset
  std::vector<std::string> warnings;  // parts of the pod that do not run locally
};

// Whether `image` is the kubetrain-trainer image: "kubetrain-trainer",
// "ghcr.io/acme/kubetrain-trainer:0.3", "kubetrain-trainer@sha256:...".
bool IsTrainerImage(std::string_view image);

// $(VAR) -> its value when VAR is in `env`, "$$" -> "$", anything else as is.
std::string ExpandVars(std::string_view text, const std::map<std::string, std::string>& env);

// InvalidArgument for a pod that cannot run here ("...containers[0]: image
// busybox has no command"), NotFound for a command not on PATH.
StatusOr<LocalCommand> LocalCommandFor(const nlohmann::json& pod, const CommandContext& ctx);

}  // namespace kubetrain::local
