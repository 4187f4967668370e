// Trainer benchmarks. Each figure is the median over --reps repetitions of --steps steps.
//   1. GFLOPS of the Wide & Deep MLP layers (forward + backward through oneDNN), next to
//      the machine's theoretical single-precision peak for the threads used.
//   2. Wide & Deep samples/s in one process (LocalParams).
//   3. Wide & Deep samples/s with 1 PS + 1 worker over loopback TCP (the PS runs in a thread
//      of this process, behind a real socket, with authentication on).
// The last line is the figure the benchmark exists for, with its units.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "trainer/data/generator.h"
#include "trainer/model/model.h"
#include "trainer/ps/server.h"
#include "trainer/worker/remote.h"
#include "trainer/worker/train.h"

namespace kubetrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Theoretical fp32 peak: threads x GHz x flops/cycle (2 FMA units x vector lanes x 2).
double PeakGflops(int threads) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  double mhz = 0;
  bool avx512 = false, avx2 = false;
  while (std::getline(in, line)) {
    if (mhz == 0 && line.rfind("cpu MHz", 0) == 0) mhz = std::stod(line.substr(line.find(':') + 1));
    if (line.rfind("flags", 0) == 0) {
      avx512 = line.find(" avx512f") != std::string::npos;
      avx2 = line.find(" avx2") != std::string::npos && line.find(" fma") != std::string::npos;
    }
  }
  const double per_cycle = avx512 ? 64 : avx2 ? 32 : 8;
  return threads * mhz / 1000 * per_cycle;
}

int Main(int argc, char** argv) {
  int threads = 0, reps = 5, steps = 20;
  CLI::App app{"trainer benchmarks"};
  app.add_option("--threads", threads, "compute threads (0: the container's CPU limit)");
  app.add_option("--reps", reps, "repetitions (the median is reported)");
  app.add_option("--steps", steps, "steps per repetition");
  CLI11_PARSE(app, argc, argv);
  if (threads <= 0) threads = DefaultThreadCount();
  SetComputeThreads(threads);
  spdlog::set_level(spdlog::level::warn);

  WideDeepConfig wd;  // batch 512, 13 dense, 26 categorical, dim 16, layers 1024,512,256
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kt_bench_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  const std::string data = dir + "/train.tsv";
  if (!WriteSyntheticCriteo(data, 100000, GeneratorOptions{}).ok()) return 1;
  ReaderOptions ro{{data}, DataFormat::kCriteoTsv, 0, 0, 1, 0, true};
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kAdagrad;
  opt.lr = 0.05f;
  std::printf(
      "Wide & Deep: batch %d, layers 1024,512,256, embedding dim %d, %d threads, "
      "median of %d x %d steps\n",
      wd.batch_size, wd.embedding_dim, threads, reps, steps);

  // 1. MLP GFLOPS: TrainStep on one fixed batch (embedding/loss work is small next to it).
  {
    auto model = CreateWideDeep(wd);
    if (!model.ok()) return 1;
    Model& m = **model;
    m.InitDense(1, m.dense_params().data());
    StripeReader reader(ro);
    Batch b;
    if (!reader.Next(wd.batch_size, &b).ok()) return 1;
    const SparseLookup lookup = SparseLookup::Build(b);
    std::vector<float> rows(lookup.ids.size() * m.SparseRowDim(), 0.01f), grads(rows.size());
    (void)m.TrainStep(b, lookup, rows.data(), grads.data());  // warm-up
    std::vector<double> gflops;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      for (int s = 0; s < steps; ++s) (void)m.TrainStep(b, lookup, rows.data(), grads.data());
      const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
      gflops.push_back(m.MlpFlopsPerStep() * steps / sec / 1e9);
    }
    const double peak = PeakGflops(threads);
    std::printf("MLP layers forward+backward: %.1f GFLOPS (%.0f%% of %.0f GFLOPS fp32 peak)\n",
                Median(gflops), 100 * Median(gflops) / peak, peak);
  }

  // 2. One process.
  double local_sps = 0;
  {
    auto model = CreateWideDeep(wd);
    if (!model.ok()) return 1;
    LocalParams params(**model, 1, opt);
    StripeReader reader(ro);
    TrainOptions t;
    t.log_every = 0;
    std::vector<double> sps;
    int64_t done = 0;
    t.steps = 2;
    if (!Train(**model, reader, params, t, 0).ok()) return 1;  // warm-up
    done = 2;
    for (int r = 0; r < reps; ++r) {
      t.steps = done + steps;
      auto res = Train(**model, reader, params, t, done);
      if (!res.ok()) return 1;
      done = t.steps;
      sps.push_back(res->samples_per_s);
    }
    local_sps = Median(sps);
    std::printf("one process: %.0f samples/s\n", local_sps);
  }

  // 3. 1 PS + 1 worker over loopback.
  double remote_sps = 0;
  {
    auto model = CreateWideDeep(wd);
    if (!model.ok()) return 1;
    AuthKey key;
    key.fill(7);
    std::vector<float> init((*model)->NumDenseParams());
    (*model)->InitDense(1, init.data());
    ParamShard shard(MakeShardConfig(**model, 0, 1, 1, opt), init.data());
    auto listener = Listener::Listen(0);
    if (!listener.ok()) return 1;
    const int port = (*listener)->port();
    PsServerOptions po;
    po.key = key;
    po.total_dense = (*model)->NumDenseParams();
    PsServer server(&shard, std::move(*listener), po);
    std::thread ps([&] { (void)server.Serve(); });
    {
      RemoteOptions rop;
      rop.ps_addresses = {"127.0.0.1:" + std::to_string(port)};
      rop.key = key;
      auto params = RemoteParams::Connect(**model, rop);
      if (!params.ok()) {
        std::fprintf(stderr, "%s\n", params.status().ToString().c_str());
        return 1;
      }
      StripeReader reader(ro);
      TrainOptions t;
      t.log_every = 0;
      t.steps = 2;
      if (!Train(**model, reader, **params, t, 0).ok()) return 1;
      int64_t done = 2;
      std::vector<double> sps;
      for (int r = 0; r < reps; ++r) {
        t.steps = done + steps;
        auto res = Train(**model, reader, **params, t, done);
        if (!res.ok()) return 1;
        done = t.steps;
        sps.push_back(res->samples_per_s);
      }
      remote_sps = Median(sps);
      (void)(*params)->ShutdownAll();
    }
    ps.join();
    std::printf("1 PS + 1 worker over loopback: %.0f samples/s (%.0f%% of one process)\n",
                remote_sps, 100 * remote_sps / local_sps);
  }
  std::filesystem::remove_all(dir);
  std::printf("Wide & Deep training throughput, one process: %.0f samples/s\n", local_sps);
  return 0;
}

}  // namespace
}  // namespace kubetrain::trainer

int main(int argc, char** argv) {
  // Same OpenMP wait policy as kubetrain-trainer (see trainer/main.cc), so the figures are
  // the trainer's: read when libgomp loads, hence the re-exec.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && ::setenv("OMP_WAIT_POLICY", "passive", 1) == 0) {
    ::execv("/proc/self/exe", argv);
  }
  return kubetrain::trainer::Main(argc, argv);
}
