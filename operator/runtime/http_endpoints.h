// The operator's HTTP endpoints: /metrics on one server, /healthz and /readyz
// on another. Each is its own event loop (common/http_server.h: bounded
// headers, time per request, connections in total and per client), so a flood
// of /metrics scrapes cannot starve the kubelet's probes.
//
// /metrics: `render_metrics()` plus both servers' connection counts.
// /healthz: 200 "ok" while the process serves. /readyz: `readiness->Check()`,
// 200 when ready, else 503, with its message.
//
// Thread-safety: Start() once, from one thread; the handlers run on the
// servers' threads and call `render_metrics` and `readiness` from there, so
// both must be thread-safe and outlive this object. The destructor stops both
// servers.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "common/http_server.h"
#include "common/status.h"
#include "operator/runtime/readiness.h"

namespace kubetrain::runtime {

// "host:port" -> {host, port}; port 0 means "off". InvalidArgument for
// anything else (no colon, a port that is not a number in 0-65535).
StatusOr<std::pair<std::string, int>> ParseListenAddress(std::string_view addr);

class OperatorEndpoints {
 public:
  OperatorEndpoints(std::function<std::string()> render_metrics, const Readiness* readiness);
  OperatorEndpoints(const OperatorEndpoints&) = delete;
  OperatorEndpoints& operator=(const OperatorEndpoints&) = delete;

  // Serves /metrics on `metrics_addr` and the probes on `health_addr`
  // ("host:port"; port 0: that server stays off). InvalidArgument for a bad
  // address, Unavailable for a port that cannot be bound, naming the address.
  [[nodiscard]] Status Start(const std::string& metrics_addr, const std::string& health_addr);

 private:
  // Constant after construction.
  const std::function<std::string()> render_metrics_;
  const Readiness* const readiness_;
  HttpServer metrics_server_;
  HttpServer health_server_;
};

}  // namespace kubetrain::runtime
