// Informer<T>: reflector + indexed store of compact objects + event handlers.
//
//   runtime::Informer<runtime::GenericObject> jobs(
//       runtime::NewKubeListerWatcher(client, kTrainingJobs, ns), runtime::ToGenericObject,
//       runtime::ReflectorOptions{.name = "trainingjobs"});
//   jobs.AddHandlers({.on_add = [&](const auto& j) { queue.Add(j->meta.Key()); }, ...});
//   jobs.Start();  jobs.WaitForSync(...);  ...  jobs.Stop();
//
// The namespace and owner-UID indexes are built in. T is what the cache keeps
// per object (the JobController keeps a compact controller::CachedPod per pod);
// `transform` builds it from the served JSON.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "operator/runtime/memory.h"
#include "operator/runtime/metrics.h"
#include "operator/runtime/object.h"
#include "operator/runtime/reflector.h"
#include "operator/runtime/shutdown.h"
#include "operator/runtime/store.h"

namespace kubetrain::runtime {

template <typename T>
struct EventHandlers {
  using Ptr = std::shared_ptr<const T>;
  std::function<void(const Ptr&)> on_add;
  std::function<void(const Ptr& old_obj, const Ptr& new_obj)> on_update;
  // `tombstone` is true when the delete was not seen as a watch event but
  // inferred from a relist (the object vanished while the watch was down);
  // `last` is then the last state the cache knew.
  std::function<void(const Ptr& last, bool tombstone)> on_delete;
};

// What an InformerSet starts, stops and waits for, whatever an informer caches.
class InformerBase {
 public:
  virtual ~InformerBase() = default;
  virtual void Start() = 0;
  virtual void Stop() = 0;
  virtual bool HasSynced() const = 0;
  // Blocks until synced, `timeout` or `stop`; returns HasSynced().
  virtual bool WaitForSync(std::chrono::milliseconds timeout, std::stop_token stop = {}) = 0;
  // Why the first list has not succeeded yet (OK when it has, or no attempt failed).
  virtual Status LastError() const = 0;
};

// Contract: owns a Reflector running on its own thread between Start() and
// Stop() (also called by the destructor), feeding a Store<T>. Each object is
// turned into a T by `transform` as it arrives, so only compact T values are
// cached; objects the transform rejects are logged and skipped. Handlers run
// on the reflector thread, in event order, and must not block (compute a key,
// enqueue it). AddIndex and AddHandlers must be called before Start(). All
// other methods are thread-safe. HasSynced() turns true after the first
// complete list has been stored and its handlers called.
template <typename T>
class Informer final : public InformerBase, private ReflectorSink {
 public:
  using Ptr = std::shared_ptr<const T>;
  using Transform = std::function<StatusOr<T>(const nlohmann::json&)>;

  Informer(std::unique_ptr<ListerWatcher> lw, Transform transform, ReflectorOptions opts = {})
      : transform_(std::move(transform)), reflector_(std::move(lw), this, std::move(opts)) {
    store_.AddIndex(kNamespaceIndex, NamespaceIndexFunc<T>);
    store_.AddIndex(kOwnerUidIndex, OwnerUidIndexFunc<T>);
  }
  ~Informer() override { Stop(); }

  void AddIndex(std::string name, typename Store<T>::IndexFunc fn) {
    store_.AddIndex(std::move(name), std::move(fn));
  }
  void AddLabelIndex(const std::string& label_key) {
    store_.AddIndex(LabelIndexName(label_key), LabelIndexFunc<T>(label_key));
  }
  void AddHandlers(EventHandlers<T> h) { handlers_.push_back(std::move(h)); }

  // The reflector thread never ends the process on bad data: an exception
  // escaping it is logged, counted in kubetrain_thread_errors_total and the
  // reflector starts over with a relist.
  void Start() override {
    thread_ = std::jthread([this](std::stop_token st) {
      while (!st.stop_requested()) {
        try {
          reflector_.Run(st);
          return;
        } catch (const std::exception& e) {
          spdlog::error("informer: reflector threw, relisting in 1 s: {}", e.what());
          DefaultMetrics().Add("kubetrain_thread_errors_total", "thread=\"reflector\"");
          SleepFor(st, std::chrono::seconds(1));
        }
      }
    });
  }
  void Stop() override {
    if (thread_.joinable()) {
      thread_.request_stop();
      thread_.join();
    }
  }

  bool HasSynced() const override { return synced_.load(); }
  bool WaitForSync(std::chrono::milliseconds timeout, std::stop_token stop = {}) override {
    std::unique_lock lock(sync_mu_);
    return sync_cv_.wait_for(lock, stop, timeout, [this] { return synced_.load(); });
  }
  Status LastError() const override { return reflector_.last_error(); }

  const Store<T>& store() const { return store_; }
  const Reflector& reflector() const { return reflector_; }

 private:
  StatusOr<Ptr> Convert(const nlohmann::json& obj) {
    try {
      KT_ASSIGN_OR_RETURN(T t, transform_(obj));
      return std::make_shared<const T>(std::move(t));
    } catch (const std::exception& e) {
      return Internal(std::string("transform threw: ") + e.what());
    }
  }

