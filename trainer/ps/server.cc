#include "trainer/ps/server.h"

#include <spdlog/spdlog.h>

#include "trainer/net/wire.h"
#include "trainer/ps/checkpoint.h"

namespace kubetrain::trainer {

PsServer::PsServer(ParamShard* shard, std::unique_ptr<Listener> listener, PsServerOptions options)
    : shard_(shard), o_(std::move(options)), listener_(std::move(listener)) {}

PsServer::~PsServer() {
  Stop();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void PsServer::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  listener_->Close();
  for (auto& c : conns_) c->Shutdown();
  cv_.notify_all();
}

Status PsServer::Serve() {
  spdlog::info("serving {} dense parameters and embedding rows of {} floats on port {}",
               shard_->dense_size(), shard_->sparse_dim(), listener_->port());
  while (true) {
    auto conn = listener_->Accept();
    if (!conn.ok()) break;  // closed by Stop()
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) break;
    Connection* c = conn->get();
    conns_.push_back(std::move(*conn));
    threads_.emplace_back([this, c] { ServeConnection(c); });
  }
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : conns_) c->Shutdown();
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
  return Status::Ok();
}

void PsServer::ServeConnection(Connection* conn) {
  // An unauthenticated peer gets 10 s to finish the handshake, then is dropped.
  conn->SetReceiveTimeout(std::chrono::seconds(10));
  Status s = conn->AuthenticateAsServer(o_.key);
  if (!s.ok()) {
    spdlog::warn("refused connection from {}: {}", conn->peer(), s.message());
    conn->Shutdown();
    return;
  }
  conn->SetReceiveTimeout(std::chrono::milliseconds(0));
  uint8_t type;
  std::string payload;
  Scratch scratch;
  int rank = -1;
  while (true) {
    s = conn->Receive(&type, &payload);
    if (!s.ok()) {
      if (s.code() == StatusCode::kUnauthenticated) {
        spdlog::warn("dropping {}: {}", conn->peer(), s.message());
      }
      break;
    }
    bool shutdown = false;
    s = Handle(*conn, type, payload, &rank, &shutdown, scratch);
    if (!s.ok()) {
      spdlog::warn("request {} from {} failed: {}", type, conn->peer(), s.ToString());
      if (!conn->Send(kError, s.ToString()).ok()) break;
    }
    if (shutdown) {
      spdlog::info("shutdown requested by {}", conn->peer());
      // Stop() from this thread would join nothing; it only wakes the accept loop.
      Stop();
      break;
    }
  }
  conn->Shutdown();
}

Status PsServer::Handle(Connection& conn, uint8_t type, const std::string& payload, int* rank,
                        bool* shutdown, Scratch& scratch) {
  WireReader r(payload);
  const int dim = shard_->sparse_dim();
  switch (type) {
    case kHello: {
      int32_t hello_rank, row_dim;
      uint64_t total;
      if (!r.Get(&hello_rank) || !r.Get(&total) || !r.Get(&row_dim)) {
        return InvalidArgument("bad hello");
      }
      if (total != o_.total_dense || row_dim != dim) {
        return FailedPrecondition("worker " + std::to_string(hello_rank) + " runs a model with " +
                                  std::to_string(total) + " dense parameters and rows of " +
                                  std::to_string(row_dim) + "; this PS has " +
                                  std::to_string(o_.total_dense) + " and " + std::to_string(dim) +
                                  " (are all replicas started with the same flags?)");
      }
      *rank = hello_rank;
      // Tell the worker the last step this PS completed, so a worker restarted in
      // synchronous mode joins the step the others are on instead of replaying old ones.
      int64_t last_step;
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_step = applied_step_;
      }
      WireWriter w;
      w.Put<int64_t>(last_step);
      return conn.Send(kOk, w.str());
    }
    case kPull: {
      uint32_t n;
      const char* ids_p;
      uint8_t want_dense;
      if (!r.Get(&n) || !r.GetArray(n, 8, &ids_p) || !r.Get(&want_dense) || !r.AtEnd()) {
        return InvalidArgument("bad pull");
      }
      std::vector<uint64_t>& ids = scratch.ids;
      ids.resize(n);
      std::memcpy(ids.data(), ids_p, n * 8ull);
      std::vector<float>& out = scratch.rows;
      out.resize(static_cast<size_t>(n) * dim + (want_dense ? shard_->dense_size() : 0));
      if (n > 0) shard_->PullSparse(ids.data(), n, out.data());
      if (want_dense) shard_->PullDense(out.data() + static_cast<size_t>(n) * dim);
      return conn.Send(kPullReply,
                       std::string_view(reinterpret_cast<const char*>(out.data()), out.size() * 4));
    }
    case kPush:
      return HandlePush(conn, payload, *rank, scratch);
    case kCheckpoint: {
      int64_t step;
      if (!r.Get(&step)) return InvalidArgument("bad checkpoint request");
      // The coordinator names the root (its checkpoint dir, or the final model's); an
      // older coordinator sends none and this PS's --checkpoint-dir is used.
      std::string root = o_.checkpoint_dir;
      if (!r.AtEnd()) {
        const size_t n = r.remaining();
        const char* p = nullptr;
        if (!r.GetArray(n, 1, &p)) return InvalidArgument("bad checkpoint request");
        root.assign(p, n);
      }
      if (root.empty()) {
        return FailedPrecondition("this PS was started without --checkpoint-dir");
      }
      KT_RETURN_IF_ERROR(PrepareCheckpointDir(root, step));
      KT_RETURN_IF_ERROR(shard_->Save(ShardPath(root, step, o_.shard_index, o_.num_shards)));
      return conn.Send(kOk, "");
    }
    case kDone: {
      int32_t done_rank;
      if (!r.Get(&done_rank)) return InvalidArgument("bad done");
      int32_t count;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (done_rank >= 0) done_.insert(done_rank);
        count = static_cast<int32_t>(done_.size());
      }
      WireWriter w;
      w.Put(count);
      return conn.Send(kDoneReply, w.str());
    }
    case kShutdown:
      *shutdown = true;
      return conn.Send(kOk, "");
    default:
      return InvalidArgument("unknown request type " + std::to_string(type));
  }
}

