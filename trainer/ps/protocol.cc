#include "trainer/ps/protocol.h"

#include <cstring>

#include "trainer/net/wire.h"

namespace kubetrain::trainer {

std::string EncodeHello(const HelloRequest& hello) {
  WireWriter w;
  w.Put<int32_t>(hello.rank).Put<uint64_t>(hello.total_dense).Put<int32_t>(hello.row_dim);
  w.Put<uint32_t>(hello.version).Put<uint64_t>(hello.incarnation);
  return std::move(w.str());
}

bool DecodeHello(std::string_view payload, HelloRequest* hello) {
  WireReader r(payload);
  if (!r.Get(&hello->rank) || !r.Get(&hello->total_dense) || !r.Get(&hello->row_dim)) {
    return false;
  }
  hello->version = 1;  // version 1 ended here
  hello->incarnation = 0;
  if (r.AtEnd()) return true;
  return r.Get(&hello->version) && r.Get(&hello->incarnation);
}

std::string EncodeHelloReply(int64_t last_step) {
  WireWriter w;
  w.Put<int64_t>(last_step).Put<uint32_t>(kPsProtocolVersion);
  return std::move(w.str());
}

std::optional<HelloReply> DecodeHelloReply(std::string_view payload) {
  WireReader r(payload);
  HelloReply reply;
  if (!r.Get(&reply.last_step)) return std::nullopt;
  reply.version = 1;  // version 1 ended here
  if (!r.AtEnd() && !r.Get(&reply.version)) return std::nullopt;
  return reply;
}

void EncodePull(const std::vector<uint64_t>& ids, bool want_dense, std::string* buffer) {
  WireWriter w(std::move(*buffer));
  w.Put<uint32_t>(static_cast<uint32_t>(ids.size()))
      .PutArray(ids.data(), ids.size())
      .Put<uint8_t>(want_dense ? 1 : 0);
  *buffer = std::move(w.str());
}

bool DecodePull(std::string_view payload, PullRequest* pull) {
  WireReader r(payload);
  uint8_t want_dense = 0;
  if (!r.Get(&pull->n) || !r.GetArray(pull->n, 8, &pull->ids) || !r.Get(&want_dense) ||
      !r.AtEnd()) {
    return false;
  }
  pull->want_dense = want_dense != 0;
  return true;
}

void EncodePush(int64_t step, uint64_t seq, const std::vector<uint64_t>& ids,
                const std::vector<int>& positions, const float* row_grads, int row_dim,
                std::string* buffer) {
  WireWriter w(std::move(*buffer));
  w.Put<int64_t>(step).Put<uint64_t>(seq).Put<uint32_t>(static_cast<uint32_t>(ids.size()));
  w.PutArray(ids.data(), ids.size());
  for (int pos : positions) w.PutArray(row_grads + static_cast<size_t>(pos) * row_dim, row_dim);
  w.Put<uint8_t>(1);
  *buffer = std::move(w.str());
}

bool DecodePush(std::string_view payload, int row_dim, size_t dense_size, PushRequest* push) {
  WireReader r(payload);
  uint8_t has_dense = 0;
  push->dense = nullptr;
  return r.Get(&push->step) && r.Get(&push->seq) && r.Get(&push->n) &&
         r.GetArray(push->n, 8, &push->ids) &&
         r.GetArray(static_cast<size_t>(push->n) * row_dim, 4, &push->rows) && r.Get(&has_dense) &&
         (!has_dense || r.GetArray(dense_size, 4, &push->dense)) && r.AtEnd();
}

std::string EncodeCheckpoint(int64_t step, std::string_view root) {
  WireWriter w;
  w.Put<int64_t>(step);
  w.PutArray(root.data(), root.size());
  return std::move(w.str());
}

bool DecodeCheckpoint(std::string_view payload, int64_t* step, std::string* root) {
  WireReader r(payload);
  if (!r.Get(step)) return false;
  root->clear();
  if (r.AtEnd()) return true;
  const size_t n = r.remaining();
  const char* p = nullptr;
  if (!r.GetArray(n, 1, &p)) return false;
  root->assign(p, n);
  return true;
}

std::string EncodeCheckpointReply(const ShardDigest& digest) {
  WireWriter w;
  w.Put<uint64_t>(digest.bytes);
  w.PutArray(digest.sha256.data(), digest.sha256.size());
  return std::move(w.str());
}

std::optional<ShardDigest> DecodeCheckpointReply(std::string_view payload) {
  WireReader r(payload);
  ShardDigest digest;
  const char* hex = nullptr;
  if (!r.Get(&digest.bytes) || !r.GetArray(64, 1, &hex) || !r.AtEnd()) return std::nullopt;
  digest.sha256.assign(hex, 64);
  return digest;
}

std::string EncodeDone(int32_t rank) {
  WireWriter w;
  w.Put<int32_t>(rank);
  return std::move(w.str());
}

bool DecodeDone(std::string_view payload, int32_t* rank) {
  WireReader r(payload);
  return r.Get(rank);
}

std::string EncodeDoneReply(const std::vector<int32_t>& finished) {
  WireWriter w;
  w.Put<int32_t>(static_cast<int32_t>(finished.size())).PutArray(finished.data(), finished.size());
  return std::move(w.str());
}

std::optional<std::vector<int32_t>> DecodeDoneReply(std::string_view payload) {
  WireReader r(payload);
  int32_t n = 0;
  const char* ranks = nullptr;
  if (!r.Get(&n) || n < 0 || !r.GetArray(static_cast<size_t>(n), 4, &ranks) || !r.AtEnd()) {
    return std::nullopt;
  }
  std::vector<int32_t> out(static_cast<size_t>(n));
  std::memcpy(out.data(), ranks, out.size() * 4);
  return out;
}

}  // namespace kubetrain::trainer
