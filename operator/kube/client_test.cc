#include "operator/kube/client.h"

#include <gtest/gtest.h>

namespace kubetrain::kube {
namespace {

TEST(ResourcePathTest, CoreNamespacedObject) {
  EXPECT_EQ(ResourcePath(kPods, "ns", "p"), "/api/v1/namespaces/ns/pods/p");
}

TEST(ResourcePathTest, GroupClusterScopedIgnoresNamespace) {
  EXPECT_EQ(ResourcePath(kCustomResourceDefinitions, "ns", "x"),
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x");
}

TEST(ResourcePathTest, AllNamespacesAndSubresource) {
  EXPECT_EQ(ResourcePath(kLeases, ""), "/apis/coordination.k8s.io/v1/leases");
  ResourceRef tj{"kubetrain.io", "v1alpha1", "trainingjobs", true};
  EXPECT_EQ(ResourcePath(tj, "a", "j", "status"),
            "/apis/kubetrain.io/v1alpha1/namespaces/a/trainingjobs/j/status");
}

TEST(ApiErrorTest, MapsReasonsToCodesAndKeepsMessage) {
  auto s =
      ApiError(409, R"({"kind":"Status","reason":"AlreadyExists","message":"pods \"x\" exists"})",
               "POST /p");
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("AlreadyExists (409) POST /p: pods \"x\" exists"), std::string::npos)
      << s.message();
  EXPECT_EQ(ApiError(409, R"({"kind":"Status","reason":"Conflict"})", "").code(),
            StatusCode::kConflict);
  EXPECT_EQ(ApiError(404, "{}", "").code(), StatusCode::kNotFound);
  EXPECT_EQ(ApiError(410, R"({"kind":"Status","reason":"Expired"})", "").code(), StatusCode::kGone);
  EXPECT_EQ(ApiError(422, R"({"kind":"Status","reason":"Invalid"})", "").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ApiError(403, "", "").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ApiError(401, "", "").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(ApiError(429, "", "").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ApiError(503, "not json", "").code(), StatusCode::kUnavailable);
}

TEST(ClientTest, CreateRejectsEmptyServer) {
  auto c = Client::Create(Config{});
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

TEST(ClientTest, ConnectionRefusedIsUnavailableAfterRetries) {
  Config cfg;
  cfg.server = "http://127.0.0.1:1";  // nothing listens on port 1
  cfg.max_retries = 1;
  auto c = Client::Create(cfg);
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Get(kPods, "default", "x");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
}

// ParseServedJson of a document that parses.
nlohmann::json Parsed(std::string_view text, ServedShape shape, bool drop_managed_fields,
                      const FieldFilter* fields = nullptr) {
  auto got = ParseServedJson(text, shape, drop_managed_fields, fields);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  return got.ok() ? std::move(got).value() : nlohmann::json();
}

// Informers parse served objects without metadata.managedFields;
// nothing else is dropped, and managedFields nested deeper (a pod template's)
// stay.
TEST(ParseServedJsonTest, DropsOnlyTheServedObjectsManagedFields) {
  const std::string mf = R"("managedFields":[{"manager":"kubectl","fieldsV1":{"f:spec":{}}}])";
  const std::string obj = R"({"metadata":{"name":"a",)" + mf +
                          R"(,"labels":{"x":"y"}},"spec":{"template":{"metadata":{)" + mf +
                          R"(}},"managedFields":1}})";
  const auto plain = nlohmann::json::parse(obj);
  auto want = plain;
  want["metadata"].erase("managedFields");

  EXPECT_EQ(Parsed(obj, ServedShape::kObject, true), want);
  EXPECT_EQ(Parsed(obj, ServedShape::kObject, false), plain);

  const std::string list =
      R"({"metadata":{"resourceVersion":"5","continue":"c"},"items":[)" + obj + "," + obj + "]}";
  auto got = Parsed(list, ServedShape::kList, true);
  EXPECT_EQ(got["metadata"], (nlohmann::json{{"resourceVersion", "5"}, {"continue", "c"}}));
  ASSERT_EQ(got["items"].size(), 2u);
  EXPECT_EQ(got["items"][0], want);
  EXPECT_EQ(got["items"][1], want);

  const std::string event = R"({"type":"MODIFIED","object":)" + obj + "}";
  got = Parsed(event, ServedShape::kWatchEvent, true);
  EXPECT_EQ(got["type"], "MODIFIED");
  EXPECT_EQ(got["object"], want);
  // The shapes do not mix: a list item's path is not a watch event's.
  EXPECT_EQ(Parsed(event, ServedShape::kList, true), nlohmann::json::parse(event));
  EXPECT_EQ(ParseServedJson("{\"items\":[", ServedShape::kList, true).status().code(),
            StatusCode::kInvalidArgument);
}

// The SAX builder gives what json::parse gives for every kind of value and
// position, and drops managedFields only at the served objects' metadata
// (not under a key "" that looks like a list's array level, not a scalar
// elsewhere).
TEST(ParseServedJsonTest, BuildsWhatJsonParseBuildsElsewhere) {
  const std::string body =
      R"({"metadata":{"managedFields":[{"a":[1,[2,{"b":null}]]}],"name":"p","n":-3,"u":18446744073709551615,)"
      R"("f":1.5e3,"t":true,"z":false,"nil":null,"s":"\u00e9\n\"x\"","e":{},"ea":[]},)"
      R"("spec":[{"metadata":{"managedFields":1}},[[]],"x"],"":{"metadata":{"managedFields":2}}})";
  auto want = nlohmann::json::parse(body);
  want["metadata"].erase("managedFields");
  EXPECT_EQ(Parsed(body, ServedShape::kObject, true), want);
  EXPECT_EQ(Parsed(body, ServedShape::kObject, true).dump(), want.dump());

