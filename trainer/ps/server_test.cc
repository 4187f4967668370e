// PsServer and RemoteParams together, in one process over loopback: the synchronous
// barrier, configuration checks, done counting and shutdown.
#include "trainer/ps/server.h"

#include <gtest/gtest.h>

#include <thread>

#include "trainer/worker/remote.h"

namespace kubetrain::trainer {
namespace {

class PsServerTest : public ::testing::Test {
 protected:
  void Start(bool sync, int trainers) {
    MlpClassifierConfig mc;
    mc.batch_size = 2;
    mc.num_features = 3;
    mc.num_classes = 2;
    mc.hidden = {4};
    auto model = CreateMlpClassifier(mc);
    ASSERT_TRUE(model.ok());
    model_ = std::move(*model);
    init_.resize(model_->NumDenseParams());
    model_->InitDense(1, init_.data());
    OptimizerConfig opt;
    opt.kind = OptimizerKind::kSgd;
    opt.lr = 0.5f;
    shard_ = std::make_unique<ParamShard>(MakeShardConfig(*model_, 0, 1, 1, opt), init_.data());
    auto listener = Listener::Listen(0);
    ASSERT_TRUE(listener.ok());
    port_ = (*listener)->port();
    key_.fill(5);
    PsServerOptions o;
    o.num_trainers = trainers;
    o.sync = sync;
    o.key = key_;
    o.total_dense = model_->NumDenseParams();
    server_ = std::make_unique<PsServer>(shard_.get(), std::move(*listener), o);
    serve_ = std::thread([this] { serve_status_ = server_->Serve(); });
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (serve_.joinable()) serve_.join();
  }
  StatusOr<std::unique_ptr<RemoteParams>> Client(int rank, const Model& model) {
    RemoteOptions o;
    o.ps_addresses = {"127.0.0.1:" + std::to_string(port_)};
    o.key = key_;
    o.rank = rank;
    o.startup_timeout = std::chrono::seconds(10);
    return RemoteParams::Connect(model, o);
  }

  std::unique_ptr<Model> model_;
  std::vector<float> init_;
  std::unique_ptr<ParamShard> shard_;
  std::unique_ptr<PsServer> server_;
  std::thread serve_;
  Status serve_status_;
  int port_ = 0;
  AuthKey key_;
};

TEST_F(PsServerTest, SyncStepAppliesTheMeanOfAllWorkersGradientsOnce) {
  Start(/*sync=*/true, /*trainers=*/2);
  const size_t n = model_->NumDenseParams();
  std::vector<float> g1(n, 1.f), g2(n, 3.f);
  Status s1, s2;
  // Both pushes block until the second one arrives; then both return.
  std::thread w1([&] {
    auto c = Client(0, *model_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    s1 = (*c)->Push(1, {}, nullptr, g1.data());
  });
  std::thread w2([&] {
    auto c = Client(1, *model_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    s2 = (*c)->Push(1, {}, nullptr, g2.data());
  });
  w1.join();
  w2.join();
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  ASSERT_TRUE(s2.ok()) << s2.ToString();
  EXPECT_EQ(shard_->updates(), 1);
  std::vector<float> now(n);
  shard_->PullDense(now.data());
  for (size_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(now[i], init_[i] - 0.5f * 2.f) << i;
}

TEST_F(PsServerTest, SyncPushResentAfterReconnectIsNotCountedTwice) {
  Start(/*sync=*/true, /*trainers=*/2);
  const size_t n = model_->NumDenseParams();
  std::vector<float> g1(n, 1.f), g2(n, 3.f);
  Status s_first, s_resent, s_other;
  auto first = Client(0, *model_);
  auto resent = Client(0, *model_);  // the same worker after a reconnect
  auto other = Client(1, *model_);
  ASSERT_TRUE(first.ok() && resent.ok() && other.ok());
  std::thread a([&] { s_first = (*first)->Push(1, {}, nullptr, g1.data()); });
  std::thread b([&] { s_resent = (*resent)->Push(1, {}, nullptr, g1.data()); });
  std::thread c([&] { s_other = (*other)->Push(1, {}, nullptr, g2.data()); });
  a.join();
  b.join();
  c.join();
  ASSERT_TRUE(s_first.ok() && s_resent.ok() && s_other.ok());
  EXPECT_EQ(shard_->updates(), 1);
  std::vector<float> now(n);
  shard_->PullDense(now.data());
  EXPECT_FLOAT_EQ(now[0], init_[0] - 0.5f * 2.f);  // mean of 1 and 3, not of 1, 1 and 3
  // A worker connecting now learns that step 1 is done.
  auto late = Client(1, *model_);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ((*late)->last_ps_step(), 1);
}

TEST_F(PsServerTest, AsyncAppliesEveryPush) {
  Start(/*sync=*/false, /*trainers=*/2);
  auto c = Client(0, *model_);
  ASSERT_TRUE(c.ok());
  std::vector<float> g(model_->NumDenseParams(), 1.f);
  ASSERT_TRUE((*c)->Push(1, {}, nullptr, g.data()).ok());
  ASSERT_TRUE((*c)->Push(2, {}, nullptr, g.data()).ok());
  EXPECT_EQ(shard_->updates(), 2);
  std::vector<float> pulled(model_->NumDenseParams());
  ASSERT_TRUE((*c)->Pull({}, nullptr, pulled.data()).ok());
  EXPECT_FLOAT_EQ(pulled[0], init_[0] - 1.f);
}

TEST_F(PsServerTest, WorkerWithAnotherModelIsRefused) {
  Start(false, 1);
  MlpClassifierConfig other;
  other.batch_size = 2;
  other.num_features = 5;  // different input width: different dense size
  other.hidden = {4};
  auto model = CreateMlpClassifier(other);
  ASSERT_TRUE(model.ok());
  auto c = Client(0, **model);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("same flags"), std::string::npos) << c.status().message();
}

TEST_F(PsServerTest, DoneCountingAndShutdownEndServe) {
  Start(false, 2);
  auto a = Client(0, *model_);
  auto b = Client(1, *model_);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  auto n = (*a)->MarkDone();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  n = (*b)->MarkDone();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  n = (*a)->MarkDone();  // idempotent per worker
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  ASSERT_TRUE((*a)->ShutdownAll().ok());
  serve_.join();
  EXPECT_TRUE(serve_status_.ok());
}

}  // namespace
}  // namespace kubetrain::trainer
