#include "operator/local/yaml_out.h"

#include <gtest/gtest.h>

#include "operator/api/yaml.h"

namespace kubetrain::local {
namespace {

using nlohmann::json;

TEST(ToYamlTest, RoundTripsTrickyValues) {
  json v = {{"a", "true"},
            {"b", "123"},
            {"c", "multi\nline: with # chars"},
            {"d", json::array({json::object({{"x", 1}, {"y", json::array({1, "no"})}}),
                               json::array({"p", "q"}), json::object(), json::array()})},
            {"kubetrain.io/job-name", "wide-deep"},
            {"e", nullptr},
            {"f", 2.5},
            {"g", ""},
            {"h", json::object({{"i", json::object({{"j", false}})}})}};
  const std::string text = ToYaml(v);
  auto docs = api::ParseYamlDocuments(text);
  ASSERT_TRUE(docs.ok()) << docs.status().ToString() << "\n" << text;
  ASSERT_EQ(docs->size(), 1u);
  EXPECT_EQ(docs->front().value, v) << text;
}

TEST(ToYamlTest, PlainWhereSafe) {
  EXPECT_EQ(ToYaml(json{{"kind", "Pod"}, {"replicas", 3}}), "kind: Pod\nreplicas: 3\n");
  // YAML 1.1 reads a plain n as false.
  EXPECT_EQ(ToYaml(json{{"n", "y"}}), "\"n\": \"y\"\n");
}

}  // namespace
}  // namespace kubetrain::local
