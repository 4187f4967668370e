// FakeApi: an in-memory apiserver behind runtime::ApiClient, for the
// controllers' unit tests (job_controller_test.cc, sweep_controller_test.cc).
// Test code only: nothing in a product library includes it.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "operator/kube/client.h"
#include "operator/runtime/api_client.h"
#include "operator/runtime/events.h"

namespace kubetrain::runtime {

// An in-memory apiserver for the resources the controllers use: create,
// update, status update (resourceVersion-checked), delete, list and watch.
// Every write is logged (verb, resource, name, result) in order. Thread-safe.
class FakeApi final : public ApiClient {
 public:
  using json = nlohmann::json;

  struct Call {
    std::string verb;  // create, update, update_status, delete
    std::string resource;
    std::string name;
    StatusCode code;
  };

  // Stores `obj` as if created (no call is logged).
  void Seed(const kube::ResourceRef& r, json obj) {
    std::lock_guard lock(mu_);
    Store(r, std::move(obj), kube::WatchEventType::kAdded);
  }
  // The next `times` calls of `verb` on `resource` answer `error`.
  void FailNext(std::string verb, std::string resource, Status error, int times = 1) {
    std::lock_guard lock(mu_);
    for (int i = 0; i < times; ++i) failures_.push_back({verb, resource, error});
  }
  // After `allow` more successful creates of `resource`, every create of it
  // answers `error` (a quota, Pod Security admission) until AcceptCreates.
  void RefuseCreates(std::string resource, Status error, int allow = 0) {
    std::lock_guard lock(mu_);
    refusals_[resource] = {allow, std::move(error)};
  }
  void AcceptCreates(const std::string& resource) {
    std::lock_guard lock(mu_);
    refusals_.erase(resource);
  }
  std::optional<json> Get(const kube::ResourceRef& r, const std::string& ns,
                          const std::string& name) {
    std::lock_guard lock(mu_);
    auto it = objects_[r.resource].find(ns + "/" + name);
    if (it == objects_[r.resource].end()) return std::nullopt;
    return it->second;
  }
  std::vector<json> All(const kube::ResourceRef& r) {
    std::lock_guard lock(mu_);
    std::vector<json> all;
    for (const auto& [key, obj] : objects_[r.resource]) all.push_back(obj);
    return all;
  }
  std::vector<Call> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

  StatusOr<json> GetObject(const kube::ResourceRef& r, const std::string& ns,
                           const std::string& name) override {
    std::optional<json> obj = Get(r, ns, name);
    if (!obj) return Status(StatusCode::kNotFound, "NotFound (404): " + name);
    return *obj;
  }
  // Until `n` pod creates are in flight together (or 10 s pass), each pod
  // create but the first (which a job sends alone: slow start) waits for the
  // others; max_pods_in_flight() tells how many met.
  void GatherPodCreates(int n) {
    std::lock_guard lock(gather_mu_);
    gather_ = n;
  }
  int max_pods_in_flight() {
    std::lock_guard lock(gather_mu_);
    return max_in_flight_;
  }
  // From now on a Secret create waits (up to 10 s) until a pod create has
  // come in since this call; secret_holds_timed_out() counts those that waited
  // in vain (no pod create in flight alongside: made one after the other).
  void HoldSecretCreatesUntilAPodCreate() {
    std::lock_guard lock(gather_mu_);
    hold_secrets_from_ = pod_creates_;
  }
  // The next create of pod `name` is followed at once by its deletion (as
  // kwok's late delete of a name did under load): the watch shows both.
  void DeleteOnCreate(std::string name) {
    std::lock_guard lock(mu_);
    delete_on_create_ = std::move(name);
  }
  int secret_holds_timed_out() {
    std::lock_guard lock(gather_mu_);
    return secret_holds_timed_out_;
  }

