// The trainer's live metrics and the HTTP endpoint that serves them in the
// Prometheus text format (GET /metrics on --metrics-port, default 9090). The
// operator reads the coordinator's step and total steps from here into
// status.progress, `kubetrain run` shows them, and Prometheus may scrape them
// (docs/api.md, "Metrics"; names in common/workload_contract.h).
//
// Contract: TrainerMetrics is process-wide (Global()), lock-free and safe to
// update from any thread; Render() reads a consistent-enough snapshot (each
// value atomically). MetricsServer serves on one thread of its own, a bounded
// event loop (common/http_server.h: 8 KiB of header, 5 s per request, 64
// connections, 8 per client), so no pod can blind it, grow the trainer's
// memory or hold up its exit; Stop() returns promptly at any moment.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/mutex.h"
#include "common/status.h"

namespace kubetrain::trainer {

class TrainerMetrics {
 public:
  using WallClock = std::chrono::system_clock;

  static TrainerMetrics& Global();

  // Training (chief and workers): the step is exported only once training
  // started, so a PS or an evaluator never looks like a trainer at step 0.
  void StartTraining(int64_t first_step, int64_t total_steps);
  void SetStep(int64_t step, double loss);
  void SetRates(double samples_per_second, double steps_per_second);
  void CheckpointCommitted(int64_t step, WallClock::time_point at);
  void AddPsBytes(uint64_t sent, uint64_t received);
  // Payload bytes this process sent to and received from parameter servers so far.
  uint64_t ps_sent_bytes() const { return ps_sent_bytes_.load(std::memory_order_relaxed); }
  uint64_t ps_received_bytes() const { return ps_received_bytes_.load(std::memory_order_relaxed); }
  // Parameter servers: a push applied, or a duplicate acknowledged and not applied.
  void AddPsPushes(bool applied);
  // Parameter servers and one process: where the embedding table's figures come from, read
  // at each Render (rows, bytes, admitted, filtered, evicted; ParamShard::embedding_stats).
  // Set once; the source must outlive every Render (ClearEmbeddingSource before it goes).
  void SetEmbeddingSource(std::function<std::array<uint64_t, 5>()> source);
  void ClearEmbeddingSource() { SetEmbeddingSource(nullptr); }
  // Evaluator: one checkpoint evaluated.
  void CheckpointEvaluated(int64_t step, double auc, double log_loss, double accuracy,
                           double examples_per_second);

  // The Prometheus text exposition (0.0.4) as of `now`.
  std::string Render(WallClock::time_point now) const;
  // Counts the training updates (StartTraining, SetStep): a Render after
  // reading version v shows at least what v stood for.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

 private:
  std::atomic<uint64_t> version_{0};
  std::atomic<bool> training_{false};
  std::atomic<int64_t> step_{0};
  std::atomic<int64_t> total_steps_{0};
  std::atomic<double> loss_{0};
  std::atomic<double> samples_per_second_{0};
  std::atomic<double> steps_per_second_{0};
  std::atomic<int64_t> checkpoint_step_{-1};
  std::atomic<int64_t> checkpoint_unix_ms_{0};
  std::atomic<uint64_t> ps_sent_bytes_{0};
  std::atomic<uint64_t> ps_received_bytes_{0};
  std::atomic<uint64_t> pushes_applied_{0};
  std::atomic<uint64_t> pushes_duplicate_{0};
  std::atomic<int64_t> eval_step_{-1};
  std::atomic<double> eval_auc_{0};
  std::atomic<double> eval_log_loss_{0};
  std::atomic<double> eval_accuracy_{0};
  std::atomic<double> eval_examples_per_second_{0};
  std::atomic<uint64_t> eval_checkpoints_{0};
  mutable Mutex embedding_mu_;
  std::function<std::array<uint64_t, 5>()> embedding_source_ GUARDED_BY(embedding_mu_);
};

// GET /metrics -> metrics->Render(now) and kubetrain_trainer_http_connections_total
// (how connections ended); anything else 404.
class MetricsServer {
 public:
  explicit MetricsServer(const TrainerMetrics* metrics);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds all addresses (IPv6 dual-stack, else IPv4) on `port` (0: any free
  // port) and serves on a background thread. Returns the bound port;
  // Unavailable when the port cannot be bound.
  [[nodiscard]] StatusOr<int> Start(int port);
  void Stop();
  // Waits until a GET /metrics has rendered at least `version` (of the
  // TrainerMetrics served), or `deadline`. True when it has. A process that
  // ends before anyone read its last step waits here, so a reader polling
  // every few hundred milliseconds (`kubetrain run`) sees how training ended.
  bool WaitUntilServed(uint64_t version, std::chrono::steady_clock::time_point deadline);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kubetrain::trainer
