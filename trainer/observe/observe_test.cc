#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "trainer/observe/crc32c.h"
#include "trainer/observe/log_tail.h"
#include "trainer/observe/summaries.h"
#include "trainer/observe/tfevents.h"

namespace kubetrain::trainer::observe {
namespace {

namespace fs = std::filesystem;

// RFC 3720 appendix B.4, the CRC-32C test vectors (and the usual check value).
TEST(Crc32cTest, MatchesTheRfc3720Vectors) {
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<char>(i);
    down[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(Crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(down), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, ExtendingEqualsOneCrcOfTheWhole) {
  EXPECT_EQ(Crc32cExtend(Crc32c("12345"), "6789"), 0xE3069283u);
}

TEST(Crc32cTest, MaskIsTensorFlowsRotateAndAdd) {
  EXPECT_EQ(MaskCrc(0), 0xa282ead8u);
  // 0x8A9136AA rotated right by 15 is 0x6d551522; plus the delta (mod 2^32).
  EXPECT_EQ(MaskCrc(0x8A9136AAu), 0x0fd7fffau);
  for (uint32_t crc : {0u, 1u, 0x8A9136AAu, 0xE3069283u, 0xffffffffu}) {
    EXPECT_EQ(UnmaskCrc(MaskCrc(crc)), crc);
    if (crc != 0) {
      EXPECT_NE(MaskCrc(crc), crc);
    }
  }
}

TEST(TfeventsTest, RecordIsLengthMaskedCrcDataMaskedCrc) {
  const std::string data = "123456789";
  const std::string r = FrameRecord(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(r.substr(0, 8), std::string("\x09\0\0\0\0\0\0\0", 8));
  uint32_t len_crc, data_crc;
  std::memcpy(&len_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 12 + data.size(), 4);
  EXPECT_EQ(len_crc, MaskCrc(Crc32c(r.substr(0, 8))));
  EXPECT_EQ(data_crc, MaskCrc(0xE3069283u));
  EXPECT_EQ(r.substr(12, data.size()), data);
}

TEST(TfeventsTest, FramingRoundTripsAndStopsAtATruncatedTail) {
  const std::string file = FrameRecord("a") + FrameRecord("") + FrameRecord(std::string(300, 'x'));
  auto records = ParseRecords(file);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 3u);
  EXPECT_EQ((*records)[0], "a");
  EXPECT_EQ((*records)[1], "");
  EXPECT_EQ((*records)[2], std::string(300, 'x'));
  auto cut = ParseRecords(std::string_view(file).substr(0, file.size() - 3));
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->size(), 2u);
}

TEST(TfeventsTest, CorruptDataIsDataLoss) {
  std::string file = FrameRecord("hello");
  file[13] ^= 1;
  EXPECT_EQ(ParseRecords(file).status().code(), StatusCode::kDataLoss);
  file = FrameRecord("hello");
  file[0] ^= 1;
  EXPECT_EQ(ParseRecords(file).status().code(), StatusCode::kDataLoss);
}

TEST(TfeventsTest, ScalarEventDecodesToWhatWasWritten) {
  const Scalar values[] = {{"train/loss", 0.6931f}, {"eval/auc", 0.75f}};
  auto e = DecodeEvent(ScalarEvent(1700000000.25, 1234567890123, values));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->wall_time, 1700000000.25);
  EXPECT_EQ(e->step, 1234567890123);
  ASSERT_EQ(e->scalars.size(), 2u);
  EXPECT_EQ(e->scalars[0].first, "train/loss");
  EXPECT_EQ(e->scalars[0].second, 0.6931f);
  EXPECT_EQ(e->scalars[1].first, "eval/auc");
  EXPECT_EQ(e->scalars[1].second, 0.75f);
  auto v = DecodeEvent(FileVersionEvent(5));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->file_version, "brain.Event:2");
}

// Exact bytes of a one-value event, field by field (protobuf wire format).
TEST(TfeventsTest, ScalarEventBytesAreTheEventProto) {
  const Scalar values[] = {{"a", 1.0f}};
  const std::string e = ScalarEvent(0.0, 3, values);
  const std::string expected = std::string("\x09\0\0\0\0\0\0\0\0", 9)  // wall_time 0.0
                               + std::string("\x10\x03", 2)            // step 3
                               + std::string("\x2a\x0a", 2)            // summary, 10 bytes
                               + std::string("\x0a\x08", 2)            // value, 8 bytes
                               + std::string(
                                     "\x0a\x01"
                                     "a",
                                     3)                                   // tag "a"
                               + std::string("\x15\x00\x00\x80\x3f", 5);  // simple_value 1.0f
  EXPECT_EQ(e, expected);
}

TEST(TfeventsTest, FileNameIsTensorBoards) {
  EXPECT_EQ(EventFileName(1700000000, "worker-0", 7), "events.out.tfevents.1700000000.worker-0.7");
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class EventWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("kt_tfevents_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  EventWriter::Options Opts() {
    EventWriter::Options o;
    o.dir = dir_ + "/run";
    o.flush_interval = std::chrono::seconds(10);
    o.now = [this] { return now_; };
    o.wall_time = [] { return 1700000000.5; };
    o.host = "h";
    o.pid = 42;
    return o;
  }
  std::string dir_;
  EventWriter::Clock::time_point now_{};
};

TEST_F(EventWriterTest, WritesOnlyWhenTheFlushIntervalHasPassed) {
  auto w = EventWriter::Open(Opts());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->path(), dir_ + "/run/events.out.tfevents.1700000000.h.42");
  const auto size = [&] { return fs::file_size((*w)->path()); };
  const uint64_t header = size();  // the file-version record, at once
  EXPECT_GT(header, 0u);
  const Scalar v[] = {{"train/loss", 0.5f}};
  for (int step = 1; step <= 100; ++step) {
    (*w)->Add(step, v);
    ASSERT_TRUE((*w)->MaybeFlush().ok());
  }
  EXPECT_EQ(size(), header) << "100 steps within the interval wrote nothing";
  now_ += std::chrono::seconds(10);
  ASSERT_TRUE((*w)->MaybeFlush().ok());
  EXPECT_GT(size(), header);
  EXPECT_EQ((*w)->flushes(), 2u);  // the header's and this one
  auto records = ParseRecords(Slurp((*w)->path()));
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 101u);
  auto first = DecodeEvent((*records)[0]);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->file_version, "brain.Event:2");
  auto last = DecodeEvent((*records)[100]);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->step, 100);
  EXPECT_EQ(last->wall_time, 1700000000.5);
  ASSERT_EQ(last->scalars.size(), 1u);
  EXPECT_EQ(last->scalars[0].second, 0.5f);
}

