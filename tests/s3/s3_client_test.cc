// The S3 client against a real S3 server (versitygw, which checks SigV4 signatures and
// payload hashes), started by the `s3` ctest fixture.
#include "common/storage/s3_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/storage/files.h"
#include "common/storage/sigv4.h"
#include "common/storage/stream.h"
#include "common/storage/writer.h"
#include "tests/s3/s3_env.h"

namespace kubetrain::storage {
namespace {

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class S3ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = testing::LoadS3Env();
    auto c = S3ConfigFromEnv([](const char* n) { return std::getenv(n); });
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    config_ = *c;
    config_.retry_base = std::chrono::milliseconds(10);
    client_ = std::make_unique<S3Client>(config_);
    // A bucket per test: names are unique, lower case, 3-63 characters.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    bucket_ = "client-";
    for (char c2 : std::string(info->name())) {
      if (bucket_.size() >= 60) break;
      bucket_.push_back(c2 >= 'A' && c2 <= 'Z' ? static_cast<char>(c2 - 'A' + 'a') : c2);
    }
    ASSERT_TRUE(client_->CreateBucket(bucket_).ok());
  }

  static std::string Random(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::string s(n, '\0');
    for (size_t i = 0; i + 8 <= n; i += 8) {
      const uint64_t v = rng();
      std::memcpy(&s[i], &v, 8);
    }
    return s;
  }

  std::map<std::string, std::string> env_;
  S3Config config_;
  std::unique_ptr<S3Client> client_;
  std::string bucket_;
};

TEST_F(S3ClientTest, WrongSecretIsRefused) {
  S3Config bad = config_;
  bad.credentials.secret_access_key += "x";
  S3Client wrong(bad);
  auto page = wrong.List(bucket_, "", "");
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(page.status().code(), StatusCode::kPermissionDenied) << page.status().ToString();
  EXPECT_NE(page.status().message().find("SignatureDoesNotMatch"), std::string::npos)
      << page.status().message();
  EXPECT_NE(page.status().message().find("s3://" + bucket_), std::string::npos);
  // And a write with it stores nothing.
  EXPECT_FALSE(wrong.Put(bucket_, "k", "v").ok());
  EXPECT_EQ(client_->Head(bucket_, "k").status().code(), StatusCode::kNotFound);
}

TEST_F(S3ClientTest, PutGetHeadDeleteRoundTripWithKeysNeedingEncoding) {
  for (const std::string key : {"plain", "dir/sub/a b+c=d&e", "ünïcode/ключ", "x%2F~y"}) {
    const std::string data = "payload of " + key;
    ASSERT_TRUE(client_->Put(bucket_, key, data, {"text/plain", false}).ok()) << key;
    auto got = client_->Get(bucket_, key);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, data);
    auto head = client_->Head(bucket_, key);
    ASSERT_TRUE(head.ok());
    EXPECT_EQ(head->size, static_cast<int64_t>(data.size()));
    ASSERT_TRUE(client_->Delete(bucket_, key).ok());
    EXPECT_EQ(client_->Head(bucket_, key).status().code(), StatusCode::kNotFound);
  }
  EXPECT_TRUE(client_->Delete(bucket_, "never-there").ok());
  auto empty = client_->Put(bucket_, "empty", "");
  ASSERT_TRUE(empty.ok()) << empty.ToString();
  auto got = client_->Get(bucket_, "empty");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "");
}

TEST_F(S3ClientTest, ConditionalPutRefusesAnExistingKey) {
  PutOptions once{"application/json", true};
  ASSERT_TRUE(client_->Put(bucket_, "MANIFEST", "first", once).ok());
  Status again = client_->Put(bucket_, "MANIFEST", "second", once);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again.ToString();
  auto got = client_->Get(bucket_, "MANIFEST");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "first");
}

