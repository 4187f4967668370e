// The median stopping rule (Golovin et al., "Google Vizier", 2017; Katib's medianstop), as a
// pure function: the sweep planner asks it about every running trial at each reading.
//
// Rule: a trial at step s with value v is stopped when s >= startStep, at least
// minTrialsRequired completed trials have a value at s (their last recorded value at or before
// s; a trial whose curve starts after s has none and is not counted), and v is strictly worse
// than the median of those values (maximize: v < median; minimize: v > median; a tie keeps the
// trial; a NaN value is worse than any median). The median of an even count is the mean of the
// two middle values. Unlike Vizier's and Katib's rule, which compare running averages, point
// values are compared: a trainer's loss is already smoothed over its recent steps.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "operator/api/sweep.h"

namespace kubetrain::sweep {

// The value of `curve` (in step order) at `step`: its last point at or before `step`;
// nullopt when its first point is after `step` or it is empty.
std::optional<double> CurveValueAt(std::span<const api::CurvePoint> curve, int64_t step);

// The numbers that stop the trial, or nullopt when it keeps running (too early, too few
// completed trials, or not worse than the median).
std::optional<api::EarlyStopRecord> MedianStop(
    const api::EarlyStopping& rule, api::Direction direction,
    std::span<const std::span<const api::CurvePoint>> completed, int64_t step, double value);

// Appends the reading (step, loss) to `curve` when it is the first in its 1/kMaxCurvePoints
// of `total_steps` (every new step when total_steps is unknown), keeping `curve` in step order
// and at most api::kMaxCurvePoints long; a step at or before the last point (a restart) is
// not recorded. True when appended.
bool RecordCurvePoint(std::vector<api::CurvePoint>& curve, int64_t step, int64_t total_steps,
                      double loss);

}  // namespace kubetrain::sweep
