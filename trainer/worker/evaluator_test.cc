#include "trainer/worker/evaluator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include "common/storage/files.h"

namespace kubetrain::trainer {
namespace {

namespace fs = std::filesystem;

constexpr int kShards = 2;
constexpr uint64_t kSeed = 7;

// Checkpoints of a small Wide & Deep model in 2 shards, written the way the parameter
// servers and the coordinator write them; each checkpoint's dense parameters are all
// `value`, so the evaluation can tell which one it was given.
class EvaluatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() /
             ("kt_evaluator_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++)))
                .string();
    fs::create_directories(root_);
    WideDeepConfig c;
    c.batch_size = 8;
    c.embedding_dim = 4;
    c.hidden = {8};
    auto model = CreateWideDeep(c);
    ASSERT_TRUE(model.ok());
    model_ = std::move(*model);
    optimizer_.kind = OptimizerKind::kAdagrad;
    optimizer_.lr = 0.1f;
  }
  void TearDown() override { fs::remove_all(root_); }

  // Shards (rows 1..50 trained by one update, so they differ from their initial values),
  // then the MANIFEST.
  void WriteCheckpoint(int64_t step, float value) {
    std::vector<float> dense(model_->NumDenseParams(), value);
    std::vector<ShardDigest> digests;
    ASSERT_TRUE(PrepareCheckpointDir(root_, step).ok());
    for (int k = 0; k < kShards; ++k) {
      const ShardConfig sc = MakeShardConfig(*model_, k, kShards, kSeed, optimizer_);
      ParamShard shard(sc, dense.data() + sc.dense_begin);
      std::vector<uint64_t> ids;
      for (uint64_t id = 1; id <= 50; ++id) {
        if (ShardOfId(id, kShards) == k) ids.push_back(id);
      }
      std::vector<float> grads(ids.size() * model_->SparseRowDim(), value);
      shard.Apply(nullptr, ids.data(), ids.size(), grads.data());
      auto d = shard.Save(ShardPath(root_, step, k, kShards));
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      digests.push_back(*d);
    }
    ASSERT_TRUE(WriteManifest(root_, step, digests).ok());
  }
  void Final(int64_t step) { ASSERT_TRUE(WriteFinalMarker(root_, step).ok()); }
  void FlipByte(int64_t step, int shard) {
    const std::string path = ShardPath(root_, step, shard, kShards);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0x55));
  }

  WatchOptions Options() const {
    WatchOptions o;
    o.checkpoint_dir = root_;
    o.num_shards = kShards;
    o.poll_interval = std::chrono::milliseconds(5);
    o.wait_timeout = std::chrono::seconds(30);  // never reached by the passing tests
    return o;
  }
  // Real loads; the "evaluation" reports the dense value as the accuracy. `after` runs
  // after each report (to write what the run writes next).
  WatchCallbacks Callbacks(std::function<void(int64_t, bool)> after = nullptr) {
    WatchCallbacks cb;
    cb.load = [this](const Checkpoint& c) -> StatusOr<std::unique_ptr<ParamClient>> {
      KT_ASSIGN_OR_RETURN(auto p,
                          CheckpointParams::Load(*model_, kSeed, optimizer_, root_, c, kShards));
      return std::unique_ptr<ParamClient>(std::move(p));
    };
    cb.evaluate = [this](ParamClient& p) -> StatusOr<EvalMetrics> {
      std::vector<float> dense(model_->NumDenseParams());
      KT_RETURN_IF_ERROR(p.Pull({}, nullptr, dense.data()));
      EvalMetrics m;
      m.examples = 1;
      m.accuracy = dense.front();
      return m;
    };
    cb.report = [this, after](int64_t step, const EvalMetrics& m, bool final) -> Status {
      reports_.push_back({step, final});
      values_.push_back(m.accuracy);
      if (after) after(step, final);
      return Status::Ok();
    };
    return cb;
  }

  static inline int counter_ = 0;
  std::string root_;
  std::unique_ptr<Model> model_;
  OptimizerConfig optimizer_;
  std::vector<std::pair<int64_t, bool>> reports_;
  std::vector<double> values_;
};

using Reports = std::vector<std::pair<int64_t, bool>>;

TEST_F(EvaluatorTest, CheckpointParamsPullEveryRowFromItsShard) {
  WriteCheckpoint(10, 0.25f);
  auto list = ListCheckpoints(root_, kShards);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->committed.size(), 1u);
  auto params =
      CheckpointParams::Load(*model_, kSeed, optimizer_, root_, list->committed[0], kShards);
  ASSERT_TRUE(params.ok()) << params.status().ToString();
  const int dim = model_->SparseRowDim();
  std::vector<uint64_t> ids = {3, 1, 50, 2, 49, 1000};  // 1000: never trained
  std::vector<float> rows(ids.size() * dim), dense(model_->NumDenseParams());
  ASSERT_TRUE((*params)->Pull(ids, rows.data(), dense.data()).ok());
  for (float v : dense) ASSERT_EQ(v, 0.25f);
  // The same rows straight from the shard that owns each id.
  for (size_t i = 0; i < ids.size(); ++i) {
    const int k = ShardOfId(ids[i], kShards);
    std::vector<float> init(model_->NumDenseParams());
    const ShardConfig sc = MakeShardConfig(*model_, k, kShards, kSeed, optimizer_);
    ParamShard shard(sc, init.data() + sc.dense_begin);
    ASSERT_TRUE(LoadShard(shard, root_, list->committed[0], k, kShards).ok());
    std::vector<float> want(dim);
    shard.PullSparse(&ids[i], 1, want.data());
    for (int d = 0; d < dim; ++d) EXPECT_EQ(rows[i * dim + d], want[d]) << "id " << ids[i];
  }
  // A trained row is not its initial value (the routing is tested, not the init).
  std::vector<float> initial(dim);
  InitSparseRow(kSeed, 3, dim, initial.data());
  EXPECT_NE(std::vector<float>(rows.begin(), rows.begin() + dim), initial);
  EXPECT_EQ((*params)->Push(1, {}, nullptr, dense.data()).code(), StatusCode::kFailedPrecondition);
}