TEST_F(S3ClientTest, MultipartRoundTripOf64MiBWithParallelParts) {
  S3Config c = config_;
  c.part_size = 8u << 20;
  c.upload_parallelism = 4;
  S3Client client(c);
  const std::string data = Random(64u << 20, 42);
  Status s = client.Upload(bucket_, "big/object.bin", data);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto head = client.Head(bucket_, "big/object.bin");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->size, 64 << 20);
  EXPECT_NE(head->etag.find("-8"), std::string::npos) << "not a multipart object: " << head->etag;
  auto got = client.Get(bucket_, "big/object.bin");  // SHA-256 checked inside
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
}

TEST_F(S3ClientTest, RangedGetStreamsTheRequestedBytes) {
  const std::string data = Random(1 << 20, 7);
  ASSERT_TRUE(client_->Put(bucket_, "r", data).ok());
  std::string part;
  int chunks = 0;
  Status s = client_->GetRange(bucket_, "r", 1000, 300000, [&](std::string_view c) {
    part.append(c);
    ++chunks;
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(part, data.substr(1000, 300000));
  std::string tail;
  ASSERT_TRUE(client_
                  ->GetRange(bucket_, "r", (1 << 20) - 10, -1,
                             [&](std::string_view c) {
                               tail.append(c);
                               return Status::Ok();
                             })
                  .ok());
  EXPECT_EQ(tail, data.substr((1 << 20) - 10));
  // A sink error stops the transfer and comes back.
  Status stop = client_->GetRange(bucket_, "r", 0, -1,
                                  [](std::string_view) { return InvalidArgument("enough"); });
  EXPECT_EQ(stop.message(), "enough");
}

TEST_F(S3ClientTest, ListingOverThousandKeysFollowsContinuationTokens) {
  constexpr int kKeys = 1050;
  std::atomic<int> next{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < kKeys; i = next++) {
        char key[32];
        std::snprintf(key, sizeof(key), "many/%05d", i);
        if (!client_->Put(bucket_, key, std::to_string(i)).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures, 0);
  ASSERT_TRUE(client_->Put(bucket_, "other/x", "x").ok());
  auto first = client_->List(bucket_, "many/", "");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->objects.size(), 1000u);
  EXPECT_FALSE(first->next_token.empty());
  auto all = client_->ListAll(bucket_, "many/");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), static_cast<size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    char key[32];
    std::snprintf(key, sizeof(key), "many/%05d", i);
    ASSERT_EQ((*all)[static_cast<size_t>(i)].key, key);
  }
}

TEST_F(S3ClientTest, VirtualHostedAddressingWorks) {
  S3Config c = config_;
  // tests/s3/up serves buckets as BUCKET.localhost; curl resolves *.localhost to loopback.
  const std::string port = c.endpoint.substr(c.endpoint.rfind(':'));
  c.endpoint = "http://localhost" + port;
  c.path_style = false;
  S3Client client(c);
  Status s = client.Put(bucket_, "vh/key", "virtual");
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto got = client_->Get(bucket_, "vh/key");  // read back path-style: the same object
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "virtual");
}

TEST_F(S3ClientTest, MissingBucketAndKeyNameThemInNotFound) {
  auto nb = client_->Get("no-such-bucket-kt", "some/key");
  ASSERT_FALSE(nb.ok());
  EXPECT_EQ(nb.status().code(), StatusCode::kNotFound);
  EXPECT_NE(nb.status().message().find("s3://no-such-bucket-kt/some/key"), std::string::npos)
      << nb.status().message();
  auto nl = client_->List("no-such-bucket-kt", "", "");
  ASSERT_FALSE(nl.ok());
  EXPECT_EQ(nl.status().code(), StatusCode::kNotFound);
  EXPECT_NE(nl.status().message().find("NoSuchBucket"), std::string::npos) << nl.status().message();
  auto nk = client_->Get(bucket_, "missing");
  ASSERT_FALSE(nk.ok());
  EXPECT_EQ(nk.status().code(), StatusCode::kNotFound);
  EXPECT_NE(nk.status().message().find("s3://" + bucket_ + "/missing"), std::string::npos);
}

