#include "trainer/rpc/ps_server.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>

#include "common/storage/files.h"
#include "trainer/metrics/metrics.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/rpc/protocol.h"

namespace kubetrain::trainer {

namespace {

// Lets the first few events of each window be logged and counts the rest, so a flood of
// hostile connections cannot flood the log. Thread-safe.
class LogLimiter {
 public:
  explicit LogLimiter(const char* what) : what_(what) {}
  // True if this event may be logged in full. Reports the events held back in the window
  // that just ended.
  bool Allow() {
    MutexLock lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - window_start_ > kWindow) {
      if (suppressed_ > 0) {
        spdlog::warn("{} more {} in the last {} s", suppressed_, what_,
                     std::chrono::duration_cast<std::chrono::seconds>(now - window_start_).count());
      }
      window_start_ = now;
      logged_ = suppressed_ = 0;
    }
    if (logged_ < kBurst) {
      ++logged_;
      return true;
    }
    ++suppressed_;
    return false;
  }

 private:
  static constexpr int kBurst = 5;
  static constexpr auto kWindow = std::chrono::seconds(10);
  const char* const what_;
  Mutex mu_;
  std::chrono::steady_clock::time_point window_start_ GUARDED_BY(mu_){};
  int logged_ GUARDED_BY(mu_) = 0, suppressed_ = 0;
};

LogLimiter refused_log("refused connections");
LogLimiter busy_log("connections closed at the connection limits");
LogLimiter accept_log("accept errors");
LogLimiter resend_log("connections closed after the SIGTERM save");

int DefaultMaxConnections() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 4096;
  // Keep descriptors for checkpoint files, the log, the listener and the spare.
  const long usable = static_cast<long>(rl.rlim_cur) - 64;
  return static_cast<int>(std::clamp<long>(usable, 8, 4096));
}

}  // namespace

PsServer::PsServer(ParamShard* shard, std::unique_ptr<Listener> listener, PsServerOptions options)
    : shard_(shard), o_(std::move(options)), listener_(std::move(listener)) {}

PsServer::~PsServer() {
  Stop();
  std::list<std::unique_ptr<Peer>> peers;
  {
    MutexLock lock(mu_);
    peers.swap(peers_);
  }
  for (auto& p : peers) {
    if (p->thread.joinable()) p->thread.join();
  }
}

void PsServer::Stop() {
  MutexLock lock(mu_);
  stopping_ = true;
  listener_->Close();
  for (auto& p : peers_) {
    if (p->conn) p->conn->Shutdown();
  }
  cv_.notify_all();
}

int PsServer::open_connections() {
  MutexLock lock(mu_);
  int n = 0;
  for (const auto& p : peers_) n += p->conn != nullptr;
  return n;
}

void PsServer::ReapAndExpire() {
  std::vector<std::unique_ptr<Peer>> done;
  {
    MutexLock lock(mu_);
    const auto now = Clock::now();
    for (auto it = peers_.begin(); it != peers_.end();) {
      Peer& p = **it;
      if (p.finished) {
        done.push_back(std::move(*it));
        it = peers_.erase(it);
        continue;
      }
      // Cut a handshake that takes too long; its thread then fails and finishes.
      if (!p.authenticated && p.conn && now > p.handshake_deadline) p.conn->Shutdown();
      ++it;
    }
  }
  for (auto& p : done) p->thread.join();
}

