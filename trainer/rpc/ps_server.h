// The parameter-server process: serves one ParamShard to the workers.
//
// Requests (payloads in rpc/protocol.h) are served by one thread per worker
// connection. Asynchronous mode applies each push as it arrives, once: a push re-sent after
// a lost connection is acknowledged but not applied again (ps/ledger.h). Synchronous mode is
// a barrier per step:
//   Flow: each worker pushes its gradients for step s; the PS sums them; when all
//     num_trainers pushes for s have arrived it applies the mean once and only then
//     answers every push of step s, so no worker pulls for s+1 before the update.
//   Guarantees: with one worker the update sequence is exactly the single-process one. A
//     push re-sent after a reconnect (same worker, same step) is not summed twice.
//   Assumptions: every worker runs the same steps; a worker that dies stalls the others
//     until the job restarts it (the operator's restart policy handles that).
// Serve() returns OK only when a Shutdown request arrives on an authenticated connection
// (sent by the coordinator once every worker has finished), so the PS exits 0 with the
// job and never otherwise.
//
// SIGTERM (Kubernetes stopping this pod: see stop/stop.h). The checkpoint stays the
// coordinator's to commit, so the PS asks for one instead of saving alone:
//   Flow: once options.stop_requested() is true the PS drains: it keeps serving, and every
//     push reply carries kPushReplyStopping, so the coordinator saves at the end of its
//     step (ps/checkpoint.h: every PS saves its shard, then the coordinator writes the
//     MANIFEST). When this PS has answered such a checkpoint request and the MANIFEST is
//     there, when no worker is connected any more (they were stopped too; the coordinator
//     saved on its own SIGTERM), or after drain_timeout, Serve() returns and
//     stopped_on_signal() is true. Without a checkpoint_dir it returns at once.
//   Guarantees: a checkpoint committed while draining holds every push this PS applied
//     before it answered the request (the coordinator drains its pushes first), and this
//     PS applies nothing after that save: a later push or done (from any worker, the
//     coordinator included) closes its connection unanswered, and new connections are
//     closed at once, so the worker re-sends it to the replacement PS, which restores the
//     saved shard and applies it there once (the ledger knows what the save holds). No
//     update is lost to the stop; only the steps' order across workers may change.
//   Assumptions: the coordinator is alive and pushing to this PS; if not (it was stopped
//     too and is saving, or it is gone), the drain timeout bounds the wait.
//
// Hostile peers: anyone who can reach the port can connect. Connections still in the
// handshake are bounded (max_handshakes) and each gets handshake_timeout in all to prove it
// holds the key; connections in all are bounded (max_connections, by default below the
// process's descriptor limit). A connection over a bound is closed at once, as is one that
// fails its handshake. Accept errors (out of descriptors or memory, aborted connections)
// are transient: Serve() logs them (rate-limited) and carries on.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "trainer/net/transport.h"
#include "trainer/ps/shard.h"
#include "trainer/rpc/protocol.h"

namespace kubetrain::trainer {

struct PsServerOptions {
  int shard_index = 0;
  int num_shards = 1;
  int num_trainers = 1;
  bool sync = false;
  std::string checkpoint_dir;
  AuthKey key{};
  size_t total_dense = 0;  // whole model, to refuse workers running another model
  // 0: the descriptor limit (RLIMIT_NOFILE) less a reserve, at most 4096.
  int max_connections = 0;
  int max_handshakes = 32;
  std::chrono::milliseconds handshake_timeout{10000};
  // SIGTERM (stop/stop.h), polled by the accept loop. Null: never.
  std::function<bool()> stop_requested;
  // How long a PS that got SIGTERM waits for the coordinator's checkpoint request.
  std::chrono::milliseconds drain_timeout{15000};
};

class PsServer {
 public:
  PsServer(ParamShard* shard, std::unique_ptr<Listener> listener, PsServerOptions options);
  ~PsServer();

  // Accepts and serves connections until a Shutdown request, then returns OK. Returns
  // Unavailable when stopped otherwise (Stop(), or a listening socket that broke), so the
  // process does not exit 0 for a job that is not over. Thread-safe to call Stop() from
  // another thread.
  Status Serve();
  void Stop();

