#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "trainer/data/eval_metrics.h"
#include "trainer/data/generator.h"
#include "trainer/data/reader.h"

namespace kubetrain::trainer {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("kt_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::string CriteoLine(int label, int i1, const std::string& c1) {
  std::string line = std::to_string(label) + "\t" + std::to_string(i1);
  for (int i = 1; i < kCriteoDense; ++i) line += "\t";  // missing integers
  line += "\t" + c1;
  for (int i = 1; i < kCriteoCat; ++i) line += "\t";  // missing categoricals
  return line;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(CriteoParseTest, ParsesFieldsAndMissingValues) {
  Batch b;
  b.dense.resize(kCriteoDense);
  b.cat.resize(kCriteoCat);
  b.label.resize(1);
  ASSERT_TRUE(ParseCriteoLine(CriteoLine(1, 4, "68fd1e64"), '\t', &b, 0).ok());
  EXPECT_EQ(b.label[0], 1.f);
  EXPECT_FLOAT_EQ(b.dense[0], std::log1p(4.f));
  EXPECT_EQ(b.dense[1], 0.f);  // missing
  EXPECT_EQ(b.cat[0], HashFeature(0, "68fd1e64"));
  EXPECT_EQ(b.cat[1], HashFeature(1, ""));
  EXPECT_NE(HashFeature(1, ""), HashFeature(2, ""));  // missing differs per field
  EXPECT_NE(HashFeature(0, "a"), HashFeature(1, "a"));
}

TEST(CriteoParseTest, RejectsMalformedLines) {
  Batch b;
  b.dense.resize(kCriteoDense);
  b.cat.resize(kCriteoCat);
  b.label.resize(1);
  EXPECT_FALSE(ParseCriteoLine("1\t2\t3", '\t', &b, 0).ok());
  EXPECT_FALSE(ParseCriteoLine(CriteoLine(2, 1, "x"), '\t', &b, 0).ok());
  const std::string bad_int = "1\tz" + CriteoLine(1, 1, "x").substr(3);
  const Status s = ParseCriteoLine(bad_int, '\t', &b, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("I1"), std::string::npos) << s.message();
  EXPECT_FALSE(ParseCriteoLine(CriteoLine(1, 1, "x") + "\textra", '\t', &b, 0).ok());
}

TEST(StripeReaderTest, EachWorkerReadsLineIModuloN) {
  TempDir dir;
  std::string a, c;
  for (int i = 0; i < 5; ++i) a += CriteoLine(0, i, "a") + "\n";
  for (int i = 5; i < 9; ++i) c += CriteoLine(0, i, "a") + "\n";
  WriteFile(dir.File("part-0"), a);
  WriteFile(dir.File("part-1"), c);
  auto files = ListDataFiles(dir.File(""), "part");
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files->size(), 2u);
  for (int stripe = 0; stripe < 3; ++stripe) {
    StripeReader reader({*files, DataFormat::kCriteoTsv, 0, stripe, 3, 0, /*loop=*/false});
    Batch b;
    auto n = reader.Next(10, &b);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_EQ(*n, 3);  // 9 lines over 3 workers
    for (int r = 0; r < 3; ++r) {
      EXPECT_FLOAT_EQ(b.dense[r * kCriteoDense], TransformCount(stripe + 3 * r));
    }
    EXPECT_EQ(*reader.Next(10, &b), 0);
  }
}

TEST(StripeReaderTest, LoopingReaderStartsOverAndFillsFullBatches) {
  TempDir dir;
  WriteFile(dir.File("d"), CriteoLine(1, 1, "a") + "\n" + CriteoLine(0, 2, "b") + "\n");
  StripeReader reader({{dir.File("d")}, DataFormat::kCriteoTsv, 0, 0, 1, 0, true});
  Batch b;
  auto n = reader.Next(5, &b);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 5);
  EXPECT_EQ(b.label, (std::vector<float>{1, 0, 1, 0, 1}));
}

TEST(StripeReaderTest, SkipsMalformedLinesUpToLimitThenFails) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 4; ++i) text += CriteoLine(1, i, "a") + "\n" + "garbage\n";
  WriteFile(dir.File("d"), text);
  {
    StripeReader reader({{dir.File("d")}, DataFormat::kCriteoTsv, 0, 0, 1, 4, false});
    Batch b;
    auto n = reader.Next(10, &b);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, 4);
    EXPECT_EQ(reader.bad_lines(), 4);
  }
  {
    StripeReader reader({{dir.File("d")}, DataFormat::kCriteoTsv, 0, 0, 1, 3, false});
    Batch b;
    auto n = reader.Next(10, &b);
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(n.status().message().find(dir.File("d") + ":8: expected 40 fields"),
              std::string::npos)
        << n.status().message();
    EXPECT_NE(n.status().message().find("limit of 3"), std::string::npos);
  }
  {
    // Looping: the same bad lines seen again in later epochs are not counted again.
    StripeReader reader({{dir.File("d")}, DataFormat::kCriteoTsv, 0, 0, 1, 4, true});
    Batch b;
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(reader.Next(4, &b).ok());
    EXPECT_EQ(reader.bad_lines(), 4);
  }
}