Status PsServer::Serve() {
  const int max_connections = o_.max_connections > 0 ? o_.max_connections : DefaultMaxConnections();
  const int max_handshakes = std::max(1, std::min(o_.max_handshakes, max_connections));
  spdlog::info(
      "serving {} dense parameters and embedding rows of {} floats on port {} (at most {} "
      "connections, {} in the handshake)",
      shard_->dense_size(), shard_->sparse_dim(), listener_->port(), max_connections,
      max_handshakes);
  // Handshake deadlines and SIGTERM are checked at least this often.
  const auto tick = std::clamp<std::chrono::milliseconds>(
      o_.handshake_timeout / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(50));
  Status result = Status::Ok();
  Clock::time_point drain_deadline{};
  while (true) {
    ReapAndExpire();
    if (DrainDone(&drain_deadline)) break;
    auto conn = listener_->AcceptFor(tick);
    if (!conn.ok()) {
      {
        MutexLock lock(mu_);
        if (stopping_) break;
      }
      if (conn.status().code() == StatusCode::kResourceExhausted) {
        if (accept_log.Allow()) spdlog::warn("{} (continuing)", conn.status().message());
        // The pending connection was shed; if even that failed, do not spin.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // back-off
        continue;
      }
      result =
          Unavailable("parameter server cannot accept connections: " + conn.status().ToString());
      break;
    }
    if (*conn == nullptr) continue;  // timeout: reap and check deadlines
    MutexLock lock(mu_);
    if (stopping_) break;
    // Saved for SIGTERM: a worker that reconnects here would only be closed again; it
    // retries (with backoff) until the replacement PS answers at this address.
    if (drain_saved_) continue;
    if (handshakes_ >= max_handshakes || static_cast<int>(peers_.size()) >= max_connections) {
      if (busy_log.Allow()) {
        spdlog::warn("closing connection from {}: {} connections open, {} in the handshake",
                     (*conn)->peer(), peers_.size(), handshakes_);
      }
      continue;  // *conn goes out of scope: closed at once
    }
    auto peer = std::make_unique<Peer>();
    peer->conn = std::move(*conn);
    peer->handshake_deadline = Clock::now() + o_.handshake_timeout;
    Peer* p = peer.get();
    ++handshakes_;
    peers_.push_back(std::move(peer));
    p->thread = std::thread([this, p] { ServePeer(p); });
  }
  Stop();
  std::list<std::unique_ptr<Peer>> peers;
  {
    MutexLock lock(mu_);
    peers.swap(peers_);
  }
  for (auto& p : peers) p->thread.join();
  MutexLock lock(mu_);
  if (shutdown_requested_) return Status::Ok();
  if (!result.ok()) return result;
  return Unavailable("parameter server stopped before the job asked it to shut down");
}

std::string PsServer::PushReplyFlags() const {
  if (Stopping() && !drain_saved_) return std::string(1, kPushReplyStopping);
  return {};
}

bool PsServer::DrainDone(Clock::time_point* deadline) {
  if (!draining_) {
    if (!o_.stop_requested || !o_.stop_requested()) return false;
    draining_ = true;
    *deadline = Clock::now() + o_.drain_timeout;
    if (o_.checkpoint_dir.empty()) {
      spdlog::warn(
          "SIGTERM: no --checkpoint-dir, stopping now; this shard's training is lost (the job "
          "starts over)");
      MutexLock lock(mu_);
      stopped_on_signal_ = true;
      return true;
    }
    spdlog::info("SIGTERM: serving until the coordinator's checkpoint request (at most {} ms)",
                 o_.drain_timeout.count());
    return false;
  }
  int64_t step;
  std::string root;
  int workers = 0;  // authenticated connections still open
  {
    MutexLock lock(mu_);
    step = saved_on_stop_;
    root = saved_on_stop_root_;
    for (const auto& p : peers_) workers += p->authenticated && p->conn != nullptr;
  }
  if (step >= 0) {
    // The shard is written; the coordinator commits it with the MANIFEST right after.
    auto committed = storage::ObjectExists(ManifestPath(root, step));
    if (committed.ok() && *committed) {
      spdlog::info("SIGTERM: checkpoint {} committed; stopping", step);
    } else if (Clock::now() > *deadline) {
      spdlog::warn("SIGTERM: saved shard {} but no MANIFEST within the drain timeout; stopping",
                   step);
    } else {
      return false;
    }
  } else if (workers == 0) {
    // Every worker left (they got SIGTERM too: the coordinator's save on its own SIGTERM
    // may have come just before this PS saw the signal): nobody is left to ask.
    spdlog::info("SIGTERM: no worker connected, nobody left to ask for a checkpoint; stopping");
  } else if (Clock::now() > *deadline) {
    spdlog::warn(
        "SIGTERM: no checkpoint request within {} ms (is the coordinator gone?); stopping; this "
        "shard's updates since the last checkpoint are lost",
        o_.drain_timeout.count());
  } else {
    return false;
  }
  MutexLock lock(mu_);
  stopped_on_signal_ = true;
  return true;
}