TEST_F(S3ClientTest, TruncatedObjectIsAnErrorNamingIt) {
  const std::string data = Random(100000, 3);
  ASSERT_TRUE(client_->Put(bucket_, "shard.bin", data).ok());
  // Cut the stored file behind the server's back (posix backend: DIR/data/<bucket>/<key>).
  const std::filesystem::path file =
      std::filesystem::path(env_["KUBETRAIN_TEST_S3_DIR"]) / "data" / bucket_ / "shard.bin";
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  std::filesystem::resize_file(file, 5000);
  auto got = client_->Get(bucket_, "shard.bin");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("s3://" + bucket_ + "/shard.bin"), std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("truncated"), std::string::npos) << got.status().message();
}

TEST_F(S3ClientTest, UnreachableEndpointIsUnavailable) {
  S3Config c = config_;
  c.endpoint = "http://127.0.0.1:1";
  c.max_attempts = 2;
  S3Client client(c);
  auto got = client.Get(bucket_, "k");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("s3://" + bucket_ + "/k"), std::string::npos);
}

// Reads are pinned to one version of the object (If-Match: the ETag its HEAD gave): a
// range of a replaced object is refused (Conflict), never served from the new version.
TEST_F(S3ClientTest, RangeOfAReplacedObjectIsAConflictNotTheNewBytes) {
  ASSERT_TRUE(client_->Put(bucket_, "pinned", Random(10000, 1)).ok());
  auto before = client_->Head(bucket_, "pinned");
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  Status same = client_->GetRange(
      bucket_, "pinned", 0, 100, [](std::string_view) { return Status::Ok(); }, before->etag);
  EXPECT_TRUE(same.ok()) << same.ToString();
  ASSERT_TRUE(client_->Put(bucket_, "pinned", Random(10000, 2)).ok());
  std::string got;
  Status s = client_->GetRange(
      bucket_, "pinned", 0, 100,
      [&](std::string_view d) {
        got.append(d);
        return Status::Ok();
      },
      before->etag);
  EXPECT_EQ(s.code(), StatusCode::kConflict) << s.ToString();
  EXPECT_NE(s.message().find("changed while being read"), std::string::npos) << s.message();
  EXPECT_EQ(got, "");
}

// The streamed data read took the object's size from a HEAD, then read
// ranges of whatever the key held by then, splicing two versions into one stream. Now a
// replacement during the read ends it with Unavailable (the trainer exits 200 and reads the
// new object from the start).
TEST_F(S3ClientTest, ObjectReplacedWhileStreamingEndsTheReadInsteadOfSplicingVersions) {
  std::string first, second;
  for (int i = 0; i < 100000; ++i) {
    first += "old " + std::to_string(i % 10) + "\n";
    second += "new " + std::to_string(i % 10) + "\n";
  }
  ASSERT_TRUE(client_->Put(bucket_, "data/replaced.tsv", first).ok());
  StreamOptions o;
  o.chunk_bytes = 4096;  // ~150 ranged GETs; at most two ahead of the reader
  o.read_ahead = 1;
  auto in = ObjectInputStream::Open("s3://" + bucket_ + "/data/replaced.tsv", o);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  std::string line;
  ASSERT_TRUE(std::getline(**in, line));
  EXPECT_EQ(line, "old 0");
  ASSERT_TRUE(client_->Put(bucket_, "data/replaced.tsv", second).ok());
  int new_lines = 0;
  while (std::getline(**in, line)) new_lines += line.rfind("new", 0) == 0;
  EXPECT_EQ(new_lines, 0) << "bytes of the new version were spliced into the old one's stream";
  EXPECT_EQ((*in)->status().code(), StatusCode::kUnavailable) << (*in)->status().ToString();
  EXPECT_NE((*in)->status().message().find("changed while being read"), std::string::npos)
      << (*in)->status().message();
}

