// ProgressReader: the operator's reader of trainers' metrics endpoints.
//
// Flow: the JobController sets each running job's target (the coordinator's
// pod IP and metrics port) at every reconcile -> one reader thread
// takes due targets from a ScrapeScheduler (bounded rate for the whole
// operator, per-job interval, backoff per failing target) and drives all their
// reads at once (libcurl's multi interface: at most max_in_flight, no
// retries) -> a ProgressTracker per job decides whether the reading is worth
// a status write -> if so, Latest(key) changes and `on_change(key)` enqueues
// the job; the reconcile copies Latest(key) into status.progress. The reader
// never writes to the apiserver itself: the job's status keeps one writer.
//
// Guarantees: a target is a pod its tenant controls, so every read is bounded
// whatever it answers: it ends by total_timeout (connecting included), holds
// at most max_header_bytes of headers and max_body_bytes of body, follows no
// redirect, uses no proxy and speaks plain HTTP only. One slow or hostile
// target never delays another's read (no head-of-line blocking: reads run
// concurrently, each with its own deadline). A target that does not answer,
// answers an error or too much, or serves no kubetrain metrics only counts a
// failure (kubetrain_progress_reads_total{result=...}) and is read again
// after backoff; it never shows in the job's status. Reads of a job that went
// are dropped. Stop() returns without waiting for reads in flight.
// Contract: thread-safe; Stop() (and the destructor) joins the thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "operator/api/types.h"
#include "operator/progress/progress.h"
#include "operator/progress/scrape_scheduler.h"
#include "operator/runtime/metrics.h"

namespace kubetrain::progress {

struct ReaderOptions {
  ScrapeScheduler::Options schedule;
  ProgressTracker::Options tracker;
  // Per read. total_timeout bounds the whole read, connecting included.
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds total_timeout{3000};
  size_t max_header_bytes = 16 * 1024;  // every header line together
  size_t max_body_bytes = 256 * 1024;
  // Reads at once, all jobs together (each is a socket).
  int max_in_flight = 64;
  // What the schedule (intervals, backoffs, the rate limit) and the tracker's
  // publish interval and timestamps read; must outlive the reader (tests: a
  // FakeClock; the reader then looks at it at least once a second). Each
  // read's own timeouts stay on real time.
  Clock* clock = &RealClock();
};

// The outcome of one read: the body on 200; otherwise Unavailable (no
// connection or it broke), DeadlineExceeded (total_timeout passed),
// ResourceExhausted (headers or body over their cap), FailedPrecondition
// (another HTTP status, or not HTTP), InvalidArgument (not an http:// URL).
using FetchFn = std::function<StatusOr<std::string>(const std::string& url)>;
// A FetchFn with the options' limits (libcurl), for one read at a time
// (`kubetrain run`).
FetchFn HttpFetcher(const ReaderOptions& options);

// Many reads in flight, driven by one thread: the reader's seam for tests.
// Start() and Wait() are called by the driving thread only; Wakeup() from any.
class AsyncFetcher {
 public:
  struct Done {
    uint64_t id = 0;
    StatusOr<std::string> body;
  };
  virtual ~AsyncFetcher() = default;
  // Starts reading `url`; its outcome comes out of a later Wait() as `id`.
  virtual void Start(uint64_t id, const std::string& url) = 0;
  // Drives the reads in flight for at most `timeout` (less when one ends or
  // Wakeup() is called) and returns those that ended.
  virtual std::vector<Done> Wait(std::chrono::milliseconds timeout) = 0;
  // Makes a Wait() in progress (or the next one) return soon.
  virtual void Wakeup() = 0;
  // Drops every read in flight (no Done for them).
  virtual void CancelAll() = 0;
};
// The production AsyncFetcher: libcurl multi with the options' limits.
StatusOr<std::unique_ptr<AsyncFetcher>> CurlFetcher(const ReaderOptions& options);

class ProgressReader {
 public:
  // `fetcher` null: CurlFetcher(options).
  ProgressReader(ReaderOptions options, std::function<void(const std::string& key)> on_change,
                 runtime::Metrics* metrics, std::unique_ptr<AsyncFetcher> fetcher = nullptr);
  ~ProgressReader();
  ProgressReader(const ProgressReader&) = delete;
  ProgressReader& operator=(const ProgressReader&) = delete;

  void Start();
  void Stop();

  // The target to read for job `key`; nullopt: nothing to read (no running
  // coordinator). The last published progress is kept either way.
  void SetTarget(const std::string& key, const std::optional<ScrapeTarget>& target);
  // The job went: forget everything about it.
  void Forget(const std::string& key);
  // The progress to report for `key`, if any reading was ever published.
  std::optional<api::Progress> Latest(const std::string& key) const;

 private:
  void Loop();
  void Finish(const ScrapeScheduler::Due& due, const StatusOr<std::string>& body);

  // Constant after construction.
  const ReaderOptions options_;
  const std::function<void(const std::string&)> on_change_;
  runtime::Metrics* const metrics_;
  const std::unique_ptr<AsyncFetcher> fetcher_;  // null if libcurl failed: nothing is read

  // Owned by the reader thread.
  std::map<uint64_t, ScrapeScheduler::Due> reads_;  // in flight, by fetch id
  uint64_t next_id_ = 0;

  mutable Mutex mu_;
  bool stopping_ GUARDED_BY(mu_) = false;
  ScrapeScheduler scheduler_ GUARDED_BY(mu_);
  std::map<std::string, ProgressTracker> trackers_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kubetrain::progress
