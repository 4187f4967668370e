#include "operator/sweep/median_stop.h"

#include <algorithm>

namespace kubetrain::sweep {

std::optional<double> CurveValueAt(std::span<const api::CurvePoint> curve, int64_t step) {
  // The first point after `step`; the one before it is the value at `step`.
  const auto after =
      std::upper_bound(curve.begin(), curve.end(), step,
                       [](int64_t s, const api::CurvePoint& p) { return s < p.step; });
  if (after == curve.begin()) return std::nullopt;
  return std::prev(after)->loss;
}

std::optional<api::EarlyStopRecord> MedianStop(
    const api::EarlyStopping& rule, api::Direction direction,
    std::span<const std::span<const api::CurvePoint>> completed, int64_t step, double value) {
  if (step < rule.start_step) return std::nullopt;
  std::vector<double> values;
  values.reserve(completed.size());
  for (std::span<const api::CurvePoint> curve : completed) {
    if (auto v = CurveValueAt(curve, step)) values.push_back(*v);
  }
  if (values.empty() || values.size() < static_cast<size_t>(rule.min_trials_required)) {
    return std::nullopt;
  }
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  const double median =
      values.size() % 2 == 1 ? values[mid] : values[mid - 1] / 2 + values[mid] / 2;
  // Written so that a NaN value is worse.
  const bool worse =
      direction == api::Direction::kMaximize ? !(value >= median) : !(value <= median);
  if (!worse) return std::nullopt;
  return api::EarlyStopRecord{step, value, median, static_cast<int32_t>(values.size())};
}

bool RecordCurvePoint(std::vector<api::CurvePoint>& curve, int64_t step, int64_t total_steps,
                      double loss) {
  if (curve.size() >= api::kMaxCurvePoints) return false;
  if (!curve.empty() && step <= curve.back().step) return false;
  if (!curve.empty() && total_steps > 0) {
    const auto bucket = [&](int64_t s) {
      const auto n = static_cast<int64_t>(api::kMaxCurvePoints);
      return std::min(n - 1, std::max<int64_t>(0, s) / std::max<int64_t>(1, total_steps / n));
    };
    if (bucket(step) == bucket(curve.back().step)) return false;
  }
  curve.push_back({step, loss});
  return true;
}

}  // namespace kubetrain::sweep
