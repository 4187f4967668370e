// Dynamic batching: requests that arrive close together run as one oneDNN batch.
//
// Flow: Submit() queues a request's examples with its callback and the model it was
//   checked against. One worker thread takes the oldest request, then keeps adding queued
//   requests (in arrival order, whole) for the same model while the batch stays within
//   max_batch, waiting for more until max_wait after the oldest one arrived or the batch
//   is full, whichever first. It runs the batch on that model (RunFn) and hands each
//   request its rows of the result. A request larger than max_batch runs alone, in chunks
//   of max_batch.
// Models: a request is computed by the model it was submitted with, never by a newer one
//   swapped in while it waited (so the version an answer names is the one that computed
//   it, and the examples fit that model's layout); a batch never mixes two models, and a
//   request keeps its model alive until it is answered. Model is a template parameter so
//   the tests can batch for a stand-in; kubetrain-serve uses Batcher<Predictor>.
// Guarantees: every accepted request's callback is called exactly once, on the worker
//   thread, also when Stop() comes first (Stop drains: it runs what is queued, then
//   returns). Submit refuses (Unavailable) when stopping or when max_queue examples are
//   waiting already, so a flood queues bounded memory. A batch's error goes to each of its
//   requests. The compute threads are set once on the worker thread (OpenMP's count is per
//   thread).
// RunNowIfIdle is the way around the queue for a lone small request: when nothing is
//   queued and no batch runs, the caller's thread runs it at once (no hand-off to the
//   worker and back, which on a loaded 2-core machine is most of a batch-1 request's tail);
//   the worker does not start a batch meanwhile (one RunFn at a time, as the Predictor
//   needs).
// Thread safety: Submit, RunNowIfIdle and Stop from any thread; stats() from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "trainer/model/batch.h"
#include "trainer/model/model.h"

namespace kubetrain::trainer::serve {

struct BatcherOptions {
  int max_batch = 256;
  std::chrono::microseconds max_wait{1000};
  int64_t max_queue = 4096;  // examples waiting, at most
  int compute_threads = 0;   // 0: leave the worker's OpenMP count alone
};

struct BatcherStats {
  uint64_t batches = 0;
  uint64_t examples = 0;
  uint64_t requests = 0;
  uint64_t refused = 0;
  uint64_t inline_requests = 0;  // run by RunNowIfIdle
  double compute_seconds = 0;    // in RunFn
};

template <typename Model>
class Batcher {
 public:
  // Runs examples (1..max_batch rows) on `model` into probabilities (rows x outputs).
  using RunFn = std::function<Status(Model& model, const Batch&, std::vector<float>*)>;
  // The request's probabilities (its rows only), or the batch's error.
  using Done = std::function<void(StatusOr<std::vector<float>>)>;

  Batcher(BatcherOptions options, RunFn run);
  ~Batcher();  // Stop()
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues `examples` (size >= 1) for `model` (not null). Unavailable when stopping or the
  // queue is full.
  Status Submit(std::shared_ptr<Model> model, Batch examples, Done done);
  // Runs `examples` on `model` on this thread when the queue is empty and no batch is
  // running, and returns its result; nullopt when busy or stopping (then Submit it).
  std::optional<StatusOr<std::vector<float>>> RunNowIfIdle(Model& model, const Batch& examples);
  // Runs what is queued, then ends the worker. Idempotent.
  void Stop();

  BatcherStats stats() const;

 private:
  struct Item {
    std::shared_ptr<Model> model;
    Batch examples;
    Done done;
    std::chrono::steady_clock::time_point arrival;
  };

  void Work();
  void RunBatch(std::vector<Item>& items);

  // Constant after construction.
  const BatcherOptions o_;
  const RunFn run_;

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_ GUARDED_BY(mu_);
  int64_t queued_examples_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool running_ GUARDED_BY(mu_) = false;  // a RunFn runs (worker or RunNowIfIdle)
  BatcherStats stats_ GUARDED_BY(mu_);
  // The worker thread's own buffers, kept across batches so a batch allocates
  // nothing once they have grown to the largest batch seen.
  Batch batch_;
  std::vector<float> probs_, chunk_probs_;
  std::thread worker_;
};

// Implementation.

template <typename Model>
Batcher<Model>::Batcher(BatcherOptions options, RunFn run) : o_(options), run_(std::move(run)) {
  worker_ = std::thread([this] { Work(); });
}

template <typename Model>
Batcher<Model>::~Batcher() {
  Stop();
}

template <typename Model>
Status Batcher<Model>::Submit(std::shared_ptr<Model> model, Batch examples, Done done) {
  if (examples.size < 1) return InvalidArgument("no examples");
  if (model == nullptr) return InvalidArgument("no model");
  {
    MutexLock lock(mu_);
    if (stopping_) {
      ++stats_.refused;
      return Unavailable("the server is shutting down");
    }
    if (queued_examples_ > 0 && queued_examples_ + examples.size > o_.max_queue) {
      ++stats_.refused;
      return Unavailable("too many examples waiting (" + std::to_string(queued_examples_) +
                         "); try again");
    }
    queued_examples_ += examples.size;
    queue_.push_back(Item{std::move(model), std::move(examples), std::move(done),
                          std::chrono::steady_clock::now()});
  }
  cv_.notify_one();
  return Status::Ok();
}

template <typename Model>
std::optional<StatusOr<std::vector<float>>> Batcher<Model>::RunNowIfIdle(Model& model,
                                                                         const Batch& examples) {
  if (examples.size < 1 || examples.size > o_.max_batch) return std::nullopt;
  {
    MutexLock lock(mu_);
    if (stopping_ || running_ || !queue_.empty()) return std::nullopt;
    running_ = true;
  }
  // OpenMP's thread count is per thread: set it once on each thread that computes.
  thread_local int threads_set = 0;
  if (o_.compute_threads > 0 && threads_set != o_.compute_threads) {
    SetComputeThreads(o_.compute_threads);
    threads_set = o_.compute_threads;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<float> probs;
  Status status = run_(model, examples, &probs);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    MutexLock lock(mu_);
    running_ = false;
    ++stats_.batches;
    ++stats_.inline_requests;
    stats_.examples += examples.size;
    ++stats_.requests;
    stats_.compute_seconds += seconds;
  }
  cv_.notify_all();  // the worker may wait for this run to end
  if (!status.ok()) return StatusOr<std::vector<float>>(status);
  return StatusOr<std::vector<float>>(std::move(probs));
}

template <typename Model>
void Batcher<Model>::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
}

