// A planned Pod (the JSON the operator would POST) -> the local process that
// stands in for it. Pure: no I/O besides looking executables up on PATH.
//
// Mapping:
//  - the init containers run first, one after the other, each to exit 0; then
//    the main container (named "trainer", else the first). Other containers
//    (sidecars) do not run;
//  - volumes: an emptyDir is a fresh directory per pod under
//    CommandContext::volume_root, a hostPath is that path; a container's
//    mountPath is replaced by the local directory wherever it appears as a path
//    in its command, args and env values ("--data-dir=/data" ->
//    "--data-dir=<volume_root>/data"). Other volume types are not mounted;
//  - an image named kubetrain-trainer (any registry prefix, tag or digest) runs
//    the local trainer binary: no `command` -> the binary with `args`; a
//    `command` whose first word is kubetrain-trainer -> that word replaced by
//    the binary. The trainer also gets --metrics-port=<CommandContext's> and
//    --termination-log=<per-replica file>;
//  - any other image needs a `command`; it runs as it is, looked up on PATH;
//  - env: the container's `value`s (with $(VAR) expansion, as the kubelet
//    does), the job's Secret key for KUBETRAIN_AUTH_KEY, and the fieldRefs
//    metadata.name/metadata.namespace/status.podIP; secretKeyRef/configMapKeyRef
//    and envFrom secretRef/configMapRef resolve against the Secrets and
//    ConfigMaps given in CommandContext::objects (those defined in the job file),
//    envFrom first and env after it, as the kubelet does; a reference to one
//    that is not there is an error unless marked optional. Anything else is
//    skipped with a warning.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kubetrain::local {

// Secrets and ConfigMaps by name: key -> value (Secret data already decoded).
struct LocalObjects {
  std::map<std::string, std::map<std::string, std::string>> secrets;
  std::map<std::string, std::map<std::string, std::string>> config_maps;
};

struct CommandContext {
  std::string trainer_path;     // the kubetrain-trainer binary
  std::string auth_secret;      // "<job>-auth-<uid>" (AuthSecretName)
  std::string auth_key_text;    // AuthKeyText(key)
  std::string termination_log;  // where this replica's termination message goes
  std::string path_env;         // PATH used to resolve commands
  std::string volume_root;      // emptyDir volumes go to <volume_root>/<volume name>
  // The job's ConfigMap ("<job>-cluster") and what its key "cluster" (and the
  // auth Secret's) holds: a configMapKeyRef to it, or a secretKeyRef to the
  // auth Secret's key "cluster", resolves like in Kubernetes.
  std::string cluster_config_map;
  std::string cluster_config;
  const LocalObjects* objects = nullptr;  // Secrets/ConfigMaps from the job file, if any
  // The trainer's --metrics-port (0: off; several local trainers must not all
  // take the default 9090).
  int metrics_port = 0;
};

struct LocalCommand {
  std::string container;                   // the container's name
  bool init = false;                       // an init container
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

// A volume as seen from the local machine.
struct LocalMount {
  std::string mount_path;  // in the container
  std::string local_path;  // here
};

// `text` with every mount_path that stands as a whole path component run
// ("/data", "/data/x", "--dir=/data") replaced by its local_path; the longest
// mount path wins. "/database" and "/x/data" are left alone.
std::string MapPaths(std::string_view text, const std::vector<LocalMount>& mounts);

// The init containers in order, then the main container. InvalidArgument for a
// pod that cannot run here ("...containers[0]: image busybox has no command"),
// NotFound for a command not on PATH.
StatusOr<std::vector<LocalCommand>> LocalCommandsFor(const nlohmann::json& pod,
                                                     const CommandContext& ctx);

// Only the directories LocalCommandsFor maps volumes to (emptyDir ones), to
// create before the pod starts.
std::vector<std::string> EmptyDirsOf(const nlohmann::json& pod, const CommandContext& ctx);

}  // namespace kubetrain::local
