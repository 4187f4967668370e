// Optimizers applied on the parameter server, element-wise over flat arrays, so dense
// slices and embedding rows share one implementation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace kubetrain::trainer {

enum class OptimizerKind { kSgd, kAdagrad, kAdam };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdagrad;
  float lr = 0.05f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float adagrad_initial = 0.1f;  // initial accumulator, as in TensorFlow
};

StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name);

// Floats of optimizer state per parameter: SGD 0, Adagrad 1, Adam 2.
int StateSlots(OptimizerKind kind);

// Initial value of each state slot.
void InitState(const OptimizerConfig& c, float* state, size_t n);

// w -= update(g). `state` holds StateSlots() x n floats (slot-major). `t` is the 1-based
// number of updates this array has received, including this one (Adam bias correction).
void ApplyUpdate(const OptimizerConfig& c, float* w, float* state, const float* g, size_t n,
                 int64_t t);
// ApplyUpdate for elements [begin, end) of the n-element arrays only (the same arithmetic
// per element), so an array can be updated in slices as their gradients become final.
void ApplyUpdateRange(const OptimizerConfig& c, float* w, float* state, const float* g, size_t n,
                      size_t begin, size_t end, int64_t t);

}  // namespace kubetrain::trainer
