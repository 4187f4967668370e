// Which S3 failures FindCheckpoint takes for a corrupt checkpoint (fall back to the previous
// one) and which it returns (the process fails, retryably, and loses no progress). A real S3
// server cannot be made to answer 503 or to damage bytes in transit, so this uses a tiny
// local S3 (ListObjectsV2, HEAD, ranged GET) holding two checkpoints; corruption behind a
// real server's back is tested in tests/s3/trainer_s3_test.cc.
#include "trainer/ps/checkpoint.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/storage/sigv4.h"

namespace kubetrain::trainer {
namespace {

// Objects under bucket "bkt", each with the SHA-256 the kubetrain client records at upload.
// Keys in `unavailable` answer 503; keys in `garbled` serve other bytes than their recorded
// checksum (`garbled_reads` of them, then the right ones: a copy damaged in transit).
class FakeS3 {
 public:
  FakeS3() {
    server_.Get("/bkt", [this](const httplib::Request& req, httplib::Response& res) {
      MutexLock lock(mu_);
      const std::string prefix = req.get_param_value("prefix");
      std::string xml = "<ListBucketResult><IsTruncated>false</IsTruncated>";
      for (const auto& [key, data] : objects_) {
        if (key.rfind(prefix, 0) != 0) continue;
        xml += "<Contents><Key>" + key + "</Key><Size>" + std::to_string(data.size()) +
               "</Size><ETag>\"e\"</ETag></Contents>";
      }
      res.set_content(xml + "</ListBucketResult>", "application/xml");
    });
    server_.Get("/bkt/(.*)", [this](const httplib::Request& req, httplib::Response& res) {
      MutexLock lock(mu_);
      const std::string key = req.matches[1];
      ++requests_[key];
      if (unavailable_.count(key) != 0) {
        res.status = 503;
        res.set_content("<Error><Code>SlowDown</Code></Error>", "application/xml");
        return;
      }
      const auto it = objects_.find(key);
      if (it == objects_.end()) {
        res.status = 404;
        res.set_content("<Error><Code>NoSuchKey</Code></Error>", "application/xml");
        return;
      }
      std::string body = it->second;
      if (req.method == "GET" && garbled_.count(key) != 0 && garbled_reads_[key] > 0) {
        --garbled_reads_[key];
        body[0] = static_cast<char>(body[0] ^ 1);
      }
      res.set_header("ETag", "\"e\"");
      res.set_header("x-amz-meta-kubetrain-sha256", storage::Sha256Hex(it->second));
      res.set_content(body, "application/octet-stream");
    });
    server_.Put("/bkt/(.*)", [this](const httplib::Request& req, httplib::Response& res) {
      MutexLock lock(mu_);
      const std::string key = req.matches[1];
      if (req.has_header("If-None-Match") && objects_.count(key) != 0) {
        res.status = 412;
        res.set_content("<Error><Code>PreconditionFailed</Code></Error>", "application/xml");
        return;
      }
      objects_[key] = req.body;
      res.set_header("ETag", "\"e\"");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_.is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // poll: no ready hook here
    }
  }
  ~FakeS3() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }

