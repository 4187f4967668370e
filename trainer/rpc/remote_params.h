// Parameters held by parameter servers, reached over authenticated TCP connections (one
// per PS, kept open for the whole run).
//
// Embedding rows go to PS ShardOfId(id); the dense vector is split in contiguous slices
// (DenseRange). A pull or push sends one request to every PS before reading any reply, so
// the PS work overlaps.
//
// Failures: while connecting at startup, unreachable PS are retried with backoff until
// startup_timeout (DNS for new Services can lag), then Unavailable. A connection lost
// later is re-established with backoff (until reconnect_timeout) and the request re-sent.
// Pushes carry this process's incarnation and a number per PS, so a re-sent push that the
// PS got before the connection broke is acknowledged, not applied twice (ps/ledger.h). A
// wrong key is Unauthenticated after a few refused handshakes (a connection cut during the
// handshake looks the same once): retrying cannot fix it.
//
// Pipelining (options.pipeline, asynchronous training): one background thread does the
// PS requests in the order they were made, so communication overlaps the caller's compute.
//   Flow per step t: Pull(t) takes the rows and dense values prefetched during step t-1;
//     Prefetch(t+1) queues their pull, Push(t) copies the gradients and queues the push;
//     the thread sends push(t-1), then pull(t+1), while the caller computes step t.
//   Guarantees: pushes are numbered in the caller's order when queued (the same numbers a
//     re-send carries), so each is applied once, in order; a pulled step sees every push
//     up to t-1 of this worker (one step stale; other workers' are asynchronous anyway).
//     SaveCheckpoint, MarkDone, DoneCount, ShutdownAll and a Pull without a matching
//     Prefetch first wait until every queued request is done, so a checkpoint of step t
//     holds push t. An error in the thread is returned by the next call and stops it.
//   Assumptions: one caller thread.
//
// Not thread-safe: one per worker.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "trainer/net/transport.h"
#include "trainer/rpc/protocol.h"
#include "trainer/worker/params.h"

namespace kubetrain::trainer {

struct RemoteOptions {
  std::vector<std::string> ps_addresses;  // "host:port"
  AuthKey key{};
  int rank = 0;
  std::chrono::milliseconds startup_timeout{std::chrono::minutes(5)};
  std::chrono::milliseconds reconnect_timeout{std::chrono::minutes(5)};
  // Polled between connection attempts: true ends them with Unavailable (SIGTERM: the
  // process stops instead of waiting for a PS). Null: never.
  std::function<bool()> stop;
  // Overlap communication with compute (see above); for asynchronous training only, where
  // one step of staleness is within what async SGD already tolerates.
  bool pipeline = false;
  // How gradients and pulled parameters travel (rpc/protocol.h): BF16 halves the bytes; the
  // PS keeps FP32 master weights and optimizer state.
  WireFloat wire = WireFloat::kF32;
};

class RemoteParams : public ParamClient {
 public:
  static StatusOr<std::unique_ptr<RemoteParams>> Connect(const Model& model, RemoteOptions options);
  ~RemoteParams() override;

  Status Pull(const std::vector<uint64_t>& ids, float* rows, float* dense) override;
  void Prefetch(const std::vector<uint64_t>& ids) override;
  Status Push(int64_t step, const std::vector<uint64_t>& ids, const float* row_grads,
              const float* dense_grad) override;
  // Asks every PS to save its shard, then commits the manifest (see ps/checkpoint.h).
  Status SaveCheckpoint(const std::string& dir, int64_t step) override;
  // A push reply said its PS got SIGTERM (kPushReplyStopping): true once per such reply
  // seen since the last call. Any thread.
  bool TakeCheckpointRequest() override { return checkpoint_requested_.exchange(false); }

