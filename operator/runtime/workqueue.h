// WorkQueue: the rate-limited, de-duplicating queue of keys between event
// handlers and reconcile workers (client-go's workqueue semantics).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "operator/kube/rate_limiter.h"

namespace kubetrain::runtime {

// Per-item exponential backoff: base * 2^failures, capped at max.
// Contract: pure bookkeeping, no clock; thread-safe.
class ItemBackoff {
 public:
  ItemBackoff(std::chrono::nanoseconds base, std::chrono::nanoseconds max)
      : base_(base), max_(max) {}
  // Records a failure of `key` and returns how long to wait before retrying.
  std::chrono::nanoseconds When(const std::string& key);
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key) const;

 private:
  const std::chrono::nanoseconds base_, max_;
  mutable Mutex mu_;
  std::unordered_map<std::string, int> failures_ GUARDED_BY(mu_);
};

struct WorkQueueOptions {
  std::chrono::nanoseconds base_delay = std::chrono::milliseconds(5);
  std::chrono::nanoseconds max_delay = std::chrono::seconds(1000);
  double qps = 10;  // overall retry bucket, shared by all items
  int burst = 100;
  // When set, the queue reports kubetrain_workqueue_{adds,retries}_total and
  // kubetrain_workqueue_depth with label name="<name>" to DefaultMetrics().
  std::string name;
  // What delays are measured on; must outlive the queue (tests: a FakeClock).
  Clock* clock = &RealClock();
};

// Contract:
//  - A key is queued at most once: Add of a queued key is a no-op.
//  - A key being processed (between Get and Done) is never handed to a second
//    worker; if added meanwhile it is queued again on Done.
//  - AddAfter queues after a delay; a key waits at most once (a later
//    AddAfter of a waiting key keeps the earlier time, an earlier one replaces
//    it), so delayed items are bounded by the number of keys; AddRateLimited after max(per-item
//    exponential backoff, overall token bucket delay); Forget resets the
//    item's backoff.
//  - ShutDown: Adds are ignored from then on, delayed items are dropped, Get
//    keeps returning what is already queued and then nullopt.
//    ShutDownAndDrain also waits for in-flight items to be Done; ShutDownNow
//    also drops what is queued.
// All methods are thread-safe.
class WorkQueue {
 public:
  explicit WorkQueue(WorkQueueOptions opts = {});
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Add(const std::string& key);
  void AddAfter(const std::string& key, std::chrono::nanoseconds delay);
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key) const;

  // Blocks for the next key; nullopt once shut down and empty.
  std::optional<std::string> Get();
  void Done(const std::string& key);

  void ShutDown();
  // ShutDown, and drop the keys already queued: Get returns nullopt at once
  // (in-flight items still end with Done). For a leader that must stop
  // writing: nothing new starts after this call.
  void ShutDownNow();
  // ShutDown, then wait until nothing is queued or in flight (or `timeout`).
  // Returns true when drained.
  bool ShutDownAndDrain(std::chrono::milliseconds timeout);
  bool ShuttingDown() const;
  size_t Len() const;
  // Keys waiting for their AddAfter/AddRateLimited delay.
  size_t DelayedLen() const;
  // Nothing queued, in flight, or waiting with its delay over: the queue hands
  // out nothing until an Add or the clock moves. For tests on a FakeClock.
  bool Idle() const;

 private:
  void AddLocked(const std::string& key) REQUIRES(mu_);
  void TimerLoop(std::stop_token stop);

  void ReportDepthLocked() REQUIRES(mu_);

  const std::string metric_labels_;  // "" when metrics are off
  Clock* const clock_;
  ItemBackoff backoff_;
  kube::TokenBucket bucket_;

  mutable Mutex mu_;
  std::condition_variable cv_;  // queue_ changed or shutdown
  std::condition_variable_any timer_cv_;
  std::deque<std::string> queue_ GUARDED_BY(mu_);
  std::unordered_set<std::string> dirty_ GUARDED_BY(mu_);  // needs processing
  std::unordered_set<std::string> processing_ GUARDED_BY(mu_);
  std::multimap<Clock::TimePoint, std::string> delayed_ GUARDED_BY(mu_);
  // Each waiting key's entry in delayed_, for the per-key dedupe.
  std::unordered_map<std::string, std::multimap<Clock::TimePoint, std::string>::iterator> waiting_
      GUARDED_BY(mu_);
  bool shutting_down_ GUARDED_BY(mu_) = false;
  std::jthread timer_;
};

// The outcome of one reconcile.
struct ReconcileResult {
  // > 0: run again after this long even if nothing changes (timers, TTLs).
  std::chrono::nanoseconds requeue_after{0};
  // Set: retrying cannot help, and the reconciler says why (its object is
  // recorded as failed where it could be, or nothing can be written for it).
  // The key is dropped until an event adds it again; requeue_after is ignored.
  // Only the reconciler knows this: an error's code never makes it permanent.
  std::optional<Status> terminal;

  static ReconcileResult Terminal(Status reason) {
    ReconcileResult r;
    r.terminal = std::move(reason);
    return r;
  }
};
using Reconciler = std::function<StatusOr<ReconcileResult>(const std::string& key)>;

// Runs `workers` threads taking keys from `queue` until it shuts down and
// drains. What happens after a reconcile is decided here, in one place:
//   ok, requeue_after == 0  -> Forget (done)
//   ok, requeue_after > 0   -> Forget, AddAfter(requeue_after)
//   ok, terminal            -> logged with its reason, counted as
//                              result="permanent_error", Forget
//   any error               -> AddRateLimited (transient; exponential backoff
//                              up to WorkQueueOptions::max_delay)
// Blocks until every worker has exited.
void RunWorkers(WorkQueue& queue, int workers, const Reconciler& reconcile);

}  // namespace kubetrain::runtime
