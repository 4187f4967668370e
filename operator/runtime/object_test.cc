#include "operator/runtime/object.h"

#include <gtest/gtest.h>

namespace kubetrain::runtime {
namespace {

using json = nlohmann::json;

TEST(ObjectTest, MetadataKeepsWhatTheControllerNeeds) {
  json pod = json::parse(R"({
    "metadata": {"name": "w-0", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
      "labels": {"b": "2", "a": "1"}, "deletionTimestamp": "2026-01-01T00:00:00Z",
      "ownerReferences": [{"kind": "X", "name": "n", "uid": "o0"},
                          {"kind": "TrainingJob", "name": "job", "uid": "o1", "controller": true}]},
    "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "big"}]},
    "status": {"phase": "Failed", "podIP": "10.0.0.2", "containerStatuses": [
      {"name": "c", "restartCount": 3, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
      {"name": "d", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}})");
  auto p = ToGenericObject(pod);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->meta.Key(), "ns/w-0");
  EXPECT_EQ(p->meta.resource_version, "42");
  ASSERT_TRUE(p->meta.controller.has_value());
  EXPECT_EQ(p->meta.controller->uid, "o1");
  ASSERT_NE(p->meta.Label("a"), nullptr);
  EXPECT_EQ(*p->meta.Label("a"), "1");
  EXPECT_EQ(p->meta.Label("zz"), nullptr);
  EXPECT_EQ(p->meta.deletion_timestamp, "2026-01-01T00:00:00Z");
  EXPECT_EQ(p->object["status"]["phase"], "Failed");
}

// Jobs are cached as text; everything but managedFields comes back.
TEST(ObjectTest, CompactObjectKeepsAllButManagedFields) {
  json job = json::parse(R"({"apiVersion": "kubetrain.io/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
      "generation": 2, "labels": {"a": "1"}, "annotations": {"x": "y"},
      "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
    "spec": {"replicaSpecs": {"Worker": {"replicas": 2, "template": {"metadata":
      {"managedFields": "kept: not the object's own"}, "spec": {"containers": [{"name": "t"}]}}}}},
    "status": {"conditions": [{"type": "Running", "status": "True"}]}})");
  auto c = ToCompactObject(job);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->meta.Key(), "ns/j");
  EXPECT_EQ(c->meta.resource_version, "7");
  EXPECT_EQ(c->meta.generation, 2);
  json want = job;
  want["metadata"].erase("managedFields");
  EXPECT_EQ(c->Object(), want);
  EXPECT_EQ(c->text.find("kubectl"), std::string::npos);
  // Ill-formed UTF-8 (never served) becomes U+FFFD instead of a throw.
  want["metadata"]["labels"]["b"] = "ill-formed \xff";
  auto d = ToCompactObject(want);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->Object()["metadata"]["labels"]["b"], "ill-formed \uFFFD");
  EXPECT_EQ(ToCompactObject(json::parse(R"({"metadata": {}})")).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ObjectTest, MissingNameIsInvalidArgument) {
  EXPECT_EQ(ParseObjectMeta(json::parse(R"({"metadata": {}})")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseObjectMeta(json(3)).status().code(), StatusCode::kInvalidArgument);
}

TEST(ObjectTest, SplitKey) {
  EXPECT_EQ(SplitKey("a/b"), (std::pair<std::string, std::string>{"a", "b"}));
  EXPECT_EQ(SplitKey("b"), (std::pair<std::string, std::string>{"", "b"}));
}

}  // namespace
}  // namespace kubetrain::runtime