Status PsServer::HandlePush(Connection& conn, const std::string& payload, int rank,
                            Scratch& scratch) {
  WireReader r(payload);
  const int dim = shard_->sparse_dim();
  int64_t step;
  uint32_t n;
  const char *ids_p, *rows_p, *dense_p = nullptr;
  uint8_t has_dense;
  if (!r.Get(&step) || !r.Get(&n) || !r.GetArray(n, 8, &ids_p) ||
      !r.GetArray(static_cast<size_t>(n) * dim, 4, &rows_p) || !r.Get(&has_dense) ||
      (has_dense && !r.GetArray(shard_->dense_size(), 4, &dense_p)) || !r.AtEnd()) {
    return InvalidArgument("bad push");
  }
  std::vector<uint64_t>& ids = scratch.ids;
  ids.resize(n);
  std::memcpy(ids.data(), ids_p, n * 8ull);
  std::vector<float>& rows = scratch.rows;
  rows.resize(static_cast<size_t>(n) * dim);
  std::memcpy(rows.data(), rows_p, rows.size() * 4);
  std::vector<float>& dense = scratch.dense;
  dense.resize(has_dense ? shard_->dense_size() : 0);
  if (has_dense) std::memcpy(dense.data(), dense_p, dense.size() * 4);
  if (!o_.sync) {
    shard_->Apply(has_dense ? dense.data() : nullptr, ids.data(), n, rows.data());
    return conn.Send(kOk, "");
  }

  if (rank < 0) return FailedPrecondition("synchronous push before hello");
  std::unique_lock<std::mutex> lock(mu_);
  if (step <= applied_step_) {
    // A re-sent push for a step already applied (the reply was lost with the connection).
    lock.unlock();
    return conn.Send(kOk, "");
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
    cv_.wait(lock, [&] { return applied_step_ >= step || stopping_; });
    if (stopping_) return Unavailable("parameter server is stopping");
    lock.unlock();
    return conn.Send(kOk, "");
  }
  for (size_t i = 0; i < dense.size(); ++i) agg_dense_[i] += dense[i];
  for (uint32_t i = 0; i < n; ++i) {
    auto& acc = agg_rows_[ids[i]];
    if (acc.empty()) acc.assign(dim, 0.f);
    for (int k = 0; k < dim; ++k) acc[k] += rows[static_cast<size_t>(i) * dim + k];
  }
  if (++agg_count_ == o_.num_trainers) {
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
  } else {
    cv_.wait(lock, [&] { return applied_step_ >= step || stopping_; });
    if (stopping_) return Unavailable("parameter server is stopping");
  }
  lock.unlock();
  return conn.Send(kOk, "");
}

}  // namespace kubetrain::trainer
