// The metrics registry: counters and gauges in the Prometheus text format. The
// operator serves it on /metrics (operator/cli/operator_main.cc, which also
// serves /healthz and /readyz).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "common/mutex.h"

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
  mutable Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ GUARDED_BY(mu_);
};

// The process-wide registry the runtime reports into.
Metrics& DefaultMetrics();

}  // namespace kubetrain::runtime
