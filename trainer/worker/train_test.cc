#include "trainer/worker/train.h"

#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>

#include "trainer/data/generator.h"
#include "trainer/ps/checkpoint.h"

namespace kubetrain::trainer {
namespace {

namespace fs = std::filesystem;

// One compute thread: these tests check numbers, not speed, and OpenMP threads that spin
// while waiting make them many times slower on a shared, oversubscribed CI machine.
class OneComputeThread : public ::testing::Environment {
 public:
  void SetUp() override { SetComputeThreads(1); }
};
[[maybe_unused]] ::testing::Environment* const kOneComputeThread =
    ::testing::AddGlobalTestEnvironment(new OneComputeThread);

class TrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("kt_train_test_" + std::to_string(::getpid()));
    fs::create_directories(root_);
    GeneratorOptions g;
    g.sample_seed = 2;
    auto oracle = WriteSyntheticCriteo(File("train.tsv"), 20000, g);
    ASSERT_TRUE(oracle.ok());
    g.sample_seed = 3;
    oracle = WriteSyntheticCriteo(File("eval.tsv"), 4000, g);
    ASSERT_TRUE(oracle.ok());
    oracle_auc_ = *oracle;
    config_.batch_size = 128;
    config_.embedding_dim = 8;
    config_.hidden = {64, 32};
    optimizer_.kind = OptimizerKind::kAdam;
    optimizer_.lr = 0.003f;
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string File(const std::string& name) const { return (root_ / name).string(); }
  // The losses of one run of o.steps steps from a fresh model; when `lines` is
  // set, also how many lines it read.
  std::vector<float> StraightLosses(const TrainOptions& o, int64_t* lines = nullptr) {
    auto model = CreateWideDeep(config_);
    EXPECT_TRUE(model.ok());
    if (!model.ok()) return {};
    LocalParams params(**model, 1, optimizer_);
    StripeReader train(Reader("train.tsv", true));
    auto r = Train(**model, train, params, o, 0);
    EXPECT_TRUE(r.ok());
    if (lines != nullptr) *lines = train.lines_read();
    return r.ok() ? r->losses : std::vector<float>();
  }
  // Restores the checkpoint in `ckpt` (taken at step `from`) into a fresh model, skips the
  // batches already trained and trains the rest of `o`: every loss equals the straight run's.
  void ExpectResumedRunContinuesExactly(const std::string& ckpt, const TrainOptions& o, int from,
                                        const std::vector<float>& straight) {
    auto model = CreateWideDeep(config_);
    ASSERT_TRUE(model.ok());
    LocalParams params(**model, 1, optimizer_);
    auto restored = params.Restore(ckpt);
    ASSERT_TRUE(restored.ok()) << restored.status().ToString();
    ASSERT_TRUE(restored->has_value());
    EXPECT_EQ(**restored, from);
    StripeReader train(Reader("train.tsv", true));
    Batch skip;
    for (int i = 0; i < from; ++i) ASSERT_TRUE(train.Next(config_.batch_size, &skip).ok());
    auto r = Train(**model, train, params, o, from);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->losses.size(), straight.size() - static_cast<size_t>(from));
    for (size_t i = 0; i < r->losses.size(); ++i) {
      EXPECT_FLOAT_EQ(r->losses[i], straight[from + i]) << "step " << from + i + 1;
    }
  }
  // Trains a fresh Wide & Deep for `steps` steps on train.tsv (one process), then evaluates it
  // on eval.tsv; fails the test (and returns nullopt) if either errs.
  struct TrainedModel {
    TrainResult train;
    EvalMetrics eval;
  };
  std::optional<TrainedModel> TrainThenEvaluate(int64_t steps) {
    auto model = CreateWideDeep(config_);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    if (!model.ok()) return std::nullopt;
    LocalParams params(**model, 1, optimizer_);
    StripeReader train(Reader("train.tsv", true));
    TrainOptions o;
    o.steps = steps;
    o.log_every = 0;
    auto r = Train(**model, train, params, o, 0);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return std::nullopt;
    StripeReader eval(Reader("eval.tsv", false));
    auto m = Evaluate(**model, eval, params, 0);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return std::nullopt;
    return TrainedModel{*std::move(r), *m};
  }
  ReaderOptions Reader(const std::string& name, bool loop) const {
    return ReaderOptions{{File(name)}, DataFormat::kCriteoTsv, 0, 0, 1, 0, loop};
  }

  fs::path root_;
  double oracle_auc_ = 0;
  WideDeepConfig config_;
  OptimizerConfig optimizer_;
};