TEST(StripeReaderTest, LoopingReaderWithNoValidLineFails) {
  TempDir dir;
  WriteFile(dir.File("d"), "garbage\n");
  StripeReader reader({{dir.File("d")}, DataFormat::kCriteoTsv, 0, 0, 1, 10, true});
  Batch b;
  EXPECT_FALSE(reader.Next(4, &b).ok());
}

TEST(StripeReaderTest, MissingFileIsNotFound) {
  StripeReader reader({{"/nonexistent/kt/file"}, DataFormat::kCriteoTsv, 0, 0, 1, 10, false});
  Batch b;
  auto n = reader.Next(4, &b);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(ListDataFiles("/nonexistent/kt", "").ok());
}

TEST(DenseCsvTest, ReadsWithHeader) {
  TempDir dir;
  WriteFile(dir.File("d.csv"), "label,x,y\n1,0.5,2\n0,-1,3e2\n2,1,x\n");
  StripeReader reader({{dir.File("d.csv")}, DataFormat::kDenseCsv, 2, 0, 1, 1, false});
  Batch b;
  auto n = reader.Next(8, &b);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, 2);
  EXPECT_EQ(b.label, (std::vector<float>{1, 0}));
  EXPECT_EQ(b.dense, (std::vector<float>{0.5f, 2.f, -1.f, 300.f}));
  EXPECT_EQ(reader.bad_lines(), 1);
}

TEST(MetricsTest, AucLogLossAccuracy) {
  const float labels[4] = {0, 0, 1, 1};
  const float good[4] = {0.1f, 0.2f, 0.8f, 0.9f};
  const float bad[4] = {0.9f, 0.8f, 0.2f, 0.1f};
  const float tied[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  const float mixed[4] = {0.1f, 0.6f, 0.4f, 0.9f};
  EXPECT_DOUBLE_EQ(Auc(good, labels, 4), 1.0);
  EXPECT_DOUBLE_EQ(Auc(bad, labels, 4), 0.0);
  EXPECT_DOUBLE_EQ(Auc(tied, labels, 4), 0.5);
  EXPECT_DOUBLE_EQ(Auc(mixed, labels, 4), 0.75);
  EXPECT_NEAR(BinaryLogLoss(tied, labels, 4), std::log(2.0), 1e-6);
  EXPECT_DOUBLE_EQ(BinaryAccuracy(good, labels, 4), 1.0);
  EXPECT_DOUBLE_EQ(BinaryAccuracy(mixed, labels, 4), 0.5);
}

TEST(GeneratorTest, DeterministicAndLearnableInPrinciple) {
  TempDir dir;
  GeneratorOptions o;
  auto auc1 = WriteSyntheticCriteo(dir.File("a"), 2000, o);
  auto auc2 = WriteSyntheticCriteo(dir.File("b"), 2000, o);
  ASSERT_TRUE(auc1.ok()) << auc1.status().ToString();
  ASSERT_TRUE(auc2.ok());
  std::stringstream a, b;
  a << std::ifstream(dir.File("a")).rdbuf();
  b << std::ifstream(dir.File("b")).rdbuf();
  EXPECT_EQ(a.str(), b.str());
  // The ground truth separates the classes well, so a model has something to learn.
  EXPECT_GT(*auc1, 0.8);
  // Every line is valid Criteo.
  StripeReader reader({{dir.File("a")}, DataFormat::kCriteoTsv, 0, 0, 1, 0, false});
  Batch batch;
  auto n = reader.Next(5000, &batch);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2000);
  double positives = 0;
  for (float l : batch.label) positives += l;
  EXPECT_GT(positives / 2000, 0.1);
  EXPECT_LT(positives / 2000, 0.9);
}

