#include "trainer/rpc/protocol.h"

#include <algorithm>
#include <cstring>

#include "trainer/net/wire.h"
#include "trainer/simd.h"

namespace kubetrain::trainer {

StatusOr<WireFloat> ParseWireFloat(std::string_view name) {
  if (name == "fp32") return WireFloat::kF32;
  if (name == "bf16") return WireFloat::kBf16;
  return InvalidArgument("unknown wire precision \"" + std::string(name) +
                         "\" (expected fp32 or bf16)");
}

const char* WireFloatName(WireFloat w) {
  return w == WireFloat::kBf16 ? "bf16" : "fp32";
}

namespace {

// The conversions run over a million floats per step: compiled for AVX-512, AVX2 and
// baseline x86-64, picked at load time (the loops have no branches, so GCC vectorises them).

// FP32 -> BF16, rounding to nearest even; a NaN stays a (quiet) NaN, infinities stay.
KT_SIMD_CLONES void ToBf16(const uint32_t* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = in[i];
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    out[i] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

KT_SIMD_CLONES void FromBf16(const uint16_t* __restrict in, uint32_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(in[i]) << 16;
}

#undef KT_SIMD_CLONES

}  // namespace

// Nothing to copy returns first: p or out may then be an empty vector's null data(),
// which memcpy must not see even for 0 bytes.
void PutWireFloats(const float* p, size_t n, WireFloat w, std::string* out) {
  if (n == 0) return;
  const size_t at = out->size();
  out->resize(at + n * WireFloatBytes(w));
  char* dst = out->data() + at;
  if (w == WireFloat::kF32) {
    std::memcpy(dst, p, n * 4);
    return;
  }
  // Converted in blocks through aligned scratch (the payload may be unaligned).
  constexpr size_t kBlock = 4096;
  uint32_t in[kBlock];
  uint16_t half[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    std::memcpy(in, p + i, m * 4);
    ToBf16(in, half, m);
    std::memcpy(dst + i * 2, half, m * 2);
  }
}

void GetWireFloats(const char* p, size_t n, WireFloat w, float* out) {
  if (n == 0) return;
  if (w == WireFloat::kF32) {
    std::memcpy(out, p, n * 4);
    return;
  }
  constexpr size_t kBlock = 4096;
  uint16_t half[kBlock];
  uint32_t bits[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    std::memcpy(half, p + i * 2, m * 2);
    FromBf16(half, bits, m);
    std::memcpy(out + i, bits, m * 4);
  }
}

std::string EncodeHello(const HelloRequest& hello) {
  WireWriter w;
  w.Put<int32_t>(hello.rank).Put<uint64_t>(hello.total_dense).Put<int32_t>(hello.row_dim);
  w.Put<uint32_t>(hello.version).Put<uint64_t>(hello.incarnation);
  w.Put<uint8_t>(static_cast<uint8_t>(hello.wire));
  return std::move(w.str());
}

bool DecodeHello(std::string_view payload, HelloRequest* hello) {
  WireReader r(payload);
  if (!r.Get(&hello->rank) || !r.Get(&hello->total_dense) || !r.Get(&hello->row_dim)) {
    return false;
  }
  hello->version = 1;  // version 1 ended here
  hello->incarnation = 0;
  hello->wire = WireFloat::kF32;
  if (r.AtEnd()) return true;
  if (!r.Get(&hello->version) || !r.Get(&hello->incarnation)) return false;
  if (r.AtEnd()) return true;  // version 2 ended here
  uint8_t wire = 0;
  if (!r.Get(&wire) || wire > static_cast<uint8_t>(WireFloat::kBf16)) return false;
  hello->wire = static_cast<WireFloat>(wire);
  return true;
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
                WireFloat wire, std::string* buffer) {
  WireWriter w(std::move(*buffer));
  w.Put<int64_t>(step).Put<uint64_t>(seq).Put<uint32_t>(static_cast<uint32_t>(ids.size()));
  w.PutArray(ids.data(), ids.size());
  for (int pos : positions) {
    PutWireFloats(row_grads + static_cast<size_t>(pos) * row_dim, row_dim, wire, &w.str());
  }
  w.Put<uint8_t>(1);
  *buffer = std::move(w.str());
}

bool DecodePush(std::string_view payload, int row_dim, size_t dense_size, WireFloat wire,
                PushRequest* push) {
  WireReader r(payload);
  uint8_t has_dense = 0;
  push->dense = nullptr;
  const size_t elem = WireFloatBytes(wire);
  return r.Get(&push->step) && r.Get(&push->seq) && r.Get(&push->n) &&
         r.GetArray(push->n, 8, &push->ids) &&
         r.GetArray(static_cast<size_t>(push->n) * row_dim, elem, &push->rows) &&
         r.Get(&has_dense) && (!has_dense || r.GetArray(dense_size, elem, &push->dense)) &&
         r.AtEnd();
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

std::string EncodeCheckpointReply(const ShardDigest& digest, const EmbeddingStats& stats) {
  WireWriter w;
  w.Put<uint64_t>(digest.bytes);
  w.PutArray(digest.sha256.data(), digest.sha256.size());
  // A delta's chain and the stats after it (an older coordinator's reader stops at the
  // SHA-256 and fails its AtEnd check: every replica runs the same version).
  w.Put<uint32_t>(static_cast<uint32_t>(digest.chain.size()));
  for (const ChainLink& l : digest.chain) {
    w.Put<int64_t>(l.step).Put<uint64_t>(l.bytes);
    w.PutArray(l.sha256.data(), l.sha256.size());
  }
  w.Put<uint64_t>(stats.rows).Put<uint64_t>(stats.bytes).Put<uint64_t>(stats.admitted);
  w.Put<uint64_t>(stats.filtered).Put<uint64_t>(stats.evicted);
  return std::move(w.str());
}

std::optional<ShardDigest> DecodeCheckpointReply(std::string_view payload, EmbeddingStats* stats) {
  WireReader r(payload);
  ShardDigest digest;
  const char* hex = nullptr;
  if (!r.Get(&digest.bytes) || !r.GetArray(64, 1, &hex)) return std::nullopt;
  digest.sha256.assign(hex, 64);
  if (r.AtEnd()) return digest;
  uint32_t links = 0;
  if (!r.Get(&links) || links > kMaxChainLinks) return std::nullopt;
  for (uint32_t i = 0; i < links; ++i) {
    ChainLink l;
    if (!r.Get(&l.step) || !r.Get(&l.bytes) || !r.GetArray(64, 1, &hex)) return std::nullopt;
    l.sha256.assign(hex, 64);
    digest.chain.push_back(std::move(l));
  }
  EmbeddingStats st;
  if (!r.Get(&st.rows) || !r.Get(&st.bytes) || !r.Get(&st.admitted) || !r.Get(&st.filtered) ||
      !r.Get(&st.evicted) || !r.AtEnd()) {
    return std::nullopt;
  }
  if (stats != nullptr) *stats = st;
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
  if (n > 0) std::memcpy(out.data(), ranks, out.size() * 4);  // no ranks: data() may be null
  return out;
}

}  // namespace kubetrain::trainer
