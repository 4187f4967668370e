#include "trainer/rpc/remote_params.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <thread>

#include "trainer/cluster/cluster.h"
#include "trainer/metrics/metrics.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/rpc/protocol.h"

namespace kubetrain::trainer {

using Clock = std::chrono::steady_clock;

struct RemoteParams::Channel {
  HostPort address;
  std::unique_ptr<Connection> conn;
  size_t dense_begin = 0, dense_end = 0;
  uint64_t push_seq = 0;  // the number of the last push to this PS
};

namespace {

// Random, never 0 (0 would be a worker that sent no incarnation).
uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return v;
}

// Consecutive refused handshakes before a connection is taken for a wrong key: the PS
// closes without a word on a bad proof, and so does a connection cut mid-handshake.
constexpr int kRefusalsBeforeWrongKey = 3;

}  // namespace

// The background thread of a pipelined RemoteParams: runs queued requests in order.
class RemoteParams::Pipeline {
 public:
  Pipeline() {
    thread_ = std::thread([this] { Run(); });
  }
  // Stops after the request in progress; requests still queued are dropped.
  ~Pipeline() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Queues `task`; returns its ticket (1, 2, ...).
  uint64_t Enqueue(std::function<Status()> task) {
    MutexLock lock(mu_);
    tasks_.push_back(std::move(task));
    cv_.notify_all();
    return ++queued_;
  }
  // Waits until the task with `ticket` has run, or any task failed; the first error.
  Status WaitFor(uint64_t ticket) {
    MutexLock lock(mu_);
    cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return done_ >= ticket || !error_.ok(); });
    return error_;
  }
  Status WaitAll() {
    uint64_t last;
    {
      MutexLock lock(mu_);
      last = queued_;
    }
    return WaitFor(last);
  }
  // The first error so far, without waiting.
  Status error() {
    MutexLock lock(mu_);
    return error_;
  }

 private:
  void Run() {
    MutexLock lock(mu_);
    while (true) {
      cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      std::function<Status()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.Unlock();
      Status s = task();
      lock.Lock();
      if (!s.ok() && error_.ok()) {
        error_ = s;
        tasks_.clear();  // what follows a failed request is not sent
      }
      ++done_;
      cv_.notify_all();
    }
  }

  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<Status()>> tasks_ GUARDED_BY(mu_);
  uint64_t queued_ GUARDED_BY(mu_) = 0, done_ = 0;
  Status error_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

RemoteParams::RemoteParams(RemoteOptions options, size_t total_dense, int row_dim)
    : o_(std::move(options)),
      total_dense_(total_dense),
      row_dim_(row_dim),
      incarnation_(NewIncarnation()) {}

uint64_t RemoteParams::pushes_to(int k) const {
  return channels_.at(k)->push_seq;
}

RemoteParams::~RemoteParams() {
  pipe_.reset();  // first: its thread may be using the members below
}

StatusOr<std::unique_ptr<RemoteParams>> RemoteParams::Connect(const Model& model,
                                                              RemoteOptions options) {
  if (options.ps_addresses.empty()) return InvalidArgument("no parameter servers in the cluster");
  std::unique_ptr<RemoteParams> p(
      new RemoteParams(std::move(options), model.NumDenseParams(), model.SparseRowDim()));
  const int n = static_cast<int>(p->o_.ps_addresses.size());
  for (int k = 0; k < n; ++k) {
    auto hp = SplitHostPort(p->o_.ps_addresses[k]);
    if (!hp.ok()) return hp.status();
    auto ch = std::make_unique<Channel>();
    ch->address = *hp;
    std::tie(ch->dense_begin, ch->dense_end) = DenseRange(p->total_dense_, k, n);
    p->channels_.push_back(std::move(ch));
  }
  p->ids_of_.resize(n);
  p->pos_of_.resize(n);
  const auto deadline = Clock::now() + p->o_.startup_timeout;
  for (int k = 0; k < n; ++k) KT_RETURN_IF_ERROR(p->EnsureConnected(k, deadline));
  if (p->o_.pipeline) p->pipe_ = std::make_unique<Pipeline>();
  return p;
}