  // Checkpoints 1 and 2 under ck/, one shard each, nothing failing or garbled.
  void TwoCheckpoints() {
    {
      MutexLock lock(mu_);
      objects_.clear();
      unavailable_.clear();
      garbled_.clear();
      garbled_reads_.clear();
      requests_.clear();
    }
    for (int step : {1, 2}) {
      const std::string dir = "ck/ckpt-" + std::to_string(step) + "/";
      const std::string shard = "shard bytes of step " + std::to_string(step);
      const nlohmann::json m = {{"step", step},
                                {"num_shards", 1},
                                {"shards",
                                 {{{"file", "shard-0-of-1.bin"},
                                   {"bytes", shard.size()},
                                   {"sha256", storage::Sha256Hex(shard)}}}}};
      MutexLock lock(mu_);
      objects_[dir + "shard-0-of-1.bin"] = shard;
      objects_[dir + "MANIFEST"] = m.dump();
    }
  }
  void Unavailable(const std::string& key) {
    MutexLock lock(mu_);
    unavailable_.insert(key);
  }
  void Garble(const std::string& key, int reads) {
    MutexLock lock(mu_);
    garbled_.insert(key);
    garbled_reads_[key] = reads;
  }
  void Flip(const std::string& key) {  // damages a stored object (its checksum goes too)
    MutexLock lock(mu_);
    objects_[key][objects_[key].size() / 2] ^= 1;
  }
  int Requests(const std::string& key) {
    MutexLock lock(mu_);
    return requests_[key];
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  Mutex mu_;
  std::map<std::string, std::string> objects_ GUARDED_BY(mu_);
  std::set<std::string> unavailable_ GUARDED_BY(mu_), garbled_ GUARDED_BY(mu_);
  std::map<std::string, int> garbled_reads_ GUARDED_BY(mu_);
  std::map<std::string, int> requests_ GUARDED_BY(mu_);
};

// --- Incremental checkpoints: chains of a full snapshot and deltas.

ShardConfig ChainConfig(int full_every, uint32_t evict_after_updates = 0) {
  ShardConfig c;
  c.dense_begin = 0;
  c.dense_end = 4;
  c.sparse_dim = 4;
  c.seed = 3;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  c.optimizer.lr = 0.1f;
  c.embedding.full_every = full_every;
  c.embedding.evict_after_updates = evict_after_updates;
  return c;
}

// One push of gradient `g` to every id in [first, last).
void PushRange(ParamShard& shard, uint64_t first, uint64_t last, float g) {
  std::vector<uint64_t> ids;
  for (uint64_t id = first; id < last; ++id) ids.push_back(id);
  std::vector<float> grads(ids.size() * 4, g);
  const float dense[4] = {g, g, g, g};
  shard.Apply(dense, ids.data(), ids.size(), grads.data());
}

// Every row (values, optimizer state, update count) and the dense slice.
std::map<uint64_t, std::vector<float>> Contents(const ParamShard& shard) {
  std::map<uint64_t, std::vector<float>> out;
  shard.ForEachRow([&](uint64_t id, const float* values, int64_t updates) {
    out[id] = std::vector<float>(values, values + 8);  // dim 4 + Adagrad state
    out[id].push_back(static_cast<float>(updates));
  });
  std::vector<float> dense(4);
  shard.PullDense(dense.data());
  out[~uint64_t{0}] = dense;
  return out;
}

StatusOr<ShardDigest> SaveAndCommit(ParamShard& shard, const std::string& root, int64_t step) {
  KT_RETURN_IF_ERROR(PrepareCheckpointDir(root, step));
  KT_ASSIGN_OR_RETURN(ShardDigest d, shard.SaveCheckpoint(root, step, 0, 1));
  KT_RETURN_IF_ERROR(WriteManifest(root, step, {d}));
  return d;
}

// What a replacement PS (or an exporter) restores from `root`: the step and its contents.
std::pair<int64_t, std::map<uint64_t, std::vector<float>>> Restored(const std::string& root,
                                                                    const ShardConfig& c) {
  const float init[4] = {0, 0, 0, 0};
  ParamShard shard(c, init);
  auto found = FindCheckpoint(root, 1);
  EXPECT_TRUE(found.ok()) << found.status().ToString();
  if (!found.ok() || !found->has_value()) return {-1, {}};
  Status s = LoadShard(shard, root, **found, 0, 1);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return {(*found)->step, Contents(shard)};
}

class CheckpointChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("kt-chain-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string root() const { return root_.string(); }
  std::filesystem::path root_;
};

TEST_F(CheckpointChainTest, DeltasHoldOnlyChangedRowsAndTheChainRestoresEveryRow) {
  const ShardConfig c = ChainConfig(3);
  const float init[4] = {0, 0, 0, 0};
  ParamShard shard(c, init);
  PushRange(shard, 1, 2001, 0.5f);
  auto full = SaveAndCommit(shard, root(), 10);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_TRUE(full->chain.empty());
  PushRange(shard, 1, 101, 0.25f);  // 5% of the rows change
  auto d1 = SaveAndCommit(shard, root(), 20);
  ASSERT_TRUE(d1.ok()) << d1.status().ToString();
  ASSERT_EQ(d1->chain.size(), 1u);
  EXPECT_EQ(d1->chain[0].step, 10);
  // 100 rows of 8 + 36 bytes plus the head, against 2000 rows in the full one.
  EXPECT_LT(d1->bytes, full->bytes / 15);
  PushRange(shard, 1900, 2101, -0.5f);  // changes old rows and creates new ones
  auto d2 = SaveAndCommit(shard, root(), 30);
  ASSERT_TRUE(d2.ok());
  ASSERT_EQ(d2->chain.size(), 2u);
  const auto [step, got] = Restored(root(), c);
  EXPECT_EQ(step, 30);
  EXPECT_EQ(got, Contents(shard));
  // The third save after a full one is full again (--checkpoint-full-every 3).
  auto again = SaveAndCommit(shard, root(), 40);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->chain.empty());
  // The MANIFEST names the chain.
  std::ifstream m(root() + "/ckpt-30/MANIFEST");
  const nlohmann::json j = nlohmann::json::parse(m);
  EXPECT_EQ(j["shards"][0]["chain"].size(), 2u);
  EXPECT_EQ(j["shards"][0]["chain"][0]["step"], 10);
}

TEST_F(CheckpointChainTest, EvictedRowsAreDeletionsInTheDeltaAndStayDeletedOnRestore) {
  const ShardConfig c = ChainConfig(4, /*evict_after_updates=*/3);
  const float init[4] = {0, 0, 0, 0};
  ParamShard shard(c, init);
  PushRange(shard, 1, 501, 0.5f);  // update 1: rows 1..500
  ASSERT_TRUE(SaveAndCommit(shard, root(), 1).ok());
  for (int i = 0; i < 5; ++i) PushRange(shard, 1, 51, 0.1f);  // updates 2..6: rows 1..50
  auto d = SaveAndCommit(shard, root(), 2);  // evicts 51..500 (not updated in 3 updates)
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->chain.size(), 1u);
  EXPECT_EQ(shard.num_rows(), 50u);
  EXPECT_EQ(shard.embedding_stats().evicted, 450u);
  const auto [step, got] = Restored(root(), c);
  EXPECT_EQ(step, 2);
  EXPECT_EQ(got.size(), 51u);  // 50 rows and the dense slice: no evicted row came back
  EXPECT_EQ(got, Contents(shard));
}

// A restored row keeps the age the chain dates it to (the update count of the newest file
// holding it), not "updated at the restore": rows 51..500, last updated 5 updates before the
// checkpoint, are evicted by the first save after a restore with --embedding-evict-steps of
// 3 updates. The old restore stamped every row as updated then and kept all 450.
TEST_F(CheckpointChainTest, RestoredRowsKeepTheirAgeForEviction) {
  const float init[4] = {0, 0, 0, 0};
  ParamShard writer(ChainConfig(4), init);
  PushRange(writer, 1, 501, 0.5f);  // update 1: rows 1..500
  ASSERT_TRUE(SaveAndCommit(writer, root(), 1).ok());
  for (int i = 0; i < 5; ++i) PushRange(writer, 1, 51, 0.1f);  // updates 2..6: rows 1..50
  ASSERT_TRUE(SaveAndCommit(writer, root(), 2).ok());

  ParamShard restored(ChainConfig(4, /*evict_after_updates=*/3), init);
  auto found = FindCheckpoint(root(), 1);
  ASSERT_TRUE(found.ok() && found->has_value());
  ASSERT_TRUE(LoadShard(restored, root(), **found, 0, 1).ok());
  ASSERT_EQ(restored.num_rows(), 500u);
  PushRange(restored, 1, 51, 0.1f);  // update 7: rows 1..50 again
  ASSERT_TRUE(SaveAndCommit(restored, root(), 3).ok());
  EXPECT_EQ(restored.num_rows(), 50u);
  EXPECT_EQ(restored.embedding_stats().evicted, 450u);
}

// The first save after a restore is a delta of the rows changed since (not every restored
// row), and the chain it ends still restores every row.
TEST_F(CheckpointChainTest, FirstDeltaAfterARestoreHoldsOnlyTheRowsChangedSince) {
  const ShardConfig c = ChainConfig(4);
  const float init[4] = {0, 0, 0, 0};
  ParamShard writer(c, init);
  PushRange(writer, 1, 2001, 0.5f);
  auto full = SaveAndCommit(writer, root(), 1);
  ASSERT_TRUE(full.ok());
  ParamShard restored(c, init);
  auto found = FindCheckpoint(root(), 1);
  ASSERT_TRUE(found.ok() && found->has_value());
  ASSERT_TRUE(LoadShard(restored, root(), **found, 0, 1).ok());
  PushRange(restored, 1, 101, 0.25f);  // 5% of the rows
  auto d = SaveAndCommit(restored, root(), 2);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->chain.size(), 1u);
  EXPECT_LT(d->bytes, full->bytes / 15);
  const auto [step, got] = Restored(root(), c);
  EXPECT_EQ(step, 2);
  EXPECT_EQ(got, Contents(restored));
}

