#include "operator/runtime/controller.h"

#include <gtest/gtest.h>

#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "operator/runtime/fake_api_client.h"

namespace kubetrain::runtime {
namespace {

using json = nlohmann::json;

struct Caches : InformerSet {
  Informer<GenericObject>* pods = nullptr;
};

// A lister that is always refused, as RBAC refuses one.
class ForbiddenLister final : public ListerWatcher {
 public:
  StatusOr<json> List() override { return PermissionDenied("pods is forbidden"); }
  Status Watch(const std::string&, const kube::WatchHandler&, std::stop_token) override {
    return PermissionDenied("pods is forbidden");
  }
};

// A scaffold over `api` watching pods in `namespaces`; deleted keys go to `forgotten`.
struct Fixture {
  explicit Fixture(std::vector<std::string> namespaces, FakeApi* api = nullptr)
      : scaffold(nullptr, api != nullptr ? api : &own_api, WorkQueueOptions{.name = ""}) {
    scaffold.BuildCaches(std::move(namespaces), [this](const std::string& ns) {
      auto c = std::make_unique<Caches>();
      c->pods = c->Add<GenericObject>("pods", scaffold.client()->ListWatch(kube::kPods, ns, "", {}),
                                      ToGenericObject);
      c->pods->AddHandlers(scaffold.KeyHandlers<GenericObject>([this](const std::string& key) {
        MutexLock lock(mu);
        forgotten.insert(key);
      }));
      return c;
    });
  }
  std::set<std::string> Forgotten() {
    MutexLock lock(mu);
    return forgotten;
  }

  FakeApi own_api;
  Mutex mu;
  std::set<std::string> forgotten GUARDED_BY(mu);
  ControllerScaffold<Caches> scaffold;  // last: stopped before what its handlers use goes
};

json Pod(const std::string& ns, const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"uid", ns + "-" + name}}}};
}

TEST(ControllerScaffoldTest, ANamespaceIsServedByItsOwnCachesElseByTheAllNamespacesOnes) {
  Fixture both({"a", ""});
  ASSERT_NE(both.scaffold.CachesFor("a"), nullptr);
  ASSERT_NE(both.scaffold.CachesFor(""), nullptr);
  EXPECT_NE(both.scaffold.CachesFor("a"), both.scaffold.CachesFor(""));
  EXPECT_EQ(both.scaffold.CachesFor("b"), both.scaffold.CachesFor(""));

  Fixture only_a({"a"});
  EXPECT_NE(only_a.scaffold.CachesFor("a"), nullptr);
  EXPECT_EQ(only_a.scaffold.CachesFor("b"), nullptr);  // not watched

  Fixture all({});
  EXPECT_EQ(all.scaffold.Namespaces(), std::vector<std::string>{""});
}

TEST(ControllerScaffoldTest, KeyHandlersQueueAddedObjectsAndForgetDeletedOnes) {
  FakeApi api;
  api.Seed(kube::kPods, Pod("a", "p0"));
  Fixture f({"a"}, &api);
  f.scaffold.Start();
  ASSERT_TRUE(f.scaffold
                  .WaitForSync(std::chrono::steady_clock::now() + std::chrono::seconds(20),
                               std::chrono::seconds(20), {})
                  .ok());
  EXPECT_TRUE(f.scaffold.Synced());
  EXPECT_EQ(f.scaffold.queue().Len(), 1u);  // a/p0, listed
  EXPECT_FALSE(f.scaffold.Idle());
  ASSERT_TRUE(api.Delete(kube::kPods, "a", "p0", {}).ok());
  ASSERT_TRUE(Eventually([&] { return f.Forgotten().contains("a/p0"); }));
  EXPECT_EQ(f.scaffold.queue().Len(), 1u);  // the delete queued nothing more
}

TEST(ControllerScaffoldTest, ACacheThatCannotListIsNamedWithItsCause) {
  struct Forbidden : InformerSet {};
  ControllerScaffold<Forbidden> scaffold(nullptr, nullptr, WorkQueueOptions{.name = ""});
  Informer<GenericObject>* pods = nullptr;
  scaffold.BuildCaches({"a"}, [&](const std::string&) {
    auto c = std::make_unique<Forbidden>();
    pods = c->Add<GenericObject>("pods", std::make_unique<ForbiddenLister>(), ToGenericObject);
    return c;
  });
  scaffold.Start();
  ASSERT_TRUE(Eventually([&] { return !pods->LastError().ok(); }));
  const Status s =
      scaffold.WaitForSync(std::chrono::steady_clock::now(), std::chrono::milliseconds(1234), {});
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("namespace 'a' did not sync within 1234 ms"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("403 Forbidden"), std::string::npos) << s.message();
  EXPECT_FALSE(scaffold.Synced());
}

}  // namespace
}  // namespace kubetrain::runtime
