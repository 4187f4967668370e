#include "trainer/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace kubetrain::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Config Parse(std::vector<std::string> args) {
  Config c;
  CLI::App app;
  AddTrainerFlags(app, &c);
  args.insert(args.begin(), "kubetrain-trainer");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return c;
}

// The message CLI11 would print for a refused command line ("" when it parses).
std::string Refusal(std::vector<std::string> args) {
  try {
    Parse(std::move(args));
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainerConfigTest, NoFlagsGiveTheDocumentedDefaults) {
  const Config c = Parse({});
  EXPECT_EQ(c.model, ModelKind::kWideDeep);
  EXPECT_EQ(c.data_format, DataFormat::kCriteoTsv);
  EXPECT_THAT(c.layers, ElementsAre(1024, 512, 256));
  EXPECT_EQ(c.optimizer, OptimizerKind::kAdagrad);
  EXPECT_EQ(c.precision, Precision::kFp32);
  EXPECT_EQ(c.wire_precision, WireFloat::kF32);
  EXPECT_EQ(c.generate_profile, GeneratorProfile::kSmall);
  EXPECT_TRUE(CheckConfig(c).ok());
}

TEST(TrainerConfigTest, NamedValuesParseOnceIntoTypes) {
  const Config c = Parse({"--model", "mlp", "--data-format", "dense_csv", "--num-features", "4",
                          "--optimizer", "adam", "--precision", "bf16", "--wire-precision", "bf16",
                          "--generate-profile", "criteo-kaggle", "--layers", "64,32"});
  EXPECT_EQ(c.model, ModelKind::kMlp);
  EXPECT_STREQ(ModelKindName(c.model), "mlp");
  EXPECT_EQ(c.data_format, DataFormat::kDenseCsv);
  EXPECT_EQ(c.optimizer, OptimizerKind::kAdam);
  EXPECT_EQ(c.Optimizer().kind, OptimizerKind::kAdam);
  EXPECT_EQ(c.precision, Precision::kBf16);
  EXPECT_EQ(c.wire_precision, WireFloat::kBf16);
  EXPECT_EQ(c.generate_profile, GeneratorProfile::kCriteoKaggle);
  EXPECT_THAT(c.layers, ElementsAre(64, 32));  // replaces the default, not appended to it
  EXPECT_THAT(Parse({"--layers", "256, 128"}).layers, ElementsAre(256, 128));
  EXPECT_TRUE(CheckConfig(c).ok());
}

TEST(TrainerConfigTest, BadValuesAreRefusedInTheParseNamingTheFlag) {
  EXPECT_THAT(Refusal({"--wire-precision", "fp8"}),
              HasSubstr("--wire-precision: unknown wire precision \"fp8\""));
  EXPECT_THAT(Refusal({"--precision", "fp8"}), HasSubstr("expected fp32 or bf16"));
  EXPECT_THAT(Refusal({"--model", "cnn"}), HasSubstr("unknown --model \"cnn\""));
  EXPECT_THAT(Refusal({"--data-format", "parquet"}), HasSubstr("unknown data format"));
  EXPECT_THAT(Refusal({"--optimizer", "lamb"}), HasSubstr("unknown optimizer"));
  EXPECT_THAT(Refusal({"--generate-profile", "huge"}), HasSubstr("small or criteo-kaggle"));
  EXPECT_THAT(Refusal({"--layers", "64,x"}), HasSubstr("\"x\" is not a positive integer"));
  EXPECT_THAT(Refusal({"--layers", "64,0"}), HasSubstr("\"0\" is not a positive integer"));
  EXPECT_THAT(Refusal({"--lr", "0"}), HasSubstr("--lr: must be positive"));
  EXPECT_THAT(Refusal({"--stop-timeout", "0"}), HasSubstr("--stop-timeout"));
  EXPECT_EQ(Refusal({"--lr", "0.5", "--layers", "8"}), "");
}

TEST(TrainerConfigTest, CheckConfigRefusesFlagsThatContradictEachOther) {
  Config wide = Parse({"--data-format", "dense_csv"});
  EXPECT_EQ(CheckConfig(wide), InvalidArgument("wide_deep needs Criteo data"));
  Config mlp = Parse({"--model", "mlp", "--data-format", "dense_csv"});
  EXPECT_THAT(CheckConfig(mlp).message(), HasSubstr("--num-features"));
  Config admit = Parse({"--embedding-admit-count", "256"});
  EXPECT_THAT(CheckConfig(admit).message(), HasSubstr("--embedding-admit-count must be between"));
  Config chain = Parse({"--checkpoint-full-every", "0"});
  EXPECT_THAT(CheckConfig(chain).message(), HasSubstr("--checkpoint-full-every"));
}

TEST(TrainerConfigTest, EvictionBoundScalesWithUpdatesPerStep) {
  Config c = Parse({"--embedding-evict-steps", "1000000"});
  auto one = BuildEmbeddingOptions(c, 1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->evict_after_updates, 1000000u);
  auto many = BuildEmbeddingOptions(c, 4096);  // 4096 updates a step: at most 524287 steps
  EXPECT_TRUE(IsInvalidArgument(many.status()));
  EXPECT_THAT(many.status().message(), HasSubstr("--embedding-evict-steps must be between 0 and"));
}

TEST(TrainerConfigTest, EvalDirDefaultsToTheDataDir) {
  Config c = Parse({"--data-dir", "/d"});
  EXPECT_EQ(c.EvalDir(), "/d");
  c = Parse({"--data-dir", "/d", "--eval-data", "/e"});
  EXPECT_EQ(c.EvalDir(), "/e");
  EXPECT_FALSE(c.IsModelTool());
  EXPECT_TRUE(Parse({"--export", "/x"}).IsModelTool());
}

}  // namespace
}  // namespace kubetrain::trainer