Status RemoteParams::EnsureConnected(int k, Clock::time_point deadline) {
  Channel& ch = *channels_[k];
  if (ch.conn) return Status::Ok();
  auto backoff = std::chrono::milliseconds(100);
  int attempts = 0, refusals = 0;
  while (true) {
    if (o_.stop && o_.stop()) {
      return Unavailable("stopped (SIGTERM) while connecting to ps-" + std::to_string(k));
    }
    ++attempts;
    Status s;
    auto conn = Dial(ch.address.host, ch.address.port, std::chrono::seconds(5));
    if (conn.ok()) {
      s = (*conn)->AuthenticateAsClient(o_.key);
      if (s.code() == StatusCode::kUnauthenticated && ++refusals >= kRefusalsBeforeWrongKey) {
        return s;
      }
      if (s.ok()) {
        refusals = 0;
        HelloRequest hello;
        hello.rank = o_.rank;
        hello.total_dense = total_dense_;
        hello.row_dim = row_dim_;
        hello.incarnation = incarnation_;
        hello.wire = o_.wire;
        s = (*conn)->Send(kHello, EncodeHello(hello));
        uint8_t type = 0;
        std::string reply;
        if (s.ok()) s = (*conn)->Receive(&type, &reply);
        if (s.ok() && type == kError) return FailedPrecondition(reply);
        if (s.ok()) {
          std::optional<HelloReply> r = DecodeHelloReply(reply);
          if (!r)
            return FailedPrecondition("ps-" + std::to_string(k) + " sent a malformed hello reply");
          if (r->version != kPsProtocolVersion) {
            return FailedPrecondition("ps-" + std::to_string(k) + " speaks PS protocol version " +
                                      std::to_string(r->version) + "; this worker speaks " +
                                      std::to_string(kPsProtocolVersion) +
                                      " (all replicas must run the same trainer version)");
          }
          last_ps_step_ = std::max(last_ps_step_, r->last_step);
        }
        if (s.ok()) {
          if (attempts > 1) {
            spdlog::info("connected to ps-{} at {}:{} after {} attempts", k, ch.address.host,
                         ch.address.port, attempts);
          }
          ch.conn = std::move(*conn);
          return Status::Ok();
        }
      }
    } else {
      s = conn.status();
    }
    if (Clock::now() + backoff > deadline) {
      return Unavailable("parameter server ps-" + std::to_string(k) + " (" + ch.address.host + ":" +
                         std::to_string(ch.address.port) + ") unreachable after " +
                         std::to_string(attempts) + " attempts: " + s.message());
    }
    if (attempts == 1 || attempts % 10 == 0) {
      spdlog::info("waiting for ps-{} ({}): {}", k, ch.address.host, s.message());
    }
    std::this_thread::sleep_for(backoff);  // backoff between attempts, not synchronisation
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
}

Status RemoteParams::Exchange(std::vector<Call>& calls) {
  std::vector<bool> failed(calls.size(), false);
  uint64_t sent = 0, received = 0;  // payload bytes, for /metrics
  for (size_t i = 0; i < calls.size(); ++i) {
    Channel& ch = *channels_[calls[i].ps];
    if (!ch.conn || !ch.conn->Send(calls[i].type, calls[i].payload, calls[i].payload2).ok()) {
      failed[i] = true;
    }
    sent += calls[i].payload.size() + calls[i].payload2.size();
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    if (failed[i]) continue;
    Channel& ch = *channels_[calls[i].ps];
    Status s = ch.conn->Receive(&calls[i].reply_type, &calls[i].reply);
    if (!s.ok()) {
      if (s.code() == StatusCode::kUnauthenticated) return s;
      failed[i] = true;
    }
    received += calls[i].reply.size();
  }
  TrainerMetrics::Global().AddPsBytes(sent, received);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!failed[i]) continue;
    const int k = calls[i].ps;
    const auto deadline = Clock::now() + o_.reconnect_timeout;
    while (true) {
      channels_[k]->conn.reset();
      spdlog::warn("lost ps-{}; reconnecting", k);
      KT_RETURN_IF_ERROR(EnsureConnected(k, deadline));
      Connection& c = *channels_[k]->conn;
      if (c.Send(calls[i].type, calls[i].payload, calls[i].payload2).ok() &&
          c.Receive(&calls[i].reply_type, &calls[i].reply).ok()) {
        break;
      }
      if (Clock::now() > deadline) return Unavailable("ps-" + std::to_string(k) + " keeps failing");
    }
  }
  for (const Call& c : calls) {
    if (c.reply_type == kError) {
      return FailedPrecondition("ps-" + std::to_string(c.ps) + ": " + c.reply);
    }
    if (c.type == kPush && IsPushReplyStopping(c.reply) && !checkpoint_requested_.exchange(true)) {
      spdlog::info("ps-{} got SIGTERM and asks for a checkpoint", c.ps);
    }
  }
  return Status::Ok();
}

