// Informer, reflector and events against the real apiserver.
#include <gtest/gtest.h>

#include <set>

#include "operator/runtime/events.h"
#include "operator/runtime/informer.h"
#include "tests/kube/it_util.h"
#include "tests/kube/tcp_proxy.h"

namespace kubetrain::testing {
namespace {

using runtime::GenericObject;
using runtime::Informer;

class Seen {
 public:
  void Add(const std::string& s) {
    std::lock_guard lock(mu_);
    events_.insert(s);
  }
  bool Has(const std::string& s) {
    std::lock_guard lock(mu_);
    return events_.count(s) > 0;
  }

 private:
  std::mutex mu_;
  std::set<std::string> events_;
};

runtime::EventHandlers<GenericObject> Recorder(Seen* seen) {
  runtime::EventHandlers<GenericObject> h;
  h.on_add = [seen](const auto& o) { seen->Add("add " + o->meta.name); };
  h.on_update = [seen](const auto&, const auto& o) {
    seen->Add("update " + o->meta.name + " " + o->object["data"].value("k", ""));
  };
  h.on_delete = [seen](const auto& o, bool tombstone) {
    seen->Add((tombstone ? "tombstone " : "delete ") + o->meta.name);
  };
  return h;
}

runtime::ReflectorOptions FastBackoff() {
  runtime::ReflectorOptions o;
  o.initial_backoff = std::chrono::milliseconds(100);
  o.max_backoff = std::chrono::milliseconds(500);
  return o;
}

TEST(InformerIT, SyncsThenSeesAddUpdateDeleteOnlyForSelectedLabels) {
  auto client = NewClient(ClusterConfig());
  ScopedNamespace ns(client.get());
  ASSERT_TRUE(
      client->Create(kube::kConfigMaps, ns.name(), ConfigMap("pre", "v", {{"app", "kt"}})).ok());
  ASSERT_TRUE(
      client->Create(kube::kConfigMaps, ns.name(), ConfigMap("other", "v", {{"app", "x"}})).ok());
  Seen seen;
  Informer<GenericObject> inf(
      runtime::NewKubeListerWatcher(client.get(), kube::kConfigMaps, ns.name(), "app=kt"),
      runtime::ToGenericObject, FastBackoff());
  inf.AddLabelIndex("app");
  inf.AddHandlers(Recorder(&seen));
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(std::chrono::seconds(30)));
  EXPECT_TRUE(seen.Has("add pre"));
  EXPECT_EQ(inf.store().size(), 1u);  // "other" filtered by the server

  ASSERT_TRUE(
      client->Create(kube::kConfigMaps, ns.name(), ConfigMap("new", "v", {{"app", "kt"}})).ok());
  ASSERT_TRUE(client
                  ->Patch(kube::kConfigMaps, ns.name(), "pre", kube::PatchType::kMerge,
                          {{"data", {{"k", "changed"}}}})
                  .ok());
  ASSERT_TRUE(client->Delete(kube::kConfigMaps, ns.name(), "new").ok());
  EXPECT_TRUE(Eventually([&] { return seen.Has("delete new"); }));
  EXPECT_TRUE(seen.Has("add new"));
  EXPECT_TRUE(seen.Has("update pre changed"));
  EXPECT_EQ(inf.store().ByIndex(runtime::LabelIndexName("app"), "kt").size(), 1u);
  EXPECT_EQ(inf.store().ByIndex(runtime::kNamespaceIndex, ns.name()).size(), 1u);
}

TEST(InformerIT, WatchResumesFromLastResourceVersionAfterConnectionDrop) {
  kube::Config cfg = ClusterConfig();
  auto client = NewClient(cfg);
  ScopedNamespace ns(client.get());
  // The informer talks to the apiserver through a proxy we can cut.
  TcpProxy proxy(ServerPort(cfg));
  kube::Config via = cfg;
  via.server = "https://127.0.0.1:" + std::to_string(proxy.port());
  auto proxied = NewClient(via);
  Seen seen;
  Informer<GenericObject> inf(
      runtime::NewKubeListerWatcher(proxied.get(), kube::kConfigMaps, ns.name()),
      runtime::ToGenericObject, FastBackoff());
  inf.AddHandlers(Recorder(&seen));
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(std::chrono::seconds(30)));
  ASSERT_TRUE(client->Create(kube::kConfigMaps, ns.name(), ConfigMap("before")).ok());
  ASSERT_TRUE(Eventually([&] { return seen.Has("add before"); }));
  const int conns = proxy.connections_accepted();

