#include "operator/runtime/http_endpoints.h"

#include <spdlog/spdlog.h>

#include <exception>

namespace kubetrain::runtime {
namespace {

// Starts `server` on `addr` (port 0: off).
Status StartOne(HttpServer& server, const std::string& addr, std::string_view what) {
  auto parsed = ParseListenAddress(addr);
  if (!parsed.ok()) {
    return InvalidArgument("invalid " + std::string(what) + " address '" + addr +
                           "': want host:port");
  }
  const auto& [host, port] = *parsed;
  if (port == 0) return Status::Ok();
  if (auto bound = server.Start(host, port); !bound.ok()) {
    return Unavailable("cannot serve " + std::string(what) + " on " + addr + ": " +
                       std::string(bound.status().message()));
  }
  spdlog::info("serving {} on {}", what, addr);
  return Status::Ok();
}

}  // namespace

StatusOr<std::pair<std::string, int>> ParseListenAddress(std::string_view addr) {
  const auto colon = addr.rfind(':');
  if (colon == std::string_view::npos) {
    return InvalidArgument("'" + std::string(addr) + "' is not host:port");
  }
  // std::stoi, as the operator always read it: leading blanks and a sign are
  // taken, and so is anything after the digits.
  int port = -1;
  try {
    port = std::stoi(std::string(addr.substr(colon + 1)));
  } catch (const std::exception&) {
    return InvalidArgument("'" + std::string(addr) + "': port is not a number");
  }
  if (port < 0 || port > 65535) {
    return InvalidArgument("'" + std::string(addr) + "': port is not 0-65535");
  }
  return std::make_pair(std::string(addr.substr(0, colon)), port);
}

OperatorEndpoints::OperatorEndpoints(std::function<std::string()> render_metrics,
                                     const Readiness* readiness)
    : render_metrics_(std::move(render_metrics)), readiness_(readiness) {
  metrics_server_.Handle("/metrics", [this](const HttpRequest&) {
    HttpResponse res;
    res.content_type = "text/plain; version=0.0.4";
    res.body = render_metrics_();
    AppendHttpStats("kubetrain_operator_http_connections_total",
                    {{"metrics", metrics_server_.stats()}, {"health", health_server_.stats()}},
                    &res.body);
    return res;
  });
  health_server_.Handle("/healthz", [](const HttpRequest&) {
    HttpResponse res;
    res.body = "ok\n";
    return res;
  });
  health_server_.Handle("/readyz", [this](const HttpRequest&) {
    const Readiness::Report r = readiness_->Check();
    HttpResponse res;
    res.status = r.ready ? 200 : 503;
    res.body = std::string(r.message) + "\n";
    return res;
  });
}

Status OperatorEndpoints::Start(const std::string& metrics_addr, const std::string& health_addr) {
  KT_RETURN_IF_ERROR(StartOne(metrics_server_, metrics_addr, "/metrics"));
  return StartOne(health_server_, health_addr, "/healthz and /readyz");
}

}  // namespace kubetrain::runtime
