// Trainer benchmarks. Each figure is the median over --reps repetitions of --steps steps;
// the runs compared with each other alternate within each repetition, so load drifting on
// a shared machine hits both alike, and ratios are the medians of per-repetition ratios.
//   1. GFLOPS of the Wide & Deep MLP layers (forward + backward through oneDNN), next to
//      a large oneDNN SGEMM on the same threads: the FP32 rate this machine reaches now.
//      (A "theoretical peak" from /proc/cpuinfo is not knowable: inside a VM "cpu MHz" is
//      the nominal clock, not the boost clock, and the FMA width per cycle differs
//      between CPUs with the same flags, e.g. AMD Zen 4 runs AVX-512 on 256-bit units.)
//   2. Wide & Deep samples/s in one process (LocalParams) and with 1 PS + 1 worker over
//      loopback TCP (the PS runs in a thread of this process, behind a real socket, with
//      authentication on), without and with pipelining (RemoteOptions::pipeline), pipelined
//      with BF16 on the wire (RemoteOptions::wire), the bytes each moves per step, and
//      where each step's time goes (read, pull, compute, push).
//   Both in FP32 and, where the CPU has BF16 (AVX-512 BF16 or AMX), with --precision bf16.
// The last line is the figure the benchmark exists for, with its units.
#include <oneapi/dnnl/dnnl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "trainer/data/generator.h"
#include "trainer/metrics/metrics.h"
#include "trainer/model/model.h"
#include "trainer/rpc/ps_server.h"
#include "trainer/rpc/remote_params.h"
#include "trainer/worker/train.h"

namespace kubetrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// GFLOPS of `reps` x C[n x n] = A[n x n] B[n x n] with oneDNN's SGEMM.
double SgemmGflops(int n, int reps) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) {
    if (dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n) !=
        dnnl_success) {
      return 0;
    }
  }
  return 2.0 * n * n * n * reps / SecondsSince(t0) / 1e9;
}

