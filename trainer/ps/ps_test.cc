#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "trainer/model/model.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/ps/optimizer.h"
#include "trainer/ps/shard.h"

namespace kubetrain::trainer {
namespace {

namespace fs = std::filesystem;

// A gradient and starting weights of n values each, uniform in [-1, 1), drawn from `seed`
// (g[i], then w[i]).
struct GradientAndWeights {
  std::vector<float> g, w;
};
GradientAndWeights RandomGradientAndWeights(size_t n, uint64_t seed) {
  GradientAndWeights out{std::vector<float>(n), std::vector<float>(n)};
  for (size_t i = 0; i < n; ++i) {
    out.g[i] = UniformSym(seed);
    out.w[i] = UniformSym(seed);
  }
  return out;
}

// An optimizer of `kind` (default hyper-parameters) and its initial state for n weights.
std::pair<OptimizerConfig, std::vector<float>> FreshOptimizer(OptimizerKind kind, size_t n) {
  OptimizerConfig c;
  c.kind = kind;
  std::vector<float> state(n * StateSlots(kind));
  InitState(c, state.data(), n);
  return {c, state};
}

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
  const auto [g, w0] = RandomGradientAndWeights(n, 5);
  for (const int threads : {1, 2}) {
    SetComputeThreads(threads);
    for (const OptimizerKind kind :
         {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
      auto [c, s] = FreshOptimizer(kind, n);
      std::vector<float> w = w0;
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

// An array updated in slices (a model's layers, as their gradients become final) ends bit
// for bit where one update of the whole array ends, for every optimizer (Adam's second
// slot lies n floats after its first, whatever the slice).
TEST(OptimizerTest, UpdatesInSlicesMatchOneWholeUpdate) {
  const size_t n = 1000;
  const auto [g, w0] = RandomGradientAndWeights(n, 9);
  for (const OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    auto [c, whole_state] = FreshOptimizer(kind, n);
    std::vector<float> whole = w0;
    std::vector<float> sliced = whole, sliced_state = whole_state;
    for (int64_t t = 1; t <= 3; ++t) {
      ApplyUpdate(c, whole.data(), whole_state.data(), g.data(), n, t);
      // Back to front, as a backward pass goes, in uneven slices.
      for (const auto& [b, e] : {std::pair<size_t, size_t>{700, 1000}, {13, 700}, {0, 13}}) {
        ApplyUpdateRange(c, sliced.data(), sliced_state.data(), g.data(), n, b, e, t);
      }
    }
    EXPECT_EQ(sliced, whole) << "optimizer " << static_cast<int>(kind);
    EXPECT_EQ(sliced_state, whole_state) << "optimizer " << static_cast<int>(kind);
  }
}

// The shard's dense update in slices (LocalParams during the backward pass) is Apply's.
TEST(ParamShardTest, DenseUpdateInSlicesMatchesApply) {
  ShardConfig c;
  c.dense_begin = 0;
  c.dense_end = 300;
  c.sparse_dim = 2;
  c.optimizer.kind = OptimizerKind::kAdam;
  std::vector<float> init(300), g(300);
  uint64_t seed = 4;
  for (size_t i = 0; i < init.size(); ++i) {
    init[i] = UniformSym(seed);
    g[i] = UniformSym(seed);
  }
  ParamShard applied(c, init.data()), sliced(c, init.data());
  for (int step = 0; step < 3; ++step) {
    applied.Apply(g.data(), nullptr, 0, nullptr);
    sliced.BeginDenseUpdate();
    sliced.ApplyDense(g.data(), 100, 300);
    sliced.ApplyDense(g.data(), 0, 100);
    sliced.Apply(nullptr, nullptr, 0, nullptr);  // the push, without a dense gradient
  }
  std::vector<float> a(300), b(300);
  applied.PullDense(a.data());
  sliced.PullDense(b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(applied.updates(), 3);
  EXPECT_EQ(sliced.updates(), 3);
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
  InitSparseRow(9, 8, 3, expect);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(ra[3 + k], expect[k]);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(rb[3 + k], ra[3 + k]);
  float dense[3];
  a.PullDense(dense);
  EXPECT_EQ(dense[2], 3.f);
}

// Pulls (training lookahead, evaluation) must not grow the shard or its checkpoints with
// rows that were never trained; the first update starts from the same initial value.
TEST(ParamShardTest, PullsCreateNoRowsUpdatesDo) {
  const float init[3] = {0, 0, 0};
  ShardConfig c = SmallConfig();
  c.optimizer.kind = OptimizerKind::kSgd;
  ParamShard s(c, init);
  const uint64_t ids[3] = {7, 8, 9};
  float pulled[9];
  s.PullSparse(ids, 3, pulled);
  s.PullSparse(ids, 3, pulled);
  EXPECT_EQ(s.num_rows(), 0u);
  int rows_seen = 0;
  s.ForEachRow([&](uint64_t, const float*, int64_t) { ++rows_seen; });
  EXPECT_EQ(rows_seen, 0);

  const float g[3] = {1, 2, 3};
  s.Apply(nullptr, ids + 1, 1, g);
  EXPECT_EQ(s.num_rows(), 1u);
  float after[9];
  s.PullSparse(ids, 3, after);
  EXPECT_EQ(s.num_rows(), 1u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(after[k], pulled[k]);                              // 7: still initial
    EXPECT_FLOAT_EQ(after[3 + k], pulled[3 + k] - 0.1f * g[k]);  // 8: one SGD step from it
    EXPECT_EQ(after[6 + k], pulled[6 + k]);                      // 9: still initial
  }
  s.ForEachRow([&](uint64_t id, const float*, int64_t updates) {
    EXPECT_EQ(id, 8u);
    EXPECT_EQ(updates, 1);
  });
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

// Above the shard's parallel threshold, with ids repeated within one push (a push from the
// wire may repeat them), rows created by the push and a scale: two compute threads give
// the one-thread results bit for bit.
TEST(ParamShardTest, ParallelPullsAndUpdatesMatchOneThread) {
  constexpr size_t kDense = (size_t{1} << 17) + 5;
  constexpr int kDim = 5;
  std::vector<float> init(kDense);
  uint64_t seed = 11;
  for (float& x : init) x = UniformSym(seed);
  ShardConfig c;
  c.dense_begin = 0;
  c.dense_end = kDense;
  c.sparse_dim = kDim;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  struct Result {
    std::vector<float> dense, rows;
    size_t num_rows = 0;
  };
  // Three pushes of 6,000 ids from a pool of 4,000 (so ids repeat within a push, some rows
  // exist already and some are new), then a pull of the whole pool.
  std::vector<uint64_t> pool(4000);
  for (uint64_t& id : pool) id = SplitMix64(seed);
  std::vector<std::vector<uint64_t>> pushes(3);
  for (auto& ids : pushes) {
    for (int i = 0; i < 6000; ++i) ids.push_back(pool[SplitMix64(seed) % pool.size()]);
  }
  std::vector<float> grads(6000 * kDim), dense_grad(kDense);
  for (float& x : grads) x = UniformSym(seed);
  for (float& x : dense_grad) x = UniformSym(seed);
  const auto run = [&](int threads) {
    SetComputeThreads(threads);
    ParamShard shard(c, init.data());
    for (size_t p = 0; p < pushes.size(); ++p) {
      shard.Apply(dense_grad.data(), pushes[p].data(), pushes[p].size(), grads.data(),
                  p == 1 ? 0.5f : 1.f);
    }
    Result r;
    r.dense.resize(kDense);
    shard.PullDense(r.dense.data());
    r.rows.resize(pool.size() * kDim);
    shard.PullSparse(pool.data(), pool.size(), r.rows.data());
    r.num_rows = shard.num_rows();
    SetComputeThreads(1);
    return r;
  };
  const Result one = run(1), two = run(2);
  EXPECT_EQ(one.num_rows, two.num_rows);
  size_t dense_diff = 0, row_diff = 0;
  for (size_t i = 0; i < kDense; ++i) dense_diff += one.dense[i] != two.dense[i];
  for (size_t i = 0; i < one.rows.size(); ++i) row_diff += one.rows[i] != two.rows[i];
  EXPECT_EQ(dense_diff, 0u);
  EXPECT_EQ(row_diff, 0u);
  // And the repeated ids were each applied once per occurrence: a row pushed k times has
  // update count k.
  std::map<uint64_t, int64_t> occurrences;
  for (const auto& ids : pushes) {
    for (uint64_t id : ids) ++occurrences[id];
  }
  SetComputeThreads(2);
  ParamShard shard(c, init.data());
  for (const auto& ids : pushes) shard.Apply(nullptr, ids.data(), ids.size(), grads.data());
  SetComputeThreads(1);
  size_t wrong = 0;
  shard.ForEachRow(
      [&](uint64_t id, const float*, int64_t updates) { wrong += occurrences[id] != updates; });
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(shard.num_rows(), occurrences.size());
}

// Found by the fuzz seed generator under ASan: a PS of a model without embeddings (an
// MLP: row dim 0) asked for an id wrote the "initial row"'s last float one float before
// the caller's buffer (row[dim - 1]). Any peer holding the job's key could send that pull.
TEST(ParamShardTest, ModelWithoutEmbeddingsWritesNoRowBytesForAnId) {
  ShardConfig c = SmallConfig();
  c.sparse_dim = 0;
  const float init[3] = {1, 2, 3};
  ParamShard shard(c, init);
  const uint64_t id = 5;
  std::vector<float> guard = {7.f, 7.f};
  shard.PullSparse(&id, 1, guard.data() + 1);  // a row of no floats at guard[1]
  EXPECT_EQ(guard, (std::vector<float>{7.f, 7.f}));
  shard.Apply(nullptr, &id, 1, guard.data() + 1);  // a push of it creates an empty row
  shard.PullSparse(&id, 1, guard.data() + 1);
  EXPECT_EQ(guard, (std::vector<float>{7.f, 7.f}));
  EXPECT_EQ(shard.num_rows(), 1u);
}

// Found by ps_shard_fuzz: a shard with no dense parameters (more PS than dense values)
// restored its empty slice with memcpy(nullptr, p, 0), undefined behaviour (fails under
// the asan preset on the old code).
TEST(ParamShardTest, ShardWithoutDenseParametersSavesAndLoads) {
  const std::string root = TempRoot();
  ShardConfig c = SmallConfig();
  c.dense_begin = c.dense_end = 0;
  ParamShard a(c, nullptr);
  const uint64_t id = 3;
  const float g[3] = {1, 2, 3};
  a.Apply(nullptr, &id, 1, g);
  ASSERT_TRUE(a.Save(root + "/s.bin").ok());
  ParamShard b(c, nullptr);
  ASSERT_TRUE(b.Load(root + "/s.bin").ok());
  EXPECT_EQ(b.num_rows(), 1u);
  std::vector<float> none;
  b.PullDense(none.data());  // ps_protocol_fuzz: the same memcpy, from a pull of the dense slice
  fs::remove_all(root);
}

// Found by ps_shard_fuzz under UBSan: a row's update count (a float in the file) of NaN,
// infinity or past 2^63 was restored, and ForEachRow's conversion to int64 is then
// undefined. A shard file is trusted only as far as its MANIFEST's checksum, and a
// MANIFEST written before checksums has none.
TEST(ParamShardTest, RestoreRejectsARowWhoseUpdateCountIsNotACount) {
  const std::string root = TempRoot();
  const float init[3] = {1, 2, 3};
  ParamShard a(SmallConfig(), init);
  const uint64_t id = 3;
  const float g[3] = {1, 2, 3};
  a.Apply(nullptr, &id, 1, g);
  ASSERT_TRUE(a.Save(root + "/s.bin").ok());
  std::ifstream in(root + "/s.bin", std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ParamShard b(SmallConfig(), init);
  ASSERT_TRUE(b.Restore(good, "good").ok());
  for (float count : {std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity(), -1.f, 1e30f}) {
    std::string bad = good;  // the only row is last; its update count is its last float
    std::memcpy(bad.data() + bad.size() - sizeof(float), &count, sizeof(float));
    const Status s = b.Restore(bad, "bad");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << count;
    EXPECT_NE(s.message().find("update count"), std::string::npos) << s.message();
  }
  fs::remove_all(root);
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
    auto d0 = s.Save(ShardPath(root, step, 0, 2));
    ASSERT_TRUE(d0.ok());
    if (step == 30) continue;  // shard 1 never written: step 30 stays incomplete
    auto d1 = s.Save(ShardPath(root, step, 1, 2));
    ASSERT_TRUE(d1.ok());
    ASSERT_TRUE(WriteManifest(root, step, {*d0, *d1}).ok());
  }
  const ShardDigest any{1, ""};
  EXPECT_FALSE(WriteManifest(root, 30, {any, any}).ok());  // refuses to commit a missing shard
  auto latest = LatestCheckpoint(root, 2);
  ASSERT_TRUE(latest.ok());
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ(**latest, 20);
  auto wrong = LatestCheckpoint(root, 3);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("has 2 shards"), std::string::npos);
  fs::remove_all(root);
}

// Saves `s` as every shard of checkpoint `step` and commits it.
void Commit(const std::string& root, int64_t step, const ParamShard& s, int n) {
  ASSERT_TRUE(PrepareCheckpointDir(root, step).ok());
  std::vector<ShardDigest> digests;
  for (int k = 0; k < n; ++k) {
    auto d = s.Save(ShardPath(root, step, k, n));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    digests.push_back(*d);
  }
  ASSERT_TRUE(WriteManifest(root, step, digests).ok());
}

void FlipBit(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  c ^= 0x10;
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(c);
}

// One update with two embedding rows, so the shard's file has a row section.
void Train(ParamShard& s) {
  const uint64_t ids[2] = {11, 12};
  const float dg[3] = {0.1f, 0.2f, 0.3f};
  const float rg[6] = {1, 1, 1, -1, -1, -1};
  s.Apply(dg, ids, 2, rg);
}

TEST(CheckpointTest, BitFlippedShardFallsBackToThePreviousCheckpoint) {
  const std::string root = TempRoot();
  const float init[3] = {1, 2, 3};
  ParamShard s(SmallConfig(), init);
  Train(s);
  Commit(root, 10, s, 2);
  Commit(root, 20, s, 2);
  const std::string victim = ShardPath(root, 20, 1, 2);
  FlipBit(victim, fs::file_size(victim) / 2);
  auto latest = LatestCheckpoint(root, 2);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ(**latest, 10) << "a checkpoint with a bit-flipped shard was chosen";
  // Loading the bad shard directly against its MANIFEST fails too.
  auto found = FindCheckpoint(root, 2);
  ASSERT_TRUE(found.ok());
  ParamShard t(SmallConfig(), init);
  EXPECT_TRUE(LoadShard(t, root, **found, 1, 2).ok());
  const Checkpoint bad{20, (*found)->shards};
  const Status s20 = LoadShard(t, root, bad, 1, 2);
  EXPECT_FALSE(s20.ok());
  EXPECT_NE(s20.message().find("SHA-256"), std::string::npos) << s20.message();
  fs::remove_all(root);
}

TEST(CheckpointTest, AReaderOfAnyShardCountTakesTheNewestWithItsOwnCount) {
  // Export and kubetrain-serve do not know how many PS wrote a model: the newest committed
  // checkpoint comes with its MANIFEST's shard count, whatever the older ones had.
  const std::string root = TempRoot();
  const float init[3] = {1, 2, 3};
  ParamShard s(SmallConfig(), init);
  Commit(root, 10, s, 2);
  Commit(root, 20, s, 3);
  ASSERT_TRUE(PrepareCheckpointDir(root, 30).ok());  // never committed: no MANIFEST
  auto found = FindCheckpoint(root, kAnyShardCount);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->step, 20);
  EXPECT_EQ((*found)->num_shards, 3);
  EXPECT_FALSE(FindCheckpoint(root, 2).ok()) << "a job of 2 PS takes a 3-shard checkpoint";
  auto newest = NewestCommittedStep(root);
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ(*newest, 20);
  // Names that only look like the layout are not checkpoints.
  fs::create_directories(root + "/ckpt-99x");
  std::ofstream(root + "/ckpt-99x/MANIFEST") << "{}";
  std::ofstream(root + "/ckpt-40.MANIFEST") << "{}";
  newest = NewestCommittedStep(root);
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(*newest, 20);
  EXPECT_EQ(ManifestPath(root, 20), root + "/ckpt-20/MANIFEST");
  const std::string empty = TempRoot();
  EXPECT_TRUE(IsNotFound(NewestCommittedStep(empty).status()));
  fs::remove_all(empty);
  fs::remove_all(root);
}

TEST(CheckpointTest, TruncatedShardFallsBackToThePreviousCheckpoint) {
  const std::string root = TempRoot();
  const float init[3] = {1, 2, 3};
  ParamShard s(SmallConfig(), init);
  Train(s);
  Commit(root, 10, s, 2);
  Commit(root, 20, s, 2);
  const std::string victim = ShardPath(root, 20, 0, 2);
  fs::resize_file(victim, fs::file_size(victim) - 4);
  auto latest = LatestCheckpoint(root, 2);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ(**latest, 10);
  // A shard that is gone altogether is the same.
  Commit(root, 30, s, 2);
  fs::remove(ShardPath(root, 30, 1, 2));
  latest = LatestCheckpoint(root, 2);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(**latest, 10);
  fs::remove_all(root);
}

TEST(CheckpointTest, CorruptManifestFallsBackAndNoUsableCheckpointIsAnError) {
  const std::string root = TempRoot();
  const float init[3] = {1, 2, 3};
  ParamShard s(SmallConfig(), init);
  Train(s);
  Commit(root, 10, s, 1);
  Commit(root, 20, s, 1);
  std::ofstream(root + "/ckpt-20/MANIFEST", std::ios::trunc) << "{\"step\": 20, \"num_";
  auto latest = LatestCheckpoint(root, 1);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(**latest, 10);
  // With every complete checkpoint corrupt, starting over would silently lose the
  // training: it is an error that names the checkpoints.
  FlipBit(ShardPath(root, 10, 0, 1), 40);
  auto none = LatestCheckpoint(root, 1);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("ckpt-10"), std::string::npos) << none.status().message();
  fs::remove_all(root);
}

TEST(CheckpointTest, ManifestRecordsEveryShardsSizeAndSha256) {
  const std::string root = TempRoot();
  const float init[3] = {1, 2, 3};
  ParamShard s(SmallConfig(), init);
  Train(s);
  Commit(root, 10, s, 2);
  std::stringstream text;
  text << std::ifstream(root + "/ckpt-10/MANIFEST").rdbuf();
  const std::string shard = [&] {
    std::stringstream b;
    b << std::ifstream(ShardPath(root, 10, 1, 2), std::ios::binary).rdbuf();
    return b.str();
  }();
  const ShardDigest d = DigestOf(shard);
  EXPECT_EQ(d.bytes, shard.size());
  EXPECT_EQ(d.sha256.size(), 64u);
  EXPECT_NE(text.str().find(d.sha256), std::string::npos) << text.str();
  fs::remove_all(root);
}

// A header's row count is checked against the bytes that follow before anything is
// allocated: a crafted count used to make Load allocate rows * stride floats (aborting
// the process) or, once the product wrapped, write past a too-small buffer.
TEST(ParamShardTest, OversizedRowCountIsRejectedBeforeAllocating) {
  const std::string root = TempRoot();
  const float init[3] = {1, 2, 3};
  ParamShard a(SmallConfig(), init);
  Train(a);  // two rows
  ASSERT_TRUE(a.Save(root + "/s.bin").ok());
  std::string data;
  {
    std::stringstream b;
    b << std::ifstream(root + "/s.bin", std::ios::binary).rdbuf();
    data = b.str();
  }
  // Header: magic, dense begin and end (u64), row dim and slots (i32), updates (i64); the
  // push ledger (empty: two u32 counts); then 3 dense floats and 2 x 3 Adam state floats;
  // then (format 3) the kind, base step and deletion count; then the row count.
  const size_t rows_at = 8 + 8 + 8 + 4 + 4 + 8 + 4 + 4 + (3 + 6) * 4 + 1 + 8 + 8;
  uint64_t saved_rows;
  std::memcpy(&saved_rows, data.data() + rows_at, 8);
  ASSERT_EQ(saved_rows, 2u);
  for (uint64_t rows : {uint64_t{1} << 40, ~uint64_t{0} / 4 + 1, ~uint64_t{0}}) {
    std::string crafted = data;
    std::memcpy(crafted.data() + rows_at, &rows, 8);
    std::ofstream(root + "/crafted.bin", std::ios::binary | std::ios::trunc) << crafted;
    ParamShard b(SmallConfig(), init);
    const Status st = b.Load(root + "/crafted.bin");
    ASSERT_FALSE(st.ok()) << rows;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_EQ(b.num_rows(), 0u);  // untouched
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace kubetrain::trainer
