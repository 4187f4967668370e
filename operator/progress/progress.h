// From a trainer's metrics to status.progress: the step rate and ETA, and the
// decision whether a new reading is worth a status write. Pure: the caller
// passes the time in (steady time for rates, wall time for updateTime), so
// tests need no clock and no sleeps. Used by the operator's ProgressReader and
// by `kubetrain run`, so both report the same progress.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "operator/api/types.h"

namespace kubetrain::progress {

// What one read of a trainer's /metrics says.
struct TrainerSample {
  int64_t step = 0;
  int64_t total_steps = 0;
  std::optional<double> samples_per_second;
  std::optional<double> steps_per_second;  // the trainer's own recent rate
  std::optional<double> loss;
  bool loss_not_finite = false;  // served, but NaN or infinite (the training diverged)
};

// NotFound when the text has no kubetrain_trainer_step/total_steps (not a
// kubetrain trainer: another image, or another server on the port);
// InvalidArgument when it is not the text format or the values make no sense
// (negative, not finite, step beyond int64).
StatusOr<TrainerSample> TrainerSampleFromText(std::string_view text);

// "45s", "4m10s", "2h5m", "3d4h": two units at most, for a printer column.
std::string FormatEta(std::chrono::seconds left);

// One job's readings of its coordinator, in time order. Not thread-safe.
class ProgressTracker {
 public:
  using SteadyTime = std::chrono::steady_clock::time_point;

  struct Options {
    // A new reading is published when its percent differs from the published
    // one and at least this long has passed; early when it reached 100%, or
    // when the step went back, the total or the replica changed (a restart:
    // written at once if no other restart was in this interval, else when
    // the interval has passed).
    std::chrono::milliseconds min_publish_interval{std::chrono::seconds(30)};
  };

  ProgressTracker() : ProgressTracker(Options{}) {}
  explicit ProgressTracker(Options options) : options_(options) {}

  // Feeds a reading of `replica` taken at `now` (steady) / `wall`. Returns the
  // progress to publish, or nullopt when the published one is still good
  // enough (no status write).
  std::optional<api::Progress> Observe(const TrainerSample& sample, std::string_view replica,
                                       SteadyTime now, api::Time wall);

  // The progress as of the last reading, published or not.
  const std::optional<api::Progress>& current() const { return current_; }
  const std::optional<api::Progress>& published() const { return published_; }
  // The smoothed step rate, steps per second; nullopt until known.
  std::optional<double> steps_per_second() const { return rate_; }

 private:
  Options options_;
  std::optional<SteadyTime> last_time_;
  int64_t last_step_ = 0;
  std::optional<double> rate_;
  std::optional<api::Progress> current_;
  std::optional<api::Progress> published_;
  SteadyTime published_at_{};
  bool restart_pending_ = false;                    // a restart since the last write
  std::optional<SteadyTime> restart_published_at_;  // the last restart written early
};

}  // namespace kubetrain::progress
