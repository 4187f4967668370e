#include "trainer/metrics/metrics.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "common/http_server.h"
#include "common/workload_contract.h"

namespace kubetrain::trainer {
namespace {

namespace names = kubetrain::contract::metric;

// Served by parameter servers; not part of what the operator reads.
constexpr std::string_view kPushesApplied = "kubetrain_trainer_ps_pushes_applied_total";
constexpr std::string_view kPushesDuplicate = "kubetrain_trainer_ps_pushes_duplicate_total";
// How connections to this endpoint ended (rejected, cut off, timed out).
constexpr std::string_view kHttpConnections = "kubetrain_trainer_http_connections_total";

void Family(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
  out.append(name).append(" ").append(buf).append("\n");
}

}  // namespace

TrainerMetrics& TrainerMetrics::Global() {
  static TrainerMetrics* m = new TrainerMetrics();  // never destroyed: the server thread reads it
  return *m;
}

void TrainerMetrics::StartTraining(int64_t first_step, int64_t total_steps) {
  step_ = first_step;
  total_steps_ = total_steps;
  training_ = true;
  version_.fetch_add(1, std::memory_order_release);
}

void TrainerMetrics::SetStep(int64_t step, double loss) {
  step_ = step;
  loss_ = loss;
  version_.fetch_add(1, std::memory_order_release);
}

void TrainerMetrics::SetRates(double samples_per_second, double steps_per_second) {
  samples_per_second_ = samples_per_second;
  steps_per_second_ = steps_per_second;
}

void TrainerMetrics::CheckpointCommitted(int64_t step, WallClock::time_point at) {
  checkpoint_unix_ms_ =
      std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count();
  checkpoint_step_ = step;
}

void TrainerMetrics::AddPsBytes(uint64_t sent, uint64_t received) {
  ps_sent_bytes_ += sent;
  ps_received_bytes_ += received;
}

void TrainerMetrics::AddPsPushes(bool applied) {
  (applied ? pushes_applied_ : pushes_duplicate_).fetch_add(1, std::memory_order_relaxed);
}

void TrainerMetrics::CheckpointEvaluated(int64_t step, double auc, double log_loss, double accuracy,
                                         double examples_per_second) {
  eval_auc_ = auc;
  eval_log_loss_ = log_loss;
  eval_accuracy_ = accuracy;
  eval_examples_per_second_ = examples_per_second;
  ++eval_checkpoints_;
  eval_step_ = step;
}

std::string TrainerMetrics::Render(WallClock::time_point now) const {
  std::string out;
  if (training_) {
    Family(out, names::kStep, "gauge", "Last completed training step of this replica.",
           static_cast<double>(step_.load()));
    Family(out, names::kTotalSteps, "gauge", "The step this replica stops at (--steps).",
           static_cast<double>(total_steps_.load()));
    Family(out, names::kLoss, "gauge", "Mean training loss over the last 100 steps.", loss_);
    Family(out, names::kSamplesPerSecond, "gauge",
           "Training examples per second over the last few seconds.", samples_per_second_);
    Family(out, names::kStepsPerSecond, "gauge",
           "Training steps per second over the last few seconds.", steps_per_second_);
  }
  if (const int64_t step = checkpoint_step_; step >= 0) {
    const auto at = WallClock::time_point(std::chrono::milliseconds(checkpoint_unix_ms_.load()));
    Family(out, names::kCheckpointStep, "gauge",
           "Step of the last checkpoint this process committed.", static_cast<double>(step));
    Family(out, names::kCheckpointAge, "gauge", "Seconds since that checkpoint was committed.",
           std::max(0.0, std::chrono::duration<double>(now - at).count()));
  }
  if (const int64_t step = eval_step_; step >= 0) {
    Family(out, names::kEvalStep, "gauge", "Step of the last checkpoint evaluated.",
           static_cast<double>(step));
    Family(out, names::kEvalAuc, "gauge", "AUC on the evaluation data at that checkpoint.",
           eval_auc_);
    Family(out, names::kEvalLogLoss, "gauge", "Log loss on the evaluation data there.",
           eval_log_loss_);
    Family(out, names::kEvalAccuracy, "gauge", "Accuracy on the evaluation data there.",
           eval_accuracy_);
    Family(out, names::kEvalExamplesPerSecond, "gauge",
           "Evaluation examples per second on that checkpoint.", eval_examples_per_second_);
    Family(out, names::kEvalCheckpoints, "counter", "Checkpoints evaluated.",
           static_cast<double>(eval_checkpoints_.load()));
  }
  Family(out, names::kPsSentBytes, "counter", "Bytes sent to parameter servers.",
         static_cast<double>(ps_sent_bytes_.load()));
  Family(out, names::kPsReceivedBytes, "counter", "Bytes received from parameter servers.",
         static_cast<double>(ps_received_bytes_.load()));
  if (const uint64_t applied = pushes_applied_, duplicate = pushes_duplicate_;
      applied + duplicate > 0) {
    Family(out, kPushesApplied, "counter", "Pushes this parameter server applied.",
           static_cast<double>(applied));
    Family(out, kPushesDuplicate, "counter",
           "Pushes re-sent after a lost connection that this parameter server had applied "
           "already: acknowledged, not applied again.",
           static_cast<double>(duplicate));
  }
  {
    MutexLock lock(embedding_mu_);
    if (embedding_source_) {
      const std::array<uint64_t, 5> e = embedding_source_();
      Family(out, "kubetrain_trainer_embedding_rows", "gauge", "Embedding rows held.",
             static_cast<double>(e[0]));
      Family(out, "kubetrain_trainer_embedding_bytes", "gauge",
             "Bytes the embedding rows take (slabs, index, sketch, logs).",
             static_cast<double>(e[1]));
      Family(out, "kubetrain_trainer_embedding_admitted_total", "counter",
             "Embedding rows created.", static_cast<double>(e[2]));
      Family(out, "kubetrain_trainer_embedding_filtered_total", "counter",
             "Updates of ids not admitted yet (--embedding-admit-count): counted, not stored.",
             static_cast<double>(e[3]));
      Family(out, "kubetrain_trainer_embedding_evicted_total", "counter",
             "Embedding rows evicted (--embedding-capacity, --embedding-evict-steps).",
             static_cast<double>(e[4]));
    }
  }
  return out;
}

void TrainerMetrics::SetEmbeddingSource(std::function<std::array<uint64_t, 5>()> source) {
  MutexLock lock(embedding_mu_);
  embedding_source_ = std::move(source);
}

struct MetricsServer::Impl {
  const TrainerMetrics* metrics;
  HttpServer server;  // default HttpLimits: 8 KiB headers, 5 s per request, 64 / 8 per client
  bool started = false;
  std::mutex mu;
  std::condition_variable served_cv;
  uint64_t served_version = 0;  // the newest version a GET /metrics rendered
};

MetricsServer::MetricsServer(const TrainerMetrics* metrics) : impl_(std::make_unique<Impl>()) {
  impl_->metrics = metrics;
  impl_->server.Handle("/metrics", [this](const HttpRequest&) {
    const uint64_t version = impl_->metrics->version();
    HttpResponse res;
    res.content_type = "text/plain; version=0.0.4";
    res.body = impl_->metrics->Render(TrainerMetrics::WallClock::now());
    AppendHttpStats(kHttpConnections, {{"metrics", impl_->server.stats()}}, &res.body);
    {
      std::lock_guard lock(impl_->mu);
      impl_->served_version = std::max(impl_->served_version, version);
    }
    impl_->served_cv.notify_all();
    return res;
  });
}

MetricsServer::~MetricsServer() {
  Stop();
}

StatusOr<int> MetricsServer::Start(int port) {
  auto bound = impl_->server.Start("", port);
  if (!bound.ok()) return Unavailable("metrics: " + bound.status().message());
  std::lock_guard lock(impl_->mu);
  impl_->started = true;
  return *bound;
}

bool MetricsServer::WaitUntilServed(uint64_t version,
                                    std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(impl_->mu);
  if (!impl_->started) return false;
  return impl_->served_cv.wait_until(lock, deadline,
                                     [&] { return impl_->served_version >= version; });
}

void MetricsServer::Stop() {
  impl_->server.Stop();
  std::lock_guard lock(impl_->mu);
  impl_->started = false;
}

}  // namespace kubetrain::trainer
