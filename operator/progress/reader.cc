#include "operator/progress/reader.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

namespace kubetrain::progress {
namespace {

constexpr std::string_view kReads = "kubetrain_progress_reads_total";
constexpr std::string_view kPublished = "kubetrain_progress_updates_total";
constexpr std::string_view kTargets = "kubetrain_progress_targets";

api::Time WallNow() {
  return std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
}

}  // namespace

FetchFn HttpFetcher(const ReaderOptions& options) {
  return [options](const std::string& url) -> StatusOr<std::string> {
    // url = http://host:port/path
    constexpr std::string_view kScheme = "http://";
    if (url.rfind(kScheme, 0) != 0) return InvalidArgument("not an http URL: " + url);
    const size_t slash = url.find('/', kScheme.size());
    const std::string origin = url.substr(0, slash);
    const std::string path = slash == std::string::npos ? "/" : url.substr(slash);
    httplib::Client client(origin);
    client.set_connection_timeout(options.connect_timeout);
    client.set_read_timeout(options.read_timeout);
    client.set_write_timeout(options.read_timeout);
    client.set_keep_alive(false);
    client.set_follow_location(false);
    std::string body;
    bool too_large = false;
    auto res = client.Get(path, [&](const char* data, size_t n) {
      if (body.size() + n > options.max_body_bytes) {
        too_large = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    if (too_large) return Status(StatusCode::kResourceExhausted, "metrics larger than the limit");
    if (!res) return Unavailable(httplib::to_string(res.error()));
    if (res->status != 200) {
      return FailedPrecondition("HTTP " + std::to_string(res->status));
    }
    return body;
  };
}

ProgressReader::ProgressReader(ReaderOptions options,
                               std::function<void(const std::string&)> on_change,
                               runtime::Metrics* metrics, FetchFn fetch)
    : options_(options),
      on_change_(std::move(on_change)),
      metrics_(metrics),
      fetch_(fetch ? std::move(fetch) : HttpFetcher(options)),
      scheduler_(options.schedule) {
  metrics_->Help(kReads, "counter",
                 "Reads of trainers' metrics endpoints for status.progress, by result.");
  metrics_->Help(kPublished, "counter", "status.progress changes handed to the reconcile.");
  metrics_->Help(kTargets, "gauge", "Jobs whose deciding replica's metrics are being read.");
}

ProgressReader::~ProgressReader() {
  Stop();
}

void ProgressReader::Start() {
  std::lock_guard lock(mu_);
  if (!threads_.empty()) return;
  stopping_ = false;
  for (int i = 0; i < std::max(1, options_.threads); ++i) threads_.emplace_back([this] { Loop(); });
}

void ProgressReader::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void ProgressReader::SetTarget(const std::string& key, const std::optional<ScrapeTarget>& target) {
  {
    std::lock_guard lock(mu_);
    if (target) {
      scheduler_.Set(key, *target, ScrapeScheduler::Clock::now());
    } else {
      scheduler_.Remove(key);
    }
    metrics_->Set(kTargets, "", static_cast<double>(scheduler_.size()));
  }
  cv_.notify_one();
}

void ProgressReader::Forget(const std::string& key) {
  std::lock_guard lock(mu_);
  scheduler_.Remove(key);
  trackers_.erase(key);
  metrics_->Set(kTargets, "", static_cast<double>(scheduler_.size()));
}

std::optional<api::Progress> ProgressReader::Latest(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = trackers_.find(key);
  if (it == trackers_.end()) return std::nullopt;
  return it->second.published();
}

void ProgressReader::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    ScrapeScheduler::Clock::duration wait{};
    auto due = scheduler_.Next(ScrapeScheduler::Clock::now(), &wait);
    if (!due) {
      if (wait == ScrapeScheduler::Clock::duration::max()) {
        cv_.wait(lock);
      } else {
        cv_.wait_for(lock, wait);
      }
      continue;
    }
    lock.unlock();
    Read(*due);
    lock.lock();
  }
}

void ProgressReader::Read(const ScrapeScheduler::Due& due) {
  // Threads catch at their boundary: a workload's bytes never end the process.
  StatusOr<TrainerSample> sample = Status(StatusCode::kInternal, "not read");
  try {
    auto body = fetch_(due.target.url);
    sample = body.ok() ? TrainerSampleFromText(*body) : StatusOr<TrainerSample>(body.status());
  } catch (const std::exception& e) {
    sample = Status(StatusCode::kInternal, e.what());
  }
  const char* result = sample.ok()                                          ? "ok"
                       : sample.status().code() == StatusCode::kNotFound    ? "no_metrics"
                       : sample.status().code() == StatusCode::kUnavailable ? "unreachable"
                                                                            : "error";
  metrics_->Add(kReads, std::string("result=\"") + result + "\"");
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    const auto now = ScrapeScheduler::Clock::now();
    const bool current = scheduler_.Done(due, sample.ok(), now);
    if (sample.ok() && current) {
      auto [it, added] = trackers_.try_emplace(due.key, options_.tracker);
      changed = it->second.Observe(*sample, due.target.replica, now, WallNow()).has_value();
    }
  }
  if (!sample.ok()) {
    spdlog::debug("progress of {}: {} ({})", due.key, sample.status().ToString(), due.target.url);
  }
  if (changed) {
    metrics_->Add(kPublished);
    on_change_(due.key);
  }
}

}  // namespace kubetrain::progress
