#include "trainer/model/loss.h"

#include <algorithm>
#include <cmath>

namespace kubetrain::trainer {

float Sigmoid(float x) {
  return x >= 0 ? 1.f / (1.f + std::exp(-x)) : std::exp(x) / (1.f + std::exp(x));
}

float SigmoidBinaryCrossEntropy(const float* logits, const float* labels, int n, float* grad) {
  return static_cast<float>(SigmoidBinaryCrossEntropySum(logits, labels, n, n, grad) / n);
}

double SigmoidBinaryCrossEntropySum(const float* logits, const float* labels, int n, int batch,
                                    float* grad) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const float z = logits[i];
    const float y = labels[i];
    // log(1 + e^-|z|) + max(z, 0) - z*y  ==  -y log s(z) - (1-y) log(1 - s(z))
    total += std::max(z, 0.f) - z * y + std::log1p(std::exp(-std::fabs(z)));
    if (grad != nullptr) grad[i] = (Sigmoid(z) - y) / static_cast<float>(batch);
  }
  return total;
}

float SoftmaxCrossEntropy(const float* logits, const float* labels, int n, int classes,
                          float* grad) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const float* z = logits + static_cast<long>(i) * classes;
    const int y = static_cast<int>(labels[i]);
    const float m = *std::max_element(z, z + classes);
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c] - m));
    const double log_sum = std::log(sum) + m;
    total += log_sum - z[y];
    if (grad != nullptr) {
      for (int c = 0; c < classes; ++c) {
        const double p = std::exp(static_cast<double>(z[c]) - log_sum);
        grad[static_cast<long>(i) * classes + c] =
            static_cast<float>((p - (c == y ? 1.0 : 0.0)) / n);
      }
    }
  }
  return static_cast<float>(total / n);
}

}  // namespace kubetrain::trainer
