#include "operator/progress/progress.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/workload_contract.h"
#include "operator/progress/prometheus_text.h"

namespace kubetrain::progress {
namespace {

// Weight of the newest rate measurement in the smoothed rate.
constexpr double kRateSmoothing = 0.5;

StatusOr<int64_t> AsCount(const std::vector<Sample>& samples, std::string_view name) {
  auto v = FindValue(samples, name);
  if (!v) return NotFound(std::string(name) + " is not in the metrics");
  if (!std::isfinite(*v) || *v < 0 || *v >= 9.2e18) {
    return InvalidArgument(std::string(name) + " must be a non-negative integer");
  }
  return static_cast<int64_t>(*v);
}

// Below 2^63: a rate that converts to int64 without overflow.
constexpr double kMaxRate = 9.2e18;

// A workload's rate, or nullopt when it makes no sense (not finite, negative,
// beyond int64: llround of such a value is the -9223372036854775808 that
// status once showed).
std::optional<double> SaneRate(std::optional<double> v) {
  if (!v || !std::isfinite(*v) || *v < 0 || *v >= kMaxRate) return std::nullopt;
  return v;
}

std::optional<double> AsRate(const std::vector<Sample>& samples, std::string_view name) {
  return SaneRate(FindValue(samples, name));
}

}  // namespace

StatusOr<TrainerSample> TrainerSampleFromText(std::string_view text) {
  auto samples = ParsePrometheusText(text);
  if (!samples.ok()) return samples.status();
  TrainerSample out;
  auto step = AsCount(*samples, contract::metric::kStep);
  if (!step.ok()) return step.status();
  auto total = AsCount(*samples, contract::metric::kTotalSteps);
  if (!total.ok()) return total.status();
  out.step = *step;
  out.total_steps = *total;
  out.samples_per_second = AsRate(*samples, contract::metric::kSamplesPerSecond);
  out.steps_per_second = AsRate(*samples, contract::metric::kStepsPerSecond);
  if (auto loss = FindValue(*samples, contract::metric::kLoss); loss) {
    if (std::isfinite(*loss)) {
      out.loss = loss;
    } else {
      out.loss_not_finite = true;
    }
  }
  return out;
}

std::string FormatEta(std::chrono::seconds left) {
  int64_t s = std::max<int64_t>(0, left.count());
  const int64_t d = s / 86400, h = s % 86400 / 3600, m = s % 3600 / 60, sec = s % 60;
  auto two = [](int64_t a, const char* ua, int64_t b, const char* ub) {
    return std::to_string(a) + ua + (b > 0 ? std::to_string(b) + ub : "");
  };
  if (d > 0) return two(d, "d", h, "h");
  if (h > 0) return two(h, "h", m, "m");
  if (m > 0) return two(m, "m", sec, "s");
  return std::to_string(sec) + "s";
}

std::optional<api::Progress> ProgressTracker::Observe(const TrainerSample& sample,
                                                      std::string_view replica, SteadyTime now,
                                                      api::Time wall) {
  const bool restarted =
      current_ && (sample.step < current_->step || sample.total_steps != current_->total_steps ||
                   replica != current_->replica);
  // The rate: measured between readings (the operator's clock, so a trainer
  // cannot claim an ETA its steps do not show), smoothed; until two readings
  // exist, the trainer's own recent rate.
  if (restarted) rate_.reset();
  if (last_time_ && !restarted && now > *last_time_ && sample.step > last_step_) {
    const double dt = std::chrono::duration<double>(now - *last_time_).count();
    const double r = static_cast<double>(sample.step - last_step_) / dt;
    rate_ = rate_ ? kRateSmoothing * r + (1 - kRateSmoothing) * *rate_ : r;
  } else if (auto own = SaneRate(sample.steps_per_second); !rate_ && own && *own > 0) {
    rate_ = own;
  }
  last_time_ = now;
  last_step_ = sample.step;

  api::Progress p;
  p.step = sample.step;
  p.total_steps = sample.total_steps;
  p.percent = sample.total_steps > 0
                  ? static_cast<int32_t>(std::min<int64_t>(
                        100, static_cast<int64_t>(static_cast<double>(sample.step) * 100.0 /
                                                  static_cast<double>(sample.total_steps))))
                  : 0;
  const std::optional<double> samples_per_second = SaneRate(sample.samples_per_second);
  p.samples_per_second =
      samples_per_second ? static_cast<int64_t>(std::llround(*samples_per_second)) : 0;
  const int64_t left = std::max<int64_t>(0, sample.total_steps - sample.step);
  if (left == 0) {
    p.eta = "0s";
  } else if (rate_ && *rate_ > 0) {
    const double secs = std::min(static_cast<double>(left) / *rate_, 1e9);
    p.eta = FormatEta(std::chrono::seconds(static_cast<int64_t>(std::ceil(secs))));
  }
  p.replica = std::string(replica);
  p.update_time = wall;
  // Before its first step a trainer's loss gauge holds no loss (0): none is reported.
  if (sample.step > 0 && sample.loss) {
    p.loss = *sample.loss;
  } else if (sample.step > 0 && sample.loss_not_finite) {
    p.loss = api::kLossNotFinite;
  }
  current_ = p;

  // Status writes per job are bounded whatever the trainer reports: besides
  // the first reading, one write per interval, plus at most one restart, one
  // first ETA and one 100% written early. A step going back and forth (each
  // step back is a "restart") thus costs a few writes per interval, not one
  // per read; a real restart, rare, is still written at once.
  if (restarted) restart_pending_ = true;
  const bool interval_passed = now - published_at_ >= options_.min_publish_interval;
  bool publish = !published_;
  bool early_restart = false;
  if (!publish && restart_pending_) {
    early_restart =
        !interval_passed &&
        (!restart_published_at_ || now - *restart_published_at_ >= options_.min_publish_interval);
    publish = interval_passed || early_restart;
  }
  if (!publish && p.percent != published_->percent) {
    publish = (p.percent == 100 && published_->percent != 100) || interval_passed;
  }
  // An ETA first known (the second reading) is worth a write too.
  if (!publish && published_->eta.empty() && !p.eta.empty()) publish = true;
  if (!publish) return std::nullopt;
  if (early_restart) restart_published_at_ = now;
  restart_pending_ = false;
  published_ = p;
  published_at_ = now;
  return p;
}

}  // namespace kubetrain::progress