  Status Create(const kube::ResourceRef& r, const std::string& ns, const json& object) override {
    if (r.resource == "secrets") {
      std::unique_lock gather(gather_mu_);
      if (hold_secrets_from_ >= 0 && !gather_cv_.wait_for(gather, std::chrono::seconds(10), [&] {
            return pod_creates_ > hold_secrets_from_;
          })) {
        ++secret_holds_timed_out_;
      }
    }
    if (r.resource == "pods") {
      std::unique_lock gather(gather_mu_);
      ++pod_creates_;
      gather_cv_.notify_all();
      ++in_flight_;
      max_in_flight_ = std::max(max_in_flight_, in_flight_);
      gather_cv_.notify_all();
      if (pod_creates_ > 1) {
        gather_cv_.wait_for(gather, std::chrono::seconds(10),
                            [&] { return max_in_flight_ >= gather_; });
      }
      --in_flight_;
    }
    std::lock_guard lock(mu_);
    json obj = object;
    obj["metadata"]["namespace"] = ns;
    const std::string name = obj["metadata"].value("name", "");
    if (Status s = Injected("create", r, name); !s.ok()) return s;
    if (auto refusal = refusals_.find(r.resource); refusal != refusals_.end()) {
      if (refusal->second.first <= 0) return Log("create", r, name, refusal->second.second);
      --refusal->second.first;
    }
    if (objects_[r.resource].count(ns + "/" + name)) {
      return Log("create", r, name,
                 Status(StatusCode::kAlreadyExists, "AlreadyExists (409): " + name));
    }
    (void)Log("create", r, name, Status::Ok());
    json stored = Store(r, std::move(obj), kube::WatchEventType::kAdded);
    if (r.resource == "pods" && name == delete_on_create_) {
      delete_on_create_.clear();
      objects_[r.resource].erase(ns + "/" + name);
      events_.push_back({++rv_, r.resource, kube::WatchEventType::kDeleted, stored});
      cv_.notify_all();
    }
    return Status::Ok();
  }
  StatusOr<json> Update(const kube::ResourceRef& r, const std::string& ns,
                        const json& object) override {
    std::lock_guard lock(mu_);
    const std::string name = object["metadata"].value("name", "");
    if (Status s = Injected("update", r, name); !s.ok()) return s;
    auto it = objects_[r.resource].find(ns + "/" + name);
    if (it == objects_[r.resource].end()) {
      return Log("update", r, name, Status(StatusCode::kNotFound, "NotFound (404)"));
    }
    json obj = object;
    obj["metadata"]["uid"] = it->second["metadata"]["uid"];
    (void)Log("update", r, name, Status::Ok());
    return Store(r, std::move(obj), kube::WatchEventType::kModified);
  }
  StatusOr<json> UpdateStatus(const kube::ResourceRef& r, const std::string& ns,
                              const json& object) override {
    std::lock_guard lock(mu_);
    const std::string name = object["metadata"].value("name", "");
    if (Status s = Injected("update_status", r, name); !s.ok()) return s;
    auto it = objects_[r.resource].find(ns + "/" + name);
    if (it == objects_[r.resource].end()) {
      return Log("update_status", r, name, Status(StatusCode::kNotFound, "NotFound (404)"));
    }
    if (object["metadata"].value("resourceVersion", "") !=
        it->second["metadata"].value("resourceVersion", "")) {
      return Log("update_status", r, name, Status(StatusCode::kConflict, "Conflict (409)"));
    }
    json obj = it->second;
    obj["status"] = object.value("status", json::object());
    (void)Log("update_status", r, name, Status::Ok());
    return Store(r, std::move(obj), kube::WatchEventType::kModified);
  }
  // JSON and merge patches (what the controllers send).
  StatusOr<json> Patch(const kube::ResourceRef& r, const std::string& ns, const std::string& name,
                       kube::PatchType type, const json& patch) override {
    std::lock_guard lock(mu_);
    if (Status s = Injected("patch", r, name); !s.ok()) return s;
    auto it = objects_[r.resource].find(ns + "/" + name);
    if (it == objects_[r.resource].end()) {
      return Log("patch", r, name, Status(StatusCode::kNotFound, "NotFound (404)"));
    }
    json obj = it->second;
    if (type == kube::PatchType::kJson) {
      obj = obj.patch(patch);
    } else if (type == kube::PatchType::kMerge) {
      // As the apiserver: a resourceVersion in the patch is a precondition.
      const json* rv = patch.contains("metadata") ? &patch["metadata"] : nullptr;
      if (rv != nullptr && rv->contains("resourceVersion") &&
          (*rv)["resourceVersion"] != obj["metadata"].value("resourceVersion", "")) {
        return Log("patch", r, name, Status(StatusCode::kConflict, "Conflict (409)"));
      }
      obj.merge_patch(patch);
    } else {
      return Log("patch", r, name, Status(StatusCode::kInvalidArgument, "unsupported patch"));
    }
    (void)Log("patch", r, name, Status::Ok());
    return Store(r, std::move(obj), kube::WatchEventType::kModified);
  }
  Status Delete(const kube::ResourceRef& r, const std::string& ns, const std::string& name,
                const kube::DeleteOptions& options) override {
    std::lock_guard lock(mu_);
    if (Status s = Injected("delete", r, name); !s.ok()) return s;
    delete_options_[r.resource + "/" + name] = options;
    auto it = objects_[r.resource].find(ns + "/" + name);
    if (it == objects_[r.resource].end()) {
      return Log("delete", r, name, Status(StatusCode::kNotFound, "NotFound (404)"));
    }
    if (!options.precondition_uid.empty() &&
        it->second["metadata"].value("uid", "") != options.precondition_uid) {
      return Log("delete", r, name, Status(StatusCode::kConflict, "Conflict (409): uid"));
    }
    json obj = it->second;
    objects_[r.resource].erase(it);
    events_.push_back({++rv_, r.resource, kube::WatchEventType::kDeleted, obj});
    cv_.notify_all();
    return Log("delete", r, name, Status::Ok());
  }
  std::unique_ptr<ListerWatcher> ListWatch(
      const kube::ResourceRef& r, const std::string& ns, const std::string& selector,
      std::shared_ptr<const kube::FieldFilter> fields) override {
    return std::make_unique<Watcher>(this, r.resource, ns, selector, std::move(fields));
  }
  // The options of the last delete of `resource`/`name`.
  std::optional<kube::DeleteOptions> LastDeleteOptions(const std::string& resource,
                                                       const std::string& name) {
    std::lock_guard lock(mu_);
    auto it = delete_options_.find(resource + "/" + name);
    if (it == delete_options_.end()) return std::nullopt;
    return it->second;
  }
  // Removes `resource`/`name` as a node's loss does (pod GC, another
  // client): the watch shows it deleted; no call is logged.
  void Vanish(const kube::ResourceRef& r, const std::string& ns, const std::string& name) {
    std::lock_guard lock(mu_);
    auto it = objects_[r.resource].find(ns + "/" + name);
    if (it == objects_[r.resource].end()) return;
    json obj = it->second;
    objects_[r.resource].erase(it);
    events_.push_back({++rv_, r.resource, kube::WatchEventType::kDeleted, obj});
    cv_.notify_all();
  }
  // Every watch has handed the controller every event so far (its handler
  // returned, so the caches hold it and what the handlers queue is queued).
  bool Delivered() {
    std::lock_guard lock(mu_);
    for (const auto& [watcher, rv] : delivered_) {
      if (rv < rv_) return false;
    }
    return true;
  }
  int64_t rv() {
    std::lock_guard lock(mu_);
    return rv_;
  }
  // The names of `resource` served (listed or watched) under label `selector`.
  std::set<std::string> Served(const std::string& resource, const std::string& selector) {
    std::lock_guard lock(mu_);
    return served_[resource + " " + selector];
  }

