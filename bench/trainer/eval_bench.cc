// The side-car evaluator's throughput: how long it takes to load a committed checkpoint of
// the default Wide & Deep model (2 shards, as 2 PS write them, every row of the evaluation
// data present) and to evaluate it, in examples per second. Medians over --reps
// repetitions, each loading the checkpoint again and evaluating all --examples examples.
// The last line is the figure the benchmark exists for, with its units.
//   eval_bench [--threads N] [--reps R] [--examples E]
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "trainer/data/generator.h"
#include "trainer/model/model.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/worker/params.h"
#include "trainer/worker/train.h"

namespace kubetrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kShards = 2;
constexpr uint64_t kSeed = 1;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

ReaderOptions EvalData(const std::string& path) {
  return ReaderOptions{{path}, DataFormat::kCriteoTsv, 0, 0, 1, 0, /*loop=*/false};
}

// Writes checkpoint `step` of 2 shards holding every embedding row the data touches.
Status WriteCheckpoint(Model& model, const OptimizerConfig& opt, const std::string& data,
                       const std::string& root, int64_t step) {
  std::vector<float> dense(model.NumDenseParams());
  model.InitDense(kSeed, dense.data());
  std::vector<std::unique_ptr<ParamShard>> shards;
  for (int k = 0; k < kShards; ++k) {
    const ShardConfig c = MakeShardConfig(model, k, kShards, kSeed, opt);
    shards.push_back(std::make_unique<ParamShard>(c, dense.data() + c.dense_begin));
  }
  StripeReader reader(EvalData(data));
  Batch batch;
  SparseLookup lookup;
  std::vector<float> rows;
  for (;;) {
    KT_ASSIGN_OR_RETURN(const int real, reader.Next(model.batch_size(), &batch));
    if (real == 0) break;
    lookup.Assign(batch);
    rows.resize(model.SparseRowDim());
    for (uint64_t id : lookup.ids) shards[ShardOfId(id, kShards)]->PullSparse(&id, 1, rows.data());
  }
  KT_RETURN_IF_ERROR(PrepareCheckpointDir(root, step));
  std::vector<ShardDigest> digests;
  for (int k = 0; k < kShards; ++k) {
    KT_ASSIGN_OR_RETURN(ShardDigest d, shards[k]->Save(ShardPath(root, step, k, kShards)));
    digests.push_back(d);
  }
  return WriteManifest(root, step, digests);
}

int Main(int argc, char** argv) {
  int threads = 0, reps = 5;
  int64_t examples = 20000;
  CLI::App app{"evaluator benchmark"};
  app.add_option("--threads", threads, "compute threads (0: the container's CPU limit)");
  app.add_option("--reps", reps, "repetitions (the median is reported)");
  app.add_option("--examples", examples, "evaluation examples per repetition");
  CLI11_PARSE(app, argc, argv);
  if (threads <= 0) threads = DefaultThreadCount();
  SetComputeThreads(threads);
  spdlog::set_level(spdlog::level::warn);

  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kt_eval_bench_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  const std::string data = dir + "/eval.tsv";
  GeneratorOptions g;
  g.sample_seed = 2;
  if (auto s = WriteSyntheticCriteo(data, examples, g); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
    return 1;
  }
  auto model = CreateWideDeep(WideDeepConfig{});  // the trainer's default model
  if (!model.ok()) return 1;
  OptimizerConfig opt;  // Adagrad: one state slot per parameter, like the default run
  opt.kind = OptimizerKind::kAdagrad;
  if (Status s = WriteCheckpoint(**model, opt, data, dir + "/ckpt", 100); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  auto found = FindCheckpoint(dir + "/ckpt", kShards);
  if (!found.ok() || !found->has_value()) return 1;
  uint64_t bytes = 0;
  for (const ShardDigest& d : (*found)->shards) bytes += d.bytes;
  std::printf(
      "Wide & Deep (default: embedding 16, layers 1024,512,256, batch 512), %d shards, "
      "%.1f MB checkpoint, %lld examples, %d threads\n",
      kShards, bytes / 1e6, static_cast<long long>(examples), threads);

  std::vector<double> load_ms, rate;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    auto params = CheckpointParams::Load(**model, kSeed, opt, dir + "/ckpt", **found, kShards);
    if (!params.ok()) {
      std::fprintf(stderr, "%s\n", params.status().ToString().c_str());
      return 1;
    }
    load_ms.push_back(1e3 * SecondsSince(t0));
    StripeReader reader(EvalData(data));
    const auto t1 = Clock::now();
    auto m = Evaluate(**model, reader, **params, 0);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
      return 1;
    }
    rate.push_back(m->examples / SecondsSince(t1));
    std::printf("  rep %d: load %.0f ms, evaluate %.0f examples/s (AUC %.4f)\n", r + 1,
                load_ms.back(), rate.back(), m->auc);
  }
  std::printf("checkpoint load: %.0f ms (median of %d)\n", Median(load_ms), reps);
  std::printf("evaluator throughput: %.0f examples/s (median of %d reps, %d threads)\n",
              Median(rate), reps, threads);
  return 0;
}

}  // namespace
}  // namespace kubetrain::trainer

int main(int argc, char** argv) {
  return kubetrain::trainer::Main(argc, argv);
}
