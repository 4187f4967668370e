#include "operator/progress/scrape_scheduler.h"

#include <algorithm>

namespace kubetrain::progress {

ScrapeScheduler::ScrapeScheduler(Options options)
    : options_(options), tokens_(std::max(1, options.burst)) {}

void ScrapeScheduler::Set(const std::string& key, const ScrapeTarget& target,
                          Clock::time_point now) {
  auto [it, added] = jobs_.try_emplace(key);
  Job& job = it->second;
  if (!added && job.target == target) return;
  job.target = target;
  job.next = now;
  job.in_flight = false;
  job.failures = 0;
}

void ScrapeScheduler::Remove(const std::string& key) {
  jobs_.erase(key);
}

void ScrapeScheduler::Refill(Clock::time_point now) {
  const double burst = std::max(1, options_.burst);
  if (refilled_ && now > *refilled_) {
    const double secs = std::chrono::duration<double>(now - *refilled_).count();
    tokens_ = std::min(burst, tokens_ + secs * options_.qps);
  }
  if (!refilled_ || now > *refilled_) refilled_ = now;
}

std::optional<ScrapeScheduler::Due> ScrapeScheduler::Next(Clock::time_point now,
                                                          Clock::duration* wait) {
  *wait = Clock::duration::max();
  Job* earliest = nullptr;
  const std::string* earliest_key = nullptr;
  for (auto& [key, job] : jobs_) {
    if (job.in_flight) continue;
    if (earliest == nullptr || job.next < earliest->next) {
      earliest = &job;
      earliest_key = &key;
    }
  }
  if (earliest == nullptr) return std::nullopt;
  if (earliest->next > now) {
    *wait = earliest->next - now;
    return std::nullopt;
  }
  Refill(now);
  if (tokens_ < 1) {
    const double secs = options_.qps > 0 ? (1 - tokens_) / options_.qps : 1.0;
    *wait = std::max<Clock::duration>(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs)),
        std::chrono::milliseconds(1));
    return std::nullopt;
  }
  tokens_ -= 1;
  earliest->in_flight = true;
  return Due{*earliest_key, earliest->target};
}

bool ScrapeScheduler::Done(const Due& due, bool ok, Clock::time_point now) {
  auto it = jobs_.find(due.key);
  if (it == jobs_.end() || it->second.target != due.target) return false;
  Job& job = it->second;
  job.in_flight = false;
  if (ok) {
    job.failures = 0;
    job.next = now + options_.interval;
    return true;
  }
  ++job.failures;
  Clock::duration delay = options_.backoff_base;
  for (int i = 1; i < job.failures && delay < options_.backoff_max; ++i) delay *= 2;
  job.next = now + std::min(delay, options_.backoff_max);
  return true;
}

void ScrapeScheduler::Cancel(const Due& due) {
  auto it = jobs_.find(due.key);
  if (it != jobs_.end() && it->second.target == due.target) it->second.in_flight = false;
}

int ScrapeScheduler::failures(const std::string& key) const {
  auto it = jobs_.find(key);
  return it == jobs_.end() ? 0 : it->second.failures;
}

}  // namespace kubetrain::progress
