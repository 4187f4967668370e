#include "operator/api/yaml.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "operator/api/json.h"
#include "operator/api/sweep.h"
#include "operator/api/validation.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

TEST(YamlTest, ScalarsFollowTheCoreSchema) {
  StatusOr<std::vector<YamlDocument>> docs = ParseYamlDocuments(
      "a: 1\nb: true\nc: ~\nd: 1.5\ne: '2'\nf: yes\ng: 0x10\nh: text\ni: \"true\"\nj: !!str 3\n");
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  ASSERT_EQ(docs->size(), 1u);
  EXPECT_EQ((*docs)[0].value, json::parse(R"({"a": 1, "b": true, "c": null, "d": 1.5, "e": "2",
      "f": "yes", "g": 16, "h": "text", "i": "true", "j": "3"})"));
}

TEST(YamlTest, SplitsDocumentsAndSkipsEmptyOnes) {
  StatusOr<std::vector<YamlDocument>> docs = ParseYamlDocuments("a: 1\n---\n---\nb: [1, 2]\n");
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[1].value, json::parse(R"({"b": [1, 2]})"));
  EXPECT_EQ((*docs)[1].line, 4);
}

TEST(YamlTest, RecordsTheLineOfEveryPath) {
  StatusOr<std::vector<YamlDocument>> docs = ParseYamlDocuments(
      "spec:\n  replicaSpecs:\n    Worker:\n      replicas: -1\n  list:\n"
      "    - x: 1\n    - y: 2\n");
  ASSERT_TRUE(docs.ok());
  const YamlDocument& d = (*docs)[0];
  EXPECT_EQ(d.LineOf("spec.replicaSpecs.Worker.replicas"), 4);
  EXPECT_EQ(d.LineOf("spec.replicaSpecs.Worker.template"), 3);  // nearest ancestor
  EXPECT_EQ(d.LineOf("spec.list[1].y"), 7);
  EXPECT_EQ(d.LineOf("nowhere"), 1);
}

TEST(YamlTest, ReportsSyntaxErrorsAndDuplicateKeysWithTheLine) {
  StatusOr<std::vector<YamlDocument>> bad = ParseYamlDocuments("a: 1\nb: [1, 2\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("invalid YAML at line"), std::string::npos);
  bad = ParseYamlDocuments("a: 1\nb: 2\na: 3\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "line 3: duplicate key \"a\"");
}

// Found by api_yaml_fuzz: a job file with a byte that is not UTF-8 parsed and validated,
// and `kubetrain validate` then died in the planner's json::dump() (type_error 316:
// std::terminate). (yaml-cpp itself refuses a "\uD800" escape; ED A0 80 is its bytes.)
TEST(YamlTest, ScalarsAndKeysThatAreNotUtf8AreAnErrorAtTheirLine) {
  for (const char* text : {"a: 1\nb: \"x\xF5\"\n", "a: 1\nb: x\xED\xA0\x80\n", "a: 1\nb\xC3: 2\n",
                           "a: 1\nb: [x\x80]\n"}) {
    StatusOr<std::vector<YamlDocument>> docs = ParseYamlDocuments(text);
    ASSERT_FALSE(docs.ok()) << text;
    EXPECT_EQ(docs.status().message(), "line 2: not valid UTF-8") << text;
  }
  StatusOr<std::vector<YamlDocument>> good = ParseYamlDocuments("a: \"\\u00e9\xC3\xA9\"\n");
  ASSERT_TRUE(good.ok());
  EXPECT_EQ((*good)[0].value["a"], "\xC3\xA9\xC3\xA9");
}

// Found by api_yaml_fuzz: a stray ',' at document level ("[a], b", a garbled job
// file) made yaml-cpp 0.7's LoadAll report empty documents forever; the vector of them
// grew until std::bad_alloc aborted `kubetrain validate` (in seconds, at gigabytes).
TEST(YamlTest, AStrayCommaAtDocumentLevelIsAnErrorNotAnEndlessLoop) {
  for (const char* text : {",", ", b", "[a], b", "{a: 1}\n,", "a: 1\n---\n[x], y\n"}) {
    StatusOr<std::vector<YamlDocument>> docs = ParseYamlDocuments(text);
    ASSERT_FALSE(docs.ok()) << text;
    EXPECT_NE(docs.status().message().find("invalid YAML"), std::string::npos)
        << docs.status().message();
  }
}

TEST(YamlTest, AliasesExpandWithinABoundAndBillionLaughsIsRefused) {
  StatusOr<std::vector<YamlDocument>> docs =
      ParseYamlDocuments("base: &b {image: x, args: [1, 2]}\ncopy: *b\n");
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  EXPECT_EQ((*docs)[0].value["copy"], (*docs)[0].value["base"]);
  EXPECT_EQ((*docs)[0].LineOf("copy.args[1]"), 2);
  // Ten levels of ten aliases each: 10^10 strings from 400 bytes.
  std::string laughs = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char level = '1'; level <= '9'; ++level) {
    laughs.append(1, 'a').append(1, level).append(": &a").append(1, level).append(" [");
    for (int j = 0; j < 10; ++j) {
      if (j > 0) laughs.append(", ");
      laughs.append("*a").append(1, static_cast<char>(level - 1));
    }
    laughs.append("]\n");
  }
  docs = ParseYamlDocuments(laughs);
  ASSERT_FALSE(docs.ok());
  EXPECT_NE(docs.status().message().find("aliases included"), std::string::npos)
      << docs.status().message();
}

