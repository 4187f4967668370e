#include "trainer/worker/train.h"

#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <numeric>

#include "trainer/data/eval_metrics.h"
#include "trainer/data/read_ahead.h"
#include "trainer/metrics/metrics.h"
#include "trainer/ps/checkpoint.h"

namespace kubetrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// CPU seconds used by every thread of this process so far.
double ProcessCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Wall-clock and process CPU seconds from the last Start() or End(), added to a phase's.
class PhaseLap {
 public:
  void Start() {
    wall_ = Clock::now();
    cpu_ = ProcessCpuSeconds();
  }
  void End(double* wall, double* cpu) {
    const auto now = Clock::now();
    const double cpu_now = ProcessCpuSeconds();
    *wall += Seconds(now - wall_);
    *cpu += cpu_now - cpu_;
    wall_ = now;
    cpu_ = cpu_now;
  }

 private:
  Clock::time_point wall_;
  double cpu_ = 0;
};

// Points `model` at the parameter client's own dense parameters, when it keeps them in this
// process, for the guard's life (no 4.4 MB copy per step for Wide & Deep); on exit the model
// gets its own copy of their values back.
class DenseBinding {
 public:
  DenseBinding(Model& model, ParamClient& params)
      : model_(model), in_place_(params.DenseInPlace()) {
    if (in_place_ != nullptr) model_.UseDenseParams(in_place_);
  }
  ~DenseBinding() {
    if (in_place_ == nullptr) return;
    std::copy_n(in_place_, model_.dense_params().size(), model_.dense_params().data());
    model_.UseDenseParams(nullptr);
  }
  DenseBinding(const DenseBinding&) = delete;
  DenseBinding& operator=(const DenseBinding&) = delete;

  // Where Pull writes the dense values: nowhere when the model reads the client's.
  float* pull_target() const {
    return in_place_ != nullptr ? nullptr : model_.dense_params().data();
  }

 private:
  Model& model_;
  float* const in_place_;
};

// Hands the model's dense gradient to the parameter client slice by slice during each step
// when the client takes it so (ParamClient::UpdatesDenseInSlices: one process), for the
// guard's life: each layer's optimizer update then runs right after its backward pass, on a
// gradient still in cache, instead of one pass over all of them in Push.
class DenseSlices {
 public:
  DenseSlices(Model& model, ParamClient& params)
      : model_(model), on_(params.UpdatesDenseInSlices()) {
    if (!on_) return;
    model_.SetDenseGradReady([&model, &params](size_t begin, size_t end) {
      params.UpdateDense(model.dense_grads().data(), begin, end);
    });
  }
  ~DenseSlices() {
    if (on_) model_.SetDenseGradReady(nullptr);
  }
  DenseSlices(const DenseSlices&) = delete;
  DenseSlices& operator=(const DenseSlices&) = delete;

  bool on() const { return on_; }

 private:
  Model& model_;
  const bool on_;
};

// The live rates served on /metrics cover about this long.
constexpr auto kRateWindow = std::chrono::seconds(2);

}  // namespace