void RemoteParams::GroupByShard(const std::vector<uint64_t>& ids,
                                std::vector<std::vector<uint64_t>>& ids_of,
                                std::vector<std::vector<int>>& pos_of) const {
  const int n = static_cast<int>(channels_.size());
  ids_of.resize(n);
  pos_of.resize(n);
  for (int k = 0; k < n; ++k) {
    ids_of[k].clear();
    pos_of[k].clear();
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int k = ShardOfId(ids[i], n);
    ids_of[k].push_back(ids[i]);
    pos_of[k].push_back(static_cast<int>(i));
  }
}

Status RemoteParams::Drain() {
  return pipe_ ? pipe_->WaitAll() : Status::Ok();
}

Status RemoteParams::RunPull(PullJob& job) {
  const int n = static_cast<int>(channels_.size());
  GroupByShard(job.ids, job.ids_of, job.pos_of);
  job.calls.resize(n);
  for (int k = 0; k < n; ++k) {
    EncodePull(job.ids_of[k], /*want_dense=*/true, &job.calls[k].payload);
    job.calls[k].ps = k;
    job.calls[k].type = kPull;
    job.calls[k].payload2 = {};
  }
  KT_RETURN_IF_ERROR(Exchange(job.calls));
  for (int k = 0; k < n; ++k) {
    const Channel& ch = *channels_[k];
    const size_t expect = (job.ids_of[k].size() * row_dim_ + (ch.dense_end - ch.dense_begin)) *
                          WireFloatBytes(o_.wire);
    if (job.calls[k].reply_type != kPullReply || job.calls[k].reply.size() != expect) {
      return Internal("ps-" + std::to_string(k) + " sent a malformed pull reply");
    }
  }
  return Status::Ok();
}

Status RemoteParams::Unpack(const PullJob& job, float* rows, float* dense) const {
  for (size_t k = 0; k < channels_.size(); ++k) {
    const Channel& ch = *channels_[k];
    const size_t nrows = job.ids_of[k].size();
    const char* p = job.calls[k].reply.data();
    const size_t row_bytes = row_dim_ * WireFloatBytes(o_.wire);
    for (size_t r = 0; r < nrows; ++r) {
      GetWireFloats(p + r * row_bytes, row_dim_, o_.wire,
                    rows + static_cast<size_t>(job.pos_of[k][r]) * row_dim_);
    }
    GetWireFloats(p + nrows * row_bytes, ch.dense_end - ch.dense_begin, o_.wire,
                  dense + ch.dense_begin);
  }
  return Status::Ok();
}

Status RemoteParams::Pull(const std::vector<uint64_t>& ids, float* rows, float* dense) {
  if (prefetch_ticket_ != 0) {
    const uint64_t ticket = std::exchange(prefetch_ticket_, 0);
    KT_RETURN_IF_ERROR(pipe_->WaitFor(ticket));
    if (prefetch_.ids == ids) return Unpack(prefetch_, rows, dense);
  }
  KT_RETURN_IF_ERROR(Drain());
  pull_job_.ids = ids;
  KT_RETURN_IF_ERROR(RunPull(pull_job_));
  return Unpack(pull_job_, rows, dense);
}

void RemoteParams::Prefetch(const std::vector<uint64_t>& ids) {
  if (!pipe_) return;
  // A prefetch nobody pulled is dropped (its job is reused once the thread is done with it).
  if (prefetch_ticket_ != 0) (void)pipe_->WaitFor(std::exchange(prefetch_ticket_, 0));
  prefetch_.ids = ids;
  prefetch_ticket_ = pipe_->Enqueue([this] { return RunPull(prefetch_); });
}

