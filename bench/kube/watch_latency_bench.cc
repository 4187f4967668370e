// Watch event latency on loopback: time from starting a write to the informer
// handler seeing the resulting event, against the cluster in $KUBECONFIG.
// Writes are sequential (each waits for its event), so this is latency, not
// throughput. Prints p50/p99 per run, then the medians over runs.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "operator/kube/client.h"
#include "operator/runtime/informer.h"

namespace {

using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t idx = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[idx];
}

}  // namespace

int main() {
  using namespace kubetrain;
  constexpr int kWrites = 200;
  constexpr int kRuns = 5;
  auto cfg = kube::LoadDefaultConfig();
  if (!cfg.ok()) {
    std::fprintf(stderr, "needs a cluster (KUBECONFIG): %s\n", cfg.status().ToString().c_str());
    return 1;
  }
  cfg->qps = 0;
  auto client = kube::Client::Create(*cfg);
  if (!client.ok()) return 1;
  kube::Client* c = client->get();
  const std::string ns = "kt-bench-" + std::to_string(::getpid());
  if (!c->Create(kube::kNamespaces, "",
                 {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}})
           .ok())
    return 1;

  std::mutex mu;
  std::condition_variable cv;
  std::string last_seen;
  SteadyClock::time_point seen_at;
  runtime::Informer<runtime::GenericObject> inf(
      runtime::NewKubeListerWatcher(c, kube::kConfigMaps, ns, "bench=latency"),
      runtime::ToGenericObject);
  runtime::EventHandlers<runtime::GenericObject> h;
  h.on_update = [&](const auto&, const auto& o) {
    std::lock_guard lock(mu);
    last_seen = o->object["data"].value("seq", "");
    seen_at = SteadyClock::now();
    cv.notify_all();
  };
  inf.AddHandlers(h);
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", "probe"}, {"labels", {{"bench", "latency"}}}}},
             {"data", {{"seq", "init"}}}};
  if (!c->Create(kube::kConfigMaps, ns, cm).ok()) return 1;
  inf.Start();
  if (!inf.WaitForSync(std::chrono::seconds(30))) return 1;

  std::vector<double> p50s, p99s;
  int seq = 0;
  for (int run = 0; run < kRuns; ++run) {
    std::vector<double> lat;
    for (int i = 0; i < kWrites; ++i) {
      std::string want = std::to_string(++seq);
      auto start = SteadyClock::now();
      auto r = c->Patch(kube::kConfigMaps, ns, "probe", kube::PatchType::kMerge,
                        {{"data", {{"seq", want}}}});
      if (!r.ok()) {
        std::fprintf(stderr, "patch: %s\n", r.status().ToString().c_str());
        return 1;
      }
      std::unique_lock lock(mu);
      if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return last_seen == want; })) {
        std::fprintf(stderr, "event %s not seen within 10 s\n", want.c_str());
        return 1;
      }
      lat.push_back(std::chrono::duration<double, std::milli>(seen_at - start).count());
    }
    p50s.push_back(Percentile(lat, 0.50));
    p99s.push_back(Percentile(lat, 0.99));
    std::printf("run %d: %d writes, p50 %.2f ms, p99 %.2f ms\n", run, kWrites, p50s.back(),
                p99s.back());
  }
  inf.Stop();
  (void)c->Delete(kube::kNamespaces, "", ns);
  std::printf(
      "watch latency write->handler (loopback, TLS, HTTP/2): p50 %.2f ms, p99 %.2f ms "
      "(medians of %d runs x %d writes)\n",
      Percentile(p50s, 0.5), Percentile(p99s, 0.5), kRuns, kWrites);
  return 0;
}