  // A list whose items sit under "" instead of an array keeps everything.
  const std::string list = R"({"items":{"":{"metadata":{"managedFields":3,"name":"q"}}}})";
  EXPECT_EQ(Parsed(list, ServedShape::kList, true), nlohmann::json::parse(list));
  // Scalars and empty documents of each shape.
  EXPECT_EQ(Parsed("7", ServedShape::kObject, true), 7);
  EXPECT_EQ(Parsed(R"({"items":[]})", ServedShape::kList, true),
            nlohmann::json::parse(R"({"items":[]})"));
  EXPECT_EQ(Parsed(R"({"type":"DELETED","object":{"metadata":{"managedFields":[]}}})",
                   ServedShape::kWatchEvent, true),
            nlohmann::json::parse(R"({"type":"DELETED","object":{"metadata":{}}})"));
  const auto cut =
      ParseServedJson(R"({"metadata":{"managedFields":[1,)", ServedShape::kObject, true);
  EXPECT_EQ(cut.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cut.status().message().find("parse error"), std::string::npos)
      << cut.status().ToString();
}

// A cache that reads a few fields of large objects has the
// objects built with only those; what sits above the served objects (a
// watch event's type, a list's metadata) is kept, arrays' elements are
// filtered as the array, and managedFields still go.
TEST(ParseServedJsonTest, BuildsOnlyTheFilteredFieldsOfTheServedObjects) {
  const FieldFilter fields = {
      {"metadata", {}},
      {"spec", {{"containers", {{"name", {}}, {"env", {{"name", {}}}}}}}},
  };
  const std::string obj =
      R"({"kind":"Pod","metadata":{"name":"a","managedFields":[1],"labels":{"x":"y"}},)"
      R"("spec":{"volumes":[{"name":"v","secret":{"secretName":"s"}}],)"
      R"("containers":[{"name":"c","image":"i","env":[{"name":"E","value":"big"},{"value":"x"}]},)"
      R"({"args":["a"]},7]},"status":{"phase":"Running"}})";
  const auto want = nlohmann::json::parse(
      R"({"metadata":{"name":"a","labels":{"x":"y"}},)"
      R"("spec":{"containers":[{"name":"c","env":[{"name":"E"},{}]},{},7]}})");
  EXPECT_EQ(Parsed(obj, ServedShape::kObject, true, &fields), want);
  auto with_managed_fields = want;
  with_managed_fields["metadata"]["managedFields"] = {1};
  EXPECT_EQ(Parsed(obj, ServedShape::kObject, false, &fields), with_managed_fields);

  const std::string list =
      R"({"metadata":{"resourceVersion":"5"},"items":[)" + obj + "," + obj + "]}";
  auto got = Parsed(list, ServedShape::kList, true, &fields);
  EXPECT_EQ(got["metadata"], (nlohmann::json{{"resourceVersion", "5"}}));
  EXPECT_EQ(got["items"], nlohmann::json::array({want, want}));

  got = Parsed(R"({"type":"ADDED","object":)" + obj + "}", ServedShape::kWatchEvent, true, &fields);
  EXPECT_EQ(got, (nlohmann::json{{"type", "ADDED"}, {"object", want}}));
  // An empty filter keeps no field; an object that is no object stays as it is.
  const FieldFilter none;
  EXPECT_EQ(Parsed(obj, ServedShape::kObject, true, &none), nlohmann::json::object());
  EXPECT_EQ(Parsed(R"({"items":[1,"s",[{"kind":1}]]})", ServedShape::kList, true, &none),
            nlohmann::json::parse(R"({"items":[1,"s",[{}]]})"));
}

}  // namespace
}  // namespace kubetrain::kube
