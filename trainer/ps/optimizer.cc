#include "trainer/ps/optimizer.h"

#include <cmath>
#include <string>

namespace kubetrain::trainer {

StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adagrad") return OptimizerKind::kAdagrad;
  if (name == "adam") return OptimizerKind::kAdam;
  return InvalidArgument("unknown optimizer \"" + std::string(name) +
                         "\" (expected sgd, adagrad or adam)");
}

int StateSlots(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return 0;
    case OptimizerKind::kAdagrad:
      return 1;
    case OptimizerKind::kAdam:
      return 2;
  }
  return 0;
}

void InitState(const OptimizerConfig& c, float* state, size_t n) {
  const float v = c.kind == OptimizerKind::kAdagrad ? c.adagrad_initial : 0.f;
  for (size_t i = 0; i < n * StateSlots(c.kind); ++i) state[i] = v;
}

void ApplyUpdate(const OptimizerConfig& c, float* w, float* state, const float* g, size_t n,
                 int64_t t) {
  switch (c.kind) {
    case OptimizerKind::kSgd:
      for (size_t i = 0; i < n; ++i) w[i] -= c.lr * g[i];
      return;
    case OptimizerKind::kAdagrad:
      for (size_t i = 0; i < n; ++i) {
        state[i] += g[i] * g[i];
        w[i] -= c.lr * g[i] / std::sqrt(state[i]);
      }
      return;
    case OptimizerKind::kAdam: {
      float* m = state;
      float* v = state + n;
      const double td = static_cast<double>(t);
      const float step = static_cast<float>(c.lr * std::sqrt(1 - std::pow(c.beta2, td)) /
                                            (1 - std::pow(c.beta1, td)));
      for (size_t i = 0; i < n; ++i) {
        m[i] = c.beta1 * m[i] + (1 - c.beta1) * g[i];
        v[i] = c.beta2 * v[i] + (1 - c.beta2) * g[i] * g[i];
        w[i] -= step * m[i] / (std::sqrt(v[i]) + c.epsilon);
      }
      return;
    }
  }
}

}  // namespace kubetrain::trainer