StatusOr<TrainResult> Train(Model& model, StripeReader& reader, ParamClient& params,
                            const TrainOptions& o, int64_t start_step) {
  TrainResult result;
  result.last_step = start_step;
  FILE* curve = nullptr;
  if (!o.loss_curve_path.empty()) {
    curve = std::fopen(o.loss_curve_path.c_str(), "a");
    if (curve == nullptr)
      return InvalidArgument("cannot open loss curve file " + o.loss_curve_path);
  }
  // Batches rotate through three slots: step t's (computing), step t+1's (read, its ids
  // given to params.Prefetch before step t's push, so a pipelined client fetches them
  // meanwhile) and step t+2's (being read on the ReadAhead thread while step t computes).
  // No batch past o.steps is read, so a reader handed to the next Train call continues
  // where this one stopped.
  constexpr int kSlots = 3;
  Batch batches[kSlots];
  SparseLookup lookups[kSlots];
  Status read_status[kSlots];  // of each slot's batch; reported at its step
  const auto slot = [](int64_t step) { return static_cast<int>(step % kSlots); };
  ReadAhead ahead(reader, model.batch_size());
  int64_t in_flight = 0;  // the step whose batch ahead is reading; 0: none
  const auto start_read = [&](int64_t s) {
    ahead.Start(&batches[slot(s)], &lookups[slot(s)]);
    in_flight = s;
  };
  const auto wait_read = [&] {
    read_status[slot(in_flight)] = ahead.Wait().status();
    in_flight = 0;
  };
  std::vector<float> rows, row_grads;
  std::deque<float> recent;
  double recent_sum = 0;
  const auto start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  auto window_start = start;
  int64_t window_samples = 0;
  TrainerMetrics& live = TrainerMetrics::Global();
  live.StartTraining(start_step, o.steps);
  auto rate_start = start;
  int64_t rate_samples = 0, rate_steps = 0;
  Status status;
  TrainResult::Phases& phases = result.phases;
  PhaseLap lap;
  const DenseBinding dense(model, params);
  const DenseSlices slices(model, params);
  if (o.stop && o.stop()) {
    result.stopped = true;  // nothing trained since the checkpoint this run started from
  } else if (start_step < o.steps) {
    start_read(start_step + 1);
  }
  for (int64_t step = start_step + 1; step <= o.steps && !result.stopped; ++step) {
    // The read phase is the time this loop waits for data, not what reading costs.
    lap.Start();
    if (in_flight == step) wait_read();
    if (!read_status[slot(step)].ok()) {
      status = read_status[slot(step)];
      break;
    }
    const Batch& batch = batches[slot(step)];
    const SparseLookup& lookup = lookups[slot(step)];
    // The next batch is read while this step pulls (only the first step gets here with
    // nothing in flight).
    if (in_flight == 0 && step < o.steps) start_read(step + 1);
    rows.resize(lookup.ids.size() * model.SparseRowDim());
    row_grads.resize(rows.size());
    lap.End(&phases.read, &phases.read_cpu);
    status = params.Pull(lookup.ids, rows.data(), dense.pull_target());
    if (!status.ok()) break;
    lap.End(&phases.pull, &phases.pull_cpu);
    if (in_flight == step + 1) {
      wait_read();
      if (read_status[slot(step + 1)].ok()) {
        params.Prefetch(lookups[slot(step + 1)].ids);
        if (step + 2 <= o.steps) start_read(step + 2);
      }
      lap.End(&phases.read, &phases.read_cpu);
    }
    if (slices.on()) params.BeginDenseUpdate();
    auto loss = model.TrainStep(batch, lookup, rows.data(), row_grads.data());
    lap.End(&phases.compute, &phases.compute_cpu);
    if (!loss.ok()) {
      status = loss.status();
      break;
    }
    if (!std::isfinite(*loss)) {
      status = InvalidArgument("loss is " + std::to_string(*loss) + " at step " +
                               std::to_string(step) + " (learning rate too high?)");
      break;
    }
    status = params.Push(step, lookup.ids, row_grads.data(),
                         slices.on() ? nullptr : model.dense_grads().data());
    if (!status.ok()) break;
    lap.End(&phases.push, &phases.push_cpu);

    result.losses.push_back(*loss);
    result.last_step = step;
    recent.push_back(*loss);
    recent_sum += *loss;
    if (recent.size() > 100) {
      recent_sum -= recent.front();
      recent.pop_front();
    }
    window_samples += batch.size;
    rate_samples += batch.size;
    ++rate_steps;
    live.SetStep(step, recent_sum / recent.size());
    if (o.on_step) o.on_step(step, *loss, batch.size);
    if (const auto now = Clock::now(); now - rate_start >= kRateWindow) {
      const double dt = Seconds(now - rate_start);
      live.SetRates(rate_samples / dt, rate_steps / dt);
      rate_start = now;
      rate_samples = rate_steps = 0;
    }
    if (curve != nullptr) std::fprintf(curve, "%lld,%.9g\n", static_cast<long long>(step), *loss);
    if (o.log_every > 0 && (step % o.log_every == 0 || step == o.steps)) {
      const auto now = Clock::now();
      spdlog::info("step {} loss {:.5f} (mean of last {}: {:.5f}) {:.0f} samples/s", step, *loss,
                   recent.size(), recent_sum / recent.size(),
                   window_samples / std::max(1e-9, Seconds(now - window_start)));
      window_start = now;
      window_samples = 0;
    }
    bool stop = o.stop && o.stop();
    const bool asked = o.save_now && o.save_now();
    const bool periodic =
        o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && step != o.steps;
    if (!o.checkpoint_dir.empty() && (periodic || stop || asked)) {
      const auto save_start = Clock::now();
      spdlog::info("saving checkpoint {}", step);
      status = params.SaveCheckpoint(o.checkpoint_dir, step);
      if (!status.ok()) break;
      result.last_saved = step;
      spdlog::info("checkpoint {} committed in {}{} ({:.0f} ms)", step, o.checkpoint_dir,
                   stop    ? " on SIGTERM"
                   : asked ? " (a parameter server got SIGTERM)"
                           : "",
                   Seconds(Clock::now() - save_start) * 1000);
      live.CheckpointCommitted(step, std::chrono::system_clock::now());
      if (o.checkpoint_keep_chains > 0) {
        auto pruned = PruneCheckpointChains(o.checkpoint_dir, o.checkpoint_keep_chains);
        if (!pruned.ok()) {
          spdlog::warn("old checkpoints in {} not deleted: {}", o.checkpoint_dir,
                       pruned.status().ToString());
        }
      }
      // SIGTERM during this save: the checkpoint just committed is the step reached.
      stop = stop || (o.stop && o.stop());
    }
    if (stop) {
      result.stopped = true;
      break;
    }
  }
  if (curve != nullptr) std::fclose(curve);
  if (!status.ok()) return status;
  const double elapsed = Seconds(Clock::now() - start);
  const double samples = static_cast<double>(result.losses.size()) * model.batch_size();
  result.samples_per_s = samples / std::max(1e-9, elapsed);
  result.samples_per_cpu_s = samples / std::max(1e-9, ProcessCpuSeconds() - cpu_start);
  result.last_loss = recent.empty() ? 0 : recent_sum / recent.size();
  return result;
}

