// Evaluation metrics over (score, label) pairs: AUC, log loss, accuracy. (The live
// Prometheus metrics a process serves are trainer/metrics/.)
#pragma once

#include <cstddef>

namespace kubetrain::trainer {

// Area under the ROC curve from P(y = 1) scores and 0/1 labels; ties count one half.
// 0.5 when only one class is present.
double Auc(const float* scores, const float* labels, size_t n);
// Mean binary log loss; probabilities are clipped to [1e-7, 1 - 1e-7].
double BinaryLogLoss(const float* probs, const float* labels, size_t n);
// Fraction of samples where (p >= 0.5) == label.
double BinaryAccuracy(const float* probs, const float* labels, size_t n);

}  // namespace kubetrain::trainer
