// Synthetic data generation rate: lines/s of --generate-profile criteo-kaggle
// (and of the small profile, for comparison) on one core, wall time of WriteSyntheticCriteo
// including the write, the fsync and the ground-truth AUC; median of the repetitions. The
// last line is the figure, with its units.
// Run: generator_bench [dir] [lines] [reps] [--with-small]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "trainer/data/generator.h"

namespace kubetrain::trainer {
namespace {

double MedianLinesPerSecond(const std::string& path, int64_t lines, int reps,
                            GeneratorProfile profile) {
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    GeneratorOptions o;
    o.profile = profile;
    o.sample_seed = static_cast<uint64_t>(r) + 2;
    const auto t0 = std::chrono::steady_clock::now();
    auto auc = WriteSyntheticCriteo(path, lines, o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!auc.ok()) {
      std::fprintf(stderr, "%s\n", auc.status().ToString().c_str());
      std::exit(1);
    }
    rates.push_back(static_cast<double>(lines) / s);
    std::printf("  rep %d: %.0f lines/s (%lld bytes, ground-truth AUC %.4f)\n", r, rates.back(),
                static_cast<long long>(std::filesystem::file_size(path)), *auc);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace
}  // namespace kubetrain::trainer

int main(int argc, char** argv) {
  using namespace kubetrain::trainer;
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const int64_t lines = argc > 2 ? std::atoll(argv[2]) : 2000000;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  const std::string path = dir + "/generator_bench.tsv";
  const bool with_small = argc > 4 && std::string(argv[4]) == "--with-small";
  double small = 0;
  if (with_small) {
    std::printf("small profile, %lld lines:\n", static_cast<long long>(lines));
    small = MedianLinesPerSecond(path, lines, reps, GeneratorProfile::kSmall);
  }
  std::printf("criteo-kaggle profile, %lld lines:\n", static_cast<long long>(lines));
  const double kaggle = MedianLinesPerSecond(path, lines, reps, GeneratorProfile::kCriteoKaggle);
  std::filesystem::remove(path);
  if (with_small) std::printf("small profile: %.0f lines/s (median)\n", small);
  std::printf("criteo-kaggle profile: %.0f lines/s (median, one core)\n", kaggle);
  return 0;
}