  proxy.DropAll();
  // Written while the watch is down: must arrive through the resumed watch.
  ASSERT_TRUE(client->Create(kube::kConfigMaps, ns.name(), ConfigMap("during")).ok());
  EXPECT_TRUE(Eventually([&] { return seen.Has("add during"); }));
  EXPECT_GT(proxy.connections_accepted(), conns);  // a new connection was made
  EXPECT_EQ(inf.reflector().lists(), 1);           // resumed, not relisted
  ASSERT_TRUE(client->Create(kube::kConfigMaps, ns.name(), ConfigMap("after")).ok());
  EXPECT_TRUE(Eventually([&] { return seen.Has("add after"); }));
  EXPECT_FALSE(seen.Has("tombstone before"));
}

// Whether the apiserver still serves a watch from `rv` (for the label below).
// A watch it can serve just idles; an expired one fails at once with 410.
bool Expired(kube::Client* c, const std::string& ns, const std::string& rv) {
  kube::ListOptions o;
  o.resource_version = rv;
  o.label_selector = "app=kt";
  std::stop_source stop;
  std::thread timer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // bounded probe, not sync
    stop.request_stop();
  });
  Status s = c->Watch(
      kube::kConfigMaps, ns, o, [](kube::WatchEvent&&) { return Status::Ok(); }, stop.get_token());
  stop.request_stop();
  timer.join();
  return s.code() == StatusCode::kGone;
}

TEST(InformerIT, GoneAfterLongDisconnectRelistsAndReplacesStoreWithTombstones) {
  kube::Config cfg = ClusterConfig();
  auto client = NewClient(cfg);
  ScopedNamespace ns(client.get());
  TcpProxy proxy(ServerPort(cfg));
  kube::Config via = cfg;
  via.server = "https://127.0.0.1:" + std::to_string(proxy.port());
  auto proxied = NewClient(via);
  Seen seen;
  Informer<GenericObject> inf(
      runtime::NewKubeListerWatcher(proxied.get(), kube::kConfigMaps, ns.name(), "app=kt"),
      runtime::ToGenericObject, FastBackoff());
  inf.AddHandlers(Recorder(&seen));
  ASSERT_TRUE(
      client->Create(kube::kConfigMaps, ns.name(), ConfigMap("keep", "v", {{"app", "kt"}})).ok());
  ASSERT_TRUE(
      client->Create(kube::kConfigMaps, ns.name(), ConfigMap("vanish", "v", {{"app", "kt"}})).ok());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(std::chrono::seconds(30)));
  ASSERT_EQ(inf.store().size(), 2u);
  // Only a change seen through the watch proves the watch connection is up,
  // so that cutting connections below really cuts it.
  ASSERT_TRUE(
      client->Create(kube::kConfigMaps, ns.name(), ConfigMap("probe", "v", {{"app", "kt"}})).ok());
  ASSERT_TRUE(Eventually([&] { return seen.Has("add probe"); }));

  // A long disconnect: the informer cannot reach the apiserver ...
  proxy.SetRefusing(true);
  proxy.DropAll();
  // ... while objects change ...
  ASSERT_TRUE(client->Delete(kube::kConfigMaps, ns.name(), "vanish").ok());
  ASSERT_TRUE(
      client->Create(kube::kConfigMaps, ns.name(), ConfigMap("fresh", "v", {{"app", "kt"}})).ok());
  // ... and enough other ConfigMap writes happen that the apiserver's watch
  // cache no longer reaches back to the informer's resourceVersion.
  const std::string rv = inf.reflector().last_resource_version();
  ASSERT_TRUE(client->Create(kube::kConfigMaps, ns.name(), ConfigMap("churn")).ok());
  int writes = 0;
  ASSERT_TRUE(Eventually(
      [&] {
        for (int i = 0; i < 100; ++i, ++writes)
          EXPECT_TRUE(client
                          ->Patch(kube::kConfigMaps, ns.name(), "churn", kube::PatchType::kMerge,
                                  {{"data", {{"k", std::to_string(writes)}}}})
                          .ok());
        return Expired(client.get(), ns.name(), rv);
      },
      std::chrono::seconds(400)))
      << "resourceVersion " << rv << " still served after " << writes << " writes";
  std::printf("resourceVersion %s expired after %d writes\n", rv.c_str(), writes);
  EXPECT_EQ(inf.reflector().lists(), 1);

  proxy.SetRefusing(false);
  // The resumed watch gets 410; the reflector relists and replaces the store.
  ASSERT_TRUE(Eventually([&] { return inf.reflector().lists() >= 2; }));
  EXPECT_TRUE(Eventually([&] { return seen.Has("add fresh"); }));
  EXPECT_TRUE(seen.Has("tombstone vanish"));  // the delete event itself was never seen
  EXPECT_FALSE(seen.Has("delete vanish"));
  EXPECT_EQ(inf.store().size(), 3u);  // keep, probe, fresh
  EXPECT_EQ(inf.store().Get(ns.name() + "/vanish"), nullptr);
}