 private:
  struct Event {
    int64_t rv;
    std::string resource;
    kube::WatchEventType type;
    json object;
  };
  struct Failure {
    std::string verb, resource;
    Status error;
  };

  class Watcher final : public ListerWatcher {
   public:
    Watcher(FakeApi* api, std::string resource, std::string ns, std::string selector,
            std::shared_ptr<const kube::FieldFilter> fields)
        : api_(api),
          resource_(std::move(resource)),
          ns_(std::move(ns)),
          selector_(std::move(selector)),
          fields_(std::move(fields)) {}
    ~Watcher() override {
      std::lock_guard lock(api_->mu_);
      api_->delivered_.erase(this);
    }
    StatusOr<json> List() override {
      std::lock_guard lock(api_->mu_);
      api_->delivered_[this] = api_->rv_;
      json items = json::array();
      for (const auto& [key, obj] : api_->objects_[resource_]) {
        if ((ns_.empty() || obj["metadata"].value("namespace", "") == ns_) && Selected(obj))
          items.push_back(Served(obj));
      }
      return json{{"metadata", {{"resourceVersion", std::to_string(api_->rv_)}}},
                  {"items", std::move(items)}};
    }
    Status Watch(const std::string& resource_version, const kube::WatchHandler& handler,
                 std::stop_token stop) override {
      int64_t seen = std::stoll(resource_version);
      while (true) {
        std::vector<kube::WatchEvent> batch;
        {
          std::unique_lock lock(api_->mu_);
          const auto more = [&] {
            return !api_->events_.empty() && api_->events_.back().rv > seen;
          };
          if (!api_->cv_.wait(lock, stop, more)) return Status::Ok();  // stopped
          for (const Event& e : api_->events_) {
            if (e.rv <= seen) continue;
            seen = e.rv;
            if (e.resource != resource_) continue;
            if (!ns_.empty() && e.object["metadata"].value("namespace", "") != ns_) continue;
            if (!Selected(e.object)) continue;
            batch.push_back({e.type, Served(e.object)});
          }
        }
        for (auto& e : batch) KT_RETURN_IF_ERROR(handler(std::move(e)));
        std::lock_guard lock(api_->mu_);
        api_->delivered_[this] = seen;
      }
    }