TEST_F(TrainTest, PhasesAccountForTheRunsTime) {
  auto model = CreateWideDeep(config_);
  ASSERT_TRUE(model.ok());
  LocalParams params(**model, 1, optimizer_);
  StripeReader train(Reader("train.tsv", true));
  TrainOptions o;
  o.steps = 20;
  o.log_every = 0;
  const auto cpu = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  const double cpu0 = cpu();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Train(**model, train, params, o, 0);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu_used = cpu() - cpu0;
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TrainResult::Phases& p = r->phases;
  EXPECT_GT(p.read, 0);
  EXPECT_GT(p.pull, 0);
  EXPECT_GT(p.compute, 0);
  EXPECT_GT(p.push, 0);
  EXPECT_LE(p.read + p.pull + p.compute + p.push, wall);
  // Per phase, the process's CPU time; all of it within the run's.
  EXPECT_GT(p.compute_cpu, 0);
  EXPECT_GE(p.read_cpu, 0);
  EXPECT_GE(p.pull_cpu, 0);
  EXPECT_GE(p.push_cpu, 0);
  EXPECT_LE(p.read_cpu + p.pull_cpu + p.compute_cpu + p.push_cpu, cpu_used);
  // The CPU rate covers the training loop, within the CPU time of the whole call.
  const double samples = 20.0 * config_.batch_size;
  ASSERT_GT(r->samples_per_cpu_s, 0);
  EXPECT_LE(samples / r->samples_per_cpu_s, cpu_used);
  EXPECT_GT(samples / r->samples_per_cpu_s, 0.5 * cpu_used);
}

// LocalParams' dense parameters as a copy per Pull, as a client without DenseInPlace()
// (a parameter server) gives them.
class CopyingParams : public ParamClient {
 public:
  explicit CopyingParams(LocalParams& local) : local_(local) {}
  Status Pull(const std::vector<uint64_t>& ids, float* rows, float* dense) override {
    if (dense == nullptr) return InvalidArgument("a copy was not asked for");
    return local_.Pull(ids, rows, dense);
  }
  Status Push(int64_t step, const std::vector<uint64_t>& ids, const float* row_grads,
              const float* dense_grad) override {
    return local_.Push(step, ids, row_grads, dense_grad);
  }
  Status SaveCheckpoint(const std::string& dir, int64_t step) override {
    return local_.SaveCheckpoint(dir, step);
  }

 private:
  LocalParams& local_;
};

// Training and evaluation from LocalParams' own dense array (no copy per step, and the
// optimizer applied layer by layer during the backward pass) give what a copy per step and
// one dense update per Push give, and the model holds the parameters' values afterwards.
TEST_F(TrainTest, ComputingFromTheLocalDenseArrayMatchesACopyPerStep) {
  struct Run {
    std::vector<float> losses, dense, pulled;
    double auc = 0;
  };
  const auto run = [&](bool copy) {
    Run out;
    auto model = CreateWideDeep(config_);
    EXPECT_TRUE(model.ok());
    if (!model.ok()) return out;
    LocalParams local(**model, 1, optimizer_);
    EXPECT_EQ(local.DenseInPlace() != nullptr, true);
    EXPECT_TRUE(local.UpdatesDenseInSlices());
    CopyingParams copying(local);
    EXPECT_FALSE(copying.UpdatesDenseInSlices());
    ParamClient& params = copy ? static_cast<ParamClient&>(copying) : local;
    StripeReader train(Reader("train.tsv", true));
    TrainOptions o;
    o.steps = 25;
    o.log_every = 0;
    auto r = Train(**model, train, params, o, 0);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return out;
    out.losses = r->losses;
    StripeReader eval(Reader("eval.tsv", false));
    auto m = Evaluate(**model, eval, params, 1000);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (m.ok()) out.auc = m->auc;
    out.dense = (*model)->dense_params();
    out.pulled.resize(out.dense.size());
    EXPECT_TRUE(local.Pull({}, nullptr, out.pulled.data()).ok());
    return out;
  };
  const Run copied = run(true), in_place = run(false);
  ASSERT_EQ(copied.losses.size(), 25u);
  EXPECT_EQ(in_place.losses, copied.losses);
  EXPECT_EQ(in_place.auc, copied.auc);
  EXPECT_EQ(in_place.pulled, copied.pulled);
  // After a run from the array the model's own parameters are the array's values.
  EXPECT_EQ(in_place.dense, in_place.pulled);
}