// The data path: an object read as a stream in small ranged chunks with read-ahead gives
// the same lines; with a cache directory, a complete read leaves a copy that the next open
// reads instead (while its size still matches the object's).
TEST_F(S3ClientTest, ObjectStreamReadsLinesAndFillsTheCache) {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + "\n";
  ASSERT_TRUE(client_->Put(bucket_, "data/part-0.tsv", text).ok());
  const std::string path = "s3://" + bucket_ + "/data/part-0.tsv";
  const std::string cache = env_["KUBETRAIN_TEST_S3_DIR"] + "/cache-" + bucket_;
  const std::string cached = cache + "/" + bucket_ + "/data/part-0.tsv";
  StreamOptions o;
  o.chunk_bytes = 4096;  // many ranged GETs, lines cut across chunks
  o.read_ahead = 3;
  o.cache_dir = cache;
  std::string marked = text;  // what the cache holds for the second pass
  for (size_t at = marked.find("line"); at != std::string::npos; at = marked.find("line", at)) {
    marked.replace(at, 4, "LINE");
  }
  for (int pass = 0; pass < 2; ++pass) {
    auto in = ObjectInputStream::Open(path, o);
    ASSERT_TRUE(in.ok()) << in.status().ToString();
    std::string line, back;
    while (std::getline(**in, line)) back += line + "\n";
    EXPECT_TRUE((*in)->status().ok()) << (*in)->status().ToString();
    EXPECT_TRUE(back == (pass == 0 ? text : marked)) << "pass " << pass;
    if (pass == 0) {
      ASSERT_EQ(ReadFileOrEmpty(cached), text);
      std::ofstream(cached, std::ios::trunc) << marked;  // same size: still valid
    }
  }
  ASSERT_TRUE(client_->Delete(bucket_, "data/part-0.tsv").ok());
  // Without the cache, the deleted object is a clear NotFound naming it.
  auto gone = ObjectInputStream::Open(path, {});
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find(path), std::string::npos) << gone.status().message();
}

// ObjectWriter streams an object of many parts with at most parts_in_flight + 1 part buffers
// in memory; nothing is visible at the key before Commit; the bytes and SHA-256 it returns
// are the object's.
TEST_F(S3ClientTest, ObjectWriterStreamsPartsWithBoundedMemory) {
  const size_t part = 5u << 20;  // S3's smallest part
  const std::string data = Random(4 * part + 123457, 11);
  const std::string path = "s3://" + bucket_ + "/streamed/shard";
  ASSERT_TRUE(client_->Delete(bucket_, "streamed/shard").ok());  // from an earlier run
  auto w = ObjectWriter::Open(path, {part, 2, "application/octet-stream"});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (size_t off = 0; off < data.size(); off += 777777) {
    ASSERT_TRUE((*w)->Append(std::string_view(data).substr(off, 777777)).ok());
  }
  EXPECT_EQ(client_->Head(bucket_, "streamed/shard").status().code(), StatusCode::kNotFound);
  auto done = (*w)->Commit();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->bytes, data.size());
  EXPECT_EQ(done->sha256, Sha256Hex(data));
  EXPECT_LE((*w)->peak_buffered_bytes(), 3 * part);
  EXPECT_GE((*w)->peak_buffered_bytes(), 2 * part);  // a part in flight while one fills
  auto got = ReadObject(path);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data) << "read back " << got->size() << " bytes of " << data.size();
}

// Within one part the writer sends a single PutObject (its checksum recorded and checked on
// read); a writer destroyed before Commit leaves no object.
TEST_F(S3ClientTest, ObjectWriterSmallObjectIsOnePutAndUncommittedLeavesNothing) {
  const std::string small = Random(4096, 12);
  auto w = ObjectWriter::Open("s3://" + bucket_ + "/small", {5u << 20, 2, "text/plain"});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append(small).ok());
  auto done = (*w)->Commit();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  auto got = client_->Get(bucket_, "small");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == small);

  ASSERT_TRUE(client_->Delete(bucket_, "dropped").ok());
  {
    auto dropped = ObjectWriter::Open("s3://" + bucket_ + "/dropped", {5u << 20, 2});
    ASSERT_TRUE(dropped.ok());
    ASSERT_TRUE((*dropped)->Append(Random(11u << 20, 13)).ok());  // two parts sent
  }
  EXPECT_EQ(client_->Head(bucket_, "dropped").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kubetrain::storage