   private:
    // The label selector's terms "key", "!key" and "key=value", as the
    // apiserver reads them. Caller holds api_->mu_.
    bool Selected(const json& obj) const {
      const json labels = obj["metadata"].value("labels", json::object());
      size_t begin = 0;
      while (begin < selector_.size()) {
        size_t end = selector_.find(',', begin);
        if (end == std::string::npos) end = selector_.size();
        const std::string term = selector_.substr(begin, end - begin);
        begin = end + 1;
        if (term.starts_with("!")) {
          if (labels.contains(term.substr(1))) return false;
        } else if (const size_t eq = term.find('='); eq != std::string::npos) {
          if (labels.value(term.substr(0, eq), "\x01") != term.substr(eq + 1)) return false;
        } else if (!labels.contains(term)) {
          return false;
        }
      }
      return true;
    }
    // As the real client builds it: with only the fields the cache asked for.
    json Served(const json& obj) const {
      api_->served_[resource_ + " " + selector_].insert(obj["metadata"].value("name", ""));
      if (!fields_) return obj;
      return kube::ParseServedJson(obj.dump(), kube::ServedShape::kObject, true, fields_.get())
          .value();
    }

    FakeApi* const api_;
    const std::string resource_, ns_, selector_;
    const std::shared_ptr<const kube::FieldFilter> fields_;
  };

