// What the trainer puts in its TensorBoard event file (tfevents.h), by tag:
//   train/loss                the mean loss over the steps since the last point
//   train/learning_rate       --lr (the optimizer's; constant)
//   train/samples_per_second  over the steps since the last point
//   ps/sent_bytes, ps/received_bytes   payload bytes to and from the parameter servers
//                             so far (parameter-server mode only)
//   eval/auc (binary models), eval/log_loss, eval/accuracy   each evaluation, at the
//                             step of the model it evaluated (the evaluator: one point per
//                             checkpoint; the coordinator: its final evaluation)
// Values are float32 (TensorBoard's simple_value): byte counters past 2^24 are rounded.
//
// Cost: Step() is a few additions per step; every `every` steps it encodes one Event in
// memory; a write (or an S3 PUT) happens only once per flush interval. Errors of the
// event file never fail training: the first is logged as a warning, later ones counted.
// Not thread-safe: the training loop's thread calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "common/status.h"
#include "trainer/observe/tfevents.h"

namespace kubetrain::trainer::observe {

class TrainingSummaries {
 public:
  using Clock = EventWriter::Clock;
  struct Options {
    int every = 10;  // steps between training points (<= 0: none)
    float learning_rate = 0;
    // Payload bytes sent to / received from the PS so far; null: not in PS mode.
    std::function<std::pair<uint64_t, uint64_t>()> ps_bytes;
    std::function<Clock::time_point()> now;  // default steady_clock
  };
  TrainingSummaries(std::unique_ptr<EventWriter> writer, Options options);
  ~TrainingSummaries() { Flush(); }  // what is pending, at exit
  TrainingSummaries(const TrainingSummaries&) = delete;
  TrainingSummaries& operator=(const TrainingSummaries&) = delete;

  // One training step's loss over `examples` examples.
  void Step(int64_t step, float loss, int examples);
  // One evaluation of the model at `step` (auc: binary models only).
  void Evaluation(int64_t step, std::optional<double> auc, double log_loss, double accuracy);
  // Writes what is pending (at exit; also after each evaluation).
  void Flush();

  const EventWriter& writer() const { return *writer_; }

 private:
  void Check(const Status& s);

  const std::unique_ptr<EventWriter> writer_;
  const Options options_;
  int64_t since_steps_ = 0;
  double since_loss_ = 0;
  int64_t since_examples_ = 0;
  Clock::time_point since_;
  uint64_t errors_ = 0;
};

}  // namespace kubetrain::trainer::observe