TEST(EventsIT, RepeatsAggregateIntoOneEventWithSeriesCount) {
  auto client = NewClient(ClusterConfig());
  ScopedNamespace ns(client.get());
  auto cm = client->Create(kube::kConfigMaps, ns.name(), ConfigMap("target"));
  ASSERT_TRUE(cm.ok());
  runtime::ObjectReference ref{"v1", "ConfigMap", ns.name(), "target",
                               (*cm)["metadata"]["uid"].get<std::string>()};
  runtime::EventRecorderOptions opts;
  opts.reporting_instance = "it";
  runtime::EventRecorder rec(client.get(), opts);
  rec.Record(ref, "Warning", "Failed", "Reconcile", "boom");
  rec.Record(ref, "Warning", "Failed", "Reconcile", "boom");
  rec.Record(ref, "Warning", "Failed", "Reconcile", "boom");
  rec.Record(ref, "Normal", "Created", "Create", "made it");
  rec.Flush();
  auto events = client->List(kube::kEvents, ns.name());
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ((*events)["items"].size(), 2u) << events->dump();
  for (const auto& e : (*events)["items"]) {
    if (e["reason"] == "Failed") {
      EXPECT_EQ(e["series"]["count"], 3);
      EXPECT_EQ(e["regarding"]["uid"], ref.uid);
    } else {
      EXPECT_FALSE(e.contains("series"));
    }
  }
}

TEST(EventsIT, PerObjectRateLimitDropsTheExcess) {
  auto client = NewClient(ClusterConfig());
  ScopedNamespace ns(client.get());
  runtime::ObjectReference ref{"v1", "ConfigMap", ns.name(), "x", "uid-x"};
  runtime::EventRecorderOptions opts;
  opts.per_object_burst = 5;
  runtime::EventRecorder rec(client.get(), opts);
  for (int i = 0; i < 8; ++i) {
    std::string note =
        std::to_string(i);  // "n" + to_string trips a GCC 12 -Wrestrict false positive
    rec.Record(ref, "Normal", "R", "A", note);
  }
  rec.Flush();
  EXPECT_EQ(rec.dropped(), 3u);
  auto events = client->List(kube::kEvents, ns.name());
  ASSERT_TRUE(events.ok());
  EXPECT_EQ((*events)["items"].size(), 5u);
}

}  // namespace
}  // namespace kubetrain::testing
