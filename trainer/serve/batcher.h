// Dynamic batching: requests that arrive close together run as one oneDNN batch.
//
// Flow: Submit() queues a request's examples with its callback. One worker thread takes
//   the oldest request, then keeps adding queued requests (in arrival order, whole) while
//   the batch stays within max_batch, waiting for more until max_wait after the oldest
//   one arrived or the batch is full, whichever first. It runs the batch (RunFn) and hands
//   each request its rows of the result. A request larger than max_batch runs alone, in
//   chunks of max_batch.
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

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "trainer/model/batch.h"

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

class Batcher {
 public:
  // Runs examples (1..max_batch rows) into probabilities (rows x outputs).
  using RunFn = std::function<Status(const Batch&, std::vector<float>*)>;
  // The request's probabilities (its rows only), or the batch's error.
  using Done = std::function<void(StatusOr<std::vector<float>>)>;

  Batcher(BatcherOptions options, RunFn run);
  ~Batcher();  // Stop()
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues `examples` (size >= 1). Unavailable when stopping or the queue is full.
  Status Submit(Batch examples, Done done);
  // Runs `examples` on this thread when the queue is empty and no batch is running, and
  // returns its result; nullopt when busy or stopping (then Submit it).
  std::optional<StatusOr<std::vector<float>>> RunNowIfIdle(const Batch& examples);
  // Runs what is queued, then ends the worker. Idempotent.
  void Stop();

  BatcherStats stats() const;

 private:
  struct Item {
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

}  // namespace kubetrain::trainer::serve
