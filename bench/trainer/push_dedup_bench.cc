// The cost of applying each push once (ps/ledger.h) on the PS's hot path: one Wide & Deep
// push (the default model's dense slice and a batch's embedding rows, Adagrad) applied with
// ParamShard::Apply (no check, as before) and with ParamShard::ApplyPush (the ledger check,
// the update and the record under the shard's lock), alternating within each repetition on
// the same shard (in turn first), timed in this thread's CPU time so that other processes on
// a shared machine do not count; the figure is the median of the per-repetition ratios. The
// last line is the figure, with its units.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "trainer/model/model.h"
#include "trainer/ps/ledger.h"
#include "trainer/ps/shard.h"
#include "trainer/worker/params.h"

namespace kubetrain::trainer {
namespace {

// This thread's CPU time in microseconds.
double CpuMicros() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int Main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 9;
  const int pushes = argc > 2 ? std::atoi(argv[2]) : 50;
  SetComputeThreads(1);
  WideDeepConfig wd;  // the trainer's defaults: batch 512, 26 categorical, dim 16
  auto model = CreateWideDeep(wd);
  if (!model.ok()) return 1;
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kAdagrad;
  opt.lr = 0.05f;
  std::vector<float> init((*model)->NumDenseParams());
  (*model)->InitDense(1, init.data());
  ParamShard shard(MakeShardConfig(**model, 0, 1, 1, opt), init.data());
  const int dim = shard.sparse_dim();
  // One batch's distinct ids (batch x categorical features), their gradients, the dense one.
  std::mt19937_64 rng(1);
  std::vector<uint64_t> ids(static_cast<size_t>(wd.batch_size) * 26);
  for (auto& id : ids) id = rng() % 2000000;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<float> rows(ids.size() * dim, 1e-3f), dense(shard.dense_size(), 1e-3f);
  shard.Hello(0, 42);
  uint64_t seq = 0;
  const auto apply = [&] {
    const double t0 = CpuMicros();
    for (int i = 0; i < pushes; ++i) shard.Apply(dense.data(), ids.data(), ids.size(), rows.data());
    return (CpuMicros() - t0) / pushes;
  };
  const auto apply_once = [&] {
    const double t0 = CpuMicros();
    for (int i = 0; i < pushes; ++i) {
      (void)shard.ApplyPush(0, 42, ++seq, dense.data(), ids.data(), ids.size(), rows.data());
    }
    return (CpuMicros() - t0) / pushes;
  };
  (void)apply();  // warm-up: creates the rows
  (void)apply_once();
  std::vector<double> apply_us, ledger_us, ratio;
  for (int r = 0; r < reps; ++r) {
    double a, b;
    if (r % 2 == 0) {
      a = apply();
      b = apply_once();
    } else {
      b = apply_once();
      a = apply();
    }
    apply_us.push_back(a);
    ledger_us.push_back(b);
    ratio.push_back(b / a);
  }
  if (shard.Pushes().applied != seq) return 1;
  std::printf(
      "one push: %zu dense parameters, %zu embedding rows of %d floats; median of %d x %d\n",
      shard.dense_size(), ids.size(), dim, reps, pushes);
  std::printf("Apply (no check): %.1f us CPU per push\n", Median(apply_us));
  std::printf("ApplyPush (applied once): %.1f us CPU per push\n", Median(ledger_us));
  std::printf(
      "ApplyPush / Apply: median ratio %.4f (%+.2f%%; the spread of this ratio is the "
      "machine's noise)\n",
      Median(ratio), 100 * (Median(ratio) - 1));
  // The check itself, too small to see next to a push: the ledger alone, 8 workers' pushes.
  PushLedger ledger;
  for (int w = 0; w < 8; ++w) ledger.Hello(w, 1000 + w);
  constexpr int kChecks = 1000000;
  std::vector<double> check_ns;
  uint64_t applied = 0;
  for (int r = 0; r < reps; ++r) {
    const double t0 = CpuMicros();
    for (int i = 0; i < kChecks; ++i) {
      const int w = i % 8;
      applied += ledger.Admit(w, 1000 + w, static_cast<uint64_t>(r) * kChecks + i + 1) ==
                 PushLedger::Outcome::kApply;
    }
    check_ns.push_back((CpuMicros() - t0) * 1e3 / kChecks);
  }
  if (applied == 0) return 1;
  std::printf("cost of applying each push once: %.0f ns CPU per push, %.4f%% of applying it\n",
              Median(check_ns), 100 * Median(check_ns) / 1e3 / Median(apply_us));
  return 0;
}

}  // namespace
}  // namespace kubetrain::trainer

int main(int argc, char** argv) {
  return kubetrain::trainer::Main(argc, argv);
}
