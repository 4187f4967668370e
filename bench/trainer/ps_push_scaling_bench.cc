// How one PS shard takes pushes from several clients at once: T threads
// (1, 2, 4, 8) each apply pushes straight to one ParamShard with ApplyPush (the ledger
// check, the update and the record; no network, no compute between pushes), every push
// `rows` embedding rows of a Wide & Deep batch (dim 16, Adagrad; ids drawn Zipf-like from a
// table of `table` rows, filled first) and optionally a dense slice of `dense` floats.
// Per thread count: pushes/s and rows/s over all threads, and the lock-wait share: the time
// pushes spent waiting for a lock another thread held (ParamShard::lock_wait_ns) over the
// time spent inside ApplyPush, summed over threads. Medians of `reps` repetitions. With 2
// cores here, more than 2 threads cannot add throughput; the share says whether the lock
// or the memory is the limit. The last lines are the figures, with their units.
// Run: ps_push_scaling_bench [--rows R] [--dense D] [--table N] [--pushes P] [--reps K]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "trainer/ps/shard.h"

namespace kubetrain::trainer {
namespace {

constexpr int kDim = 16;

struct Options {
  size_t rows = 8192;
  size_t dense = 0;
  size_t table = 1000000;
  int pushes = 200;  // per thread
  int reps = 5;
};

struct Run {
  double pushes_per_s = 0, rows_per_s = 0, wait_share = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Ids of one push: Zipf-like over the table (log-uniform row numbers), hashed like
// HashFeature's ids.
std::vector<uint64_t> PushIds(size_t rows, size_t table, uint64_t seed) {
  std::vector<uint64_t> ids(rows);
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (auto& id : ids) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    const double u = static_cast<double>(s >> 11) * 0x1.0p-53;
    const auto r = static_cast<uint64_t>(std::exp(u * std::log(static_cast<double>(table)))) - 1;
    id = (r + 1) * 0x9e3779b97f4a7c15ULL;
  }
  return ids;
}

#ifdef KT_BENCH_OLD_SHARD
// Built against the old ParamShard (one mutex, no wait count) for comparison.
uint64_t LockWait(const ParamShard&) {
  return 0;
}
#else
uint64_t LockWait(const ParamShard& shard) {
  return shard.lock_wait_ns();
}
#endif

Run Measure(const Options& o, int threads) {
  ShardConfig c;
  c.sparse_dim = kDim;
  c.dense_end = o.dense;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  const std::vector<float> dense_init(o.dense, 0.01f);
  ParamShard shard(c, dense_init.data());
  {
    // Fill the table, so pushes update rows more than they create them.
    std::vector<uint64_t> ids;
    const std::vector<float> g(4096 * kDim, 0.f);
    for (size_t r = 0; r < o.table; r += 4096) {
      ids.clear();
      for (size_t i = r; i < std::min(o.table, r + 4096); ++i)
        ids.push_back((i + 1) * 0x9e3779b97f4a7c15ULL);
      shard.Apply(nullptr, ids.data(), ids.size(), g.data());
    }
  }
  // Each thread's pushes are made before the clock starts.
  std::vector<std::vector<std::vector<uint64_t>>> ids(threads);
  for (int t = 0; t < threads; ++t)
    for (int p = 0; p < 8; ++p) ids[t].push_back(PushIds(o.rows, o.table, t * 8 + p + 1));
  const std::vector<float> row_grads(o.rows * kDim, 0.001f);
  const std::vector<float> dense_grad(o.dense, 0.001f);
  for (int t = 0; t < threads; ++t) shard.Hello(t, 1000 + t);
  const uint64_t wait_before = LockWait(shard);
  std::vector<double> inside(threads, 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int p = 0; p < o.pushes; ++p) {
        const auto& push = ids[t][p % ids[t].size()];
        const auto a = std::chrono::steady_clock::now();
        (void)shard.ApplyPush(t, 1000 + t, static_cast<uint64_t>(p) + 1,
                              o.dense > 0 ? dense_grad.data() : nullptr, push.data(), push.size(),
                              row_grads.data());
        inside[t] += std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      }
    });
  }
  for (auto& w : workers) w.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double total_inside = 0;
  for (double s : inside) total_inside += s;
  Run run;
  const double pushes = static_cast<double>(threads) * o.pushes;
  run.pushes_per_s = pushes / wall;
  run.rows_per_s = pushes * static_cast<double>(o.rows) / wall;
  run.wait_share = static_cast<double>(LockWait(shard) - wait_before) / 1e9 / total_inside;
  return run;
}

}  // namespace
}  // namespace kubetrain::trainer

int main(int argc, char** argv) {
  using namespace kubetrain::trainer;
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (flag == "--rows")
      o.rows = static_cast<size_t>(v);
    else if (flag == "--dense")
      o.dense = static_cast<size_t>(v);
    else if (flag == "--table")
      o.table = static_cast<size_t>(v);
    else if (flag == "--pushes")
      o.pushes = static_cast<int>(v);
    else if (flag == "--reps")
      o.reps = static_cast<int>(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::printf(
      "one shard, %zu rows per push (dim %d, Adagrad), %zu dense floats, table %zu rows, "
      "%d pushes per thread, median of %d; %u cores\n",
      o.rows, kDim, o.dense, o.table, o.pushes, o.reps, std::thread::hardware_concurrency());
  for (const int threads : {1, 2, 4, 8}) {
    std::vector<double> pushes, rows, wait;
    for (int r = 0; r < o.reps; ++r) {
      const Run run = Measure(o, threads);
      pushes.push_back(run.pushes_per_s);
      rows.push_back(run.rows_per_s);
      wait.push_back(run.wait_share);
    }
    std::printf(
        "%d client threads: %.0f pushes/s, %.2fM row updates/s, lock wait %.1f%% of "
        "apply time\n",
        threads, Median(pushes), Median(rows) / 1e6, 100 * Median(wait));
  }
  return 0;
}