TEST_F(EvaluatorTest, EvaluatesEveryCheckpointInOrderAndEndsAtTheFinalOne) {
  WriteCheckpoint(20, 2);
  WriteCheckpoint(10, 1);
  WriteCheckpoint(30, 3);
  Final(30);
  auto r = WatchCheckpoints(Options(), Callbacks());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(reports_, (Reports{{10, false}, {20, false}, {30, true}}));
  EXPECT_EQ(values_, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(r->final_step, 30);
  EXPECT_EQ(r->final_metrics.accuracy, 3);
  EXPECT_EQ(r->evaluated, 3);
  EXPECT_EQ(r->corrupt, 0);
}

TEST_F(EvaluatorTest, WaitsForCheckpointsAndTheFinalMarkerWhileTrainingRuns) {
  WriteCheckpoint(10, 1);
  // Training goes on while the evaluator evaluates: the next checkpoint, then the end.
  auto r = WatchCheckpoints(Options(), Callbacks([this](int64_t step, bool) {
                              if (step == 10) WriteCheckpoint(20, 2);
                              if (step == 20) {
                                WriteCheckpoint(30, 3);
                                Final(30);
                              }
                            }));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(reports_, (Reports{{10, false}, {20, false}, {30, true}}));
  EXPECT_EQ(r->final_step, 30);
}

TEST_F(EvaluatorTest, AFinalMarkerAfterItsCheckpointWasEvaluatedReportsItAsFinal) {
  WriteCheckpoint(10, 1);
  auto r = WatchCheckpoints(Options(), Callbacks([this](int64_t step, bool final) {
                              if (step == 10 && !final) Final(10);
                            }));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(reports_, (Reports{{10, false}, {10, true}}));  // evaluated once
  EXPECT_EQ(r->evaluated, 1);
}

TEST_F(EvaluatorTest, AFinalMarkerFromAnEarlierShorterRunIsNotTheEnd) {
  WriteCheckpoint(10, 1);
  Final(10);  // an earlier run of 10 steps
  WatchOptions o = Options();
  o.final_step_at_least = 20;  // this run's --steps
  auto r = WatchCheckpoints(o, Callbacks([this](int64_t step, bool) {
                              if (step == 10) {
                                WriteCheckpoint(20, 2);
                                Final(20);
                              }
                            }));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(reports_, (Reports{{10, false}, {20, true}}));
}

TEST_F(EvaluatorTest, ACorruptCheckpointIsSkippedAndTheNextOneEvaluated) {
  WriteCheckpoint(10, 1);
  WriteCheckpoint(20, 2);
  FlipByte(10, 1);
  Final(20);
  auto r = WatchCheckpoints(Options(), Callbacks());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(reports_, (Reports{{20, true}}));
  EXPECT_EQ(r->corrupt, 1);
}

TEST_F(EvaluatorTest, ACorruptFinalCheckpointFails) {
  WriteCheckpoint(10, 1);
  WriteCheckpoint(20, 2);
  FlipByte(20, 0);
  Final(20);
  auto r = WatchCheckpoints(Options(), Callbacks());
  ASSERT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("final checkpoint"), std::string::npos);
  EXPECT_NE(r.status().message().find("ckpt-20"), std::string::npos);
  EXPECT_NE(r.status().message().find("SHA-256"), std::string::npos) << r.status().message();
  EXPECT_EQ(reports_, (Reports{{10, false}}));
}

TEST_F(EvaluatorTest, AFinalMarkerNamingNoCommittedCheckpointFails) {
  WriteCheckpoint(10, 1);
  Final(20);
  auto r = WatchCheckpoints(Options(), Callbacks());
  ASSERT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("not a committed checkpoint"), std::string::npos)
      << r.status().message();
}

TEST_F(EvaluatorTest, NoCheckpointWithinTheTimeoutFailsSayingSo) {
  WatchOptions o = Options();
  o.wait_timeout = std::chrono::milliseconds(50);
  auto r = WatchCheckpoints(o, Callbacks());
  ASSERT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("no checkpoint appeared in " + root_), std::string::npos)
      << r.status().message();
}

TEST_F(EvaluatorTest, NoFinalMarkerWithinTheTimeoutFailsNamingTheLastCheckpoint) {
  WriteCheckpoint(10, 1);
  WatchOptions o = Options();
  o.wait_timeout = std::chrono::milliseconds(50);
  auto r = WatchCheckpoints(o, Callbacks());
  ASSERT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("no checkpoint after step 10 and no FINAL"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(reports_, (Reports{{10, false}}));
}

TEST_F(EvaluatorTest, AMalformedFinalMarkerIsAnError) {
  WriteCheckpoint(10, 1);
  ASSERT_TRUE(storage::WriteObject(root_ + "/FINAL", "ten").ok());
  auto r = WatchCheckpoints(Options(), Callbacks());
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("FINAL"), std::string::npos);
}

}  // namespace
}  // namespace kubetrain::trainer
