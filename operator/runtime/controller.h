// The half of a controller that does not depend on what it reconciles:
// ControllerScaffold (the API client, the per-namespace informers, the work
// queue, sync and Idle) and RunController (the workers, with graceful
// shutdown). The JobController and the SweepController are each a scaffold
// plus their own Reconcile.
//
// Typical main(), putting the runtime pieces together:
//
//   std::stop_token stop = runtime::InstallShutdownHandler();      // SIGTERM/SIGINT
//   auto client = kube::Client::Create(*kube::LoadDefaultConfig(flags.kubeconfig));
//   runtime::LeaderElector elector(client->get(), le_config);
//   Status s = elector.Run(stop, [&](std::stop_token leading) {
//     runtime::Informer<runtime::GenericObject> jobs(
//         runtime::NewKubeListerWatcher(client->get(), kTrainingJobs, ""),
//         runtime::ToGenericObject);
//     runtime::WorkQueue queue;
//     jobs.AddHandlers({.on_add = ..., .on_update = ..., .on_delete = ...});  // enqueue keys only
//     jobs.Start();
//     if (!jobs.WaitForSync(std::chrono::minutes(2))) return;
//     runtime::RunController(leading, queue, /*workers=*/4, reconcile);
//   });  // returns after the lease is released (graceful) or lost (then exit non-zero)
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/runtime/api_client.h"
#include "operator/runtime/informer.h"
#include "operator/runtime/workqueue.h"

namespace kubetrain::runtime {

// Runs `workers` reconcile threads over `queue` (see RunWorkers for how a
// result is turned into forget / requeue / backoff) until `stop` is
// requested. Then it stops taking new work at once: the queue is shut down
// (Adds, delayed and queued keys are dropped; they are recomputed from the
// caches by whoever leads next), reconciles already in flight finish, and
// RunController returns. Blocks the caller.
inline void RunController(std::stop_token stop, WorkQueue& queue, int workers,
                          const Reconciler& reconcile) {
  std::stop_callback on_stop(stop, [&queue] { queue.ShutDownNow(); });
  RunWorkers(queue, workers, reconcile);
}

// ControllerScaffold<Caches>: what a controller keeps besides its own state
// and Reconcile. `Caches` is the controller's struct of one namespace's
// informers, deriving from InformerSet.
//
// Contract: owns the caches, the work queue and (when built from a
// kube::Client) the API client. Build it, then BuildCaches once (handlers
// enqueue keys on queue()), then Start, WaitForSync and Run. The owner calls
// Stop() first in its destructor: the handlers may use the owner's other
// members, which are gone before the scaffold's destructor runs. After
// BuildCaches every method is thread-safe.
template <typename Caches>
class ControllerScaffold {
 public:
  // Every API call through `client`, which must outlive the scaffold; or, with
  // `client` null, through `owned` (a NewKubeApiClient over the operator's
  // kube::Client).
  ControllerScaffold(std::unique_ptr<ApiClient> owned, ApiClient* client,
                     WorkQueueOptions queue_options)
      : owned_client_(std::move(owned)),
        client_(client != nullptr ? client : owned_client_.get()),
        queue_(std::move(queue_options)) {}
  ~ControllerScaffold() { Stop(); }
  ControllerScaffold(const ControllerScaffold&) = delete;
  ControllerScaffold& operator=(const ControllerScaffold&) = delete;

  ApiClient* client() const { return client_; }
  WorkQueue& queue() { return queue_; }

  // The caches of each of `namespaces` (empty or {""}: all namespaces), each
  // from `build(ns)` (a std::unique_ptr<Caches>).
  template <typename Build>
  void BuildCaches(std::vector<std::string> namespaces, Build&& build) {
    if (namespaces.empty()) namespaces.push_back("");
    for (const std::string& ns : namespaces) caches_[ns] = build(ns);
  }

  // The caches serving namespace `ns`: its own, else the all-namespaces ones,
  // else null (a key from a namespace not watched).
  Caches* CachesFor(const std::string& ns) const {
    auto it = caches_.find(ns);
    if (it != caches_.end()) return it->second.get();
    it = caches_.find("");
    return it == caches_.end() ? nullptr : it->second.get();
  }

  std::vector<std::string> Namespaces() const {
    std::vector<std::string> out;
    for (const auto& [ns, c] : caches_) out.push_back(ns);
    return out;
  }

  // Starts every informer and returns at once.
  void Start() {
    for (auto& [ns, c] : caches_) c->Start();
  }

  // Waits until `deadline` for every cache's first list, returning early
  // (kUnavailable) once `stop` is requested. A timeout's error names the cause
  // the caches saw (TLS, 401, 403, CRD missing); `timeout` is the figure it
  // quotes.
  [[nodiscard]] Status WaitForSync(std::chrono::steady_clock::time_point deadline,
                                   std::chrono::milliseconds timeout, std::stop_token stop) {
    for (auto& [ns, c] : caches_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (c->WaitForSync(std::max(left, std::chrono::milliseconds(0)), stop)) continue;
      if (stop.stop_requested())
        return Status(StatusCode::kUnavailable, "stopped before the caches synced");
      return Unavailable("caches for namespace '" + ns + "' did not sync within " +
                         std::to_string(timeout.count()) + " ms: " + c->Cause());
    }
    return Status::Ok();
  }

  // True once every cache has synced.
  bool Synced() const {
    for (const auto& [ns, c] : caches_) {
      if (!c->Synced()) return false;
    }
    return true;
  }

  // Nothing queued, in flight or due at the queue's clock (WorkQueue::Idle).
  bool Idle() const { return queue_.Idle(); }

  // RunController over the queue.
  void Run(std::stop_token stop, int workers, const Reconciler& reconcile) {
    RunController(stop, queue_, workers, reconcile);
  }

  // Shuts the queue down and stops every informer; idempotent.
  void Stop() {
    queue_.ShutDown();
    for (auto& [ns, c] : caches_) c->Stop();
  }

  // Handlers for the controller's own kind: an add or an update queues the
  // object's key, a delete calls `forget` with it.
  template <typename T>
  EventHandlers<T> KeyHandlers(std::function<void(const std::string& key)> forget) {
    return {
        .on_add = [this](const auto& obj) { queue_.Add(obj->meta.Key()); },
        .on_update = [this](const auto&, const auto& obj) { queue_.Add(obj->meta.Key()); },
        .on_delete = [forget = std::move(forget)](const auto& obj,
                                                  bool) { forget(obj->meta.Key()); },
    };
  }

 private:
  // Constant after BuildCaches.
  const std::unique_ptr<ApiClient> owned_client_;
  ApiClient* const client_;
  std::map<std::string, std::unique_ptr<Caches>> caches_;

  WorkQueue queue_;  // thread-safe
};

}  // namespace kubetrain::runtime