TEST_F(EventWriterTest, SummariesWriteMeanLossRateAndEvaluations) {
  auto w = EventWriter::Open(Opts());
  ASSERT_TRUE(w.ok());
  const std::string path = (*w)->path();
  TrainingSummaries::Options o;
  o.every = 2;
  o.learning_rate = 0.05f;
  o.ps_bytes = [] { return std::pair<uint64_t, uint64_t>{1000, 2000}; };
  o.now = [this] { return now_; };
  TrainingSummaries s(std::move(*w), o);
  now_ += std::chrono::seconds(1);
  s.Step(1, 1.0f, 100);
  now_ += std::chrono::seconds(1);
  s.Step(2, 0.5f, 100);  // a point: mean loss 0.75, 200 examples in 2 s
  s.Evaluation(2, 0.8, 0.4, 0.9);
  auto records = ParseRecords(Slurp(path));
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 3u);
  auto train = DecodeEvent((*records)[1]);
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->step, 2);
  using P = std::pair<std::string, float>;
  EXPECT_EQ(train->scalars, (std::vector<P>{{"train/loss", 0.75f},
                                            {"train/learning_rate", 0.05f},
                                            {"train/samples_per_second", 100.0f},
                                            {"ps/sent_bytes", 1000.0f},
                                            {"ps/received_bytes", 2000.0f}}));
  auto eval = DecodeEvent((*records)[2]);
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(eval->scalars,
            (std::vector<P>{{"eval/auc", 0.8f}, {"eval/log_loss", 0.4f}, {"eval/accuracy", 0.9f}}));
}

TEST(LogTailTest, KeepsEverythingUnderTheCapacity) {
  LogTail t(64);
  t.Append("one\n");
  t.Append("two\n");
  EXPECT_EQ(t.Contents(), "one\ntwo\n");
  EXPECT_EQ(t.dropped_bytes(), 0u);
}

TEST(LogTailTest, KeepsTheLastBytesAndSaysHowManyWereDropped) {
  LogTail t(32);
  std::string all;
  for (int i = 0; i < 100; ++i) {
    const std::string line = "line " + std::to_string(i) + "\n";
    t.Append(line);
    all += line;
  }
  EXPECT_EQ(t.dropped_bytes(), all.size() - 32);
  const std::string c = t.Contents();
  // From the first whole line in the last 32 bytes to the end.
  const std::string last32 = all.substr(all.size() - 32);
  const std::string whole = last32.substr(last32.find('\n') + 1);
  ASSERT_GE(c.size(), whole.size());
  EXPECT_EQ(c.substr(c.size() - whole.size()), whole);
  EXPECT_EQ(c.rfind("[kubetrain: the first " + std::to_string(all.size() - whole.size()) +
                        " bytes of this log were dropped",
                    0),
            0u)
      << c;
}

TEST(LogTailTest, OneAppendLargerThanTheRingKeepsItsEnd) {
  LogTail t(8);
  t.Append("abc");
  t.Append("0123456789abcdef\nxyz");
  EXPECT_EQ(t.dropped_bytes(), 23u - 8u);
  EXPECT_NE(t.Contents().find("\nxyz"), std::string::npos) << t.Contents();
}

TEST(LogTailTest, SinkKeepsFormattedLines) {
  auto tail = std::make_shared<LogTail>(1024);
  spdlog::logger logger("tail-test", MakeLogTailSink(tail));
  logger.set_pattern("[%l] %v");
  logger.info("hello {}", 1);
  logger.warn("careful");
  EXPECT_EQ(tail->Contents(), "[info] hello 1\n[warning] careful\n");
}

}  // namespace
}  // namespace kubetrain::trainer::observe
