// The parameter-server process: serves one ParamShard to the workers.
//
// Requests (see FrameType in net/transport.h) are served by one thread per worker
// connection. Asynchronous mode applies each push as it arrives. Synchronous mode is a
// barrier per step:
//   Flow: each worker pushes its gradients for step s; the PS sums them; when all
//     num_trainers pushes for s have arrived it applies the mean once and only then
//     answers every push of step s, so no worker pulls for s+1 before the update.
//   Guarantees: with one worker the update sequence is exactly the single-process one. A
//     push re-sent after a reconnect (same worker, same step) is not summed twice.
//   Assumptions: every worker runs the same steps; a worker that dies stalls the others
//     until the job restarts it (the operator's restart policy handles that).
// Serve() returns OK when a Shutdown request arrives (sent by the coordinator once every
// worker has finished), so the PS exits 0 with the job.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "operator/common/status.h"
#include "trainer/net/transport.h"
#include "trainer/ps/shard.h"

namespace kubetrain::trainer {

struct PsServerOptions {
  int shard_index = 0;
  int num_shards = 1;
  int num_trainers = 1;
  bool sync = false;
  std::string checkpoint_dir;
  AuthKey key{};
  size_t total_dense = 0;  // whole model, to refuse workers running another model
};

class PsServer {
 public:
  PsServer(ParamShard* shard, std::unique_ptr<Listener> listener, PsServerOptions options);
  ~PsServer();

  // Accepts and serves connections until a Shutdown request. Thread-safe to call Stop()
  // from another thread.
  Status Serve();
  void Stop();

 private:
  // One connection's buffers for the arrays of a request, copied out of the payload (which
  // does not align them) and reused across requests so a step allocates nothing.
  struct Scratch {
    std::vector<uint64_t> ids;
    std::vector<float> rows;
    std::vector<float> dense;
  };
  void ServeConnection(Connection* conn);
  // Handles one request; sets *shutdown for a Shutdown request. `*rank` is the worker's
  // rank once it has said hello on this connection, else -1.
  Status Handle(Connection& conn, uint8_t type, const std::string& payload, int* rank,
                bool* shutdown, Scratch& scratch);
  Status HandlePush(Connection& conn, const std::string& payload, int rank, Scratch& scratch);

  // Constant after construction.
  ParamShard* const shard_;
  const PsServerOptions o_;
  std::unique_ptr<Listener> listener_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                           // guarded by mu_
  std::set<int> done_;                              // guarded by mu_
  std::vector<std::unique_ptr<Connection>> conns_;  // guarded by mu_
  std::vector<std::thread> threads_;                // guarded by mu_
  // Synchronous aggregation of the current step, guarded by mu_.
  int64_t agg_step_ = -1;
  int agg_count_ = 0;
  std::set<int> agg_ranks_;  // workers whose push for agg_step_ is in the sum
  int64_t applied_step_ = -1;
  std::vector<float> agg_dense_;
  std::unordered_map<uint64_t, std::vector<float>> agg_rows_;
};

}  // namespace kubetrain::trainer
