#include "trainer/data/eval_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace kubetrain::trainer {

double Auc(const float* scores, const float* labels, size_t n) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U: sum of the (average, for ties) ranks of the positives.
  double rank_sum = 0;
  double positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double avg_rank = (static_cast<double>(i) + static_cast<double>(j) + 1) / 2;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += avg_rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

double BinaryLogLoss(const float* probs, const float* labels, size_t n) {
  if (n == 0) return 0;
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = std::clamp(static_cast<double>(probs[i]), 1e-7, 1 - 1e-7);
    total -= labels[i] > 0.5f ? std::log(p) : std::log(1 - p);
  }
  return total / static_cast<double>(n);
}

double BinaryAccuracy(const float* probs, const float* labels, size_t n) {
  if (n == 0) return 0;
  size_t right = 0;
  for (size_t i = 0; i < n; ++i) right += (probs[i] >= 0.5f) == (labels[i] > 0.5f);
  return static_cast<double>(right) / static_cast<double>(n);
}

}  // namespace kubetrain::trainer
