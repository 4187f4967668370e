// `kubetrain run`'s status.progress: the same metrics endpoint and the same
// ProgressTracker as the operator (operator/progress), so a local run reports
// the progress a cluster run would. The coordinator (chief-0, else
// worker-0) of a kubetrain-trainer image gets --metrics-port=<a free port>;
// the runner reads 127.0.0.1:<port>/metrics about every kReadInterval from its
// event loop (short timeouts: the process is local).
// Contract: not thread-safe (the runner's loop owns it).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "operator/api/types.h"
#include "operator/progress/progress.h"
#include "operator/progress/reader.h"

namespace kubetrain::local {

class LocalProgress {
 public:
  using TimePoint = Clock::TimePoint;
  static constexpr std::chrono::milliseconds kReadInterval{500};

  // A new reading is published (becomes status.progress) at most every `publish_interval`.
  // Reads are due by `clock` (the runner's), which must outlive this.
  explicit LocalProgress(std::chrono::milliseconds publish_interval = kDefaultPublishInterval,
                         Clock* clock = &RealClock());
  static constexpr std::chrono::milliseconds kDefaultPublishInterval{2000};

  // A free TCP port on 127.0.0.1 (the kernel's choice).
  static StatusOr<int> FreePort();
  // Reads `replica`'s metrics on `port` from now on (a new process of it).
  void Watch(const std::string& replica, int port);
  // When the next read is due; nullopt when nothing is watched.
  std::optional<TimePoint> NextRead() const;
  // Reads if due. True when the published progress changed.
  bool Poll(TimePoint now);
  const std::optional<api::Progress>& published() const { return tracker_.published(); }

 private:
  Clock* const clock_;
  progress::FetchFn fetch_;
  progress::ProgressTracker tracker_;
  std::string replica_;
  int port_ = 0;
  TimePoint next_{};
};

// "42% (step 420/1000), 5120 samples/s, ETA 12s".
std::string DescribeProgress(const api::Progress& p);

}  // namespace kubetrain::local
