// ObjectWriter on local files (the S3 side is tested against a real server in tests/s3).
#include "common/storage/writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/storage/sigv4.h"

namespace kubetrain::storage {
namespace {

namespace fs = std::filesystem;

class WriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kt_writer_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  static std::string Slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path root_;
};

TEST_F(WriterTest, LocalFileAppearsWholeAtCommitWithItsSha256) {
  const fs::path path = root_ / "sub" / "file";
  std::string data;
  for (int i = 0; i < 300000; ++i) data += std::to_string(i);  // ~1.6 MB: past the buffer
  auto w = ObjectWriter::Open(path.string());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE((*w)->Append(std::string_view(data).substr(0, 1000)).ok());
  ASSERT_TRUE((*w)->Append(std::string_view(data).substr(1000)).ok());
  EXPECT_FALSE(fs::exists(path));
  auto done = (*w)->Commit();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->bytes, data.size());
  EXPECT_EQ(done->sha256, Sha256Hex(data));
  EXPECT_EQ(Slurp(path), data);
  EXPECT_EQ(std::distance(fs::directory_iterator(path.parent_path()), fs::directory_iterator{}),
            1);  // no temp file left
}

TEST_F(WriterTest, LocalWriterDroppedBeforeCommitLeavesNothing) {
  const fs::path path = root_ / "file";
  {
    auto w = ObjectWriter::Open(path.string());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append("partial").ok());
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(root_));
}

}  // namespace
}  // namespace kubetrain::storage