Status RemoteParams::Push(int64_t step, const std::vector<uint64_t>& ids, const float* row_grads,
                          const float* dense_grad) {
  const int n = static_cast<int>(channels_.size());
  GroupByShard(ids);
  if (!pipe_) {
    std::vector<Call>& calls = step_calls_;
    calls.resize(n);
    for (int k = 0; k < n; ++k) {
      const Channel& ch = *channels_[k];
      // Numbered once here; a re-send in Exchange() sends the same bytes, the same number.
      EncodePush(step, ++channels_[k]->push_seq, ids_of_[k], pos_of_[k], row_grads, row_dim_,
                 o_.wire, &calls[k].payload);
      calls[k].ps = k;
      calls[k].type = kPush;
      SetPushDense(dense_grad, ch, calls[k]);
    }
    return Exchange(calls);
  }
  KT_RETURN_IF_ERROR(pipe_->error());
  // Pipelined: the caller overwrites its gradients in the next step, so the job keeps a
  // copy. Numbered now, in the caller's order, which is the order the thread sends them.
  std::shared_ptr<PushJob> job;
  {
    MutexLock lock(pool_mu_);
    if (!push_pool_.empty()) {
      job = std::move(push_pool_.back());
      push_pool_.pop_back();
    }
  }
  if (!job) job = std::make_shared<PushJob>();
  const float* dense = dense_grad;
  if (o_.wire == WireFloat::kF32) {
    job->dense.assign(dense_grad, dense_grad + total_dense_);
    dense = job->dense.data();
  }
  job->calls.resize(n);
  for (int k = 0; k < n; ++k) {
    const Channel& ch = *channels_[k];
    EncodePush(step, ++channels_[k]->push_seq, ids_of_[k], pos_of_[k], row_grads, row_dim_, o_.wire,
               &job->calls[k].payload);
    job->calls[k].ps = k;
    job->calls[k].type = kPush;
    SetPushDense(dense, ch, job->calls[k]);
  }
  pipe_->Enqueue([this, job]() mutable {
    Status s = Exchange(job->calls);
    MutexLock lock(pool_mu_);
    push_pool_.push_back(std::move(job));
    return s;
  });
  return Status::Ok();
}

void RemoteParams::SetPushDense(const float* dense_grad, const Channel& ch, Call& call) const {
  const float* slice = dense_grad + ch.dense_begin;
  const size_t n = ch.dense_end - ch.dense_begin;
  if (o_.wire == WireFloat::kF32) {
    // Sent from the caller's array (or the job's copy) without another copy.
    call.payload2 = std::string_view(reinterpret_cast<const char*>(slice), n * 4);
    return;
  }
  PutWireFloats(slice, n, o_.wire, &call.payload);  // converted: the payload owns it
  call.payload2 = {};
}

std::optional<EmbeddingStats> RemoteParams::embedding_stats() const {
  return embedding_stats_;
}

Status RemoteParams::SaveCheckpoint(const std::string& dir, int64_t step) {
  KT_RETURN_IF_ERROR(Drain());  // the checkpoint of step `step` holds its push
  const int n = static_cast<int>(channels_.size());
  std::vector<Call> calls(n);
  for (int k = 0; k < n; ++k) {
    calls[k].ps = k;
    calls[k].type = kCheckpoint;
    calls[k].payload = EncodeCheckpoint(step, dir);  // every PS saves its shard under this root
  }
  KT_RETURN_IF_ERROR(Exchange(calls));
  // Every shard is durable: commit, with the size and SHA-256 each PS wrote.
  std::vector<ShardDigest> digests(n);
  EmbeddingStats sum;
  for (int k = 0; k < n; ++k) {
    EmbeddingStats stats;
    std::optional<ShardDigest> digest = DecodeCheckpointReply(calls[k].reply, &stats);
    sum.rows += stats.rows;
    sum.bytes += stats.bytes;
    sum.admitted += stats.admitted;
    sum.filtered += stats.filtered;
    sum.evicted += stats.evicted;
    if (calls[k].reply_type != kOk || !digest) {
      return FailedPrecondition("ps-" + std::to_string(k) +
                                " did not report its shard's checksum (all replicas must run the "
                                "same trainer version)");
    }
    digests[k] = std::move(*digest);
  }
  embedding_stats_ = sum;
  return WriteManifest(dir, step, digests);
}