  // Waits until every queued push has been sent and acknowledged (a worker stopping on
  // SIGTERM hands in its last update this way).
  Status Flush() { return Drain(); }
  // Tells every PS this worker has finished; returns DoneCount().
  StatusOr<int> MarkDone();
  // How many workers have finished: every rank any PS reported finished, now or in an
  // earlier call (a PS restored from an older checkpoint may have forgotten some; this
  // process re-tells it, so its next checkpoint has them).
  StatusOr<int> DoneCount();
  // The last synchronous step any PS reported completing when we connected (-1: none).
  int64_t last_ps_step() const { return last_ps_step_; }
  // Asks every PS to exit. A lost connection is re-established and the request re-sent for
  // a short while; a PS that cannot be reached again after the request was sent has most
  // likely exited already.
  Status ShutdownAll();
  // This process's incarnation (random, never 0) and how many pushes it numbered for ps-k.
  uint64_t incarnation() const { return incarnation_; }
  uint64_t pushes_to(int k) const;
  // Summed over the PSes' last checkpoint replies.
  std::optional<EmbeddingStats> embedding_stats() const override;

 private:
  std::optional<EmbeddingStats> embedding_stats_;  // the last SaveCheckpoint's, summed
  struct Channel;
  class Pipeline;
  struct Call {
    int ps;
    uint8_t type;
    std::string payload;
    std::string_view payload2;  // large arrays, sent without a copy
    uint8_t reply_type = 0;
    std::string reply;
  };
  // A pull's requests, one per PS, and where each PS's rows go.
  struct PullJob {
    std::vector<uint64_t> ids;
    std::vector<std::vector<uint64_t>> ids_of;
    std::vector<std::vector<int>> pos_of;
    std::vector<Call> calls;
  };
  // A queued push: its requests and its own copy of the dense gradient (under a BF16 wire
  // the converted copy is in each request's payload instead).
  struct PushJob {
    std::vector<Call> calls;
    std::vector<float> dense;
  };
  RemoteParams(RemoteOptions options, size_t total_dense, int row_dim);
  // Connects (or reconnects) channel `k`, retrying until `deadline`.
  Status EnsureConnected(int k, std::chrono::steady_clock::time_point deadline);
  // Sends all calls, then reads all replies; failed exchanges are retried one by one
  // after reconnecting. A kError reply becomes an error Status.
  Status Exchange(std::vector<Call>& calls);
  // Fills ids_of[k] / pos_of[k] with the ids owned by ps-k and their positions in `ids`.
  void GroupByShard(const std::vector<uint64_t>& ids, std::vector<std::vector<uint64_t>>& ids_of,
                    std::vector<std::vector<int>>& pos_of) const;
  void GroupByShard(const std::vector<uint64_t>& ids) { GroupByShard(ids, ids_of_, pos_of_); }
  // Sends a pull of job.ids and checks the replies; Unpack copies them out.
  Status RunPull(PullJob& job);
  Status Unpack(const PullJob& job, float* rows, float* dense) const;
  // Points a push's request at the dense gradient's slice for `ch` (f32), or appends the
  // slice converted to the wire type to its payload.
  void SetPushDense(const float* dense_grad, const Channel& ch, Call& call) const;
  // Waits until the pipeline has done every queued request (OK without a pipeline).
  Status Drain();

  const RemoteOptions o_;
  const size_t total_dense_;
  const int row_dim_;
  const uint64_t incarnation_;
  std::vector<std::unique_ptr<Channel>> channels_;
  int64_t last_ps_step_ = -1;
  std::atomic<bool> checkpoint_requested_{false};  // set by Exchange (the pipeline's thread)
  std::set<int32_t> finished_;                     // ranks any PS reported finished
  // Per-step scratch, kept to avoid reallocating.
  std::vector<std::vector<uint64_t>> ids_of_;
  std::vector<std::vector<int>> pos_of_;
  std::vector<Call> step_calls_;  // Pull's and Push's, one per PS; buffers reused
  PullJob pull_job_;              // Pull's, on the caller's thread

  // Pipelining (null without it). The prefetch job is the thread's from Prefetch until the
  // caller waited for its ticket; push jobs go back to the pool once sent.
  std::unique_ptr<Pipeline> pipe_;
  PullJob prefetch_;
  uint64_t prefetch_ticket_ = 0;  // 0: no prefetch queued
  Mutex pool_mu_;
  std::vector<std::shared_ptr<PushJob>> push_pool_ GUARDED_BY(pool_mu_);
};

}  // namespace kubetrain::trainer
