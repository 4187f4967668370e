#include "operator/sweep/median_stop.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace kubetrain::sweep {

std::optional<double> RunningAverageAt(std::span<const api::CurvePoint> curve, int64_t step) {
  double sum = 0;
  int64_t n = 0;
  for (const api::CurvePoint& p : curve) {
    if (p.step > step) break;
    sum += p.loss;
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / static_cast<double>(n);
}

std::optional<api::EarlyStopRecord> MedianStop(
    const api::EarlyStopping& rule, api::Direction direction,
    std::span<const std::span<const api::CurvePoint>> completed,
    std::span<const api::CurvePoint> trial, int64_t step, double value) {
  if (step < rule.start_step) return std::nullopt;
  std::vector<double> averages;
  averages.reserve(completed.size());
  for (std::span<const api::CurvePoint> curve : completed) {
    if (auto v = RunningAverageAt(curve, step)) averages.push_back(*v);
  }
  if (averages.empty() || averages.size() < static_cast<size_t>(rule.min_trials_required)) {
    return std::nullopt;
  }
  std::sort(averages.begin(), averages.end());
  const size_t mid = averages.size() / 2;
  const double median =
      averages.size() % 2 == 1 ? averages[mid] : averages[mid - 1] / 2 + averages[mid] / 2;
  const bool maximize = direction == api::Direction::kMaximize;
  // Best of the trial's readings by `step`; written so that NaN is never best (and is worse).
  double best = value;
  for (const api::CurvePoint& p : trial) {
    if (p.step > step) break;
    if (maximize ? p.loss > best || best != best : p.loss < best || best != best) best = p.loss;
  }
  const bool worse = maximize ? !(best >= median) : !(best <= median);
  if (!worse) return std::nullopt;
  return api::EarlyStopRecord{step, best, median, static_cast<int32_t>(averages.size())};
}

bool RecordCurvePoint(std::vector<api::CurvePoint>& curve, int64_t step, int64_t total_steps,
                      double loss) {
  if (curve.size() >= api::kMaxCurvePoints || step < 1) return false;
  if (!curve.empty() && step <= curve.back().step) return false;
  if (!curve.empty() && total_steps > 0) {
    const auto bucket = [&](int64_t s) {
      const auto n = static_cast<int64_t>(api::kMaxCurvePoints);
      return std::min(n - 1, std::max<int64_t>(0, s) / std::max<int64_t>(1, total_steps / n));
    };
    if (bucket(step) == bucket(curve.back().step)) return false;
  }
  // 6 significant digits: the status stays small, and no comparison needs more.
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", loss);
  curve.push_back({step, std::strtod(text, nullptr)});
  return true;
}

}  // namespace kubetrain::sweep
