// Incremental checkpoints: bytes and seconds of a full snapshot against a
// delta with `changed` of the rows updated since the previous checkpoint. One PS shard of the
// default Wide & Deep model (dim 16, Adagrad: 132 bytes per row on disk plus its id) holding
// `rows` rows, saved to a local directory with ParamShard::SaveCheckpoint
// (--checkpoint-full-every large, so every save after the first is a delta) and, for the full
// figure, ParamShard::Save. Each rep updates a fresh `changed` share of the rows first. The
// last line: medians, and the goal's bound (changed share of the full bytes plus the head:
// the dense slice and ledger, which every delta writes whole).
// Run: checkpoint_incremental_bench <dir> [rows=10000000] [changed=0.05] [reps=3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "trainer/model/model.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/ps/shard.h"
#include "trainer/worker/params.h"

namespace kubetrain::trainer {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: checkpoint_incremental_bench <dir> [rows] [changed] [reps]\n");
    return 2;
  }
  const std::string root = argv[1];
  const long rows = argc > 2 ? std::atol(argv[2]) : 10000000;
  const double changed = argc > 3 ? std::atof(argv[3]) : 0.05;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 3;
  SetComputeThreads(1);
  WideDeepConfig wd;  // the trainer's defaults
  auto model = CreateWideDeep(wd);
  if (!model.ok()) return 1;
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kAdagrad;
  opt.lr = 0.05f;
  std::vector<float> init((*model)->NumDenseParams());
  (*model)->InitDense(1, init.data());
  EmbeddingOptions eo;
  eo.full_every = 1000;
  ParamShard shard(MakeShardConfig(**model, 0, 1, 1, opt, eo), init.data());
  const int dim = shard.sparse_dim();
  constexpr size_t kChunk = 65536;
  std::vector<uint64_t> ids(kChunk);
  std::vector<float> grads(kChunk * dim, 1e-3f);
  const auto update = [&](long first, long count) {
    for (long begin = first; begin < first + count; begin += kChunk) {
      const size_t n = static_cast<size_t>(std::min<long>(kChunk, first + count - begin));
      for (size_t i = 0; i < n; ++i) ids[i] = static_cast<uint64_t>((begin + i) % rows);
      shard.Apply(nullptr, ids.data(), n, grads.data());
    }
  };
  update(0, rows);
  const auto save = [&](int64_t step, bool full, ShardDigest* d) {
    if (Status s = PrepareCheckpointDir(root, step); !s.ok()) return -1.0;
    const auto t0 = std::chrono::steady_clock::now();
    auto digest =
        full ? shard.Save(ShardPath(root, step, 0, 1)) : shard.SaveCheckpoint(root, step, 0, 1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!digest.ok()) {
      std::fprintf(stderr, "%s\n", digest.status().ToString().c_str());
      return -1.0;
    }
    *d = *digest;
    return s;
  };
  ShardDigest base;
  if (save(1, false, &base) < 0) return 1;  // the chain's full snapshot
  std::vector<double> full_s, delta_s;
  uint64_t full_bytes = 0, delta_bytes = 0;
  const long n_changed = static_cast<long>(static_cast<double>(rows) * changed);
  for (int r = 0; r < reps; ++r) {
    update(static_cast<long>(r + 1) * n_changed, n_changed);
    ShardDigest d;
    const double ds = save(2 + 2 * r, false, &d);
    if (ds < 0 || d.chain.empty()) return 1;
    delta_s.push_back(ds);
    delta_bytes = d.bytes;
    const double fs = save(3 + 2 * r, true, &d);
    if (fs < 0) return 1;
    full_s.push_back(fs);
    full_bytes = d.bytes;
    std::printf("rep %d: delta %.1f MB in %.3f s; full %.1f MB in %.3f s\n", r + 1,
                delta_bytes / 1e6, ds, full_bytes / 1e6, fs);
    std::filesystem::remove_all(CheckpointDir(root, 3 + 2 * r));  // keep the disk in check
  }
  const double head = static_cast<double>((*model)->NumDenseParams()) * 4 * 2;  // dense + state
  std::printf(
      "checkpoint at %ld rows, %.0f%% changed: full %.1f MB %.3f s, incremental %.1f MB %.3f s "
      "(%.3f of full bytes, %.3f of full time; bound %.1f MB = share x full + %.1f MB dense "
      "head), median of %d\n",
      rows, changed * 100, full_bytes / 1e6, Median(full_s), delta_bytes / 1e6, Median(delta_s),
      static_cast<double>(delta_bytes) / static_cast<double>(full_bytes),
      Median(delta_s) / Median(full_s), (changed * static_cast<double>(full_bytes) + head) / 1e6,
      head / 1e6, reps);
  return 0;
}

}  // namespace
}  // namespace kubetrain::trainer

int main(int argc, char** argv) {
  return kubetrain::trainer::Main(argc, argv);
}