bool PsServer::stopped_on_signal() {
  MutexLock lock(mu_);
  return stopped_on_signal_;
}

int64_t PsServer::saved_on_stop() {
  MutexLock lock(mu_);
  return saved_on_stop_;
}

void PsServer::Finish(Peer* peer) {
  MutexLock lock(mu_);
  if (!peer->authenticated) --handshakes_;
  peer->conn.reset();
  peer->finished = true;
}

void PsServer::ServePeer(Peer* peer) {
  Connection* conn;
  {
    MutexLock lock(mu_);
    conn = peer->conn.get();
  }
  Status s = conn->AuthenticateAsServer(o_.key);
  if (!s.ok()) {
    if (refused_log.Allow())
      spdlog::warn("refused connection from {}: {}", conn->peer(), s.message());
    Finish(peer);
    return;
  }
  {
    MutexLock lock(mu_);
    peer->authenticated = true;
    --handshakes_;
  }
  uint8_t type;
  std::string payload;
  Scratch scratch;
  Session session;
  while (true) {
    s = conn->Receive(&type, &payload);
    if (!s.ok()) {
      if (s.code() == StatusCode::kUnauthenticated) {
        spdlog::warn("dropping {}: {}", conn->peer(), s.message());
      }
      break;
    }
    bool shutdown = false;
    s = Handle(*conn, type, payload, &session, &shutdown, scratch);
    if (session.close_unanswered) {
      if (resend_log.Allow()) {
        spdlog::info(
            "closing {} unanswered: this PS saved its shard for SIGTERM and applies "
            "nothing more; the worker re-sends to the replacement",
            conn->peer());
      }
      break;
    }
    if (!s.ok()) {
      spdlog::warn("request {} from {} failed: {}", type, conn->peer(), s.ToString());
      if (!conn->Send(kError, s.ToString()).ok()) break;
    }
    if (shutdown) {
      spdlog::info("shutdown requested by {}", conn->peer());
      {
        MutexLock lock(mu_);
        shutdown_requested_ = true;
      }
      // Stop() from this thread would join nothing; it only wakes the accept loop.
      Stop();
      break;
    }
  }
  Finish(peer);
}

