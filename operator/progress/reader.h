// ProgressReader: the operator's reader of trainers' metrics endpoints.
//
// Flow: the JobController sets each running job's target (the deciding
// replica's pod IP and metrics port) at every reconcile -> a few reader
// threads take due targets from a ScrapeScheduler (bounded rate for the whole
// operator, per-job interval, backoff per failing target) -> HTTP GET with
// short timeouts, no retries -> a ProgressTracker per job decides whether the
// reading is worth a status write -> if so, Latest(key) changes and
// `on_change(key)` enqueues the job; the reconcile copies Latest(key) into
// status.progress. The reader never writes to the apiserver itself: the job's
// status keeps one writer.
//
// Guarantees: a target that does not answer, answers an error or serves no
// kubetrain metrics only counts a failure (kubetrain_progress_reads_total
// {result=...}) and is read again after backoff; it never shows in the job's
// status. Reads of a job that went are dropped.
// Contract: thread-safe; Stop() (and the destructor) joins the threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "operator/api/types.h"
#include "operator/progress/progress.h"
#include "operator/progress/scrape_scheduler.h"
#include "operator/runtime/metrics.h"

namespace kubetrain::progress {

struct ReaderOptions {
  ScrapeScheduler::Options schedule;
  ProgressTracker::Options tracker;
  int threads = 2;
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds read_timeout{2000};
  size_t max_body_bytes = 256 * 1024;
};

// GET `url`, the body on 200; an error otherwise (Unavailable: no answer,
// FailedPrecondition: another status, ResourceExhausted: too large).
using FetchFn = std::function<StatusOr<std::string>(const std::string& url)>;
// The default FetchFn: cpp-httplib with the options' timeouts.
FetchFn HttpFetcher(const ReaderOptions& options);

class ProgressReader {
 public:
  ProgressReader(ReaderOptions options, std::function<void(const std::string& key)> on_change,
                 runtime::Metrics* metrics, FetchFn fetch = nullptr);
  ~ProgressReader();
  ProgressReader(const ProgressReader&) = delete;
  ProgressReader& operator=(const ProgressReader&) = delete;

  void Start();
  void Stop();

  // The target to read for job `key`; nullopt: nothing to read (no running
  // deciding replica). The last published progress is kept either way.
  void SetTarget(const std::string& key, const std::optional<ScrapeTarget>& target);
  // The job went: forget everything about it.
  void Forget(const std::string& key);
  // The progress to report for `key`, if any reading was ever published.
  std::optional<api::Progress> Latest(const std::string& key) const;

 private:
  void Loop();
  void Read(const ScrapeScheduler::Due& due);

  // Constant after construction.
  const ReaderOptions options_;
  const std::function<void(const std::string&)> on_change_;
  runtime::Metrics* const metrics_;
  const FetchFn fetch_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                            // guarded by mu_
  ScrapeScheduler scheduler_;                        // guarded by mu_
  std::map<std::string, ProgressTracker> trackers_;  // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace kubetrain::progress