StatusOr<int> RemoteParams::MarkDone() {
  KT_RETURN_IF_ERROR(Drain());  // every push is applied before the PS hears we are done
  const int n = static_cast<int>(channels_.size());
  std::vector<Call> calls(n);
  for (int k = 0; k < n; ++k) {
    calls[k].ps = k;
    calls[k].type = kDone;
    calls[k].payload = EncodeDone(o_.rank);
  }
  KT_RETURN_IF_ERROR(Exchange(calls));
  return DoneCount();
}

StatusOr<int> RemoteParams::DoneCount() {
  KT_RETURN_IF_ERROR(Drain());
  // Ask every PS and take the union, with what earlier answers said: a PS restored from a
  // checkpoint older than a worker's finish has forgotten it, the others (or we) have not.
  const int n = static_cast<int>(channels_.size());
  std::vector<Call> calls(n);
  for (int k = 0; k < n; ++k) {
    calls[k].ps = k;
    calls[k].type = kDone;
    calls[k].payload = EncodeDone(-1);
  }
  KT_RETURN_IF_ERROR(Exchange(calls));
  std::vector<std::set<int32_t>> known(n);
  for (const Call& c : calls) {
    std::optional<std::vector<int32_t>> ranks = DecodeDoneReply(c.reply);
    if (c.reply_type != kDoneReply || !ranks) {
      return Internal("ps-" + std::to_string(c.ps) + " sent a malformed done reply");
    }
    known[c.ps].insert(ranks->begin(), ranks->end());
    finished_.insert(ranks->begin(), ranks->end());
  }
  // Tell a PS that does not know (restored from an older checkpoint, or it has not yet
  // seen a worker's own Done in flight: harmless), so that its next checkpoint remembers.
  std::vector<Call> retell;
  for (int k = 0; k < n; ++k) {
    for (int32_t rank : finished_) {
      if (known[k].count(rank)) continue;
      Call c;
      c.ps = k;
      c.type = kDone;
      c.payload = EncodeDone(rank);
      retell.push_back(std::move(c));
    }
  }
  if (!retell.empty()) {
    spdlog::info("telling parameter servers about {} finished worker(s) they did not know of",
                 retell.size());
    KT_RETURN_IF_ERROR(Exchange(retell));
  }
  return static_cast<int>(finished_.size());
}

Status RemoteParams::ShutdownAll() {
  KT_RETURN_IF_ERROR(Drain());
  // A PS that got the request exits at once, so its reply may be lost and a reconnect may
  // find nobody: after the first send, an unreachable PS counts as stopped.
  constexpr auto kRetryFor = std::chrono::seconds(10);
  const int n = static_cast<int>(channels_.size());
  Status first;
  for (int k = 0; k < n; ++k) {
    Channel& ch = *channels_[k];
    const auto deadline = Clock::now() + kRetryFor;
    bool sent = false;
    Status s;
    while (true) {
      if (!ch.conn) s = EnsureConnected(k, deadline);
      if (s.ok()) {
        uint8_t type;
        std::string reply;
        s = ch.conn->Send(kShutdown, "");
        sent = sent || s.ok();
        if (s.ok()) s = ch.conn->Receive(&type, &reply);
        if (s.ok()) break;
        ch.conn.reset();
      }
      if (s.code() == StatusCode::kUnauthenticated || s.code() == StatusCode::kFailedPrecondition ||
          Clock::now() > deadline) {
        break;
      }
    }
    if (!s.ok() && sent) {
      spdlog::info("ps-{} did not answer the shutdown request; it has likely exited ({})", k,
                   s.message());
    } else if (!s.ok() && first.ok()) {
      first = s.WithContext("ps-" + std::to_string(k));
    }
  }
  return first;
}

}  // namespace kubetrain::trainer