TEST_F(CheckpointChainTest, CorruptLinkFallsBackToTheFullSnapshotAndItsGoodDeltas) {
  const ShardConfig c = ChainConfig(10);
  const float init[4] = {0, 0, 0, 0};
  ParamShard shard(c, init);
  std::map<int64_t, std::map<uint64_t, std::vector<float>>> at;
  for (int64_t step = 1; step <= 4; ++step) {
    PushRange(shard, static_cast<uint64_t>(step) * 10, static_cast<uint64_t>(step) * 10 + 300,
              0.1f * static_cast<float>(step));
    ASSERT_TRUE(SaveAndCommit(shard, root(), step).ok());
    at[step] = Contents(shard);
  }
  // Step 3's delta is damaged: checkpoints 3 and 4 (built on it) are unusable; 2 is whole.
  const std::string link = ShardPath(root(), 3, 0, 1);
  std::string bytes;
  {
    std::ifstream in(link, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] ^= 1;
  std::ofstream(link, std::ios::binary | std::ios::trunc) << bytes;
  const auto [step, got] = Restored(root(), c);
  EXPECT_EQ(step, 2);
  EXPECT_EQ(got, at[2]);
  // The next save after restoring is a delta on checkpoint 2's chain, and restores.
  const float zero[4] = {0, 0, 0, 0};
  ParamShard replacement(c, zero);
  auto found = FindCheckpoint(root(), 1);
  ASSERT_TRUE(found.ok() && found->has_value());
  ASSERT_TRUE(LoadShard(replacement, root(), **found, 0, 1).ok());
  PushRange(replacement, 5, 15, 1.f);
  auto d = SaveAndCommit(replacement, root(), 5);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->chain.size(), 2u);
  EXPECT_EQ(d->chain[1].step, 2);
  const auto [step5, got5] = Restored(root(), c);
  EXPECT_EQ(step5, 5);
  EXPECT_EQ(got5, Contents(replacement));
}