Status PsServer::Handle(Connection& conn, uint8_t type, const std::string& payload,
                        Session* session, bool* shutdown, Scratch& scratch) {
  const int dim = shard_->sparse_dim();
  switch (type) {
    case kHello: {
      HelloRequest hello;
      if (!DecodeHello(payload, &hello)) return InvalidArgument("bad hello");
      if (hello.version != kPsProtocolVersion) {
        return FailedPrecondition("worker " + std::to_string(hello.rank) +
                                  " speaks PS protocol version " + std::to_string(hello.version) +
                                  "; this PS speaks " + std::to_string(kPsProtocolVersion) +
                                  " (all replicas must run the same trainer version)");
      }
      if (hello.total_dense != o_.total_dense || hello.row_dim != dim) {
        return FailedPrecondition(
            "worker " + std::to_string(hello.rank) + " runs a model with " +
            std::to_string(hello.total_dense) + " dense parameters and rows of " +
            std::to_string(hello.row_dim) + "; this PS has " + std::to_string(o_.total_dense) +
            " and " + std::to_string(dim) + " (are all replicas started with the same flags?)");
      }
      session->rank = hello.rank;
      session->incarnation = hello.incarnation;
      session->wire = hello.wire;
      shard_->Hello(hello.rank, hello.incarnation);
      // Tell the worker the last step this PS completed, so a worker restarted in
      // synchronous mode joins the step the others are on instead of replaying old ones.
      int64_t last_step;
      {
        MutexLock lock(mu_);
        last_step = applied_step_;
      }
      return conn.Send(kOk, EncodeHelloReply(last_step));
    }
    case kPull: {
      PullRequest pull;
      if (!DecodePull(payload, &pull)) return InvalidArgument("bad pull");
      const uint32_t n = pull.n;
      const bool want_dense = pull.want_dense;
      std::vector<uint64_t>& ids = scratch.ids;
      ids.resize(n);
      if (n > 0) std::memcpy(ids.data(), pull.ids, n * 8ull);  // else data() may be null
      std::vector<float>& out = scratch.rows;
      out.resize(static_cast<size_t>(n) * dim + (want_dense ? shard_->dense_size() : 0));
      if (n > 0) shard_->PullSparse(ids.data(), n, out.data());
      if (want_dense) shard_->PullDense(out.data() + static_cast<size_t>(n) * dim);
      if (session->wire != WireFloat::kF32) {
        scratch.wire.clear();
        PutWireFloats(out.data(), out.size(), session->wire, &scratch.wire);
        return conn.Send(kPullReply, scratch.wire);
      }
      return conn.Send(kPullReply,
                       std::string_view(reinterpret_cast<const char*>(out.data()), out.size() * 4));
    }
    case kPush:
      return HandlePush(conn, payload, session, scratch);
    case kCheckpoint: {
      int64_t step;
      std::string root;
      if (!DecodeCheckpoint(payload, &step, &root)) {
        return InvalidArgument("bad checkpoint request");
      }
      // The coordinator names the root (its checkpoint dir, or the final model's); an
      // older coordinator sends none and this PS's --checkpoint-dir is used.
      if (root.empty()) root = o_.checkpoint_dir;
      if (root.empty()) {
        return FailedPrecondition("this PS was started without --checkpoint-dir");
      }
      KT_RETURN_IF_ERROR(PrepareCheckpointDir(root, step));
      const bool stopping = Stopping();
      StatusOr<ShardDigest> digest = Internal("checkpoint not saved");
      {
        // Draining: the save is this shard's last state; nothing is applied after it.
        std::unique_lock<std::shared_mutex> frozen(apply_mu_, std::defer_lock);
        if (stopping) frozen.lock();
        digest = shard_->SaveCheckpoint(root, step, o_.shard_index, o_.num_shards);
        if (digest.ok() && stopping) drain_saved_ = true;
      }
      if (!digest.ok()) return digest.status();
      if (stopping) {
        MutexLock lock(mu_);
        saved_on_stop_ = step;
        saved_on_stop_root_ = root;
        cv_.notify_all();  // synchronous pushes waiting for a step that will not be applied here
      }
      // The coordinator records what was written in the MANIFEST.
      return conn.Send(kOk, EncodeCheckpointReply(*digest, shard_->embedding_stats()));
    }
    case kDone: {
      int32_t done_rank;
      if (!DecodeDone(payload, &done_rank)) return InvalidArgument("bad done");
      // Kept in the shard's ledger, so a checkpoint remembers who finished.
      if (done_rank >= 0) {
        std::shared_lock apply(apply_mu_);
        if (drain_saved_) {
          session->close_unanswered = true;
          return Status::Ok();
        }
        shard_->MarkFinished(done_rank);
      }
      return conn.Send(kDoneReply, EncodeDoneReply(shard_->Finished()));
    }
    case kShutdown:
      *shutdown = true;
      return conn.Send(kOk, "");
    default:
      return InvalidArgument("unknown request type " + std::to_string(type));
  }
}

