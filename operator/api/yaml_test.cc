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
