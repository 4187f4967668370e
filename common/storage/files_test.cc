#include "common/storage/files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kubetrain::storage {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kt_files_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  fs::path root_;
};

// Containers that share a volume all run their trainer as PID 1, so a temp name built from
// the PID (and a per-process counter) is the same in each of them: one writer truncated
// and wrote through the other's temp file, and a checkpoint MANIFEST could be committed
// with the other's half-written bytes. Stand-in for the other writer: links planted at
// every name the PID scheme would pick. A write must never go through them.
TEST_F(FilesTest, NeverWritesThroughAnotherWritersTempName) {
  const fs::path victim = root_ / "other-writer";
  { std::ofstream(victim) << "the other writer's bytes"; }
  const fs::path target = root_ / "MANIFEST";
  const std::string pid = std::to_string(::getpid());
  for (int i = 0; i < 256; ++i) {
    fs::create_symlink(victim, target.string() + ".tmp." + pid + "." + std::to_string(i));
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(WriteFileAtomic(target.string(), "ours " + std::to_string(i)).ok());
  }
  const fs::path committed = root_ / "ckpt-1.MANIFEST";
  for (int i = 0; i < 256; ++i) {
    fs::create_symlink(victim, committed.string() + ".tmp." + pid + "." + std::to_string(i));
  }
  ASSERT_TRUE(WriteFileAtomic(committed.string(), "manifest", WriteMode::kCreateOnly).ok());
  EXPECT_EQ(Slurp(victim), "the other writer's bytes");
  EXPECT_EQ(Slurp(target), "ours 3");
  EXPECT_EQ(Slurp(committed), "manifest");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(committed)));
}

TEST_F(FilesTest, TempFilesAreUniqueReadableAndGone) {
  const std::string base = (root_ / "f").string();
  std::string a, b;
  StatusOr<int> fa = CreateTempBeside(base, &a);
  StatusOr<int> fb = CreateTempBeside(base, &b);
  ASSERT_TRUE(fa.ok() && fb.ok());
  ::close(*fa);
  ::close(*fb);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind(base + ".tmp.", 0), 0u);
  // Readers in other containers may run as another user.
  EXPECT_EQ(fs::status(a).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
  fs::remove(a);
  fs::remove(b);

  ASSERT_TRUE(WriteFileAtomic(base, "x").ok());
  EXPECT_EQ(WriteFileAtomic(base, "y", WriteMode::kCreateOnly).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(Slurp(base), "x");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(root_)) ++entries;
  EXPECT_EQ(entries, 1) << "a temp file was left behind";
}

// Concurrent writers of one path: the file always holds one writer's whole content.
TEST_F(FilesTest, ConcurrentWritersLeaveOneWholeFile) {
  const std::string path = (root_ / "metrics.json").string();
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      const std::string content(4096 + t, static_cast<char>('a' + t));
      for (int i = 0; i < 50; ++i) ASSERT_TRUE(WriteFileAtomic(path, content).ok());
    });
  }
  for (auto& w : writers) w.join();
  const std::string got = Slurp(path);
  ASSERT_GE(got.size(), 4096u);
  const int t = static_cast<int>(got.size()) - 4096;
  EXPECT_EQ(got, std::string(got.size(), static_cast<char>('a' + t)));
}

}  // namespace
}  // namespace kubetrain::storage