Status PsServer::HandlePush(Connection& conn, const std::string& payload, Session* session_ptr,
                            Scratch& scratch) {
  Session& session = *session_ptr;
  const int dim = shard_->sparse_dim();
  const int rank = session.rank;
  if (rank < 0) return FailedPrecondition("push before hello");
  PushRequest push;
  if (!DecodePush(payload, dim, shard_->dense_size(), session.wire, &push)) {
    return InvalidArgument("bad push");
  }
  const int64_t step = push.step;
  const uint32_t n = push.n;
  const bool has_dense = push.dense != nullptr;
  std::vector<uint64_t>& ids = scratch.ids;
  ids.resize(n);
  if (n > 0) std::memcpy(ids.data(), push.ids, n * 8ull);  // else data() may be null
  std::vector<float>& rows = scratch.rows;
  rows.resize(static_cast<size_t>(n) * dim);
  GetWireFloats(push.rows, rows.size(), session.wire, rows.data());
  std::vector<float>& dense = scratch.dense;
  dense.resize(has_dense ? shard_->dense_size() : 0);
  if (has_dense) GetWireFloats(push.dense, dense.size(), session.wire, dense.data());
  if (!o_.sync) {
    std::shared_lock apply(apply_mu_);
    if (drain_saved_) {
      session.close_unanswered = true;
      return Status::Ok();
    }
    const PushLedger::Outcome outcome =
        shard_->ApplyPush(rank, session.incarnation, push.seq, has_dense ? dense.data() : nullptr,
                          ids.data(), n, rows.data());
    if (outcome == PushLedger::Outcome::kUnknown) {
      return FailedPrecondition("push from a forgotten incarnation of worker " +
                                std::to_string(rank) + " (it restarted " +
                                std::to_string(PushLedger::kIncarnationsPerRank) +
                                " times since): not applied");
    }
    TrainerMetrics::Global().AddPsPushes(outcome == PushLedger::Outcome::kApply);
    return conn.Send(kOk, PushReplyFlags());
  }

  MutexLock lock(mu_);
  if (drain_saved_) {
    session.close_unanswered = true;
    return Status::Ok();
  }
  if (step <= applied_step_) {
    // A re-sent push for a step already applied (the reply was lost with the connection).
    lock.Unlock();
    shard_->CountPush(rank, /*applied=*/false);
    TrainerMetrics::Global().AddPsPushes(/*applied=*/false);
    return conn.Send(kOk, PushReplyFlags());
  }
  if (agg_count_ == 0) {
    agg_step_ = step;
    agg_dense_.assign(shard_->dense_size(), 0.f);
    agg_rows_.clear();
    agg_ranks_.clear();
  } else if (step != agg_step_) {
    return FailedPrecondition("synchronous step mismatch: got a push for step " +
                              std::to_string(step) + " while aggregating step " +
                              std::to_string(agg_step_));
  }
  if (!agg_ranks_.insert(rank).second) {
    // Re-sent after a reconnect: already in the sum; just wait for the step.
    shard_->CountPush(rank, /*applied=*/false);
    TrainerMetrics::Global().AddPsPushes(/*applied=*/false);
    cv_.wait(lock.native(),
             [&]() REQUIRES(mu_) { return applied_step_ >= step || stopping_ || drain_saved_; });
    if (applied_step_ < step && drain_saved_) {
      session.close_unanswered = true;
      return Status::Ok();
    }
    if (stopping_) return Unavailable("parameter server is stopping");
    lock.Unlock();
    return conn.Send(kOk, PushReplyFlags());
  }
  shard_->CountPush(rank, /*applied=*/true);
  TrainerMetrics::Global().AddPsPushes(/*applied=*/true);
  for (size_t i = 0; i < dense.size(); ++i) agg_dense_[i] += dense[i];
  for (uint32_t i = 0; i < n; ++i) {
    auto& acc = agg_rows_[ids[i]];
    if (acc.empty()) acc.assign(dim, 0.f);
    for (int k = 0; k < dim; ++k) acc[k] += rows[static_cast<size_t>(i) * dim + k];
  }
  std::shared_lock<std::shared_mutex> apply(apply_mu_, std::defer_lock);
  if (++agg_count_ == o_.num_trainers) {
    apply.lock();
    if (drain_saved_) {  // saved for SIGTERM while this push was on its way in
      session.close_unanswered = true;
      cv_.notify_all();
      return Status::Ok();
    }
    std::vector<uint64_t> all_ids;
    std::vector<float> all_rows;
    all_ids.reserve(agg_rows_.size());
    all_rows.reserve(agg_rows_.size() * dim);
    for (const auto& [id, g] : agg_rows_) {
      all_ids.push_back(id);
      all_rows.insert(all_rows.end(), g.begin(), g.end());
    }
    shard_->Apply(agg_dense_.data(), all_ids.data(), all_ids.size(), all_rows.data(),
                  1.f / static_cast<float>(o_.num_trainers));
    applied_step_ = step;
    agg_count_ = 0;
    cv_.notify_all();
    apply.unlock();
  } else {
    cv_.wait(lock.native(),
             [&]() REQUIRES(mu_) { return applied_step_ >= step || stopping_ || drain_saved_; });
    if (applied_step_ < step && drain_saved_) {
      session.close_unanswered = true;
      return Status::Ok();
    }
    if (stopping_) return Unavailable("parameter server is stopping");
  }
  lock.Unlock();
  return conn.Send(kOk, PushReplyFlags());
}

}  // namespace kubetrain::trainer