TEST_F(TrainTest, WideDeepLearnsGroundTruth) {
  const auto trained = TrainThenEvaluate(400);
  ASSERT_TRUE(trained);
  const TrainResult* r = &trained->train;
  const EvalMetrics* m = &trained->eval;
  EXPECT_EQ(r->last_step, 400);
  EXPECT_EQ(m->examples, 4000);
  // Far above chance, within reach of the best achievable (the ground truth's own AUC,
  // about 0.91 here; 51k samples over 20k distinct lines do not get all the way).
  EXPECT_GT(m->auc, 0.8) << "oracle " << oracle_auc_;
  EXPECT_LT(m->auc, oracle_auc_ + 0.02) << "better than the truth: evaluation data leaks";
  EXPECT_LT(m->log_loss, 0.6);
  // Loss went down.
  double first = 0, last = 0;
  for (int i = 0; i < 50; ++i) first += r->losses[i], last += r->losses[350 + i];
  EXPECT_LT(last, first * 0.95);
}

// Two compute threads train in two data-parallel lanes (half a batch each, their dense
// gradients summed): the same run twice gives the same bits, and it follows the one-thread
// run up to rounding (the sums are in another order), to the same evaluation AUC.
TEST_F(TrainTest, TwoComputeLanesAreDeterministicAndFollowTheOneThreadRun) {
  struct Run {
    std::vector<float> losses;
    double auc = 0;
  };
  const auto run = [&](int threads) {
    SetComputeThreads(threads);
    Run out;
    if (const auto trained = TrainThenEvaluate(150)) {
      out = Run{trained->train.losses, trained->eval.auc};
    }
    SetComputeThreads(1);
    return out;
  };
  const Run two = run(2), again = run(2), one = run(1);
  ASSERT_EQ(one.losses.size(), 150u);
  ASSERT_EQ(two.losses.size(), 150u);
  EXPECT_EQ(two.losses, again.losses);
  EXPECT_EQ(two.auc, again.auc);
  EXPECT_NE(two.losses, one.losses) << "two threads did not run in lanes";
  for (size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_NEAR(two.losses[i], one.losses[i], 1e-3 * one.losses[i]) << "step " << i + 1;
  }
  EXPECT_NEAR(two.auc, one.auc, 0.002);
}

TEST_F(TrainTest, ResumeFromCheckpointContinuesExactly) {
  TrainOptions o;
  o.log_every = 0;
  o.steps = 20;
  const std::vector<float> straight = StraightLosses(o);
  ASSERT_EQ(straight.size(), 20u);
  const std::string ckpt = File("ckpt");
  {
    auto model = CreateWideDeep(config_);
    ASSERT_TRUE(model.ok());
    LocalParams params(**model, 1, optimizer_);
    StripeReader train(Reader("train.tsv", true));
    TrainOptions first = o;
    first.steps = 10;
    ASSERT_TRUE(Train(**model, train, params, first, 0).ok());
    ASSERT_TRUE(params.SaveCheckpoint(ckpt, 10).ok());
  }
  ExpectResumedRunContinuesExactly(ckpt, o, 10, straight);
}

// SIGTERM (o.stop) during step 6: that step is finished, saved and committed, and the run
// ends there; a run resumed from it continues exactly as the straight run does.
TEST_F(TrainTest, StopSavesTheStepReachedAndTheResumedRunContinuesExactly) {
  TrainOptions o;
  o.log_every = 0;
  o.steps = 12;
  const std::vector<float> straight = StraightLosses(o);
  ASSERT_EQ(straight.size(), 12u);
  const std::string ckpt = File("ckpt");
  {
    auto model = CreateWideDeep(config_);
    ASSERT_TRUE(model.ok());
    LocalParams params(**model, 1, optimizer_);
    StripeReader train(Reader("train.tsv", true));
    TrainOptions first = o;
    first.checkpoint_dir = ckpt;
    first.checkpoint_every = 1000;  // never: only the stop saves
    int polls = 0;
    first.stop = [&polls] { return ++polls > 6; };  // once before step 1, then after each step
    auto r = Train(**model, train, params, first, 0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->stopped);
    EXPECT_EQ(r->last_step, 6);
    EXPECT_EQ(r->last_saved, 6);
  }
  auto latest = LatestCheckpoint(ckpt, 1);
  ASSERT_TRUE(latest.ok());
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ(**latest, 6);
  ExpectResumedRunContinuesExactly(ckpt, o, 6, straight);
}

