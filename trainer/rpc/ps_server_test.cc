// PsServer and RemoteParams together, in one process over loopback: the synchronous
// barrier, configuration checks, done counting and shutdown.
#include "trainer/rpc/ps_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "trainer/rpc/protocol.h"
#include "trainer/rpc/remote_params.h"

namespace kubetrain::trainer {
namespace {

// A raw TCP connection to the server under test, for peers that do not hold the key.
int RawConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Reads until the server closes the connection or `timeout` passes; true if it closed.
bool ClosedByServer(int fd, std::chrono::milliseconds timeout) {
  const timeval tv{static_cast<time_t>(timeout.count() / 1000),
                   static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[256];
  while (std::chrono::steady_clock::now() < deadline) {
    const ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
  return false;
}

int OpenFds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

template <typename Pred>
bool PollUntil(Pred pred, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // poll interval
  }
  return true;
}

class PsServerTest : public ::testing::Test {
 protected:
  void Start(bool sync, int trainers, PsServerOptions o = {}) {
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
    shard_config_ = MakeShardConfig(*model_, 0, 1, 1, opt);
    shard_ = std::make_unique<ParamShard>(shard_config_, init_.data());
    auto listener = Listener::Listen(0);
    ASSERT_TRUE(listener.ok());
    port_ = (*listener)->port();
    key_.fill(5);
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
  StatusOr<std::unique_ptr<RemoteParams>> Client(int rank, const Model& model,
                                                 bool pipeline = false) {
    RemoteOptions o;
    o.pipeline = pipeline;
    o.ps_addresses = {"127.0.0.1:" + std::to_string(port_)};
    o.key = key_;
    o.rank = rank;
    o.startup_timeout = std::chrono::seconds(10);
    return RemoteParams::Connect(model, o);
  }

  std::unique_ptr<Model> model_;
  std::vector<float> init_;
  ShardConfig shard_config_;
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

TEST_F(PsServerTest, PipelinedPushesAreAppliedOnceInOrderAndPrefetchesAreOneStepBehind) {
  Start(/*sync=*/false, /*trainers=*/1);
  auto c = Client(0, *model_, /*pipeline=*/true);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const size_t n = model_->NumDenseParams();
  std::vector<float> g(n, 1.f), dense(n);
  // Step 1: nothing prefetched, a plain pull.
  ASSERT_TRUE((*c)->Pull({}, nullptr, dense.data()).ok());
  EXPECT_FLOAT_EQ(dense[0], init_[0]);
  (*c)->Prefetch({});
  ASSERT_TRUE((*c)->Push(1, {}, nullptr, g.data()).ok());
  std::fill(g.begin(), g.end(), 100.f);  // the caller's next step overwrites its gradients
  // Step 2 gets the prefetch, queued before push 1: without it.
  ASSERT_TRUE((*c)->Pull({}, nullptr, dense.data()).ok());
  EXPECT_FLOAT_EQ(dense[0], init_[0]);
  (*c)->Prefetch({});
  std::fill(g.begin(), g.end(), 1.f);
  ASSERT_TRUE((*c)->Push(2, {}, nullptr, g.data()).ok());
  // Step 3's prefetch was queued after push 1 and before push 2.
  ASSERT_TRUE((*c)->Pull({}, nullptr, dense.data()).ok());
  EXPECT_FLOAT_EQ(dense[0], init_[0] - 0.5f);
  // DoneCount waits for every queued push: both applied once, with the gradients as they
  // were when pushed (lr 0.5 x 1, twice).
  ASSERT_TRUE((*c)->DoneCount().ok());
  EXPECT_EQ(shard_->updates(), 2);
  EXPECT_EQ((*c)->pushes_to(0), 2u);
  ASSERT_TRUE((*c)->Pull({}, nullptr, dense.data()).ok());  // no prefetch: fresh
  EXPECT_FLOAT_EQ(dense[0], init_[0] - 1.f);
}

TEST_F(PsServerTest, PipelinedCheckpointHoldsTheLastPush) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kt_pipe_ckpt_" + std::to_string(::getpid())))
          .string();
  PsServerOptions po;
  po.checkpoint_dir = dir;
  Start(/*sync=*/false, /*trainers=*/1, po);
  auto c = Client(0, *model_, /*pipeline=*/true);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<float> g(model_->NumDenseParams(), 1.f);
  for (int step = 1; step <= 5; ++step) ASSERT_TRUE((*c)->Push(step, {}, nullptr, g.data()).ok());
  ASSERT_TRUE((*c)->SaveCheckpoint(dir, 5).ok());
  EXPECT_EQ(shard_->updates(), 5);  // the checkpoint was taken after every queued push
  std::filesystem::remove_all(dir);
}

// A worker's connection speaking the protocol by hand, to re-send a push as a worker does
// after a lost reply.
class RawWorker {
 public:
  RawWorker(int port, const AuthKey& key, int32_t rank, uint64_t incarnation, size_t dense) {
    auto conn = Dial("127.0.0.1", port, std::chrono::seconds(5));
    EXPECT_TRUE(conn.ok());
    conn_ = std::move(*conn);
    EXPECT_TRUE(conn_->AuthenticateAsClient(key).ok());
    HelloRequest hello;
    hello.rank = rank;
    hello.total_dense = dense;
    hello.row_dim = 0;
    hello.incarnation = incarnation;
    EXPECT_EQ(Call(kHello, EncodeHello(hello)), kOk);
  }
  uint8_t Push(uint64_t seq, const std::vector<float>& dense) {
    std::string payload;
    EncodePush(1, seq, {}, {}, nullptr, 0, WireFloat::kF32, &payload);
    return Call(kPush, payload,
                std::string_view(reinterpret_cast<const char*>(dense.data()), dense.size() * 4));
  }
  uint8_t Call(uint8_t type, std::string_view payload, std::string_view payload2 = {}) {
    EXPECT_TRUE(conn_->Send(type, payload, payload2).ok());
    uint8_t reply_type = 0;
    EXPECT_TRUE(conn_->Receive(&reply_type, &reply_).ok());
    return reply_type;
  }
  const std::string& reply() const { return reply_; }

 private:
  std::unique_ptr<Connection> conn_;
  std::string reply_;
};

TEST_F(PsServerTest, AsyncPushResentAfterALostReplyIsAcknowledgedNotAppliedTwice) {
  Start(/*sync=*/false, /*trainers=*/1);
  const size_t n = model_->NumDenseParams();
  const std::vector<float> g(n, 1.f);
  RawWorker first(port_, key_, 0, /*incarnation=*/42, n);
  ASSERT_EQ(first.Push(1, g), kOk);
  // The reply was lost with the connection: the worker reconnects and sends push 1 again.
  RawWorker second(port_, key_, 0, 42, n);
  EXPECT_EQ(second.Push(1, g), kOk);
  EXPECT_EQ(first.Push(1, g), kOk);  // and a copy still queued on the old connection
  EXPECT_EQ(shard_->updates(), 1);
  ASSERT_EQ(second.Push(2, g), kOk);
  EXPECT_EQ(shard_->updates(), 2);
  EXPECT_EQ(shard_->Pushes(), (PushCounts{2, 2}));
  std::vector<float> now(n);
  shard_->PullDense(now.data());
  EXPECT_FLOAT_EQ(now[0], init_[0] - 0.5f * 2.f);
  // A push before hello is refused, not applied.
  auto raw = Dial("127.0.0.1", port_, std::chrono::seconds(5));
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE((*raw)->AuthenticateAsClient(key_).ok());
  std::string payload;
  EncodePush(1, 3, {}, {}, nullptr, 0, WireFloat::kF32, &payload);
  ASSERT_TRUE((*raw)
                  ->Send(kPush, payload,
                         std::string_view(reinterpret_cast<const char*>(g.data()), g.size() * 4))
                  .ok());
  uint8_t type = 0;
  std::string reply;
  ASSERT_TRUE((*raw)->Receive(&type, &reply).ok());
  EXPECT_EQ(type, kError);
  EXPECT_NE(reply.find("before hello"), std::string::npos) << reply;
  EXPECT_EQ(shard_->updates(), 2);
}

TEST_F(PsServerTest, WorkerOfAnotherProtocolVersionIsToldSo) {
  Start(false, 1);
  auto conn = Dial("127.0.0.1", port_, std::chrono::seconds(5));
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE((*conn)->AuthenticateAsClient(key_).ok());
  HelloRequest hello;
  hello.total_dense = model_->NumDenseParams();
  // A version 1 worker's hello: rank, dense size and row dim only.
  ASSERT_TRUE((*conn)->Send(kHello, EncodeHello(hello).substr(0, 16)).ok());
  uint8_t type = 0;
  std::string reply;
  ASSERT_TRUE((*conn)->Receive(&type, &reply).ok());
  EXPECT_EQ(type, kError);
  EXPECT_NE(reply.find("protocol version 1"), std::string::npos) << reply;
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

// One PS of a job with its own shard, serving on a thread (for tests with several PS).
// The value, or -1 for an error.
int Count(const StatusOr<int>& n) {
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  return n.ok() ? *n : -1;
}

struct TestPs {
  TestPs(const Model& model, const std::vector<float>& init, const AuthKey& key, int k, int n,
         int listen_port = 0) {
    OptimizerConfig opt;
    opt.kind = OptimizerKind::kSgd;
    const ShardConfig sc = MakeShardConfig(model, k, n, 1, opt);
    shard = std::make_unique<ParamShard>(sc, init.data() + sc.dense_begin);
    auto listener = Listener::Listen(listen_port);
    EXPECT_TRUE(listener.ok()) << listener.status().ToString();
    port = (*listener)->port();
    PsServerOptions o;
    o.shard_index = k;
    o.num_shards = n;
    o.num_trainers = 2;
    o.key = key;
    o.total_dense = model.NumDenseParams();
    server = std::make_unique<PsServer>(shard.get(), std::move(*listener), o);
    thread = std::thread([this] { (void)server->Serve(); });
  }
  ~TestPs() {
    server->Stop();
    thread.join();
  }
  std::unique_ptr<ParamShard> shard;
  std::unique_ptr<PsServer> server;
  std::thread thread;
  int port = 0;
};

TEST_F(PsServerTest, FinishedWorkersForgottenByARestartedPsAreStillCountedAndRetold) {
  Start(false, 2);  // for the model only
  auto ps0 = std::make_unique<TestPs>(*model_, init_, key_, 0, 2);
  auto ps1 = std::make_unique<TestPs>(*model_, init_, key_, 1, 2);
  auto client = [&](int rank) {
    RemoteOptions o;
    o.ps_addresses = {"127.0.0.1:" + std::to_string(ps0->port),
                      "127.0.0.1:" + std::to_string(ps1->port)};
    o.key = key_;
    o.rank = rank;
    o.startup_timeout = std::chrono::seconds(10);
    o.reconnect_timeout = std::chrono::seconds(10);
    return RemoteParams::Connect(*model_, o);
  };
  auto coordinator = client(0);
  auto worker = client(1);
  ASSERT_TRUE(coordinator.ok() && worker.ok());
  ASSERT_EQ(Count((*worker)->MarkDone()), 1);
  ASSERT_EQ(Count((*coordinator)->DoneCount()), 1);
  // Both PS restart on their ports with no memory of worker 1 (as from a checkpoint older
  // than its finish); worker 1 has exited.
  const int port0 = ps0->port, port1 = ps1->port;
  ps0.reset();
  ps1.reset();
  ps0 = std::make_unique<TestPs>(*model_, init_, key_, 0, 2, port0);
  ps1 = std::make_unique<TestPs>(*model_, init_, key_, 1, 2, port1);
  // The coordinator still counts it, and tells both PS, so their next checkpoints know.
  EXPECT_EQ(Count((*coordinator)->DoneCount()), 1);
  EXPECT_EQ(ps0->shard->Finished(), std::vector<int32_t>{1});
  EXPECT_EQ(ps1->shard->Finished(), std::vector<int32_t>{1});
  EXPECT_EQ(Count((*coordinator)->MarkDone()), 2);
}

TEST_F(PsServerTest, ServeDoesNotReturnOkUnlessAShutdownWasRequested) {
  Start(false, 1);
  server_->Stop();
  serve_.join();
  EXPECT_FALSE(serve_status_.ok()) << "the PS would exit 0 for a job that is not over";
}

// Connections that fail the handshake give their descriptor back at once (they used to be
// kept, with their thread, until the server ended).
TEST_F(PsServerTest, FailedHandshakesAreClosedAtOnce) {
  Start(false, 1);
  // One good connection first, so the lazily opened descriptors of the server exist.
  auto c = Client(0, *model_);
  ASSERT_TRUE(c.ok());
  const int before = OpenFds();
  for (int i = 0; i < 50; ++i) {
    const int fd = RawConnect(port_);
    // A RESPONSE frame (length 65, type 2) with a wrong proof.
    unsigned char frame[4 + 1 + 64] = {65, 0, 0, 0, 2};
    ASSERT_EQ(::send(fd, frame, sizeof(frame), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(frame)));
    EXPECT_TRUE(ClosedByServer(fd, std::chrono::milliseconds(5000))) << i;
    ::close(fd);
  }
  EXPECT_TRUE(PollUntil([&] { return OpenFds() <= before; }, std::chrono::seconds(5)))
      << OpenFds() << " descriptors open, " << before << " before";
  // And the good connection still works.
  std::vector<float> g(model_->NumDenseParams(), 1.f);
  EXPECT_TRUE((*c)->Push(1, {}, nullptr, g.data()).ok());
}

// A peer that drips its handshake a byte at a time used to reset a per-read timeout
// forever; the handshake has one deadline in all.
TEST_F(PsServerTest, SlowHandshakeIsCutAtItsDeadline) {
  PsServerOptions o;
  o.handshake_timeout = std::chrono::milliseconds(300);
  Start(false, 1, o);
  const int fd = RawConnect(port_);
  const unsigned char frame[4 + 1 + 64] = {65, 0, 0, 0, 2};
  bool closed = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  for (size_t i = 0; !closed && std::chrono::steady_clock::now() < give_up; ++i) {
    if (i < sizeof(frame) - 1 && ::send(fd, frame + i, 1, MSG_NOSIGNAL) != 1) break;
    closed = ClosedByServer(fd, std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(closed) << "the server still waits for the handshake after 8 s";
  ::close(fd);
}

// Handshakes in flight are bounded: over the bound a connection is closed at once, and
// once the silent peers' handshakes time out a worker gets in.
TEST_F(PsServerTest, HandshakesInFlightAreBounded) {
  PsServerOptions o;
  o.max_handshakes = 3;
  o.handshake_timeout = std::chrono::milliseconds(500);
  Start(false, 1, o);
  std::vector<int> silent;
  for (int i = 0; i < 3; ++i) silent.push_back(RawConnect(port_));
  EXPECT_TRUE(PollUntil([&] { return server_->open_connections() == 3; }, std::chrono::seconds(5)));
  const int over = RawConnect(port_);
  // The fourth gets no challenge: the server hangs up (the three silent ones did get theirs).
  EXPECT_TRUE(ClosedByServer(over, std::chrono::milliseconds(5000)));
  ::close(over);
  auto c = Client(0, *model_);  // retries until a slot is free
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  for (int fd : silent) ::close(fd);
}

}  // namespace
}  // namespace kubetrain::trainer

namespace kubetrain::trainer {
namespace {

// An empty directory under the temp dir, named for this process.
std::string FreshDir(const std::string& prefix) {
  const std::string root =
      (std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(root);
  return root;
}

// Options of a PS that checkpoints under `root` and gets SIGTERM when `stop` is set.
PsServerOptions StoppableOptions(const std::string& root, const std::atomic<bool>& stop) {
  PsServerOptions o;
  o.checkpoint_dir = root;
  o.stop_requested = [&stop] { return stop.load(); };
  o.drain_timeout = std::chrono::seconds(60);
  return o;
}

// SIGTERM to a PS: it keeps serving, its push replies ask for a checkpoint, and
// once it has saved its shard for the coordinator's request and the MANIFEST is there it
// stops, saying so.
TEST_F(PsServerTest, StoppingPsAsksForACheckpointAndStopsOnceItIsCommitted) {
  const std::string root = FreshDir("kt_ps_stop_");
  std::atomic<bool> stop{false};
  const PsServerOptions o = StoppableOptions(root, stop);
  Start(/*sync=*/false, /*trainers=*/1, o);
  auto client = Client(0, *model_);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const std::vector<float> g(model_->NumDenseParams(), 0.1f);
  ASSERT_TRUE((*client)->Push(1, {}, nullptr, g.data()).ok());
  EXPECT_FALSE((*client)->TakeCheckpointRequest());
  stop = true;
  ASSERT_TRUE((*client)->Push(2, {}, nullptr, g.data()).ok());
  EXPECT_TRUE((*client)->TakeCheckpointRequest());
  EXPECT_FALSE((*client)->TakeCheckpointRequest());  // once per reply that asks
  // Still serving while it waits for the request.
  ASSERT_TRUE((*client)->Push(3, {}, nullptr, g.data()).ok());
  ASSERT_TRUE((*client)->SaveCheckpoint(root, 3).ok());
  serve_.join();
  EXPECT_TRUE(server_->stopped_on_signal());
  EXPECT_EQ(server_->saved_on_stop(), 3);
  EXPECT_TRUE(std::filesystem::exists(root + "/ckpt-3/MANIFEST"));
  std::filesystem::remove_all(root);
}

// A PS that saved its shard for SIGTERM applies nothing more: a push that arrives after
// the save (here from another worker, before the MANIFEST lets the PS exit) is closed
// unanswered, and the worker re-sends it to the replacement PS, which restores the save and
// applies it there. On the old code the draining PS applied it and lost it with the process
// (node2.delete_ps: the new ps-0 resumed two steps behind what the workers had pushed).
TEST_F(PsServerTest, PushAfterTheSigtermSaveIsAppliedByTheReplacementNotLost) {
  const std::string root = FreshDir("kt_ps_resend_");
  std::atomic<bool> stop{false};
  const PsServerOptions o = StoppableOptions(root, stop);
  Start(/*sync=*/false, /*trainers=*/2, o);
  RemoteOptions ro;
  ro.ps_addresses = {"127.0.0.1:" + std::to_string(port_)};
  ro.key = key_;
  ro.rank = 1;
  ro.startup_timeout = std::chrono::seconds(10);
  ro.reconnect_timeout = std::chrono::seconds(30);
  auto worker = RemoteParams::Connect(*model_, ro);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  const std::vector<float> g(model_->NumDenseParams(), 0.1f);
  ASSERT_TRUE((*worker)->Push(1, {}, nullptr, g.data()).ok());
  stop = true;
  // The coordinator's checkpoint request, by hand: the shard is saved, the MANIFEST is not
  // written yet, so the PS keeps its port while it waits for it.
  auto coordinator = Dial("127.0.0.1", port_, std::chrono::seconds(5));
  ASSERT_TRUE(coordinator.ok());
  ASSERT_TRUE((*coordinator)->AuthenticateAsClient(key_).ok());
  ASSERT_TRUE((*coordinator)->Send(kCheckpoint, EncodeCheckpoint(2, root)).ok());
  uint8_t type = 0;
  std::string reply;
  ASSERT_TRUE((*coordinator)->Receive(&type, &reply).ok());
  ASSERT_EQ(type, kOk) << reply;
  std::vector<float> saved(model_->NumDenseParams());
  shard_->PullDense(saved.data());
  ASSERT_EQ(shard_->updates(), 1);
  // The worker pushes step 2 after the save.
  std::atomic<bool> pushed{false};
  Status push_status;
  std::jthread push([&] {  // joins on any early return: bounded by reconnect_timeout
    push_status = (*worker)->Push(2, {}, nullptr, g.data());
    pushed = true;
  });
  // Answered (old code) or its connection closed: either way the old PS has seen it.
  ASSERT_TRUE(PollUntil([&] { return pushed.load() || server_->open_connections() < 2; },
                        std::chrono::seconds(10)));
  EXPECT_FALSE(pushed.load()) << "the draining PS answered a push after its save";
  EXPECT_EQ(shard_->updates(), 1) << "applied after the save: lost with the process";
  // The old PS goes (its pod is deleted); the replacement restores the save on its port.
  coordinator->reset();
  server_->Stop();
  serve_.join();
  auto replacement = std::make_unique<ParamShard>(shard_config_, init_.data());
  ASSERT_TRUE(replacement->Load(ShardPath(root, 2, 0, 1)).ok());
  const int64_t restored_updates = replacement->updates();
  auto listener = Listener::Listen(port_);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  PsServerOptions ro2;
  ro2.num_trainers = 2;
  ro2.key = key_;
  ro2.total_dense = model_->NumDenseParams();
  server_ = std::make_unique<PsServer>(replacement.get(), std::move(*listener), ro2);
  serve_ = std::thread([this] { serve_status_ = server_->Serve(); });
  push.join();
  EXPECT_TRUE(push_status.ok()) << push_status.ToString();
  EXPECT_EQ(replacement->updates(), restored_updates + 1);  // the re-sent push, once
  std::vector<float> now(model_->NumDenseParams());
  replacement->PullDense(now.data());
  EXPECT_FLOAT_EQ(now[0], saved[0] - 0.5f * 0.1f);
  server_->Stop();
  serve_.join();
  server_.reset();
  std::filesystem::remove_all(root);
}

// Without a checkpoint directory there is nothing to wait for: it stops at once.
TEST_F(PsServerTest, StoppingPsWithoutCheckpointDirStopsAtOnce) {
  PsServerOptions o;
  o.stop_requested = [] { return true; };
  o.drain_timeout = std::chrono::seconds(60);
  Start(/*sync=*/false, /*trainers=*/1, o);
  serve_.join();
  EXPECT_TRUE(server_->stopped_on_signal());
  EXPECT_EQ(server_->saved_on_stop(), -1);
}

}  // namespace
}  // namespace kubetrain::trainer
