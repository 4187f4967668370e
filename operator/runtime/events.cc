#include "operator/runtime/events.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <random>
#include <vector>

#include "common/utf8.h"
#include "operator/runtime/leader_election.h"
#include "operator/runtime/metrics.h"

namespace kubetrain::runtime {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxSeries = 4096;
// events.k8s.io/v1 rejects notes over 1 kB.
constexpr size_t kMaxNoteBytes = 1024;

std::string RandomSuffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* hex = "0123456789abcdef";
  std::string s;
  uint64_t v = rng();
  for (int i = 0; i < 12; ++i, v >>= 4) s.push_back(hex[v & 15]);
  return s;
}

}  // namespace

EventRecorder::EventRecorder(kube::Client* client, EventRecorderOptions opts)
    : client_(client), opts_(std::move(opts)) {
  thread_ = std::jthread([this](std::stop_token st) { Loop(st); });
}

EventRecorder::~EventRecorder() {
  thread_.request_stop();
  cv_.notify_all();
}

void EventRecorder::Record(const ObjectReference& regarding, const std::string& type,
                           const std::string& reason, const std::string& action,
                           const std::string& note) {
  const auto now = opts_.clock->Now();
  MutexLock lock(mu_);
  if (limits_.size() >= opts_.max_tracked_objects) PruneLimitsLocked(now);
  Limit& limit =
      limits_[regarding.uid.empty() ? regarding.ns + "/" + regarding.name : regarding.uid];
  if (!limit.bucket)
    limit.bucket =
        std::make_unique<kube::TokenBucket>(opts_.per_object_qps, opts_.per_object_burst);
  limit.last_used = now;
  if (limit.bucket->Reserve(now).count() > 0 || queue_.size() >= opts_.max_pending) {
    ++dropped_;
    return;
  }
  queue_.push_back(Pending{regarding, type, reason, action, note});
  cv_.notify_all();
}

void EventRecorder::PruneLimitsLocked(std::chrono::steady_clock::time_point now) {
  // A bucket left alone until it refilled is the same as a fresh one.
  const auto refill = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(opts_.per_object_burst / std::max(opts_.per_object_qps, 1e-9)));
  std::erase_if(limits_, [&](const auto& kv) { return now - kv.second.last_used >= refill; });
  if (limits_.size() < opts_.max_tracked_objects) return;
  // Still full (a burst of new objects): forget the least recently used half,
  // which at worst gives those objects a fresh burst. Amortised O(1) per Record.
  std::vector<std::chrono::steady_clock::time_point> used;
  used.reserve(limits_.size());
  for (const auto& [key, limit] : limits_) used.push_back(limit.last_used);
  auto median = used.begin() + static_cast<std::ptrdiff_t>(used.size() / 2);
  std::nth_element(used.begin(), median, used.end());
  const auto cutoff = *median;
  std::erase_if(limits_, [&](const auto& kv) { return kv.second.last_used < cutoff; });
  if (limits_.size() >= opts_.max_tracked_objects) limits_.clear();  // all used at once
}

size_t EventRecorder::tracked_objects() const {
  MutexLock lock(mu_);
  return limits_.size();
}

uint64_t EventRecorder::dropped() const {
  MutexLock lock(mu_);
  return dropped_;
}

void EventRecorder::Flush() {
  MutexLock lock(mu_);
  cv_.wait(lock.native(), [this]() REQUIRES(mu_) { return queue_.empty() && !busy_; });
}

void EventRecorder::Loop(std::stop_token stop) {
  std::optional<std::chrono::steady_clock::time_point> stopped_at;
  for (;;) {
    Pending p;
    {
      MutexLock lock(mu_);
      cv_.wait(lock.native(), stop, [this]() REQUIRES(mu_) { return !queue_.empty(); });
      if (queue_.empty()) return;  // stopped and drained
      if (stop.stop_requested()) {
        // Events recorded just before shutdown are still worth sending, but
        // an unreachable apiserver must not hold the process up for long.
        auto now = opts_.clock->Now();
        if (!stopped_at) stopped_at = now;
        if (now - *stopped_at > opts_.shutdown_grace) {
          dropped_ += queue_.size();
          queue_.clear();
          cv_.notify_all();
          return;
        }
      }
      p = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    // Nothing an event carries may end the process: an exception here would
    // terminate it from this thread, for every tenant.
    try {
      Send(p);
    } catch (const std::exception& e) {
      spdlog::error("event: dropping {} event for {}/{}: {}", p.reason, p.regarding.ns,
                    p.regarding.name, e.what());
      DefaultMetrics().Add("kubetrain_thread_errors_total", "thread=\"events\"");
    }
    MutexLock lock(mu_);
    busy_ = false;
    cv_.notify_all();
  }
}

void EventRecorder::Send(const Pending& p) {
  const auto now = opts_.clock->Now();
  const std::string key = p.regarding.uid + "|" + p.regarding.ns + "/" + p.regarding.name + "|" +
                          p.type + "|" + p.reason + "|" + p.action + "|" + p.note;
  const std::string ns = p.regarding.ns.empty() ? "default" : p.regarding.ns;
  if (series_.size() > kMaxSeries) {
    // Forget series whose window has passed, so the map stays bounded.
    std::erase_if(series_,
                  [&](const auto& kv) { return now - kv.second.last >= opts_.aggregation_window; });
    // Many objects within one window: drop them all; a repeat then starts a
    // new Event instead of counting into the old one.
    if (series_.size() > kMaxSeries) series_.clear();
  }
  auto it = series_.find(key);
  if (it != series_.end() && now - it->second.last < opts_.aggregation_window) {
    Series& s = it->second;
    s.count++;
    s.last = now;
    json patch = {
        {"series", {{"count", s.count}, {"lastObservedTime", MicroTimeNow(*opts_.clock)}}}};
    auto r = client_->Patch(kube::kEvents, s.ns, s.event_name, kube::PatchType::kMerge, patch);
    if (r.ok()) return;
    spdlog::warn("event: updating series of {} failed: {}", s.event_name, r.status().ToString());
    series_.erase(it);  // fall through: create a fresh Event
  }
  std::string name = p.regarding.name + "." + RandomSuffix();
  json ev = {{"apiVersion", "events.k8s.io/v1"},
             {"kind", "Event"},
             {"metadata", {{"name", name}, {"namespace", ns}}},
             {"eventTime", MicroTimeNow(*opts_.clock)},
             {"reportingController", opts_.reporting_controller},
             {"reportingInstance", opts_.reporting_instance.empty() ? opts_.reporting_controller
                                                                    : opts_.reporting_instance},
             {"action", p.action},
             {"reason", p.reason},
             {"type", p.type},
             // A failed pod's termination message is in the note: cut it on a
             // code-point boundary (a cut mid-character made dump() throw), and
             // no terminal escapes reach `kubectl describe`.
             {"note", CleanText(p.note, kMaxNoteBytes)},
             {"regarding",
              {{"apiVersion", p.regarding.api_version},
               {"kind", p.regarding.kind},
               {"namespace", p.regarding.ns},
               {"name", p.regarding.name},
               {"uid", p.regarding.uid}}}};
  auto r = client_->Create(kube::kEvents, ns, ev);
  if (!r.ok()) {
    spdlog::warn("event: creating {} failed: {}", name, r.status().ToString());
    return;
  }
  series_[key] = Series{name, ns, 1, now};
}

}  // namespace kubetrain::runtime