  // A (re)list: each page is converted as it arrives and its JSON freed; the
  // converted list is swapped in at once by Replace and the difference to the
  // previous content is reported to the handlers.
  void AddListed(std::vector<nlohmann::json>&& items) override {
    listed_.reserve(listed_.size() + items.size());
    for (auto& item : items) {
      auto p = Convert(item);
      nlohmann::json().swap(item);  // free the JSON as soon as it is converted
      if (!p.ok()) {
        spdlog::warn("informer: skipping object: {}", p.status().ToString());
        continue;
      }
      std::string key = (*p)->meta.Key();
      listed_.insert_or_assign(std::move(key), std::move(*p));
    }
  }
  void DropListed() override { typename Store<T>::Map().swap(listed_); }

  void Replace(const std::string&) override {
    typename Store<T>::Map fresh;
    fresh.swap(listed_);
    auto snapshot = fresh;  // shared pointers only
    auto old = store_.Replace(std::move(fresh));
    for (const auto& [key, obj] : snapshot) {
      auto it = old.find(key);
      if (it == old.end()) {
        for (auto& h : handlers_)
          if (h.on_add) h.on_add(obj);
      } else {
        if (it->second->meta.resource_version != obj->meta.resource_version)
          for (auto& h : handlers_)
            if (h.on_update) h.on_update(it->second, obj);
        old.erase(it);
      }
    }
    for (const auto& [key, obj] : old)
      for (auto& h : handlers_)
        if (h.on_delete) h.on_delete(obj, /*tombstone=*/true);
    old.clear();
    snapshot.clear();
    // The list's JSON pages are freed: give their pages back to the system.
    ReleaseFreeMemory();
    if (!synced_.load()) {
      std::lock_guard lock(sync_mu_);
      synced_ = true;
      sync_cv_.notify_all();
    }
  }

  void Apply(kube::WatchEventType type, nlohmann::json&& object) override {
    auto p = Convert(object);
    if (!p.ok()) {
      spdlog::warn("informer: skipping event: {}", p.status().ToString());
      return;
    }
    std::string key = (*p)->meta.Key();
    if (type == kube::WatchEventType::kDeleted) {
      auto old = store_.Erase(key);
      for (auto& h : handlers_)
        if (h.on_delete) h.on_delete(old ? old : *p, false);
      return;
    }
    auto old = store_.Upsert(key, *p);
    for (auto& h : handlers_) {
      if (old) {
        if (h.on_update) h.on_update(old, *p);
      } else if (h.on_add) {
        h.on_add(*p);
      }
    }
  }

  // Constant after Start().
  const Transform transform_;
  std::vector<EventHandlers<T>> handlers_;

  Store<T> store_;
  typename Store<T>::Map listed_;  // the list in progress (reflector thread only)
  Reflector reflector_;
  std::atomic<bool> synced_{false};
  std::mutex sync_mu_;
  std::condition_variable_any sync_cv_;
  std::jthread thread_;
};

// InformerSet: the informers one controller keeps for one namespace, started,
// stopped and waited for together. A controller's per-namespace struct derives
// from it and keeps typed pointers to what Add returns.
// Contract: owns its informers; Add before Start(). Start, Stop (also called by
// the destructor, idempotent), Synced and Cause are thread-safe once built.
class InformerSet {
 public:
  InformerSet() = default;
  InformerSet(const InformerSet&) = delete;
  InformerSet& operator=(const InformerSet&) = delete;
  virtual ~InformerSet() { Stop(); }

  // A new informer over `lw`, named `name` in logs and in Cause().
  template <typename T>
  Informer<T>* Add(std::string name, std::unique_ptr<ListerWatcher> lw,
                   typename Informer<T>::Transform transform) {
    auto informer = std::make_unique<Informer<T>>(std::move(lw), std::move(transform),
                                                  ReflectorOptions{.name = name});
    Informer<T>* out = informer.get();
    informers_.push_back({std::move(name), std::move(informer)});
    return out;
  }

  void Start() {
    for (auto& e : informers_) e.informer->Start();
  }
  void Stop() {
    for (auto& e : informers_) e.informer->Stop();
  }
  bool Synced() const {
    for (const auto& e : informers_) {
      if (!e.informer->HasSynced()) return false;
    }
    return true;
  }
  // Waits for each informer in turn, each up to `timeout`; false at the first
  // that did not sync (or on `stop`).
  bool WaitForSync(std::chrono::milliseconds timeout, std::stop_token stop) {
    for (auto& e : informers_) {
      if (!e.informer->WaitForSync(timeout, stop)) return false;
    }
    return true;
  }
  // The first error an informer that has not synced saw, described.
  std::string Cause() const {
    for (const auto& e : informers_) {
      if (e.informer->HasSynced()) continue;
      const Status error = e.informer->LastError();
      if (!error.ok()) return DescribeListError(e.name, error);
    }
    return "no list failed, the apiserver was slow (raise --cache-sync-timeout)";
  }

 private:
  struct Entry {
    std::string name;
    std::unique_ptr<InformerBase> informer;
  };
  std::vector<Entry> informers_;
};

}  // namespace kubetrain::runtime
