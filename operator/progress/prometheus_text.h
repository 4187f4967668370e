// A parser for the Prometheus text exposition format (version 0.0.4), enough to
// read a trainer's /metrics. The input comes from a workload: untrusted, so
// every malformed line is an error value, never an exception or a crash.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kubetrain::progress {

struct Sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written
  double value = 0;
};

// One sample per line: `name[{label="value",...}] value [timestamp]`; blank
// lines and `#` lines (HELP, TYPE, comments) are skipped. Label values may
// hold the escapes \\, \" and \n; values may be NaN, +Inf, -Inf. Anything else
// is InvalidArgument naming the line ("line 3: ...").
StatusOr<std::vector<Sample>> ParsePrometheusText(std::string_view text);

// The value of the sample `name` without labels; nullopt if there is none.
std::optional<double> FindValue(const std::vector<Sample>& samples, std::string_view name);

}  // namespace kubetrain::progress