StatusOr<EvalMetrics> Evaluate(Model& model, StripeReader& reader, ParamClient& params,
                               int64_t max_examples) {
  const int outputs = model.num_outputs();
  std::vector<float> scores, labels, probs(static_cast<size_t>(model.batch_size()) * outputs);
  std::vector<float> rows;
  double nll = 0;
  int64_t right = 0;
  Batch batch;
  SparseLookup lookup;
  const DenseBinding dense(model, params);
  while (max_examples <= 0 || static_cast<int64_t>(labels.size()) < max_examples) {
    KT_ASSIGN_OR_RETURN(const int real, reader.Next(model.batch_size(), &batch));
    if (real == 0) break;
    // A short final batch is padded; the padding is not scored.
    if (real < model.batch_size()) PadBatch(batch, real, model.batch_size());
    lookup.Assign(batch);
    rows.resize(lookup.ids.size() * model.SparseRowDim());
    KT_RETURN_IF_ERROR(params.Pull(lookup.ids, rows.data(), dense.pull_target()));
    KT_RETURN_IF_ERROR(model.Predict(batch, lookup, rows.data(), probs.data()));
    for (int s = 0; s < real; ++s) {
      if (max_examples > 0 && static_cast<int64_t>(labels.size()) >= max_examples) break;
      labels.push_back(batch.label[s]);
      if (outputs == 1) {
        scores.push_back(probs[s]);
      } else {
        const float* p = probs.data() + static_cast<size_t>(s) * outputs;
        const int y = static_cast<int>(batch.label[s]);
        nll -= std::log(std::max(p[y], 1e-7f));
        right += std::max_element(p, p + outputs) - p == y;
      }
    }
  }
  EvalMetrics m;
  m.examples = static_cast<int64_t>(labels.size());
  if (m.examples == 0) return InvalidArgument("no evaluation examples");
  if (outputs == 1) {
    m.auc = Auc(scores.data(), labels.data(), labels.size());
    m.log_loss = BinaryLogLoss(scores.data(), labels.data(), labels.size());
    m.accuracy = BinaryAccuracy(scores.data(), labels.data(), labels.size());
  } else {
    m.log_loss = nll / m.examples;
    m.accuracy = static_cast<double>(right) / m.examples;
  }
  return m;
}

}  // namespace kubetrain::trainer