// --checkpoint-full-every 2, --checkpoint-keep-chains 2: chains {1, 2}, {3, 4}, {5, 6}.
// Nothing goes while only two full snapshots are committed; once the third is, every file
// of chain {1, 2} goes (and an unfinished save's before it), chains {3, 4} and {5} stay
// whole, and a corrupt link of the newest chain still falls back to the one before.
TEST_F(CheckpointChainTest, PruningDeletesChainsOlderThanTheNewestTwoOnceANewFullIsCommitted) {
  const ShardConfig c = ChainConfig(2);
  const float init[4] = {0, 0, 0, 0};
  ParamShard shard(c, init);
  namespace fs = std::filesystem;
  fs::create_directories(root_ / "ckpt-0");
  std::ofstream(root_ / "ckpt-0" / "shard-0-of-1.bin") << "an unfinished save";
  std::map<int64_t, std::map<uint64_t, std::vector<float>>> at;
  for (int64_t step = 1; step <= 5; ++step) {
    PushRange(shard, static_cast<uint64_t>(step) * 10, static_cast<uint64_t>(step) * 10 + 100,
              0.1f);
    auto d = SaveAndCommit(shard, root(), step);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->chain.empty(), step % 2 == 1) << step;
    at[step] = Contents(shard);
    auto pruned = PruneCheckpointChains(root(), 2);
    ASSERT_TRUE(pruned.ok()) << pruned.status().ToString();
    // Step 3 commits the second full: the unfinished ckpt-0 before the first goes. Step 5
    // commits the third: chain {1, 2} goes (a MANIFEST and a shard each).
    EXPECT_EQ(*pruned, step == 3 ? 1 : step == 5 ? 4 : 0) << step;
  }
  for (int64_t step = 0; step <= 2; ++step) {
    EXPECT_FALSE(fs::exists(CheckpointDir(root(), step))) << step;
  }
  for (int64_t step = 3; step <= 5; ++step) {
    EXPECT_TRUE(fs::exists(ManifestPath(root(), step))) << step;
  }
  EXPECT_EQ(Restored(root(), c).second, at[5]);
  std::ofstream(ShardPath(root(), 5, 0, 1), std::ios::trunc) << "damaged";
  const auto [step, got] = Restored(root(), c);
  EXPECT_EQ(step, 4);
  EXPECT_EQ(got, at[4]);
  EXPECT_FALSE(PruneCheckpointChains(root(), 0).ok());
}

