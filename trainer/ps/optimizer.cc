#include "trainer/ps/optimizer.h"

#include <cmath>
#include <string>

#include "trainer/model/parallel.h"
#include "trainer/simd.h"

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

namespace {

// The element-wise loops are compiled for AVX-512, AVX2 and baseline x86-64 (picked at
// load time), so that the dense update (a million floats per step for Wide & Deep) runs
// in SIMD. Vector square root and division are correctly rounded like their scalar forms
// and this file is built with -fno-math-errno (errno on sqrt of a negative was what kept
// GCC scalar) and without FP contraction, so results are bit-identical to plain loops.

KT_SIMD_CLONES void Sgd(float lr, float* __restrict w, const float* __restrict g, size_t n) {
  for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
}

KT_SIMD_CLONES void Adagrad(float lr, float* __restrict w, float* __restrict acc,
                            const float* __restrict g, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    acc[i] += g[i] * g[i];
    w[i] -= lr * g[i] / std::sqrt(acc[i]);
  }
}

KT_SIMD_CLONES void Adam(float beta1, float beta2, float epsilon, float step, float* __restrict w,
                         float* __restrict m, float* __restrict v, const float* __restrict g,
                         size_t n) {
  for (size_t i = 0; i < n; ++i) {
    m[i] = beta1 * m[i] + (1 - beta1) * g[i];
    v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
    w[i] -= step * m[i] / (std::sqrt(v[i]) + epsilon);
  }
}

#undef KT_SIMD_CLONES

// Runs f(begin, end) over [0, n): split evenly over the compute threads for large arrays
// (the dense slice), on the calling thread for small ones (embedding rows).
template <typename F>
void ForRange(size_t n, F f) {
  ParallelRanges(n, size_t{1} << 16, f);
}

}  // namespace

void ApplyUpdate(const OptimizerConfig& c, float* w, float* state, const float* g, size_t n,
                 int64_t t) {
  ApplyUpdateRange(c, w, state, g, n, 0, n, t);
}

void ApplyUpdateRange(const OptimizerConfig& c, float* w, float* state, const float* g, size_t n,
                      size_t begin, size_t end, int64_t t) {
  // Offsets into the slice [begin, end); the state's slots stay n apart.
  w += begin;
  g += begin;
  float* const s0 = state == nullptr ? nullptr : state + begin;
  const size_t m = end - begin;
  switch (c.kind) {
    case OptimizerKind::kSgd:
      ForRange(m, [&](size_t b, size_t e) { Sgd(c.lr, w + b, g + b, e - b); });
      return;
    case OptimizerKind::kAdagrad:
      ForRange(m, [&](size_t b, size_t e) { Adagrad(c.lr, w + b, s0 + b, g + b, e - b); });
      return;
    case OptimizerKind::kAdam: {
      const double td = static_cast<double>(t);
      const float step = static_cast<float>(c.lr * std::sqrt(1 - std::pow(c.beta2, td)) /
                                            (1 - std::pow(c.beta1, td)));
      ForRange(m, [&](size_t b, size_t e) {
        Adam(c.beta1, c.beta2, c.epsilon, step, w + b, s0 + b, s0 + n + b, g + b, e - b);
      });
      return;
    }
  }
}

}  // namespace kubetrain::trainer
