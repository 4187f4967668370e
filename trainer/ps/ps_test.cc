#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "trainer/model/model.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/ps/optimizer.h"
#include "trainer/ps/shard.h"

namespace kubetrain::trainer {
namespace {

namespace fs = std::filesystem;

std::string TempRoot() {
  static int n = 0;
  const fs::path p = fs::temp_directory_path() /
                     ("kt_ps_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

TEST(OptimizerTest, SgdAdagradAdamFirstSteps) {
  const float g[2] = {0.5f, -2.f};
  OptimizerConfig c;
  c.lr = 0.1f;
  {
    c.kind = OptimizerKind::kSgd;
    float w[2] = {1.f, 1.f};
    ApplyUpdate(c, w, nullptr, g, 2, 1);
    EXPECT_FLOAT_EQ(w[0], 0.95f);
    EXPECT_FLOAT_EQ(w[1], 1.2f);
  }
  {
    c.kind = OptimizerKind::kAdagrad;
    float w[2] = {1.f, 1.f}, s[2];
    InitState(c, s, 2);
    ApplyUpdate(c, w, s, g, 2, 1);
    EXPECT_FLOAT_EQ(s[0], 0.1f + 0.25f);
    EXPECT_NEAR(w[0], 1.f - 0.1f * 0.5f / std::sqrt(0.35f), 1e-6);
  }
  {
    c.kind = OptimizerKind::kAdam;
    float w[2] = {1.f, 1.f}, s[4];
    InitState(c, s, 2);
    ApplyUpdate(c, w, s, g, 2, 1);
    // Adam's first step moves every weight by ~lr against the gradient's sign.
    EXPECT_NEAR(w[0], 0.9f, 1e-5);
    EXPECT_NEAR(w[1], 1.1f, 1e-5);
  }
  EXPECT_FALSE(ParseOptimizerKind("rmsprop").ok());
  EXPECT_EQ(*ParseOptimizerKind("adam"), OptimizerKind::kAdam);
}

// The dense update runs vectorised and split over the compute threads; it must round
// exactly like the plain element-by-element formulas, for every optimizer.
TEST(OptimizerTest, LargeArraysMatchScalarFormulasBitForBit) {
  const size_t n = (size_t{1} << 17) + 13;  // above the parallel threshold, odd tail
  std::vector<float> g(n), w0(n);
  uint64_t seed = 5;
  for (size_t i = 0; i < n; ++i) {
    g[i] = UniformSym(seed);
    w0[i] = UniformSym(seed);
  }
  for (const int threads : {1, 2}) {
    SetComputeThreads(threads);
    for (const OptimizerKind kind :
         {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
      OptimizerConfig c;
      c.kind = kind;
      std::vector<float> w = w0, s(n * StateSlots(kind));
      InitState(c, s.data(), n);
      std::vector<float> rw = w, rs = s;
      for (int64_t t = 1; t <= 3; ++t) {
        ApplyUpdate(c, w.data(), s.data(), g.data(), n, t);
        const float step =
            static_cast<float>(c.lr * std::sqrt(1 - std::pow(c.beta2, static_cast<double>(t))) /
                               (1 - std::pow(c.beta1, static_cast<double>(t))));
        for (size_t i = 0; i < n; ++i) {
          if (kind == OptimizerKind::kSgd) {
            rw[i] -= c.lr * g[i];
          } else if (kind == OptimizerKind::kAdagrad) {
            rs[i] += g[i] * g[i];
            rw[i] -= c.lr * g[i] / std::sqrt(rs[i]);
          } else {
            float& m = rs[i];
            float& v = rs[n + i];
            m = c.beta1 * m + (1 - c.beta1) * g[i];
            v = c.beta2 * v + (1 - c.beta2) * g[i] * g[i];
            rw[i] -= step * m / (std::sqrt(v) + c.epsilon);
          }
        }
      }
      size_t diff = 0;
      for (size_t i = 0; i < n; ++i) diff += w[i] != rw[i];
      for (size_t i = 0; i < s.size(); ++i) diff += s[i] != rs[i];
      EXPECT_EQ(diff, 0u) << "optimizer " << static_cast<int>(kind) << ", " << threads
                          << " threads";
    }
  }
  SetComputeThreads(1);
}

TEST(ShardingTest, DenseRangesCoverEverythingOnce) {
  size_t next = 0;
  for (int k = 0; k < 3; ++k) {
    auto [b, e] = DenseRange(10, k, 3);
    EXPECT_EQ(b, next);
    next = e;
  }
  EXPECT_EQ(next, 10u);
  int counts[2] = {0, 0};
  for (uint64_t id = 0; id < 1000; ++id) ++counts[ShardOfId(id, 2)];
  EXPECT_GT(counts[0], 400);
  EXPECT_GT(counts[1], 400);
}

ShardConfig SmallConfig() {
  ShardConfig c;
  c.dense_begin = 2;
  c.dense_end = 5;
  c.sparse_dim = 3;
  c.seed = 9;
  c.optimizer.kind = OptimizerKind::kAdam;
  c.optimizer.lr = 0.1f;
  return c;
}

TEST(ParamShardTest, RowsAreCreatedLazilyAndDeterministically) {
  const float init[3] = {1, 2, 3};
  ParamShard a(SmallConfig(), init), b(SmallConfig(), init);
  const uint64_t ids[2] = {7, 8};
  float ra[6], rb[6], expect[3];
  a.PullSparse(ids, 2, ra);
  b.PullSparse(ids + 1, 1, rb + 3);
  EXPECT_EQ(a.num_rows(), 2u);
  InitSparseRow(9, 8, 3, expect);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(ra[3 + k], expect[k]);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(rb[3 + k], ra[3 + k]);
  float dense[3];
  a.PullDense(dense);
  EXPECT_EQ(dense[2], 3.f);
}

TEST(ParamShardTest, ApplyScalesAndUpdates) {
  const float init[3] = {0, 0, 0};
  ShardConfig c = SmallConfig();
  c.optimizer.kind = OptimizerKind::kSgd;
  ParamShard s(c, init);
  const float g[3] = {1, 2, 3};
  const uint64_t id = 5;
  float before[3], after[3];
  s.PullSparse(&id, 1, before);
  s.Apply(g, &id, 1, g, 0.5f);
  float dense[3];
  s.PullDense(dense);
  EXPECT_FLOAT_EQ(dense[1], -0.1f);  // lr 0.1 * 2 * 0.5
  s.PullSparse(&id, 1, after);
  EXPECT_FLOAT_EQ(after[2], before[2] - 0.15f);
  EXPECT_EQ(s.updates(), 1);
}

TEST(ParamShardTest, SaveLoadRoundTripsIncludingOptimizerState) {
  const std::string root = TempRoot();
  const float init[3] = {1, 2, 3};
  ParamShard a(SmallConfig(), init);
  const uint64_t ids[2] = {11, 12};
  const float dg[3] = {0.1f, 0.2f, 0.3f};
  const float rg[6] = {1, 1, 1, -1, -1, -1};
  a.Apply(dg, ids, 2, rg);
  ASSERT_TRUE(a.Save(root + "/s.bin").ok());
  ParamShard b(SmallConfig(), init);
  ASSERT_TRUE(b.Load(root + "/s.bin").ok());
  // Identical state: one more identical update gives identical parameters.
  a.Apply(dg, ids, 2, rg);
  b.Apply(dg, ids, 2, rg);
  float ra[6], rb[6], da[3], db[3];
  a.PullSparse(ids, 2, ra);
  b.PullSparse(ids, 2, rb);
  a.PullDense(da);
  b.PullDense(db);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ra[i], rb[i]);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(da[i], db[i]);
  EXPECT_EQ(b.updates(), 2);
  fs::remove_all(root);
}

TEST(ParamShardTest, LoadRejectsOtherConfigurationAndTruncation) {
  const std::string root = TempRoot();
  const float init[3] = {1, 2, 3};
  ParamShard a(SmallConfig(), init);
  ASSERT_TRUE(a.Save(root + "/s.bin").ok());
  ShardConfig other = SmallConfig();
  other.optimizer.kind = OptimizerKind::kSgd;
  ParamShard b(other, init);
  const Status s = b.Load(root + "/s.bin");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("optimizer"), std::string::npos) << s.message();
  fs::resize_file(root + "/s.bin", fs::file_size(root + "/s.bin") - 4);
  ParamShard c(SmallConfig(), init);
  EXPECT_FALSE(c.Load(root + "/s.bin").ok());
  EXPECT_EQ(c.Load(root + "/missing").code(), StatusCode::kNotFound);
  fs::remove_all(root);
}

TEST(CheckpointTest, OnlyCheckpointsWithManifestCount) {
  const std::string root = TempRoot();
  auto none = LatestCheckpoint(root + "/absent", 2);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  const float init[3] = {1, 2, 3};
  ParamShard s(SmallConfig(), init);
  for (int64_t step : {10, 20, 30}) {
    ASSERT_TRUE(PrepareCheckpointDir(root, step).ok());
    ASSERT_TRUE(s.Save(ShardPath(root, step, 0, 2)).ok());
    if (step == 30) continue;  // shard 1 never written: step 30 stays incomplete
    ASSERT_TRUE(s.Save(ShardPath(root, step, 1, 2)).ok());
    ASSERT_TRUE(WriteManifest(root, step, 2).ok());
  }
  EXPECT_FALSE(WriteManifest(root, 30, 2).ok());  // refuses to commit a missing shard
  auto latest = LatestCheckpoint(root, 2);
  ASSERT_TRUE(latest.ok());
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ(**latest, 20);
  auto wrong = LatestCheckpoint(root, 3);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("has 2 shards"), std::string::npos);
  fs::remove_all(root);
}

}  // namespace
}  // namespace kubetrain::trainer