// A stop already requested before the first step trains nothing and saves nothing; without
// a checkpoint directory a stop ends the run at the step reached, saving nothing.
TEST_F(TrainTest, StopBeforeTheFirstStepOrWithoutCheckpointDirSavesNothing) {
  auto model = CreateWideDeep(config_);
  ASSERT_TRUE(model.ok());
  LocalParams params(**model, 1, optimizer_);
  StripeReader train(Reader("train.tsv", true));
  TrainOptions o;
  o.log_every = 0;
  o.steps = 10;
  o.checkpoint_dir = File("ckpt");
  o.stop = [] { return true; };
  auto r = Train(**model, train, params, o, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->last_step, 0);
  EXPECT_EQ(r->last_saved, -1);
  EXPECT_FALSE(fs::exists(File("ckpt")));
  int polls = 0;
  o.checkpoint_dir.clear();
  o.stop = [&polls] { return ++polls > 3; };
  r = Train(**model, train, params, o, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->last_step, 3);
  EXPECT_EQ(r->last_saved, -1);
}

// A PS that got SIGTERM asks for a checkpoint (o.save_now): the step is saved and training
// goes on to the end.
TEST_F(TrainTest, SaveNowCommitsTheStepAndTrainingGoesOn) {
  auto model = CreateWideDeep(config_);
  ASSERT_TRUE(model.ok());
  LocalParams params(**model, 1, optimizer_);
  StripeReader train(Reader("train.tsv", true));
  TrainOptions o;
  o.log_every = 0;
  o.steps = 8;
  o.checkpoint_dir = File("ckpt");
  int step = 0;
  o.save_now = [&step] { return ++step == 5; };
  auto r = Train(**model, train, params, o, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->stopped);
  EXPECT_EQ(r->last_step, 8);
  EXPECT_EQ(r->last_saved, 5);
  auto list = ListCheckpoints(File("ckpt"), 1);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->committed.size(), 1u);
  EXPECT_EQ(list->committed[0].step, 5);
}

// The next batches are read on a background thread while a step computes; none past the
// last step, so a second Train on the same reader continues exactly where the first
// stopped, as one longer run does.
TEST_F(TrainTest, ReadsNoBatchPastTheLastStepSoARunCanContinue) {
  TrainOptions o;
  o.log_every = 0;
  o.steps = 12;
  int64_t lines = 0;
  const std::vector<float> straight = StraightLosses(o, &lines);
  ASSERT_EQ(straight.size(), 12u);
  EXPECT_EQ(lines, 12 * config_.batch_size);
  auto model = CreateWideDeep(config_);
  ASSERT_TRUE(model.ok());
  LocalParams params(**model, 1, optimizer_);
  StripeReader train(Reader("train.tsv", true));
  TrainOptions first = o;
  first.steps = 7;
  auto a = Train(**model, train, params, first, 0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(train.lines_read(), 7 * config_.batch_size);
  auto b = Train(**model, train, params, o, 7);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(train.lines_read(), 12 * config_.batch_size);
  std::vector<float> joined = a->losses;
  joined.insert(joined.end(), b->losses.begin(), b->losses.end());
  EXPECT_EQ(joined, straight);
}

// A read that fails (here: too many malformed lines in the third batch) ends the run with
// its error at its step, after the steps before it were trained.
TEST_F(TrainTest, AReadErrorEndsTheRunAtItsStep) {
  std::ifstream in(File("train.tsv"));
  std::string text, line;
  for (int i = 0; i < 2 * config_.batch_size + 10 && std::getline(in, line); ++i) {
    text += line + "\n";
  }
  for (int i = 0; i < 200; ++i) text += "garbage\n";
  std::ofstream(File("bad.tsv")) << text;
  auto model = CreateWideDeep(config_);
  ASSERT_TRUE(model.ok());
  LocalParams params(**model, 1, optimizer_);
  ReaderOptions ro = Reader("bad.tsv", true);
  ro.max_bad_lines = 5;
  StripeReader train(ro);
  TrainOptions o;
  o.steps = 10;
  o.log_every = 0;
  o.loss_curve_path = File("curve.csv");
  auto r = Train(**model, train, params, o, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("malformed lines"), std::string::npos)
      << r.status().message();
  std::ifstream curve(File("curve.csv"));
  int steps = 0;
  while (std::getline(curve, line)) ++steps;
  EXPECT_EQ(steps, 2);
}

TEST_F(TrainTest, DivergenceIsAnError) {
  auto model = CreateWideDeep(config_);
  ASSERT_TRUE(model.ok());
  OptimizerConfig wild;
  wild.kind = OptimizerKind::kSgd;
  wild.lr = 1e8f;
  LocalParams params(**model, 1, wild);
  StripeReader train(Reader("train.tsv", true));
  TrainOptions o;
  o.steps = 50;
  o.log_every = 0;
  auto r = Train(**model, train, params, o, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("learning rate"), std::string::npos);
}

}  // namespace
}  // namespace kubetrain::trainer
