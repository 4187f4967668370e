#include "trainer/worker/remote.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "trainer/cluster/cluster.h"
#include "trainer/metrics/metrics.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/ps/protocol.h"

namespace kubetrain::trainer {

using Clock = std::chrono::steady_clock;

struct RemoteParams::Channel {
  HostPort address;
  std::unique_ptr<Connection> conn;
  size_t dense_begin = 0, dense_end = 0;
};

RemoteParams::RemoteParams(RemoteOptions options, size_t total_dense, int row_dim)
    : o_(std::move(options)), total_dense_(total_dense), row_dim_(row_dim) {}

RemoteParams::~RemoteParams() = default;

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
  return p;
}

Status RemoteParams::EnsureConnected(int k, Clock::time_point deadline) {
  Channel& ch = *channels_[k];
  if (ch.conn) return Status::Ok();
  auto backoff = std::chrono::milliseconds(100);
  int attempts = 0;
  while (true) {
    ++attempts;
    Status s;
    auto conn = Dial(ch.address.host, ch.address.port, std::chrono::seconds(5));
    if (conn.ok()) {
      s = (*conn)->AuthenticateAsClient(o_.key);
      if (s.code() == StatusCode::kUnauthenticated) return s;
      if (s.ok()) {
        s = (*conn)->Send(kHello, EncodeHello({o_.rank, total_dense_, row_dim_}));
        uint8_t type = 0;
        std::string reply;
        if (s.ok()) s = (*conn)->Receive(&type, &reply);
        if (s.ok() && type == kError) return FailedPrecondition(reply);
        if (std::optional<int64_t> last = DecodeHelloReply(reply); s.ok() && last) {
          last_ps_step_ = std::max(last_ps_step_, *last);
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
  }
  return Status::Ok();
}

void RemoteParams::GroupByShard(const std::vector<uint64_t>& ids) {
  const int n = static_cast<int>(channels_.size());
  for (int k = 0; k < n; ++k) {
    ids_of_[k].clear();
    pos_of_[k].clear();
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int k = ShardOfId(ids[i], n);
    ids_of_[k].push_back(ids[i]);
    pos_of_[k].push_back(static_cast<int>(i));
  }
}

Status RemoteParams::Pull(const std::vector<uint64_t>& ids, float* rows, float* dense) {
  const int n = static_cast<int>(channels_.size());
  GroupByShard(ids);
  std::vector<Call>& calls = step_calls_;
  calls.resize(n);
  for (int k = 0; k < n; ++k) {
    EncodePull(ids_of_[k], /*want_dense=*/true, &calls[k].payload);
    calls[k].ps = k;
    calls[k].type = kPull;
    calls[k].payload2 = {};
  }
  KT_RETURN_IF_ERROR(Exchange(calls));
  for (int k = 0; k < n; ++k) {
    const Channel& ch = *channels_[k];
    const size_t nrows = ids_of_[k].size();
    const size_t expect = (nrows * row_dim_ + (ch.dense_end - ch.dense_begin)) * 4;
    if (calls[k].reply_type != kPullReply || calls[k].reply.size() != expect) {
      return Internal("ps-" + std::to_string(k) + " sent a malformed pull reply");
    }
    const char* p = calls[k].reply.data();
    for (size_t r = 0; r < nrows; ++r) {
      std::memcpy(rows + static_cast<size_t>(pos_of_[k][r]) * row_dim_, p + r * row_dim_ * 4,
                  row_dim_ * 4);
    }
    std::memcpy(dense + ch.dense_begin, p + nrows * row_dim_ * 4,
                (ch.dense_end - ch.dense_begin) * 4);
  }
  return Status::Ok();
}

Status RemoteParams::Push(int64_t step, const std::vector<uint64_t>& ids, const float* row_grads,
                          const float* dense_grad) {
  const int n = static_cast<int>(channels_.size());
  GroupByShard(ids);
  std::vector<Call>& calls = step_calls_;
  calls.resize(n);
  for (int k = 0; k < n; ++k) {
    const Channel& ch = *channels_[k];
    EncodePush(step, ids_of_[k], pos_of_[k], row_grads, row_dim_, &calls[k].payload);
    calls[k].ps = k;
    calls[k].type = kPush;
    calls[k].payload2 = std::string_view(reinterpret_cast<const char*>(dense_grad + ch.dense_begin),
                                         (ch.dense_end - ch.dense_begin) * 4);
  }
  return Exchange(calls);
}

Status RemoteParams::SaveCheckpoint(const std::string& dir, int64_t step) {
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
  for (int k = 0; k < n; ++k) {
    std::optional<ShardDigest> digest = DecodeCheckpointReply(calls[k].reply);
    if (calls[k].reply_type != kOk || !digest) {
      return FailedPrecondition("ps-" + std::to_string(k) +
                                " did not report its shard's checksum (all replicas must run the "
                                "same trainer version)");
    }
    digests[k] = std::move(*digest);
  }
  return WriteManifest(dir, step, digests);
}

StatusOr<int> RemoteParams::MarkDone() {
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
  // Ask every PS and take the largest count: a PS that restarted has forgotten which
  // workers finished, the others have not.
  const int n = static_cast<int>(channels_.size());
  std::vector<Call> calls(n);
  for (int k = 0; k < n; ++k) {
    calls[k].ps = k;
    calls[k].type = kDone;
    calls[k].payload = EncodeDone(-1);
  }
  KT_RETURN_IF_ERROR(Exchange(calls));
  int32_t best = 0;
  for (const Call& c : calls) {
    std::optional<int32_t> count = DecodeDoneReply(c.reply);
    if (c.reply_type != kDoneReply || !count) {
      return Internal("ps-" + std::to_string(c.ps) + " sent a malformed done reply");
    }
    best = std::max(best, *count);
  }
  return best;
}

Status RemoteParams::ShutdownAll() {
  const int n = static_cast<int>(channels_.size());
  Status first;
  for (int k = 0; k < n; ++k) {
    Channel& ch = *channels_[k];
    if (!ch.conn) continue;
    uint8_t type;
    std::string reply;
    Status s = ch.conn->Send(kShutdown, "");
    if (s.ok()) s = ch.conn->Receive(&type, &reply);
    if (!s.ok() && first.ok()) first = s.WithContext("ps-" + std::to_string(k));
  }
  return first;
}

}  // namespace kubetrain::trainer
