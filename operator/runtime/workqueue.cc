#include "operator/runtime/workqueue.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <vector>

#include "operator/runtime/metrics.h"

namespace kubetrain::runtime {

std::chrono::nanoseconds ItemBackoff::When(const std::string& key) {
  MutexLock lock(mu_);
  int n = failures_[key]++;
  // 2^n overflows quickly; compare in floating point first.
  double d = static_cast<double>(base_.count()) * std::pow(2.0, n);
  if (d >= static_cast<double>(max_.count())) return max_;
  return std::chrono::nanoseconds(static_cast<int64_t>(d));
}

void ItemBackoff::Forget(const std::string& key) {
  MutexLock lock(mu_);
  failures_.erase(key);
}

int ItemBackoff::NumRequeues(const std::string& key) const {
  MutexLock lock(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

WorkQueue::WorkQueue(WorkQueueOptions opts)
    : metric_labels_(opts.name.empty() ? "" : "name=\"" + opts.name + "\""),
      clock_(opts.clock),
      backoff_(opts.base_delay, opts.max_delay),
      bucket_(opts.qps, opts.burst) {
  timer_ = std::jthread([this](std::stop_token st) { TimerLoop(st); });
}

WorkQueue::~WorkQueue() {
  ShutDown();
  timer_.request_stop();
  timer_cv_.notify_all();
}

void WorkQueue::AddLocked(const std::string& key) {
  if (shutting_down_) return;
  if (!dirty_.insert(key).second) return;  // already queued (or re-queued)
  if (processing_.count(key)) return;      // Done() will queue it
  queue_.push_back(key);
  if (!metric_labels_.empty())
    DefaultMetrics().Add("kubetrain_workqueue_adds_total", metric_labels_);
  ReportDepthLocked();
  cv_.notify_one();
}

void WorkQueue::ReportDepthLocked() {
  if (!metric_labels_.empty())
    DefaultMetrics().Set("kubetrain_workqueue_depth", metric_labels_,
                         static_cast<double>(queue_.size()));
}

void WorkQueue::Add(const std::string& key) {
  MutexLock lock(mu_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, std::chrono::nanoseconds delay) {
  if (delay.count() <= 0) return Add(key);
  MutexLock lock(mu_);
  if (shutting_down_) return;
  const Clock::TimePoint at = clock_->Now() + delay;
  if (auto w = waiting_.find(key); w != waiting_.end()) {
    if (w->second->first <= at) return;  // already due no later than asked
    delayed_.erase(w->second);
    waiting_.erase(w);
  }
  waiting_.emplace(key, delayed_.emplace(at, key));
  timer_cv_.notify_all();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  if (!metric_labels_.empty())
    DefaultMetrics().Add("kubetrain_workqueue_retries_total", metric_labels_);
  auto item = backoff_.When(key);
  auto overall = bucket_.Reserve(clock_->Now());
  AddAfter(key, std::max(item, overall));
}

void WorkQueue::Forget(const std::string& key) {
  backoff_.Forget(key);
}
int WorkQueue::NumRequeues(const std::string& key) const {
  return backoff_.NumRequeues(key);
}

std::optional<std::string> WorkQueue::Get() {
  MutexLock lock(mu_);
  cv_.wait(lock.native(), [this]() REQUIRES(mu_) { return !queue_.empty() || shutting_down_; });
  if (queue_.empty()) return std::nullopt;
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  ReportDepthLocked();
  processing_.insert(key);
  dirty_.erase(key);
  return key;
}

void WorkQueue::Done(const std::string& key) {
  MutexLock lock(mu_);
  processing_.erase(key);
  if (dirty_.count(key)) {
    // Added while it was being processed: process it again.
    queue_.push_back(key);
    ReportDepthLocked();
    cv_.notify_one();
  } else if (processing_.empty() && queue_.empty()) {
    cv_.notify_all();  // a drain may be waiting
  }
}

void WorkQueue::ShutDown() {
  MutexLock lock(mu_);
  shutting_down_ = true;
  delayed_.clear();
  waiting_.clear();
  cv_.notify_all();
  timer_cv_.notify_all();
}

void WorkQueue::ShutDownNow() {
  MutexLock lock(mu_);
  shutting_down_ = true;
  delayed_.clear();
  waiting_.clear();
  dirty_.clear();  // queued keys, and in-flight ones re-added (not requeued on Done)
  queue_.clear();
  ReportDepthLocked();
  cv_.notify_all();
  timer_cv_.notify_all();
}

bool WorkQueue::ShutDownAndDrain(std::chrono::milliseconds timeout) {
  ShutDown();
  MutexLock lock(mu_);
  return cv_.wait_for(lock.native(), timeout,
                      [this]() REQUIRES(mu_) { return queue_.empty() && processing_.empty(); });
}

bool WorkQueue::ShuttingDown() const {
  MutexLock lock(mu_);
  return shutting_down_;
}

size_t WorkQueue::Len() const {
  MutexLock lock(mu_);
  return queue_.size();
}

size_t WorkQueue::DelayedLen() const {
  MutexLock lock(mu_);
  return delayed_.size();
}

bool WorkQueue::Idle() const {
  MutexLock lock(mu_);
  return queue_.empty() && processing_.empty() &&
         (delayed_.empty() || delayed_.begin()->first > clock_->Now());
}

void WorkQueue::TimerLoop(std::stop_token stop) {
  MutexLock lock(mu_);
  while (!stop.stop_requested()) {
    auto now = clock_->Now();
    while (!delayed_.empty() && delayed_.begin()->first <= now) {
      std::string key = std::move(delayed_.begin()->second);
      delayed_.erase(delayed_.begin());
      waiting_.erase(key);
      AddLocked(key);
    }
    if (delayed_.empty()) {
      timer_cv_.wait(lock.native(), stop, [this]() REQUIRES(mu_) { return !delayed_.empty(); });
    } else {
      auto next = delayed_.begin()->first;
      (void)clock_->WaitUntil(lock.native(), timer_cv_, stop, next, [this, next]() REQUIRES(mu_) {
        return !delayed_.empty() && delayed_.begin()->first < next;
      });
    }
  }
}

void RunWorkers(WorkQueue& queue, int workers, const Reconciler& reconcile) {
  std::vector<std::jthread> threads;
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back([&queue, &reconcile] {
      while (auto key = queue.Get()) {
        StatusOr<ReconcileResult> r = [&]() -> StatusOr<ReconcileResult> {
          try {
            return reconcile(*key);
          } catch (const std::exception& e) {
            DefaultMetrics().Add("kubetrain_thread_errors_total", "thread=\"worker\"");
            return Internal(std::string("reconcile threw: ") + e.what());
          }
        }();
        const char* outcome = !r.ok()                        ? "error"
                              : r->terminal.has_value()      ? "permanent_error"
                              : r->requeue_after.count() > 0 ? "requeue"
                                                             : "success";
        DefaultMetrics().Add("kubetrain_reconcile_total",
                             std::string("result=\"") + outcome + "\"");
        if (!r.ok()) {
          spdlog::warn("reconcile {}: {} (retry {})", *key, r.status().ToString(),
                       queue.NumRequeues(*key) + 1);
          queue.AddRateLimited(*key);
        } else if (r->terminal) {
          spdlog::error("reconcile {}: permanent error, not retrying: {}", *key,
                        r->terminal->ToString());
          queue.Forget(*key);
        } else {
          queue.Forget(*key);
          if (r->requeue_after.count() > 0) queue.AddAfter(*key, r->requeue_after);
        }
        queue.Done(*key);
      }
    });
  }
}

}  // namespace kubetrain::runtime
