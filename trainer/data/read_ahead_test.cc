#include "trainer/data/read_ahead.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "trainer/data/generator.h"

namespace kubetrain::trainer {
namespace {

namespace fs = std::filesystem;

class ReadAheadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kt_read_ahead_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }
  ReaderOptions Options(const std::string& file, bool loop, int64_t max_bad = 0) const {
    return ReaderOptions{{File(file)}, DataFormat::kCriteoTsv, 0, 0, 1, max_bad, loop};
  }

  fs::path dir_;
};

TEST_F(ReadAheadTest, ReadsTheSameBatchesAsTheReaderAndBuildsTheirLookups) {
  ASSERT_TRUE(WriteSyntheticCriteo(File("d"), 1000, GeneratorOptions{}).ok());
  StripeReader direct(Options("d", true)), behind(Options("d", true));
  Batch want, got[2];
  SparseLookup lookups[2];
  ReadAhead ahead(behind, 64);  // after what it reads into: destroyed first
  ahead.Start(&got[0], &lookups[0]);
  for (int i = 0; i < 40; ++i) {  // over two passes of the file
    const int cur = i % 2;
    auto n = ahead.Wait();
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_FALSE(ahead.in_flight());
    // The next read runs while this batch is checked.
    ahead.Start(&got[1 - cur], &lookups[1 - cur]);
    ASSERT_TRUE(direct.Next(64, &want).ok());
    EXPECT_EQ(*n, 64);
    EXPECT_EQ(got[cur].cat, want.cat) << "batch " << i;
    EXPECT_EQ(got[cur].dense, want.dense) << "batch " << i;
    EXPECT_EQ(got[cur].label, want.label) << "batch " << i;
    const SparseLookup expect = SparseLookup::Build(want);
    EXPECT_EQ(lookups[cur].ids, expect.ids);
    EXPECT_EQ(lookups[cur].index, expect.index);
  }
  // The destructor waits for the read still in flight.
}

TEST_F(ReadAheadTest, PassesTheReadersErrorsAndEndThrough) {
  {
    std::ofstream(File("bad")) << "garbage\n";
    StripeReader reader(Options("bad", true));
    Batch b;
    SparseLookup l;
    ReadAhead ahead(reader, 4);
    ahead.Start(&b, &l);
    auto n = ahead.Wait();
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument);
  }
  {
    ASSERT_TRUE(WriteSyntheticCriteo(File("short"), 10, GeneratorOptions{}).ok());
    StripeReader reader(Options("short", false));
    Batch b;
    SparseLookup l;
    ReadAhead ahead(reader, 8);
    ahead.Start(&b, &l);
    auto n = ahead.Wait();
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 8);
    ahead.Start(&b, &l);
    n = ahead.Wait();
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 2);
    EXPECT_EQ(l.index.size(), 2u * kCriteoCat);
    ahead.Start(&b, &l);
    n = ahead.Wait();
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 0);
  }
}

TEST_F(ReadAheadTest, StopsWithNothingEverRequested) {
  ASSERT_TRUE(WriteSyntheticCriteo(File("d"), 10, GeneratorOptions{}).ok());
  StripeReader reader(Options("d", true));
  { ReadAhead ahead(reader, 4); }
  Batch b;
  ASSERT_TRUE(reader.Next(4, &b).ok());  // the reader was not touched
  EXPECT_EQ(reader.lines_read(), 4);
}

}  // namespace
}  // namespace kubetrain::trainer
