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
// Beside it, two figures that tell the lock from the scheduler on a small or busy machine:
// "cores used", the threads' CPU time inside ApplyPush over the wall time (what the process
// got from the machine), and the same pushes with one private shard per thread ("no shared
// lock": nothing to wait for), whose updates/s are the ceiling the shared shard is held to.
// When threads outnumber the free cores, a thread that is descheduled holds a stripe that the
// running ones will need, so they sleep on its lock instead of waiting in the run queue: the
// wait share then tracks 1 - cores/threads while updates/s stay at the ceiling.
// Run: ps_push_scaling_bench [--rows R] [--dense D] [--table N] [--pushes P] [--reps K]
//        [--ceiling 0|1]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
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
  bool ceiling = true;  // also measure one private shard per thread
};

struct Run {
  double pushes_per_s = 0, rows_per_s = 0, wait_share = 0, cores = 0;
};

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

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

// With `shared`, every thread pushes into one shard; otherwise each into its own.
Run Measure(const Options& o, int threads, bool shared) {
  ShardConfig c;
  c.sparse_dim = kDim;
  c.dense_end = o.dense;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  const std::vector<float> dense_init(o.dense, 0.01f);
  std::vector<std::unique_ptr<ParamShard>> shards;
  for (int t = 0; t < (shared ? 1 : threads); ++t)
    shards.push_back(std::make_unique<ParamShard>(c, dense_init.data()));
  for (auto& owned : shards) {
    ParamShard& shard = *owned;
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
  const auto shard_of = [&](int t) -> ParamShard& { return *shards[shared ? 0 : t]; };
  uint64_t wait_before = 0;
  for (int t = 0; t < threads; ++t) shard_of(t).Hello(t, 1000 + t);
  for (auto& shard : shards) wait_before += LockWait(*shard);
  std::vector<double> inside(threads, 0), cpu(threads, 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      ParamShard& shard = shard_of(t);
      const double cpu0 = ThreadCpuSeconds();
      for (int p = 0; p < o.pushes; ++p) {
        const auto& push = ids[t][p % ids[t].size()];
        const auto a = std::chrono::steady_clock::now();
        (void)shard.ApplyPush(t, 1000 + t, static_cast<uint64_t>(p) + 1,
                              o.dense > 0 ? dense_grad.data() : nullptr, push.data(), push.size(),
                              row_grads.data());
        inside[t] += std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      }
      cpu[t] = ThreadCpuSeconds() - cpu0;
    });
  }
  for (auto& w : workers) w.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double total_inside = 0, total_cpu = 0;
  for (double s : inside) total_inside += s;
  for (double s : cpu) total_cpu += s;
  uint64_t wait_after = 0;
  for (auto& shard : shards) wait_after += LockWait(*shard);
  Run run;
  const double pushes = static_cast<double>(threads) * o.pushes;
  run.pushes_per_s = pushes / wall;
  run.rows_per_s = pushes * static_cast<double>(o.rows) / wall;
  run.wait_share = static_cast<double>(wait_after - wait_before) / 1e9 / total_inside;
  run.cores = total_cpu / wall;
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
    else if (flag == "--ceiling")
      o.ceiling = v != 0;
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
    std::vector<double> pushes, rows, wait, cores, ceiling, ratio;
    for (int r = 0; r < o.reps; ++r) {  // shared and private alternate: same machine load
      const Run run = Measure(o, threads, true);
      pushes.push_back(run.pushes_per_s);
      rows.push_back(run.rows_per_s);
      wait.push_back(run.wait_share);
      cores.push_back(run.cores);
      if (o.ceiling) {
        const Run own = Measure(o, threads, false);
        ceiling.push_back(own.rows_per_s);
        ratio.push_back(run.rows_per_s / own.rows_per_s);
      }
    }
    std::printf(
        "%d client threads: %.0f pushes/s, %.2fM row updates/s, lock wait %.1f%% of "
        "apply time, %.2f cores used",
        threads, Median(pushes), Median(rows) / 1e6, 100 * Median(wait), Median(cores));
    if (o.ceiling) {
      std::printf("; one shard per thread (no shared lock): %.2fM row updates/s, shared / own %.2f",
                  Median(ceiling) / 1e6, Median(ratio));
    }
    std::printf("\n");
  }
  return 0;
}
