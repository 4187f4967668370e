// Synthetic Criteo-format data from a known ground-truth model, so tests and benchmarks can
// check that training learns something real without downloading Criteo.
//
// The truth (fixed by `model_seed`): every categorical value has a weight, the integer
// features have weights on log(1 + x), and fields 0 and 1 interact (a term a linear model
// cannot fit). P(click) = sigmoid(bias + sum of those). Values are skewed (a few frequent,
// many rare) like real ad data. Samples come from `sample_seed`, so a training and an
// evaluation file drawn from the same model differ only in their samples.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kubetrain::trainer {

// Which vocabulary the categorical fields draw from.
//   kSmall: 200 values per field (vocab_size), skewed as v = vocab * u^2; the default.
//   kCriteoKaggle: Criteo Kaggle's published per-field cardinalities (DLRM's list,
//     33,762,577 values in all), each field Zipf-like (value v, 0-based, has probability
//     ~ 1 / (v + 1.5): a few values frequent, most rare, the largest index card - 1
//     reachable). The truth's weight of a value is hashed from (model_seed, field, value),
//     so no table of 33M weights is held.
enum class GeneratorProfile { kSmall, kCriteoKaggle };
StatusOr<GeneratorProfile> ParseGeneratorProfile(std::string_view name);
// Distinct values per categorical field in Criteo Kaggle (DLRM, dlrm_data_pytorch.py).
const std::array<int64_t, 26>& CriteoKaggleCardinalities();

struct GeneratorOptions {
  GeneratorProfile profile = GeneratorProfile::kSmall;
  uint64_t model_seed = 1;
  uint64_t sample_seed = 2;
  int vocab_size = 200;  // kSmall: distinct values per categorical field
  double missing_rate = 0.03;
};

// Writes `n` lines of criteo_tsv to `path` atomically (temp file, then rename), so several
// processes generating the same file never read a half-written one. Returns the AUC the
// ground-truth probabilities achieve on these lines (the best any model can do).
StatusOr<double> WriteSyntheticCriteo(const std::string& path, int64_t n,
                                      const GeneratorOptions& options);

}  // namespace kubetrain::trainer
