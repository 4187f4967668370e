// The median stopping rule (Golovin et al., "Google Vizier", 2017; Katib's medianstop), as a
// pure function: the sweep planner asks it about every running trial at each reading.
//
// Rule (Katib's and Vizier's): a trial at step s is stopped when s >= startStep, at least
// minTrialsRequired completed trials have a reading at or before s, and the trial's best value
// by s is strictly worse than the median of the completed trials' running averages up to s
// (the mean of each one's recorded values at steps <= s; a trial first read after s is not
// counted). Maximize: worse is lower; minimize: higher; a tie keeps the trial; NaN is worse than
// any median. The median of an even count is the mean of the two middle values.
//
// Why not the point values at s: a noisy curve is above the others' median half the time, and
// comparing points stopped a good trial (Adam at lr 0.02 among 0.01 and 0.003) in one of three
// runs of tests/cli sweep_early_stop; best-so-far against running averages did not in the 15
// runs since.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "operator/api/sweep.h"

namespace kubetrain::sweep {

// The running average of `curve` up to `step`: the mean of its values at steps <= `step`;
// nullopt when it has none.
std::optional<double> RunningAverageAt(std::span<const api::CurvePoint> curve, int64_t step);

// Whether the trial whose recorded curve is `trial` and whose latest reading is (step, value)
// is stopped: the numbers that stop it (its best value by `step`, the median, the count), or
// nullopt when it keeps running (too early, too few completed trials, not worse).
std::optional<api::EarlyStopRecord> MedianStop(
    const api::EarlyStopping& rule, api::Direction direction,
    std::span<const std::span<const api::CurvePoint>> completed,
    std::span<const api::CurvePoint> trial, int64_t step, double value);

// Appends the reading (step, loss) to `curve` when it is the first in its 1/kMaxCurvePoints
// of `total_steps` (every new step when total_steps is unknown), keeping `curve` in step order
// and at most api::kMaxCurvePoints long; a step at or before the last point (a restart) is
// not recorded, nor step 0 (no training step yet: a trainer's loss gauge reads 0 then, which
// would be the trial's best for ever). True when appended.
bool RecordCurvePoint(std::vector<api::CurvePoint>& curve, int64_t step, int64_t total_steps,
                      double loss);

}  // namespace kubetrain::sweep
