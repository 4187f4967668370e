// EventRecorder: events.k8s.io/v1 Events with aggregation and a per-object
// rate limit, sent from a background thread so reconciles never block on them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"
#include "operator/kube/client.h"
#include "operator/kube/rate_limiter.h"

namespace kubetrain::runtime {

// The object an event is about.
struct ObjectReference {
  std::string api_version;  // "kubetrain.io/v1alpha1"
  std::string kind;
  std::string ns;
  std::string name;
  std::string uid;
};

struct EventRecorderOptions {
  std::string reporting_controller = "kubetrain.io/operator";
  std::string reporting_instance;  // e.g. pod name
  // A repeat of the same (object, type, reason, action, note) within this
  // window becomes a series count on the existing Event, not a new Event.
  std::chrono::seconds aggregation_window{360};
  // Per-object token bucket (client-go: burst 25, one per 5 minutes).
  double per_object_qps = 1.0 / 300;
  int per_object_burst = 25;
  size_t max_pending = 1000;  // queue bound; excess events are dropped
  // Bound on the per-object buckets kept. A bucket unused for as long as it
  // takes to refill (burst / qps) is forgotten (a fresh one is the same);
  // beyond the bound the least recently used are forgotten first.
  size_t max_tracked_objects = 4096;
  // How long the destructor keeps sending queued events before dropping them.
  std::chrono::milliseconds shutdown_grace{5000};
  // What the rate limit, the aggregation window and the grace are measured
  // on; must outlive the recorder (tests: a FakeClock).
  Clock* clock = &RealClock();
};

// Contract: Record() never blocks on the network and never fails; events
// beyond the per-object rate limit or the queue bound are dropped (and
// counted). The first occurrence creates an Event; repeats within the window
// PATCH its series (count, lastObservedTime). Thread-safe. The destructor
// keeps sending what is queued for shutdown_grace (plus one request in flight),
// drops the rest, and joins.
class EventRecorder {
 public:
  EventRecorder(kube::Client* client, EventRecorderOptions opts = {});
  ~EventRecorder();

  // type: "Normal" or "Warning".
  void Record(const ObjectReference& regarding, const std::string& type, const std::string& reason,
              const std::string& action, const std::string& note);

  uint64_t dropped() const;
  // Objects with a rate-limit bucket (bounded by max_tracked_objects).
  size_t tracked_objects() const;
  // Blocks until the queue is empty (tests).
  void Flush();

 private:
  struct Pending {
    ObjectReference regarding;
    std::string type, reason, action, note;
  };
  struct Series {
    std::string event_name;
    std::string ns;
    int count = 1;
    std::chrono::steady_clock::time_point last;
  };
  struct Limit {
    std::unique_ptr<kube::TokenBucket> bucket;
    std::chrono::steady_clock::time_point last_used;
  };
  void PruneLimitsLocked(std::chrono::steady_clock::time_point now) REQUIRES(mu_);
  void Loop(std::stop_token stop);
  void Send(const Pending& p);

  kube::Client* const client_;
  const EventRecorderOptions opts_;

  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Pending> queue_ GUARDED_BY(mu_);
  std::unordered_map<std::string, Limit> limits_ GUARDED_BY(mu_);
  uint64_t dropped_ GUARDED_BY(mu_) = 0;
  bool busy_ GUARDED_BY(mu_) = false;
  std::map<std::string, Series> series_;  // sender thread only
  std::jthread thread_;
};

}  // namespace kubetrain::runtime