// Median milliseconds per step of each phase over the repetitions, wall-clock and CPU (every
// thread of the process during the phase; CPU / wall = threads busy on average).
struct PhaseMs {
  std::vector<double> read, pull, compute, push, read_cpu, pull_cpu, compute_cpu, push_cpu;
  void Add(const TrainResult& r, int steps) {
    const TrainResult::Phases& p = r.phases;
    read.push_back(1e3 * p.read / steps);
    pull.push_back(1e3 * p.pull / steps);
    compute.push_back(1e3 * p.compute / steps);
    push.push_back(1e3 * p.push / steps);
    read_cpu.push_back(1e3 * p.read_cpu / steps);
    pull_cpu.push_back(1e3 * p.pull_cpu / steps);
    compute_cpu.push_back(1e3 * p.compute_cpu / steps);
    push_cpu.push_back(1e3 * p.push_cpu / steps);
  }
  void Print(const char* what) const {
    std::printf(
        "  %s, ms per step (CPU-ms): read %.2f (%.2f), pull %.2f (%.2f), compute %.2f (%.2f), "
        "push %.2f (%.2f)\n",
        what, Median(read), Median(read_cpu), Median(pull), Median(pull_cpu), Median(compute),
        Median(compute_cpu), Median(push), Median(push_cpu));
  }
};

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

  // 1. MLP GFLOPS: TrainStep on one fixed batch (embedding/loss work is small next to it),
  // FP32, BF16 and a 1024^3 SGEMM in turn.
  const bool bf16 = CpuHasNativeBf16();
  if (!bf16) std::printf("%s\n", ResolvePrecision(Precision::kBf16).fallback.c_str());
  {
    WideDeepConfig wd16 = wd;
    wd16.precision = Precision::kBf16;
    auto m32 = CreateWideDeep(wd);
    auto m16 = CreateWideDeep(bf16 ? wd16 : wd);
    if (!m32.ok() || !m16.ok()) return 1;
    (*m32)->InitDense(1, (*m32)->dense_params().data());
    (*m16)->InitDense(1, (*m16)->dense_params().data());
    StripeReader reader(ro);
    Batch b;
    if (!reader.Next(wd.batch_size, &b).ok()) return 1;
    const SparseLookup lookup = SparseLookup::Build(b);
    std::vector<float> rows(lookup.ids.size() * (*m32)->SparseRowDim(), 0.01f), grads(rows.size());
    auto run = [&](Model& m) {
      const auto t0 = Clock::now();
      for (int s = 0; s < steps; ++s) (void)m.TrainStep(b, lookup, rows.data(), grads.data());
      return m.MlpFlopsPerStep() * steps / SecondsSince(t0) / 1e9;
    };
    (void)(*m32)->TrainStep(b, lookup, rows.data(), grads.data());  // warm-up
    (void)(*m16)->TrainStep(b, lookup, rows.data(), grads.data());
    (void)SgemmGflops(1024, 1);
    std::vector<double> g32, g16, sgemm, ratio, speedup;
    for (int r = 0; r < reps; ++r) {
      g32.push_back(run(**m32));
      if (bf16) g16.push_back(run(**m16));
      sgemm.push_back(SgemmGflops(1024, 4));
      ratio.push_back(g32.back() / sgemm.back());
      if (bf16) speedup.push_back(g16.back() / g32.back());
    }
    std::printf(
        "MLP layers forward+backward, FP32: %.1f GFLOPS (%.0f%% of a 1024^3 oneDNN SGEMM on the "
        "same threads: %.1f GFLOPS)\n",
        Median(g32), 100 * Median(ratio), Median(sgemm));
    if (bf16) {
      std::printf("MLP layers forward+backward, BF16: %.1f GFLOPS (%.2fx FP32)\n", Median(g16),
                  Median(speedup));
    }
  }

  // 2. One process and 1 PS + 1 worker over loopback, alternating.
  WideDeepConfig wd16 = wd;
  wd16.precision = Precision::kBf16;
  auto local_model = CreateWideDeep(wd);
  auto bf16_model = CreateWideDeep(bf16 ? wd16 : wd);
  auto remote_model = CreateWideDeep(wd);
  if (!local_model.ok() || !bf16_model.ok() || !remote_model.ok()) return 1;
  LocalParams local(**local_model, 1, opt), local16(**bf16_model, 1, opt);
  StripeReader local_reader(ro), bf16_reader(ro), remote_reader(ro);

  AuthKey key;
  key.fill(7);
  std::vector<float> init((*remote_model)->NumDenseParams());
  (*remote_model)->InitDense(1, init.data());
  ParamShard shard(MakeShardConfig(**remote_model, 0, 1, 1, opt), init.data());
  auto listener = Listener::Listen(0);
  if (!listener.ok()) return 1;
  const int port = (*listener)->port();
  PsServerOptions po;
  po.key = key;
  po.total_dense = (*remote_model)->NumDenseParams();
  PsServer server(&shard, std::move(*listener), po);
  std::thread ps([&] { (void)server.Serve(); });
  RemoteOptions rop;
  rop.ps_addresses = {"127.0.0.1:" + std::to_string(port)};
  rop.key = key;
  auto remote = RemoteParams::Connect(**remote_model, rop);
  // The same, pipelined (the trainer's asynchronous default): a second worker of the PS.
  auto piped_model = CreateWideDeep(wd);
  if (!piped_model.ok()) return 1;
  rop.pipeline = true;
  rop.rank = 1;
  auto piped = RemoteParams::Connect(**piped_model, rop);
  if (remote.ok() && !piped.ok()) remote = piped.status();
  // Pipelined with BF16 on the wire (--wire-precision bf16): a third worker.
  auto wire16_model = CreateWideDeep(wd);
  if (!wire16_model.ok()) return 1;
  rop.rank = 2;
  rop.wire = WireFloat::kBf16;
  auto wire16 = RemoteParams::Connect(**wire16_model, rop);
  if (remote.ok() && !wire16.ok()) remote = wire16.status();
  if (!remote.ok()) {
    std::fprintf(stderr, "%s\n", remote.status().ToString().c_str());
    server.Stop();
    ps.join();
    return 1;
  }

  TrainOptions t;
  t.log_every = 0;
  t.steps = 2;  // warm-up
  if (!Train(**local_model, local_reader, local, t, 0).ok()) return 1;
  if (bf16 && !Train(**bf16_model, bf16_reader, local16, t, 0).ok()) return 1;
  if (!Train(**remote_model, remote_reader, **remote, t, 0).ok()) return 1;
  StripeReader piped_reader(ro), wire16_reader(ro);
  if (!Train(**piped_model, piped_reader, **piped, t, 0).ok()) return 1;
  if (!Train(**wire16_model, wire16_reader, **wire16, t, 0).ok()) return 1;
  std::vector<double> local_sps, bf16_sps, remote_sps, ratio, bf16_ratio, piped_sps, piped_ratio,
      wire16_sps, wire16_ratio;
  PhaseMs local_ms, bf16_ms, remote_ms, piped_ms, wire16_ms;
  // Payload bytes per step to and from the PS (requests and replies, both ways), measured
  // around each run once its last push is through (DoneCount waits for it).
  const TrainerMetrics& wire = TrainerMetrics::Global();
  auto bytes = [&] { return wire.ps_sent_bytes() + wire.ps_received_bytes(); };
  std::vector<double> remote_bytes, piped_bytes, wire16_bytes;
  for (int r = 0; r < reps; ++r) {
    const int64_t done = 2 + static_cast<int64_t>(r) * steps;
    t.steps = done + steps;
    auto a = Train(**local_model, local_reader, local, t, done);
    if (!a.ok()) return 1;
    local_sps.push_back(a->samples_per_s);
    local_ms.Add(*a, steps);
    if (bf16) {
      auto c = Train(**bf16_model, bf16_reader, local16, t, done);
      if (!c.ok()) return 1;
      bf16_sps.push_back(c->samples_per_s);
      bf16_ratio.push_back(c->samples_per_s / a->samples_per_s);
      bf16_ms.Add(*c, steps);
    }
    uint64_t b0 = bytes();
    auto b = Train(**remote_model, remote_reader, **remote, t, done);
    if (!b.ok()) return 1;
    remote_bytes.push_back(static_cast<double>(bytes() - b0) / steps);
    remote_sps.push_back(b->samples_per_s);
    ratio.push_back(b->samples_per_s / a->samples_per_s);
    remote_ms.Add(*b, steps);
    b0 = bytes();
    auto d = Train(**piped_model, piped_reader, **piped, t, done);
    if (!d.ok() || !(*piped)->DoneCount().ok()) return 1;
    piped_bytes.push_back(static_cast<double>(bytes() - b0) / steps);
    piped_sps.push_back(d->samples_per_s);
    piped_ratio.push_back(d->samples_per_s / a->samples_per_s);
    piped_ms.Add(*d, steps);
    b0 = bytes();
    auto e = Train(**wire16_model, wire16_reader, **wire16, t, done);
    if (!e.ok() || !(*wire16)->DoneCount().ok()) return 1;
    wire16_bytes.push_back(static_cast<double>(bytes() - b0) / steps);
    wire16_sps.push_back(e->samples_per_s);
    wire16_ratio.push_back(e->samples_per_s / a->samples_per_s);
    wire16_ms.Add(*e, steps);
  }
  (void)(*remote)->ShutdownAll();
  ps.join();
  std::printf("one process: %.0f samples/s\n", Median(local_sps));
  local_ms.Print("one process");
  if (bf16) {
    std::printf("one process, --precision bf16: %.0f samples/s (%.2fx FP32)\n", Median(bf16_sps),
                Median(bf16_ratio));
    bf16_ms.Print("one process, bf16");
  }
  std::printf(
      "1 PS + 1 worker over loopback, --no-pipeline: %.0f samples/s (%.2fx one process), "
      "%.2f MB on the wire per step\n",
      Median(remote_sps), Median(ratio), Median(remote_bytes) / 1e6);
  remote_ms.Print("1 PS + 1 worker, --no-pipeline");
  std::printf(
      "1 PS + 1 worker over loopback, pipelined: %.0f samples/s (%.2fx one process), %.2f MB on "
      "the wire per step\n",
      Median(piped_sps), Median(piped_ratio), Median(piped_bytes) / 1e6);
  piped_ms.Print("1 PS + 1 worker, pipelined");
  std::printf(
      "1 PS + 1 worker over loopback, pipelined, --wire-precision bf16: %.0f samples/s (%.2fx "
      "one process), %.2f MB on the wire per step\n",
      Median(wire16_sps), Median(wire16_ratio), Median(wire16_bytes) / 1e6);
  wire16_ms.Print("1 PS + 1 worker, pipelined, bf16 wire");
  std::filesystem::remove_all(dir);
  std::printf("Wide & Deep training throughput, one process: %.0f samples/s\n", Median(local_sps));
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
