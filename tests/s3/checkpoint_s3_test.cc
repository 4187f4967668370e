// Checkpoint chains in a real S3 server (the `s3` fixture's versitygw), in process: old
// chains deleted once a newer full snapshot is committed, and a delta streamed to S3 in
// bounded memory (never built whole).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "common/storage/files.h"
#include "tests/s3/s3_env.h"
#include "trainer/ps/checkpoint.h"

// The largest single allocation while `g_track` is set: a shard built in memory is one
// string of the object's size; a streamed one allocates parts of the client's part size.
namespace {
std::atomic<bool> g_track{false};
std::atomic<size_t> g_largest{0};
}  // namespace

// Not inlined: GCC would see malloc() paired with the standard delete and warn.
[[gnu::noinline]] void* operator new(std::size_t n) {
  if (g_track.load(std::memory_order_relaxed)) {
    size_t seen = g_largest.load(std::memory_order_relaxed);
    while (n > seen && !g_largest.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// The default operator delete frees with free(), which matches this malloc().

namespace kubetrain::trainer {
namespace {

// Dim 16, Adagrad: rows of 33 floats (132 bytes) plus the 8-byte id in a shard file.
ShardConfig Config(int full_every) {
  ShardConfig c;
  c.dense_begin = 0;
  c.dense_end = 4;
  c.sparse_dim = 16;
  c.seed = 5;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  c.optimizer.lr = 0.1f;
  c.embedding.full_every = full_every;
  return c;
}

void PushRange(ParamShard& shard, uint64_t first, uint64_t last, float g) {
  std::vector<uint64_t> ids;
  for (uint64_t id = first; id < last; ++id) ids.push_back(id);
  std::vector<float> grads(ids.size() * 16, g);
  const float dense[4] = {g, g, g, g};
  shard.Apply(dense, ids.data(), ids.size(), grads.data());
}

StatusOr<ShardDigest> SaveAndCommit(ParamShard& shard, const std::string& root, int64_t step) {
  KT_RETURN_IF_ERROR(PrepareCheckpointDir(root, step));
  KT_ASSIGN_OR_RETURN(ShardDigest d, shard.SaveCheckpoint(root, step, 0, 1));
  KT_RETURN_IF_ERROR(WriteManifest(root, step, {d}));
  return d;
}

class CheckpointS3Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::LoadS3Env();
    auto c = storage::DefaultS3Client();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->CreateBucket("checkpoint-s3").ok());
  }
  void SetUp() override {
    root_ = "s3://checkpoint-s3/" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
            std::to_string(::getpid()) + "/";
  }
  std::string root_;
};

TEST_F(CheckpointS3Test, ChainsBeforeTheNewestTwoAreDeletedOnceANewFullIsCommitted) {
  const float init[4] = {0, 0, 0, 0};
  ParamShard shard(Config(2), init);
  for (int64_t step = 1; step <= 5; ++step) {
    PushRange(shard, static_cast<uint64_t>(step) * 10, static_cast<uint64_t>(step) * 10 + 100,
              0.1f);
    ASSERT_TRUE(SaveAndCommit(shard, root_, step).ok());
    auto pruned = PruneCheckpointChains(root_, 2);
    ASSERT_TRUE(pruned.ok()) << pruned.status().ToString();
    EXPECT_EQ(*pruned, step == 5 ? 4 : 0) << step;  // chain {1, 2}: a MANIFEST and a shard each
  }
  auto names = storage::ListObjects(root_);
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  const std::vector<std::string> want = {"ckpt-3/MANIFEST", "ckpt-3/shard-0-of-1.bin",
                                         "ckpt-4/MANIFEST", "ckpt-4/shard-0-of-1.bin",
                                         "ckpt-5/MANIFEST", "ckpt-5/shard-0-of-1.bin"};
  EXPECT_EQ(*names, want);
  auto found = FindCheckpoint(root_, 1);
  ASSERT_TRUE(found.ok() && found->has_value()) << found.status().ToString();
  EXPECT_EQ((*found)->step, 5);
  ParamShard restored(Config(2), init);
  EXPECT_TRUE(LoadShard(restored, root_, **found, 0, 1).ok());
  EXPECT_EQ(restored.num_rows(), shard.num_rows());
}

// A delta of 300,000 changed rows (~42 MB) goes to S3 in parts: no allocation during the
// save reaches half the object (the largest is a 16 MiB part; built whole, one string would
// hold all 42 MB).
TEST_F(CheckpointS3Test, ADeltaIsStreamedToS3NotBuiltInMemory) {
  const float init[4] = {0, 0, 0, 0};
  ParamShard shard(Config(4), init);
  PushRange(shard, 1, 2, 0.5f);
  ASSERT_TRUE(SaveAndCommit(shard, root_, 1).ok());
  PushRange(shard, 1, 300001, 0.25f);
  g_largest = 0;
  g_track = true;
  auto d = shard.SaveCheckpoint(root_, 2, 0, 1);
  g_track = false;
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->chain.size(), 1u);  // a delta
  EXPECT_GT(d->bytes, 40'000'000u);
  EXPECT_LT(g_largest.load(), d->bytes / 2) << "largest allocation " << g_largest.load();
  ASSERT_TRUE(WriteManifest(root_, 2, {*d}).ok());
  auto found = FindCheckpoint(root_, 1);
  ASSERT_TRUE(found.ok() && found->has_value());
  ParamShard restored(Config(4), init);
  ASSERT_TRUE(LoadShard(restored, root_, **found, 0, 1).ok());
  EXPECT_EQ(restored.num_rows(), 300000u);
}

}  // namespace
}  // namespace kubetrain::trainer