  json Store(const kube::ResourceRef& r, json obj, kube::WatchEventType type) {
    obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
    if (!obj["metadata"].contains("uid")) obj["metadata"]["uid"] = "uid-" + std::to_string(rv_);
    if (!obj["metadata"].contains("creationTimestamp")) {
      obj["metadata"]["creationTimestamp"] = "2026-11-22T20:00:00Z";
    }
    const std::string key =
        obj["metadata"].value("namespace", "") + "/" + obj["metadata"].value("name", "");
    objects_[r.resource][key] = obj;
    events_.push_back({rv_, r.resource, type, obj});
    cv_.notify_all();
    return obj;
  }
  Status Injected(const std::string& verb, const kube::ResourceRef& r, const std::string& name) {
    for (auto it = failures_.begin(); it != failures_.end(); ++it) {
      if (it->verb != verb || it->resource != r.resource) continue;
      Status error = it->error;
      failures_.erase(it);
      return Log(verb, r, name, error);
    }
    return Status::Ok();
  }
  Status Log(const std::string& verb, const kube::ResourceRef& r, const std::string& name,
             Status result) {
    calls_.push_back({verb, r.resource, name, result.code()});
    return result;
  }

  std::mutex gather_mu_;
  std::condition_variable gather_cv_;
  int gather_ = 0, in_flight_ = 0, max_in_flight_ = 0;  // guarded by gather_mu_
  int pod_creates_ = 0, hold_secrets_from_ = -1;        // guarded by gather_mu_
  int secret_holds_timed_out_ = 0;                      // guarded by gather_mu_
  std::mutex mu_;
  std::map<std::string, kube::DeleteOptions> delete_options_;  // guarded by mu_
  std::condition_variable_any cv_;
  int64_t rv_ = 0;                                              // guarded by mu_
  std::map<const Watcher*, int64_t> delivered_;                 // guarded by mu_: rv handled
  std::map<std::string, std::map<std::string, json>> objects_;  // guarded by mu_
  std::deque<Event> events_;                                    // guarded by mu_
  std::vector<Failure> failures_;                               // guarded by mu_
  std::vector<Call> calls_;                                     // guarded by mu_
  std::string delete_on_create_;                                // guarded by mu_
  std::map<std::string, std::set<std::string>> served_;         // guarded by mu_
  std::map<std::string, std::pair<int, Status>> refusals_;      // guarded by mu_
};

// The controllers' tests wait with these rather than with sleeps.

// Polls `done` until it holds or 20 s pass.
// A client whose writes fail at once without being sent: where a controller
// test's events go when they are not under test.
inline std::unique_ptr<kube::Client> NowhereClient() {
  kube::Config config;
  config.server = "http://127.0.0.1:1";
  config.may_write = [] { return false; };
  auto client = kube::Client::Create(std::move(config));
  return std::move(*client);
}

// An event recorder's options for tests: it stops at once.
inline EventRecorderOptions RecorderOptions() {
  EventRecorderOptions o;
  o.shutdown_grace = std::chrono::milliseconds(0);
  return o;
}

template <typename F>
bool Eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // poll interval
  }
  return done();
}

// Everything `controller` will do at its clock's present time is done: every
// watch event delivered, the controller idle (and synced, where it says so),
// the resourceVersion stable.
template <typename Controller>
bool Settle(FakeApi& api, const Controller& controller) {
  return Eventually([&] {
    const int64_t rv = api.rv();
    bool synced = true;
    if constexpr (requires { controller.Synced(); }) synced = controller.Synced();
    return synced && api.Delivered() && controller.Idle() && api.rv() == rv;
  });
}

// Moves `clock` forward by `step` until `done` holds after the controller
// settled (at most `max_steps` times).
template <typename Controller, typename F>
bool AdvanceUntil(FakeClock& clock, FakeApi& api, const Controller& controller, F done,
                  std::chrono::milliseconds step = std::chrono::milliseconds(100),
                  int max_steps = 100) {
  for (int i = 0; i <= max_steps; ++i) {
    if (!Settle(api, controller)) return false;
    if (done()) return true;
    clock.Advance(step);
  }
  return false;
}

}  // namespace kubetrain::runtime
