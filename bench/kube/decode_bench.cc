// Decode rate of a 10,000-pod list and memory per cached pod.
//
// Builds a PodList like the apiserver returns for training pods (labels,
// owner reference, managedFields, a container with env and resources, status
// with conditions and a terminated container), then, for several runs:
//   decode: parse the list text + transform every item into the controller's
//           pod cache entry (controller::ToCachedPod: metadata + ObservedPod)
//   memory: heap held by a Store<CachedPod> with all pods (mallinfo2 delta)
// Prints the medians; the figures come last.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "operator/controller/observe_pod.h"
#include "operator/runtime/object.h"
#include "operator/runtime/store.h"

namespace {

using json = nlohmann::json;
using kubetrain::controller::CachedPod;
using kubetrain::runtime::GenericObject;
using kubetrain::runtime::Store;

json MakePod(int i) {
  std::string name = "job-" + std::to_string(i / 10) + "-worker-" + std::to_string(i % 10);
  json env = json::array();
  for (const char* k : {"CLUSTER_CONFIG", "POD_NAME", "TF_CONFIG", "KUBETRAIN_AUTH_KEY"})
    env.push_back({{"name", k}, {"value", std::string(120, 'x')}});
  return {
      {"metadata",
       {{"name", name},
        {"namespace", "team-" + std::to_string(i % 7)},
        {"uid", "6f1c9a2e-1d2b-4c3d-9e8f-" + std::to_string(100000000000 + i)},
        {"resourceVersion", std::to_string(1000000 + i)},
        {"creationTimestamp", "2026-11-21T10:00:00Z"},
        {"labels",
         {{"app.kubernetes.io/managed-by", "kubetrain"},
          {"kubetrain.io/job-name", "job-" + std::to_string(i / 10)},
          {"kubetrain.io/replica-type", "worker"},
          {"kubetrain.io/replica-index", std::to_string(i % 10)}}},
        {"ownerReferences",
         {{{"apiVersion", "kubetrain.io/v1alpha1"},
           {"kind", "TrainingJob"},
           {"name", "job-" + std::to_string(i / 10)},
           {"uid", "0a0b0c0d-1111-2222-3333-" + std::to_string(400000000000 + i / 10)},
           {"controller", true},
           {"blockOwnerDeletion", true}}}},
        {"managedFields",
         {{{"manager", "kubetrain"},
           {"operation", "Update"},
           {"apiVersion", "v1"},
           {"time", "2026-11-21T10:00:00Z"},
           {"fieldsType", "FieldsV1"},
           {"fieldsV1",
            {{"f:metadata", {{"f:labels", {{".", json::object()}}}}},
             {"f:spec", {{"f:containers", json::object()}}}}}}}}}},
      {"spec",
       {{"nodeName", "kwok-node-" + std::to_string(i % 3)},
        {"restartPolicy", "Never"},
        {"containers",
         {{{"name", "trainer"},
           {"image", "kubetrain-trainer:0.1.0"},
           {"args", {"--model", "wide-deep", "--steps", "100000"}},
           {"env", env},
           {"ports", {{{"containerPort", 2222}, {"name", "kubetrain"}}}},
           {"resources",
            {{"requests", {{"cpu", "4"}, {"memory", "8Gi"}}},
             {"limits", {{"cpu", "4"}, {"memory", "8Gi"}}}}}}}}}},
      {"status",
       {{"phase", "Running"},
        {"podIP", "10.244.0." + std::to_string(i % 250)},
        {"conditions",
         {{{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", "2026-11-21T10:00:05Z"}},
          {{"type", "PodScheduled"},
           {"status", "True"},
           {"lastTransitionTime", "2026-11-21T10:00:01Z"}}}},
        {"containerStatuses",
         {{{"name", "trainer"},
           {"restartCount", i % 3},
           {"ready", true},
           {"image", "kubetrain-trainer:0.1.0"},
           {"state", {{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}}}}}}}}};
}

size_t HeapInUse() {
  return mallinfo2().uordblks;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename T, typename Fn>
size_t StoreBytes(const std::string& text, Fn transform) {
  malloc_trim(0);
  size_t before = HeapInUse();
  Store<T> store;
  store.AddIndex(kubetrain::runtime::kNamespaceIndex, kubetrain::runtime::NamespaceIndexFunc<T>);
  store.AddIndex(kubetrain::runtime::kOwnerUidIndex, kubetrain::runtime::OwnerUidIndexFunc<T>);
  {
    json list = json::parse(text);
    typename Store<T>::Map items;
    for (auto& item : list["items"]) {
      auto t = transform(item);
      if (!t.ok()) continue;
      auto p = std::make_shared<const T>(std::move(*t));
      items.emplace(p->meta.Key(), std::move(p));
    }
    (void)store.Replace(std::move(items));
  }  // the JSON is gone; only the store remains
  malloc_trim(0);
  size_t after = HeapInUse();
  return (after - before) / store.size();
}

}  // namespace

int main() {
  constexpr int kPods = 10000;
  constexpr int kRuns = 5;
  json list = {{"apiVersion", "v1"},
               {"kind", "PodList"},
               {"metadata", {{"resourceVersion", "2000000"}}},
               {"items", json::array()}};
  for (int i = 0; i < kPods; ++i) list["items"].push_back(MakePod(i));
  const std::string text = list.dump();
  list = nullptr;
  std::printf("PodList: %d pods, %.1f MB of JSON (%.0f bytes/pod)\n", kPods, text.size() / 1e6,
              static_cast<double>(text.size()) / kPods);

  std::vector<double> rates;
  for (int run = 0; run < kRuns; ++run) {
    auto start = std::chrono::steady_clock::now();
    json parsed = json::parse(text);
    std::vector<CachedPod> pods;
    pods.reserve(kPods);
    for (const auto& item : parsed["items"])
      pods.push_back(*kubetrain::controller::ToCachedPod(item));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(kPods / secs);
    std::printf("run %d: decode %.0f pods/s\n", run, kPods / secs);
  }

  // As the pod informer decodes: each item without managedFields, then with
  // only the fields ToCachedPod reads (controller::CachedPodFields).
  std::vector<double> served_all, served_kept;
  for (int run = 0; run < kRuns; ++run) {
    for (const bool kept : {false, true}) {
      auto start = std::chrono::steady_clock::now();
      json parsed = kubetrain::kube::ParseServedJson(
                        text, kubetrain::kube::ServedShape::kList, true,
                        kept ? kubetrain::controller::CachedPodFields().get() : nullptr)
                        .value();
      std::vector<CachedPod> pods;
      pods.reserve(kPods);
      for (const auto& item : parsed["items"])
        pods.push_back(*kubetrain::controller::ToCachedPod(item));
      parsed = nullptr;
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      (kept ? served_kept : served_all).push_back(kPods / secs);
    }
  }
  std::printf("informer decode, every field but managedFields: %.0f pods/s (median of %d)\n",
              Median(served_all), kRuns);
  std::printf("informer decode, only the fields the cache reads: %.0f pods/s (median of %d)\n",
              Median(served_kept), kRuns);

  std::vector<double> compact, full;
  for (int run = 0; run < kRuns; ++run) {
    compact.push_back(
        static_cast<double>(StoreBytes<CachedPod>(text, kubetrain::controller::ToCachedPod)));
    full.push_back(
        static_cast<double>(StoreBytes<GenericObject>(text, kubetrain::runtime::ToGenericObject)));
  }
  std::printf("reference: whole-object JSON cache %.0f bytes/pod (median of %d)\n", Median(full),
              kRuns);
  std::printf("decode rate (list of %d pods, parse + transform): %.0f objects/s (median of %d)\n",
              kPods, Median(rates), kRuns);
  std::printf(
      "memory per cached pod (controller pod cache with indexes): %.0f bytes (median of %d)\n",
      Median(compact), kRuns);
  return 0;
}
