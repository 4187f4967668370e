// Logs that outlive pods: the last bytes of a replica's own log, kept in memory and
// written to <--output>/logs/<replica>.log when the process exits (trainer/roles.cc; the
// name is contract::LogTailName).
//
// LogTail is a byte ring of fixed capacity (1 MiB in the trainer): appending never grows
// it past that, so a long job's log costs a constant amount of memory and one copy per
// line. Thread-safe (one mutex; the spdlog sink already serialises lines).
// What is lost: a SIGKILL (an OOM kill, the kubelet after the grace period) ends the
// process before it can write the tail; the kubelet's own log of the container stays.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/mutex.h"

namespace spdlog::sinks {
class sink;
}

namespace kubetrain::trainer::observe {

inline constexpr size_t kLogTailBytes = size_t{1} << 20;

class LogTail {
 public:
  explicit LogTail(size_t capacity = kLogTailBytes);

  void Append(std::string_view text);
  // The kept bytes, oldest first. When older bytes were dropped it starts with one line
  // saying how many, then at the first whole line kept.
  std::string Contents() const;
  uint64_t dropped_bytes() const;

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  std::string ring_ GUARDED_BY(mu_);    // capacity_ bytes once full
  size_t head_ GUARDED_BY(mu_) = 0;     // where the next byte goes once full
  uint64_t total_ GUARDED_BY(mu_) = 0;  // bytes ever appended
};

// A spdlog sink that appends each formatted line to `tail` (add it to the default
// logger's sinks before setting the pattern).
std::shared_ptr<spdlog::sinks::sink> MakeLogTailSink(std::shared_ptr<LogTail> tail);

}  // namespace kubetrain::trainer::observe