TEST(YamlTest, DeepNestingAndOversizedFilesAreRefused) {
  StatusOr<std::vector<YamlDocument>> deep =
      ParseYamlDocuments(std::string(200, '[') + std::string(200, ']'));
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("nested deeper than 128"), std::string::npos)
      << deep.status().message();
  StatusOr<std::vector<YamlDocument>> big =
      ParseYamlDocuments("a: \"" + std::string(kMaxYamlBytes, 'x') + "\"\n");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("at most"), std::string::npos);
}

// libstdc++'s std::regex recursed once per character of a scalar and overflowed the stack
// on long ones.
TEST(YamlTest, LongScalarsAreTypedWithoutRecursion) {
  StatusOr<std::vector<YamlDocument>> docs = ParseYamlDocuments(
      "a: " + std::string(1'000'000, '7') + "\nb: 1." + std::string(200'000, '5') + "\nc: 1e\n");
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  EXPECT_TRUE((*docs)[0].value["a"].is_string());  // out of range: kept as text
  EXPECT_TRUE((*docs)[0].value["b"].is_number_float());
  EXPECT_EQ((*docs)[0].value["c"], "1e");
  docs = ParseYamlDocuments("a: -12\nb: +.5\nc: 0x1F\nd: 0o17\ne: 1.\nf: .\ng: 2e-3\nh: 0x\n");
  ASSERT_TRUE(docs.ok());
  EXPECT_EQ((*docs)[0].value, json::parse(R"({"a": -12, "b": 0.5, "c": 31, "d": 15, "e": 1.0,
      "f": ".", "g": 0.002, "h": "0x"})"));
}

// Every TrainingJob in examples/ is valid as it stands (other documents, such as a
// Secret next to the job, are for kubectl and `kubetrain run`).
TEST(ExamplesTest, EveryExampleParsesAndValidates) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(KUBETRAIN_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    StatusOr<std::vector<YamlDocument>> docs = ParseYamlDocuments(text.str());
    ASSERT_TRUE(docs.ok()) << entry.path() << ": " << docs.status().ToString();
    for (const YamlDocument& doc : *docs) {
      if (KindOf(doc.value) == kSweepKind) {
        StatusOr<TrainingSweep> sweep = ParseTrainingSweep(doc.value);
        ASSERT_TRUE(sweep.ok()) << entry.path() << ": " << sweep.status().ToString();
        EXPECT_TRUE(ValidateSweep(*sweep).empty())
            << entry.path() << ": " << ToStatus(ValidateSweep(*sweep)).ToString();
        ++count;
        continue;
      }
      if (doc.value.value("kind", "") != "TrainingJob") continue;  // e.g. its Secret
      StatusOr<TrainingJob> job = ParseTrainingJob(doc.value);
      ASSERT_TRUE(job.ok()) << entry.path() << ": " << job.status().ToString();
      EXPECT_TRUE(Validate(*job).empty())
          << entry.path() << ": " << ToStatus(Validate(*job)).ToString();
      ++count;
    }
  }
  EXPECT_GE(count, 3);
}

}  // namespace
}  // namespace kubetrain::api
