// `kubetrain logs`: which replicas a job has, where its trainer saves its log
// tails, and the line prefixing shared by live and saved logs.
//
// The saved-tail contract (written by kubetrain-trainer when a replica exits,
// see docs/user-guide.md): `<output>/logs/<role>-<index>.log`, e.g.
// `worker-0.log`, `ps-1.log`, where <output> is the trainer's `--output`, a
// local directory or s3://bucket/prefix.
//
// Contract: pure functions and one small value type; no I/O except
// ReadSavedLogs (the local file system or S3 through the trainer's storage
// layer, configured from the AWS_* variables). Thread-compatible.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kubetrain::cli {

// A saved tail larger than this is cut to its last kMaxSavedLogBytes (the
// trainer keeps 1 MiB; this bounds what a bad writer can make us print).
inline constexpr size_t kMaxSavedLogBytes = size_t{4} << 20;
// A line longer than this is printed in pieces of this size.
inline constexpr size_t kMaxLineBytes = size_t{64} << 10;

// "worker-0" from a pod's kubetrain.io/replica-type and replica-index labels;
// "" when it has neither.
std::string ReplicaOfPod(const nlohmann::json& pod);

// Every replica a TrainingJob object (served JSON) declares, in role order
// (chief, ps, worker, evaluator) then index: {"ps-0", "worker-0", "worker-1"}.
std::vector<std::string> ReplicasOfJob(const nlohmann::json& job);

// The trainer's --output of a TrainingJob (served JSON or parsed from a file):
// the first `--output=X` or `--output X` in the args of any replica's
// containers, chief and worker first. "" when none sets it. With `pod_spec`
// and `container`, also the pod spec and container that set it.
std::string OutputOfJob(const nlohmann::json& job, nlohmann::json* pod_spec = nullptr,
                        nlohmann::json* container = nullptr);

// The saved tails under `<output>/logs/`: replica ("worker-0") -> text, cut to
// the last kMaxSavedLogBytes. A directory or prefix that does not exist has
// none; other read errors are returned.
[[nodiscard]] StatusOr<std::map<std::string, std::string>> ReadSavedLogs(const std::string& output);

// Splits a byte stream into lines and prefixes each with "<replica> | ", the
// replica name padded to `width` (as `kubetrain run` prints its replicas).
// A line longer than kMaxLineBytes is emitted in pieces.
class LinePrefixer {
 public:
  LinePrefixer(std::string replica, size_t width);
  // The complete lines of `chunk` (and of what came before), prefixed.
  std::string Add(std::string_view chunk);
  // What is left without a final newline, prefixed and ended with one ("" if nothing).
  std::string Flush();

 private:
  std::string Prefixed(std::string_view line) const;

  const std::string prefix_;
  std::string partial_;
};

}  // namespace kubetrain::cli
