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
// Not thread-safe: one per worker.
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "trainer/net/transport.h"
#include "trainer/worker/params.h"

namespace kubetrain::trainer {

struct RemoteOptions {
  std::vector<std::string> ps_addresses;  // "host:port"
  AuthKey key{};
  int rank = 0;
  std::chrono::milliseconds startup_timeout{std::chrono::minutes(5)};
  std::chrono::milliseconds reconnect_timeout{std::chrono::minutes(5)};
};

class RemoteParams : public ParamClient {
 public:
  static StatusOr<std::unique_ptr<RemoteParams>> Connect(const Model& model, RemoteOptions options);
  ~RemoteParams() override;

  Status Pull(const std::vector<uint64_t>& ids, float* rows, float* dense) override;
  Status Push(int64_t step, const std::vector<uint64_t>& ids, const float* row_grads,
              const float* dense_grad) override;
  // Asks every PS to save its shard, then commits the manifest (see ps/checkpoint.h).
  Status SaveCheckpoint(const std::string& dir, int64_t step) override;

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

 private:
  struct Channel;
  struct Call {
    int ps;
    uint8_t type;
    std::string payload;
    std::string_view payload2;  // large arrays, sent without a copy
    uint8_t reply_type = 0;
    std::string reply;
  };
  RemoteParams(RemoteOptions options, size_t total_dense, int row_dim);
  // Connects (or reconnects) channel `k`, retrying until `deadline`.
  Status EnsureConnected(int k, std::chrono::steady_clock::time_point deadline);
  // Sends all calls, then reads all replies; failed exchanges are retried one by one
  // after reconnecting. A kError reply becomes an error Status.
  Status Exchange(std::vector<Call>& calls);
  // Fills ids_of_[k] / pos_of_[k] with the ids owned by ps-k and their positions in `ids`.
  void GroupByShard(const std::vector<uint64_t>& ids);

  const RemoteOptions o_;
  const size_t total_dense_;
  const int row_dim_;
  const uint64_t incarnation_;
  std::vector<std::unique_ptr<Channel>> channels_;
  int64_t last_ps_step_ = -1;
  std::set<int32_t> finished_;  // ranks any PS reported finished
  // Per-step scratch, kept to avoid reallocating.
  std::vector<std::vector<uint64_t>> ids_of_;
  std::vector<std::vector<int>> pos_of_;
  std::vector<Call> step_calls_;  // Pull's and Push's, one per PS; buffers reused
};

}  // namespace kubetrain::trainer
