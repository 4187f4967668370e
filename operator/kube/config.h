// Connection settings for one Kubernetes API server: from a kubeconfig file
// or from the in-cluster service-account mount.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "operator/common/status.h"

namespace kubetrain::kube {

// Everything the transport needs to reach and authenticate to an apiserver.
// A plain value: copyable, no I/O after loading, except that `token_file`
// is re-read by the transport when it changes (service-account tokens rotate).
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

// The usual order: explicit `kubeconfig` path (the --kubeconfig flag), then
// $KUBECONFIG (first entry of a ':'-separated list), then in-cluster if
// KUBERNETES_SERVICE_HOST is set, then ~/.kube/config.
[[nodiscard]] StatusOr<Config> LoadDefaultConfig(const std::string& kubeconfig = "",
                                                 const std::string& context = "");

// Reads a whole file; NotFound / PermissionDenied naming the path.
[[nodiscard]] StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace kubetrain::kube
