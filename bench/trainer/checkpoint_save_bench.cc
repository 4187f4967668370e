// The checkpoint save rate that sizes the SIGTERM grace period (docs/user-guide.md,
// "Preemption ... lose no steps"): one PS shard of the default Wide & Deep model (batch 512,
// layers 1024,512,256, dim 16, Adagrad) holding `rows` updated embedding rows, saved with
// ParamShard::Save (serialise, SHA-256, atomic write or S3 upload) to `root` (a local
// directory or s3://bucket/prefix/, credentials from the AWS_* variables) `reps` times. The
// last line is the median rate in MB/s (1e6 bytes), with the shard size.
// Run: checkpoint_save_bench <root> [rows=1000000] [reps=5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/storage/files.h"
#include "common/storage/s3_client.h"
#include "trainer/model/model.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/ps/shard.h"
#include "trainer/worker/params.h"

namespace kubetrain::trainer {
namespace {

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: checkpoint_save_bench <dir or s3://bucket/prefix/> [rows] [reps]\n");
    return 2;
  }
  const std::string root = argv[1];
  const long rows = argc > 2 ? std::atol(argv[2]) : 1000000;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  if (storage::IsS3Path(root)) {
    // A fresh bucket on a test server; an existing one is fine.
    auto path = storage::ParseS3Path(root);
    auto client = storage::DefaultS3Client();
    if (!path.ok() || !client.ok()) {
      std::fprintf(stderr, "%s\n",
                   (!path.ok() ? path.status() : client.status()).ToString().c_str());
      return 1;
    }
    (void)(*client)->CreateBucket(path->bucket);
  }
  SetComputeThreads(1);
  WideDeepConfig wd;  // the trainer's defaults
  auto model = CreateWideDeep(wd);
  if (!model.ok()) return 1;
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kAdagrad;
  opt.lr = 0.05f;
  std::vector<float> init((*model)->NumDenseParams());
  (*model)->InitDense(1, init.data());
  ParamShard shard(MakeShardConfig(**model, 0, 1, 1, opt), init.data());
  // `rows` updated rows: checkpoints hold only rows that were updated.
  const int dim = shard.sparse_dim();
  constexpr size_t kChunk = 65536;
  std::vector<uint64_t> ids(kChunk);
  std::vector<float> grads(kChunk * dim, 1e-3f);
  for (long begin = 0; begin < rows; begin += kChunk) {
    const size_t n = static_cast<size_t>(std::min<long>(kChunk, rows - begin));
    for (size_t i = 0; i < n; ++i) ids[i] = static_cast<uint64_t>(begin) + i;
    shard.Apply(nullptr, ids.data(), n, grads.data());
  }
  std::vector<double> rates;
  uint64_t bytes = 0;
  for (int r = 0; r < reps; ++r) {
    const int64_t step = r + 1;
    if (Status s = PrepareCheckpointDir(root, step); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto digest = shard.Save(ShardPath(root, step, 0, 1));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!digest.ok()) {
      std::fprintf(stderr, "%s\n", digest.status().ToString().c_str());
      return 1;
    }
    bytes = digest->bytes;
    rates.push_back(static_cast<double>(bytes) / 1e6 / s);
    std::printf("save %d: %.1f MB in %.3f s (%.0f MB/s)\n", r + 1, bytes / 1e6, s, rates.back());
  }
  std::sort(rates.begin(), rates.end());
  std::printf(
      "checkpoint save rate (one shard of %.1f MB, %ld rows, to %s): %.0f MB/s median of %d\n",
      bytes / 1e6, rows, root.c_str(), rates[rates.size() / 2], reps);
  return 0;
}

}  // namespace
}  // namespace kubetrain::trainer

int main(int argc, char** argv) {
  return kubetrain::trainer::Main(argc, argv);
}
