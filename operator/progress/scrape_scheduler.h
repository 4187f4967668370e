// When to read which job's metrics: a bounded request rate for the whole
// operator, whatever the number of jobs.
//
// Guarantees (all with the caller's clock, so tests need no sleeps):
//  - at most `qps` reads per second over any long window, `burst` at once,
//    for all jobs together (a token bucket);
//  - a job is read at most once per `interval`, and never twice at once;
//  - a target that fails (no server, timeout, not a kubetrain trainer) is
//    read again after backoff_base, doubling per failure in a row up to
//    backoff_max: an image that serves no metrics costs a read every few
//    minutes, not a retry storm. A new pod (another UID or URL) starts afresh.
// Due jobs are served earliest first, so none starves while others wait.
// Contract: pure bookkeeping, no I/O; not thread-safe (the reader locks).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace kubetrain::progress {

struct ScrapeTarget {
  std::string url;      // http://<pod IP>:<port>/metrics
  std::string pod_uid;  // a new pod is a new target
  std::string replica;  // "worker-0"

  friend bool operator==(const ScrapeTarget&, const ScrapeTarget&) = default;
};

class ScrapeScheduler {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    double qps = 5;
    int burst = 5;
    Clock::duration interval = std::chrono::seconds(10);
    Clock::duration backoff_base = std::chrono::seconds(30);
    Clock::duration backoff_max = std::chrono::minutes(5);
  };

  explicit ScrapeScheduler(Options options);

  // Adds or updates the target of `key`. An unchanged target keeps its
  // schedule; a changed one is due at once with its failures forgotten.
  void Set(const std::string& key, const ScrapeTarget& target, Clock::time_point now);
  void Remove(const std::string& key);
  size_t size() const { return jobs_.size(); }

  struct Due {
    std::string key;
    ScrapeTarget target;
  };
  // The job to read now (taking a token and marking it in flight), or nullopt
  // with *wait set to how long until one may be due (Clock::duration::max()
  // when nothing is scheduled).
  std::optional<Due> Next(Clock::time_point now, Clock::duration* wait);
  // The read of `due` finished at `now`. False (and ignored) if the job's
  // target changed or went meanwhile.
  bool Done(const Due& due, bool ok, Clock::time_point now);
  // The read of `due` was dropped before it ended (the reader stopped): the
  // job is no longer in flight and keeps its schedule and failures.
  void Cancel(const Due& due);

  // For tests: the failures in a row of `key` (0 when unknown).
  int failures(const std::string& key) const;

 private:
  struct Job {
    ScrapeTarget target;
    Clock::time_point next{};
    bool in_flight = false;
    int failures = 0;
  };
  void Refill(Clock::time_point now);

  const Options options_;
  std::map<std::string, Job> jobs_;
  double tokens_;
  std::optional<Clock::time_point> refilled_;
};

}  // namespace kubetrain::progress
