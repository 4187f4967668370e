// Connection settings for one Kubernetes API server: from a kubeconfig file
// or from the in-cluster service-account mount.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kubetrain::kube {

// A kubeconfig user's `exec` credential plugin (client.authentication.k8s.io
// v1 or v1beta1), run as kubectl runs it: the command with its args, the
// plugin's env added to ours, KUBERNETES_EXEC_INFO describing the request,
// stdin not a terminal; its stdout is an ExecCredential.
struct ExecPlugin {
  std::string api_version;  // "client.authentication.k8s.io/v1"
  std::string command;      // a relative path with a '/' is resolved against the kubeconfig
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string install_hint;
  bool provide_cluster_info = false;
};

// What a plugin returned: a token and/or a client certificate, and when it expires.
struct ExecCredential {
  std::string token;
  std::string client_cert_pem;
  std::string client_key_pem;
  std::optional<std::chrono::system_clock::time_point> expiry;
};

// Everything the transport needs to reach and authenticate to an apiserver.
// A plain value: copyable, no I/O after loading, except that `token_file`
// is re-read by the transport when it changes (service-account tokens rotate)
// and an exec plugin is re-run when its token expires.
struct Config {
  std::string server;  // "https://host:port", no trailing slash
  // TLS trust: PEM bytes of the CA bundle (from -data or the file). Empty
  // means the system trust store. Verification is on unless insecure.
  std::string ca_pem;
  bool insecure_skip_tls_verify = false;
  // Authentication: a bearer token (literal or re-read from token_file) and/or
  // a client certificate (PEM bytes).
  std::string token;
  std::string token_file;
  std::string client_cert_pem;
  std::string client_key_pem;
  // An exec plugin: run once at load (its token or certificate fills the
  // fields above, so a failing plugin is an error at start), and again by the
  // transport when the token expires or the apiserver answers 401.
  std::optional<ExecPlugin> exec;
  std::optional<std::chrono::system_clock::time_point> exec_expiry;
  // Namespace from the context (or the in-cluster namespace file); "default"
  // when neither says.
  std::string ns = "default";
  // Where it came from, for error messages: "kubeconfig /x (context y)".
  std::string source;

  // Transport tuning; the CLI exposes these as flags.
  double qps = 50;
  int burst = 100;
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds request_timeout{60'000};
  int max_retries = 5;  // idempotent verbs only

  // Called after every HTTP attempt (verb, HTTP status or 0 on a transport
  // error, latency), e.g. to feed a metrics registry. Must be thread-safe.
  std::function<void(std::string_view verb, long status, std::chrono::nanoseconds latency)>
      on_request;
  // Called when re-running the exec plugin failed: the old credential is kept
  // (the apiserver's 401 then says why) and no call returns this error, so the
  // caller logs it. Must be thread-safe and must not call the client. Unset:
  // not reported.
  std::function<void(const Status& error)> on_credential_error;

  // When set and false, writes (POST, PUT, PATCH, DELETE) fail with
  // kUnavailable without being sent, retries included. Leader election fences
  // the reconcilers' client with it once the lease is lost. Must be thread-safe.
  std::function<bool()> may_write;
};

// Loads `path` and picks `context` (empty: current-context). Errors name the
// file, the field and the context, e.g.
//   kubeconfig /k: context "x": user "u": client-key: file "/nope": No such file.
[[nodiscard]] StatusOr<Config> LoadKubeConfigFile(const std::string& path,
                                                  const std::string& context = "");

// Parses kubeconfig YAML already in memory. `path` is used for messages and
// to resolve relative file references (relative to the file's directory).
[[nodiscard]] StatusOr<Config> ParseKubeConfig(const std::string& yaml, const std::string& path,
                                               const std::string& context = "");

// In-cluster config: KUBERNETES_SERVICE_HOST/PORT plus the service-account
// mount (token, ca.crt, namespace) under `sa_dir`.
[[nodiscard]] StatusOr<Config> LoadInClusterConfig(
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// Runs `plugin` for the cluster in `cfg` (server and CA, when the plugin asks
// for cluster info). Errors name the command and quote its install hint. A plugin
// that has not finished within `timeout` (one waiting for a login that never comes)
// is killed with its process group: DeadlineExceeded, so the client's requests are
// never held up for ever. Output beyond 1 MiB is an error (InvalidArgument).
inline constexpr std::chrono::seconds kExecPluginTimeout{30};
[[nodiscard]] StatusOr<ExecCredential> RunExecPlugin(
    const ExecPlugin& plugin, const Config& cfg,
    std::chrono::milliseconds timeout = kExecPluginTimeout);

// Loads a ':'-separated list of kubeconfig files merged as kubectl merges
// $KUBECONFIG: files that do not exist are skipped; the first file to set
// current-context wins; for clusters, contexts and users the first entry of
// each name wins; relative paths are resolved against the file they are in.
[[nodiscard]] StatusOr<Config> LoadKubeConfigList(const std::string& list,
                                                  const std::string& context = "");

// The usual order: explicit `kubeconfig` path (the --kubeconfig flag), then
// $KUBECONFIG (the whole ':'-separated list, merged as kubectl does), then
// in-cluster if KUBERNETES_SERVICE_HOST is set, then ~/.kube/config.
[[nodiscard]] StatusOr<Config> LoadDefaultConfig(const std::string& kubeconfig = "",
                                                 const std::string& context = "");

// Reads a whole file; NotFound / PermissionDenied naming the path.
[[nodiscard]] StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace kubetrain::kube
