// Metrics registry and the /healthz, /readyz, /metrics HTTP endpoint.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/status.h"

namespace kubetrain::runtime {

// Counters and gauges rendered in the Prometheus text format.
// Contract: names are Prometheus metric names; `labels` is the rendered label
// set without braces ("verb=\"GET\",code=\"200\"") or empty. Thread-safe.
class Metrics {
 public:
  void Add(std::string_view name, std::string_view labels = "", double delta = 1);  // counter
  void Set(std::string_view name, std::string_view labels, double value);           // gauge
  void Help(std::string_view name, std::string_view type, std::string_view help);
  double Get(std::string_view name, std::string_view labels = "") const;
  std::string Render() const;

 private:
  struct Family {
    std::string type = "untyped", help;
    std::map<std::string, double> series;  // labels -> value
  };
  mutable std::mutex mu_;
  std::map<std::string, Family, std::less<>> families_;  // guarded by mu_
};

// The process-wide registry the runtime reports into.
Metrics& DefaultMetrics();

// Serves GET /healthz (200 while the process runs), /readyz (200 when
// `ready()` says so, else 503) and /metrics (the registry). Start() binds and
// serves on a background thread; Stop() (and the destructor) shut it down.
class HealthServer {
 public:
  HealthServer(Metrics* metrics, std::function<bool()> ready);
  ~HealthServer();
  // port 0 picks a free port; returns the bound port.
  [[nodiscard]] StatusOr<int> Start(const std::string& host, int port);
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kubetrain::runtime
