#include "trainer/observe/summaries.h"

#include <spdlog/spdlog.h>

#include <vector>

namespace kubetrain::trainer::observe {

TrainingSummaries::TrainingSummaries(std::unique_ptr<EventWriter> writer, Options options)
    : writer_(std::move(writer)), options_([&] {
        if (!options.now) options.now = [] { return Clock::now(); };
        return std::move(options);
      }()) {
  since_ = options_.now();
}

void TrainingSummaries::Step(int64_t step, float loss, int examples) {
  ++since_steps_;
  since_loss_ += loss;
  since_examples_ += examples;
  if (options_.every <= 0 || step % options_.every != 0) return;
  const auto now = options_.now();
  const double secs = std::chrono::duration<double>(now - since_).count();
  Scalar values[5] = {
      {"train/loss", static_cast<float>(since_loss_ / static_cast<double>(since_steps_))},
      {"train/learning_rate", options_.learning_rate},
      {"train/samples_per_second",
       static_cast<float>(static_cast<double>(since_examples_) / std::max(secs, 1e-9))},
  };
  size_t n = 3;
  if (options_.ps_bytes) {
    const auto [sent, received] = options_.ps_bytes();
    values[n++] = {"ps/sent_bytes", static_cast<float>(sent)};
    values[n++] = {"ps/received_bytes", static_cast<float>(received)};
  }
  writer_->Add(step, std::span<const Scalar>(values, n));
  since_steps_ = since_examples_ = 0;
  since_loss_ = 0;
  since_ = now;
  Check(writer_->MaybeFlush());
}

void TrainingSummaries::Evaluation(int64_t step, std::optional<double> auc, double log_loss,
                                   double accuracy) {
  std::vector<Scalar> values;
  if (auc.has_value()) values.push_back({"eval/auc", static_cast<float>(*auc)});
  values.push_back({"eval/log_loss", static_cast<float>(log_loss)});
  values.push_back({"eval/accuracy", static_cast<float>(accuracy)});
  writer_->Add(step, values);
  Flush();  // evaluations are rare and worth seeing at once
}

void TrainingSummaries::Flush() {
  Check(writer_->Flush());
}

void TrainingSummaries::Check(const Status& s) {
  if (s.ok()) return;
  if (errors_++ == 0) {
    spdlog::warn("TensorBoard events ({}): {}; training goes on", writer_->path(), s.ToString());
  }
}

}  // namespace kubetrain::trainer::observe