template <typename Model>
BatcherStats Batcher<Model>::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

template <typename Model>
void Batcher<Model>::Work() {
  if (o_.compute_threads > 0) SetComputeThreads(o_.compute_threads);
  std::vector<Item> items;
  for (;;) {
    {
      MutexLock lock(mu_);
      cv_.wait(lock.native(),
               [&]() REQUIRES(mu_) { return (stopping_ || !queue_.empty()) && !running_; });
      if (queue_.empty()) return;  // stopping, and drained
      // Wait for company until the oldest request has waited max_wait or the batch is full
      // (not when stopping: drain at once).
      const auto until = queue_.front().arrival + o_.max_wait;
      cv_.wait_until(lock.native(), until,
                     [&]() REQUIRES(mu_) { return stopping_ || queued_examples_ >= o_.max_batch; });
      int64_t rows = 0;
      while (!queue_.empty()) {
        const int n = queue_.front().examples.size;
        if (!items.empty() && (rows + n > o_.max_batch || queue_.front().model != items[0].model)) {
          break;
        }
        rows += n;
        queued_examples_ -= n;
        items.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      running_ = true;
    }
    RunBatch(items);
    items.clear();
    {
      MutexLock lock(mu_);
      running_ = false;
    }
  }
}

template <typename Model>
void Batcher<Model>::RunBatch(std::vector<Item>& items) {
  const auto start = std::chrono::steady_clock::now();
  Batch& batch = batch_;
  const Batch& first = items.front().examples;
  Model& model = *items.front().model;
  batch.num_dense = first.num_dense;
  batch.num_cat = first.num_cat;
  batch.size = 0;
  batch.dense.clear();
  batch.cat.clear();
  std::vector<float>& probs = probs_;
  std::vector<float>& chunk_probs = chunk_probs_;
  probs.clear();
  Status status;
  if (items.size() == 1 && first.size <= o_.max_batch) {
    status = run_(model, first, &probs);  // no copy
  } else if (items.size() == 1) {         // larger than a batch: in chunks
    for (int begin = 0; begin < first.size && status.ok(); begin += o_.max_batch) {
      const int n = std::min(o_.max_batch, first.size - begin);
      batch.size = n;
      batch.dense.assign(first.dense.begin() + static_cast<size_t>(begin) * first.num_dense,
                         first.dense.begin() + static_cast<size_t>(begin + n) * first.num_dense);
      batch.cat.assign(first.cat.begin() + static_cast<size_t>(begin) * first.num_cat,
                       first.cat.begin() + static_cast<size_t>(begin + n) * first.num_cat);
      batch.label.assign(n, 0.f);
      status = run_(model, batch, &chunk_probs);
      probs.insert(probs.end(), chunk_probs.begin(), chunk_probs.end());
    }
  } else {
    for (const Item& it : items) {
      if (it.model != items.front().model || it.examples.num_dense != batch.num_dense ||
          it.examples.num_cat != batch.num_cat) {
        status = Internal("requests of different models or shapes in one batch");
      }
      batch.size += it.examples.size;
      batch.dense.insert(batch.dense.end(), it.examples.dense.begin(), it.examples.dense.end());
      batch.cat.insert(batch.cat.end(), it.examples.cat.begin(), it.examples.cat.end());
    }
    batch.label.assign(batch.size, 0.f);
    if (status.ok()) status = run_(model, batch, &probs);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t total = 0;
  for (const Item& it : items) total += it.examples.size;
  {
    MutexLock lock(mu_);
    ++stats_.batches;
    stats_.examples += total;
    stats_.requests += items.size();
    stats_.compute_seconds += seconds;
  }
  const size_t per_row = total > 0 ? probs.size() / static_cast<size_t>(total) : 0;
  size_t at = 0;
  for (Item& it : items) {
    const size_t n = static_cast<size_t>(it.examples.size) * per_row;
    if (!status.ok() || probs.size() < at + n) {
      it.done(status.ok() ? Internal("the model returned too few outputs") : status);
    } else {
      it.done(std::vector<float>(probs.begin() + at, probs.begin() + at + n));
    }
    at += n;
  }
}

}  // namespace kubetrain::trainer::serve