// One fake for the whole process: the trainer's S3 client is process-wide and configured
// from the environment on its first use. Each test starts from the two sound checkpoints.
class CheckpointS3Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fake_ = new FakeS3();
    ::setenv("AWS_ACCESS_KEY_ID", "ak", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "sk", 1);
    ::setenv("AWS_ENDPOINT_URL_S3", ("http://127.0.0.1:" + std::to_string(fake_->port())).c_str(),
             1);
    ::setenv("AWS_MAX_ATTEMPTS", "3", 1);
  }
  static void TearDownTestSuite() { delete fake_; }
  void SetUp() override { s3_.TwoCheckpoints(); }

  static inline FakeS3* fake_ = nullptr;
  FakeS3& s3_ = *fake_;
  const std::string root_ = "s3://bkt/ck/";
};

TEST_F(CheckpointS3Test, BothCheckpointsSoundUsesTheNewest) {
  auto found = FindCheckpoint(root_, 1);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->step, 2);
}

TEST_F(CheckpointS3Test, ServerErrorOnTheNewestShardIsReturnedNotAFallback) {
  s3_.Unavailable("ck/ckpt-2/shard-0-of-1.bin");
  auto found = FindCheckpoint(root_, 1);
  ASSERT_FALSE(found.ok()) << "fell back to step " << (found->has_value() ? (*found)->step : -1);
  EXPECT_EQ(found.status().code(), StatusCode::kUnavailable) << found.status().ToString();
  EXPECT_NE(found.status().message().find("s3://bkt/ck/ckpt-2/shard-0-of-1.bin"), std::string::npos)
      << found.status().message();
  EXPECT_EQ(s3_.Requests("ck/ckpt-2/shard-0-of-1.bin"), 3);  // retried up to AWS_MAX_ATTEMPTS
}

TEST_F(CheckpointS3Test, ServerErrorOnTheNewestManifestIsReturnedNotAFallback) {
  s3_.Unavailable("ck/ckpt-2/MANIFEST");
  auto found = FindCheckpoint(root_, 1);
  ASSERT_FALSE(found.ok()) << "fell back to step " << (found->has_value() ? (*found)->step : -1);
  EXPECT_EQ(found.status().code(), StatusCode::kUnavailable) << found.status().ToString();
}

TEST_F(CheckpointS3Test, BytesDamagedOnceInTransitAreReadAgainNotACorruptCheckpoint) {
  s3_.Garble("ck/ckpt-2/shard-0-of-1.bin", 1);
  auto found = FindCheckpoint(root_, 1);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->step, 2);
}

TEST_F(CheckpointS3Test, ShardThatNeverMatchesItsUploadChecksumFallsBackToThePreviousCheckpoint) {
  s3_.Garble("ck/ckpt-2/shard-0-of-1.bin", 1000);
  auto found = FindCheckpoint(root_, 1);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->step, 1);
}

TEST_F(CheckpointS3Test, ManifestThatNeverMatchesItsUploadChecksumFallsBackToThePreviousOne) {
  s3_.Garble("ck/ckpt-2/MANIFEST", 1000);
  auto found = FindCheckpoint(root_, 1);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->step, 1);
}

TEST_F(CheckpointS3Test, IncrementalChainRoundTripsAndACorruptLinkFallsBack) {
  const std::string root = "s3://bkt/chain/";
  const ShardConfig c = ChainConfig(5);
  const float init[4] = {0, 0, 0, 0};
  ParamShard shard(c, init);
  std::map<int64_t, std::map<uint64_t, std::vector<float>>> at;
  for (int64_t step = 1; step <= 3; ++step) {
    PushRange(shard, static_cast<uint64_t>(step) * 50, static_cast<uint64_t>(step) * 50 + 200,
              0.2f);
    auto d = SaveAndCommit(shard, root, step);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->chain.size(), static_cast<size_t>(step - 1));
    at[step] = Contents(shard);
  }
  auto [step, got] = Restored(root, c);
  EXPECT_EQ(step, 3);
  EXPECT_EQ(got, at[3]);
  s3_.Flip("chain/ckpt-2/shard-0-of-1.bin");
  std::tie(step, got) = Restored(root, c);
  EXPECT_EQ(step, 1);
  EXPECT_EQ(got, at[1]);
}

}  // namespace
}  // namespace kubetrain::trainer