// The criteo-kaggle profile: every field within Kaggle's cardinality, the big fields
// Zipf-like (one value frequent, most values seen once), deterministic, learnable.
TEST(GeneratorTest, CriteoKaggleProfileHasKaggleCardinalitiesAndZipfSkew) {
  TempDir dir;
  GeneratorOptions o;
  o.profile = GeneratorProfile::kCriteoKaggle;
  constexpr int64_t kLines = 20000;
  auto auc = WriteSyntheticCriteo(dir.File("a"), kLines, o);
  ASSERT_TRUE(auc.ok()) << auc.status().ToString();
  ASSERT_TRUE(WriteSyntheticCriteo(dir.File("b"), kLines, o).ok());
  std::stringstream a, b;
  a << std::ifstream(dir.File("a")).rdbuf();
  b << std::ifstream(dir.File("b")).rdbuf();
  EXPECT_EQ(a.str(), b.str());
  o.model_seed = 7;
  ASSERT_TRUE(WriteSyntheticCriteo(dir.File("c"), kLines, o).ok());
  std::stringstream c;
  c << std::ifstream(dir.File("c")).rdbuf();
  EXPECT_NE(a.str(), c.str());
  EXPECT_GT(*auc, 0.75);

  const auto& card = CriteoKaggleCardinalities();
  int64_t total = 0;
  for (int64_t k : card) total += k;
  EXPECT_EQ(total, 33762577);
  std::vector<std::map<std::string, int64_t>> seen(kCriteoCat);
  std::string line;
  int64_t lines = 0;
  while (std::getline(a, line)) {
    ++lines;
    std::vector<std::string> cols;
    std::stringstream ls(line);
    for (std::string col; std::getline(ls, col, '\t');) cols.push_back(col);
    if (line.back() == '\t') cols.emplace_back();
    ASSERT_EQ(cols.size(), size_t{1 + kCriteoDense + kCriteoCat}) << line;
    for (int fi = 0; fi < kCriteoCat; ++fi) {
      const std::string& v = cols[1 + kCriteoDense + fi];
      if (!v.empty()) ++seen[fi][v];
    }
  }
  EXPECT_EQ(lines, kLines);
  for (int fi = 0; fi < kCriteoCat; ++fi) {
    EXPECT_LE(static_cast<int64_t>(seen[fi].size()), card[fi]) << "field " << fi;
  }
  // Small fields are covered: field 8 has 3 values, field 19 has 4.
  EXPECT_EQ(seen[8].size(), 3u);
  EXPECT_EQ(seen[19].size(), 4u);
  // Field 2 (10,131,227 values): its most frequent value in a few percent of lines
  // (P(0) = ln 2 / ln(card + 1) = 4.3%), yet most values drawn are distinct (the tail).
  int64_t top = 0;
  for (const auto& [v, count] : seen[2]) top = std::max(top, count);
  EXPECT_GT(top, kLines / 50);
  EXPECT_LT(top, kLines / 10);
  EXPECT_GT(static_cast<int64_t>(seen[2].size()), kLines / 2);
  // Valid for the reader.
  StripeReader reader({{dir.File("a")}, DataFormat::kCriteoTsv, 0, 0, 1, 0, false});
  Batch batch;
  auto n = reader.Next(kLines + 1, &batch);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, kLines);
}

TEST(GeneratorTest, ProfileNamesParse) {
  EXPECT_EQ(*ParseGeneratorProfile("small"), GeneratorProfile::kSmall);
  EXPECT_EQ(*ParseGeneratorProfile("criteo-kaggle"), GeneratorProfile::kCriteoKaggle);
  EXPECT_FALSE(ParseGeneratorProfile("kaggle").ok());
}

// Containers sharing a volume all run as PID 1: a temp name built from the PID is the same
// in each, so one generator truncates and renames away another's half-written file.
TEST(GeneratorTest, TempFileNameDoesNotCollideWithAnotherProcessWithTheSamePid) {
  TempDir dir;
  // Another container's generator, also PID == ours, is half-way through its temp file.
  const std::string pid_name = dir.File(".train.tsv.tmp." + std::to_string(::getpid()));
  WriteFile(pid_name, "partial data of the other writer\n");
  GeneratorOptions o;
  auto auc = WriteSyntheticCriteo(dir.File("train.tsv"), 100, o);
  ASSERT_TRUE(auc.ok()) << auc.status().ToString();
  ASSERT_TRUE(fs::exists(pid_name)) << "the other writer's temp file was taken over";
  std::stringstream other;
  other << std::ifstream(pid_name).rdbuf();
  EXPECT_EQ(other.str(), "partial data of the other writer\n");
  // And our own temp file is gone: only the two files remain.
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.File(""))) ++files;
  EXPECT_EQ(files, 2);
}

TEST(GeneratorTest, ConcurrentWritersWithTheSamePidBothSucceedWithIdenticalData) {
  // Threads share the PID, like containers that are each PID 1.
  TempDir dir;
  GeneratorOptions o;
  constexpr int kWriters = 4;
  std::vector<Status> results(kWriters);
  std::vector<std::thread> writers;
  for (int i = 0; i < kWriters; ++i) {
    writers.emplace_back([&, i] {
      auto auc = WriteSyntheticCriteo(dir.File("train.tsv"), 20000, o);
      results[i] = auc.ok() ? Status::Ok() : auc.status();
    });
  }
  for (auto& t : writers) t.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  auto alone = WriteSyntheticCriteo(dir.File("alone.tsv"), 20000, o);
  ASSERT_TRUE(alone.ok());
  std::stringstream a, b;
  a << std::ifstream(dir.File("train.tsv")).rdbuf();
  b << std::ifstream(dir.File("alone.tsv")).rdbuf();
  EXPECT_TRUE(a.str() == b.str()) << "concurrent writers corrupted the file";
}

}  // namespace
}  // namespace kubetrain::trainer
