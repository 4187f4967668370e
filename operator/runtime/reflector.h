// Reflector: keeps a sink in step with the apiserver by list + watch.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "operator/kube/client.h"

namespace kubetrain::runtime {

// Where the reflector gets data. The real one wraps kube::Client; tests feed
// scripted lists and events.
class ListerWatcher {
 public:
  virtual ~ListerWatcher() = default;
  // A complete, consistent list (all pages); the List object with "items"
  // and metadata.resourceVersion.
  [[nodiscard]] virtual StatusOr<nlohmann::json> List() = 0;
  // The same list page by page: each page's items go to `on_items` as they
  // arrive, so a caller converting them never holds the whole list; `restart`
  // means the items given so far are void (the list starts over). Returns
  // the list's resourceVersion. The default gives List() as one page.
  using ItemsFn = std::function<void(std::vector<nlohmann::json>&& items)>;
  [[nodiscard]] virtual StatusOr<std::string> ListPages(const ItemsFn& on_items,
                                                        const std::function<void()>& restart);
  // Watches from `resource_version`; same contract as kube::Client::Watch.
  [[nodiscard]] virtual Status Watch(const std::string& resource_version,
                                     const kube::WatchHandler& handler, std::stop_token stop) = 0;
};

// Lists and watches one resource through a kube::Client, with server-side
// label and field selectors, paging lists by `page_size`; the objects are
// built with only `fields` (kube::ListOptions::fields; null: all of them).
std::unique_ptr<ListerWatcher> NewKubeListerWatcher(
    kube::Client* client, kube::ResourceRef ref, std::string ns, std::string label_selector = "",
    std::string field_selector = "", int64_t page_size = 500,
    std::shared_ptr<const kube::FieldFilter> fields = nullptr);

// What the reflector feeds. Called from the reflector's thread only.
// A (re)list arrives as AddListed pages, then Replace, or DropListed when it
// failed or started over.
class ReflectorSink {
 public:
  virtual ~ReflectorSink() = default;
  // One page of the list in progress: kept aside (converted, the JSON freed)
  // until Replace.
  virtual void AddListed(std::vector<nlohmann::json>&& items) = 0;
  // Forgets the pages given since the last Replace.
  virtual void DropListed() = 0;
  // The list is complete: its pages are the full current state and replace
  // everything seen before.
  virtual void Replace(const std::string& resource_version) = 0;
  // One watch event (never a bookmark).
  virtual void Apply(kube::WatchEventType type, nlohmann::json&& object) = 0;
};

struct ReflectorOptions {
  std::chrono::milliseconds initial_backoff{800};
  std::chrono::milliseconds max_backoff{30'000};
  // A watch that ran at least this long resets the backoff.
  std::chrono::milliseconds healthy_watch{10'000};
  std::string name = "reflector";  // for logs
  // What the backoff waits on and watch lifetimes are measured on; must
  // outlive the reflector (tests: a FakeClock).
  Clock* clock = &RealClock();
};

// Contract: Run() drives the state machine below on the calling thread until
// `stop` is requested; the sink sees one Replace per (re)list and then the
// watch events in order. state() and last_resource_version() are thread-safe.
//
// State machine:
//   kEmpty --list ok--> kListed --watch opened--> kWatching
//   kWatching --stream ended (server timeout)--> kWatching (re-watch from last RV at once;
//                                                  after a backoff if it lasted < 1 s)
//   kWatching --error (connection drop, 5xx)--> kBackoff --> kWatching (resume from last RV)
//   kWatching --410 Gone / Expired--> kEmpty (relist; the sink's content is replaced atomically)
//   kEmpty --list error--> kBackoff --> kEmpty
// Guarantees: no event older than the last list is delivered after it; the
// resourceVersion advances with every event and bookmark, so a resumed watch
// misses nothing the server still has. Backoff doubles from initial_backoff
// to max_backoff with jitter and resets after a healthy watch.
// Assumptions: resourceVersions are opaque; only the server compares them.
class Reflector {
 public:
  enum class State { kEmpty, kListed, kWatching, kBackoff, kStopped };

  Reflector(std::unique_ptr<ListerWatcher> lw, ReflectorSink* sink, ReflectorOptions opts = {});

  void Run(std::stop_token stop);

  State state() const { return state_.load(); }
  std::string last_resource_version() const;
  // Number of successful lists so far (1 after the initial sync; more after relists).
  int lists() const { return lists_.load(); }
  // The error of the last failed list or watch; OK after a successful list.
  Status last_error() const;

 private:
  void SetRv(std::string rv);
  void Backoff(std::stop_token stop, std::chrono::milliseconds& delay);

  // Constant after construction.
  const std::unique_ptr<ListerWatcher> lw_;
  ReflectorSink* const sink_;
  const ReflectorOptions opts_;

  std::atomic<State> state_{State::kEmpty};
  std::atomic<int> lists_{0};
  mutable Mutex mu_;
  std::string rv_ GUARDED_BY(mu_);
  Status last_error_ GUARDED_BY(mu_);
};

// metadata.resourceVersion of a served object or list ("" when absent).
std::string RvOf(const nlohmann::json& obj);
// A List object's items, moved out of it.
std::vector<nlohmann::json> ItemsOf(nlohmann::json& list);

// Why a cache could not list `resource`, in words an operator acts on: names
// the cause seen (TLS, 401, 403, CRD missing, unreachable) before the error.
std::string DescribeListError(std::string_view resource, const Status& error);

}  // namespace kubetrain::runtime
