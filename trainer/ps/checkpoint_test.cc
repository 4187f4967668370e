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
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "trainer/storage/sigv4.h"

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

}  // namespace
}  // namespace kubetrain::trainer
