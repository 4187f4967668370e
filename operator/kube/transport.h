// Transport: the kube client's HTTP half. Internal to kubetrain_kube: other
// modules use kube::Client (client.h), whose verbs and watch are built on it.
//
// Contract: one Send is one request with rate limiting (Config::qps/burst),
// credentials (bearer token, re-read from its file when it changes; exec
// plugin credentials, refreshed before expiry or after a 401) and the retry
// policy client.h describes. No error mapping: a non-2xx answer is an
// HttpResponse; a transport failure is a Status. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

#include "common/status.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"

namespace kubetrain::kube {

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const Config& config() const = 0;

  // Sends one request with retries. `on_data`, when set, receives the body
  // incrementally (watch); then the body is only kept for non-2xx responses.
  using DataFn = std::function<bool(std::string_view)>;  // false = abort
  [[nodiscard]] virtual StatusOr<HttpResponse> Send(std::string_view method,
                                                    const std::string& path,
                                                    const std::string& body,
                                                    std::string_view content_type,
                                                    const DataFn* on_data, std::stop_token stop,
                                                    long timeout_ms) = 0;
};

// The libcurl transport (a pool of handles, each keeping its connection).
std::unique_ptr<Transport> NewCurlTransport(Config config);

}  // namespace kubetrain::kube
