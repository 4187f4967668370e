#include "trainer/serve/batcher.h"

#include <algorithm>

#include "trainer/model/model.h"

namespace kubetrain::trainer::serve {

using Clock = std::chrono::steady_clock;

Batcher::Batcher(BatcherOptions options, RunFn run) : o_(options), run_(std::move(run)) {
  worker_ = std::thread([this] { Work(); });
}

Batcher::~Batcher() {
  Stop();
}

Status Batcher::Submit(Batch examples, Done done) {
  if (examples.size < 1) return InvalidArgument("no examples");
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
    queue_.push_back(Item{std::move(examples), std::move(done), Clock::now()});
  }
  cv_.notify_one();
  return Status::Ok();
}

std::optional<StatusOr<std::vector<float>>> Batcher::RunNowIfIdle(const Batch& examples) {
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
  const auto start = Clock::now();
  std::vector<float> probs;
  Status status = run_(examples, &probs);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
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

void Batcher::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
}

BatcherStats Batcher::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

void Batcher::Work() {
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
        if (!items.empty() && rows + n > o_.max_batch) break;
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

void Batcher::RunBatch(std::vector<Item>& items) {
  const auto start = Clock::now();
  Batch& batch = batch_;
  const Batch& first = items.front().examples;
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
    status = run_(first, &probs);  // no copy
  } else if (items.size() == 1) {  // larger than a batch: in chunks
    for (int begin = 0; begin < first.size && status.ok(); begin += o_.max_batch) {
      const int n = std::min(o_.max_batch, first.size - begin);
      batch.size = n;
      batch.dense.assign(first.dense.begin() + static_cast<size_t>(begin) * first.num_dense,
                         first.dense.begin() + static_cast<size_t>(begin + n) * first.num_dense);
      batch.cat.assign(first.cat.begin() + static_cast<size_t>(begin) * first.num_cat,
                       first.cat.begin() + static_cast<size_t>(begin + n) * first.num_cat);
      batch.label.assign(n, 0.f);
      status = run_(batch, &chunk_probs);
      probs.insert(probs.end(), chunk_probs.begin(), chunk_probs.end());
    }
  } else {
    for (const Item& it : items) {
      if (it.examples.num_dense != batch.num_dense || it.examples.num_cat != batch.num_cat) {
        status = Internal("requests of different shapes in one batch");
      }
      batch.size += it.examples.size;
      batch.dense.insert(batch.dense.end(), it.examples.dense.begin(), it.examples.dense.end());
      batch.cat.insert(batch.cat.end(), it.examples.cat.begin(), it.examples.cat.end());
    }
    batch.label.assign(batch.size, 0.f);
    if (status.ok()) status = run_(batch, &probs);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
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