  // Connections open now (in the handshake or authenticated); for tests.
  int open_connections();
  // After Serve(): it returned because of SIGTERM; the checkpoint step this PS saved while
  // draining (-1: none).
  bool stopped_on_signal();
  int64_t saved_on_stop();

 private:
  using Clock = std::chrono::steady_clock;
  // One accepted connection and the thread serving it.
  struct Peer {
    std::unique_ptr<Connection> conn;  // under the server's mu_; reset (fd closed) when it ends
    std::thread thread;                // joined by the accept loop once `finished`
    Clock::time_point handshake_deadline;
    bool authenticated = false;  // under the server's mu_
    bool finished = false;       // under the server's mu_
  };
  void ServePeer(Peer* peer);
  // Closes this peer's connection at once and marks it for the accept loop to join.
  void Finish(Peer* peer);
  // Joins finished peers and cuts handshakes past their deadline.
  void ReapAndExpire();
  // One connection's buffers for the arrays of a request, copied out of the payload (which
  // does not align them) and reused across requests so a step allocates nothing.
  struct Scratch {
    std::vector<uint64_t> ids;
    std::vector<float> rows;
    std::vector<float> dense;
    std::string wire;  // a pull reply in BF16
  };
  // Who is on a connection, once it has said hello.
  struct Session {
    int rank = -1;
    uint64_t incarnation = 0;
    WireFloat wire = WireFloat::kF32;  // of its pulls' replies and its pushes
    // Set by a handler that did not apply the request because this PS saved its shard for
    // SIGTERM: the connection is closed unanswered, so the worker re-sends elsewhere.
    bool close_unanswered = false;
  };
  // Handles one request; sets *shutdown for a Shutdown request.
  Status Handle(Connection& conn, uint8_t type, const std::string& payload, Session* session,
                bool* shutdown, Scratch& scratch);
  Status HandlePush(Connection& conn, const std::string& payload, Session* session,
                    Scratch& scratch);
  // SIGTERM seen, by the accept loop or now (a request need not wait for its tick).
  bool Stopping() const { return draining_ || (o_.stop_requested && o_.stop_requested()); }
  // The flags of a push reply: kPushReplyStopping while draining and nothing saved yet.
  std::string PushReplyFlags() const;
  // The accept loop's look at SIGTERM: true when Serve() should return.
  bool DrainDone(Clock::time_point* deadline);

  // Constant after construction.
  ParamShard* const shard_;
  const PsServerOptions o_;
  std::unique_ptr<Listener> listener_;

  Mutex mu_;
  std::condition_variable cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool shutdown_requested_ GUARDED_BY(mu_) = false;
  std::atomic<bool> draining_{false};  // SIGTERM seen; set by the accept loop only
  // A checkpoint was saved while draining: nothing is applied to the shard after it. Set
  // with apply_mu_ held exclusively; read with it held shared around every change to the
  // shard (push, done), so no change lands between the save and the flag.
  std::atomic<bool> drain_saved_{false};
  std::shared_mutex apply_mu_;  // order: mu_ before apply_mu_
  bool stopped_on_signal_ GUARDED_BY(mu_) = false;
  int64_t saved_on_stop_ GUARDED_BY(mu_) = -1;
  std::string saved_on_stop_root_ GUARDED_BY(mu_);
  std::list<std::unique_ptr<Peer>> peers_ GUARDED_BY(mu_);
  int handshakes_ GUARDED_BY(mu_) = 0;  // peers not yet authenticated
  // Synchronous aggregation of the current step.
  int64_t agg_step_ GUARDED_BY(mu_) = -1;
  int agg_count_ GUARDED_BY(mu_) = 0;
  std::set<int> agg_ranks_ GUARDED_BY(mu_);  // workers whose push for agg_step_ is in the sum
  int64_t applied_step_ GUARDED_BY(mu_) = -1;
  std::vector<float> agg_dense_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, std::vector<float>> agg_rows_ GUARDED_BY(mu_);
};

}  // namespace kubetrain::trainer
