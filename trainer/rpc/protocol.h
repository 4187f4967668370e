// The parameter-server protocol: the payloads of the request and reply frames a
// worker (rpc/remote_params.cc) and a parameter server (rpc/ps_server.cc) exchange, in
// one place. Frame types are FrameType in net/transport.h; fields are
// fixed-width little-endian (net/wire.h), arrays unaligned.
//
//   kHello       i32 rank, u64 dense size, i32 row dim, u32 protocol version, u64 incarnation,
//                u8 wire float (WireFloat)      -> kOk i64 last applied step, u32 version | kError
//   kPull        u32 n, u64 ids[n], u8 want_dense       -> kPullReply w rows[n*dim], dense slice
//   kPush        i64 step, u64 seq, u32 n, u64 ids[n], w rows[n*dim], u8 has_dense,
//                w dense slice                          -> kOk [u8 flags] | kError
//                (flags bit 0, kPushReplyStopping: this PS got SIGTERM and waits for the
//                coordinator's checkpoint request before it exits; an empty kOk: none)
//   (w: the float type the worker named in its hello, for its whole connection: f32, or
//   bf16 — half the bytes; the PS converts to and from its FP32 parameters.)
//   kCheckpoint  i64 step, root (the rest, optional)    -> kOk u64 bytes, 64 hex SHA-256 [chain] |
//   kError kDone        i32 rank (-1: only ask)   -> kDoneReply i32 n, i32 finished ranks[n]
//   kShutdown    (empty)                                -> kOk, then the PS exits 0
//   kError       a message, in reply to any request
//
// Version 2 added the version, the worker's incarnation and the push's sequence number
// (exactly-once pushes, ps/ledger.h) and the finished ranks; version 3 the wire float. A
// version-1 hello (no version) decodes as version 1, a version-2 hello (no wire float) as
// version 2, and a version-1 hello reply (8 bytes) as version 1, so either side can name
// the mismatch instead of failing on a misread push.
//
// Decoding is bounds-checked: a short or malformed payload is `false`, never a
// crash. Hello and Done ignore trailing bytes; Pull and Push must
// end where their arrays do. Decoded arrays point into the payload (no copy):
// the payload must outlive their use, and callers copy them out with memcpy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/ps/shard.h"

namespace kubetrain::trainer {

inline constexpr uint32_t kPsProtocolVersion = 3;

// How the floats of pulls and pushes travel. The PS keeps FP32 parameters and optimizer
// state either way; BF16 (round to nearest even) halves the bytes of gradients and pulled
// parameters at 8 bits of mantissa.
enum class WireFloat : uint8_t { kF32 = 0, kBf16 = 1 };
StatusOr<WireFloat> ParseWireFloat(std::string_view name);  // "fp32" | "bf16"
const char* WireFloatName(WireFloat w);
inline size_t WireFloatBytes(WireFloat w) {
  return w == WireFloat::kBf16 ? 2 : 4;
}
// Appends n floats to `out` in `w`.
void PutWireFloats(const float* p, size_t n, WireFloat w, std::string* out);
// Reads n floats in `w` (unaligned) into `out`.
void GetWireFloats(const char* p, size_t n, WireFloat w, float* out);

// The push reply's flags (after kOk; older servers send none, older workers ignore them).
inline constexpr char kPushReplyStopping = 0x01;
inline bool IsPushReplyStopping(std::string_view reply) {
  return !reply.empty() && (reply[0] & kPushReplyStopping) != 0;
}

struct HelloRequest {
  int32_t rank = 0;
  uint64_t total_dense = 0;  // the whole model's dense parameters
  int32_t row_dim = 0;       // floats per embedding row
  uint32_t version = kPsProtocolVersion;
  uint64_t incarnation = 0;  // random per worker process; names its pushes' numbering
  WireFloat wire = WireFloat::kF32;
};
std::string EncodeHello(const HelloRequest& hello);
bool DecodeHello(std::string_view payload, HelloRequest* hello);
// The reply: the last step the PS applied (a restarted synchronous worker joins there), and
// the PS's protocol version.
struct HelloReply {
  int64_t last_step = -1;
  uint32_t version = kPsProtocolVersion;
};
std::string EncodeHelloReply(int64_t last_step);
std::optional<HelloReply> DecodeHelloReply(std::string_view payload);

// Encodes into `buffer`, reusing its storage.
void EncodePull(const std::vector<uint64_t>& ids, bool want_dense, std::string* buffer);
struct PullRequest {
  uint32_t n = 0;
  const char* ids = nullptr;  // n u64, unaligned
  bool want_dense = false;
};
bool DecodePull(std::string_view payload, PullRequest* pull);

// The push of `ids` with their gradient rows row_grads[positions[i] * row_dim ...] in
// `wire`, and has_dense = 1: the caller appends the dense slice in `wire` (PutWireFloats),
// or sends it as the frame's second part when `wire` is f32 (no copy). `seq` numbers the
// worker's pushes to this PS (1, 2, ...; see ps/ledger.h). Encodes into `buffer`, reusing
// its storage.
void EncodePush(int64_t step, uint64_t seq, const std::vector<uint64_t>& ids,
                const std::vector<int>& positions, const float* row_grads, int row_dim,
                WireFloat wire, std::string* buffer);
struct PushRequest {
  int64_t step = 0;
  uint64_t seq = 0;
  uint32_t n = 0;
  const char* ids = nullptr;    // n u64, unaligned
  const char* rows = nullptr;   // n * row_dim floats in the wire type, unaligned
  const char* dense = nullptr;  // dense_size floats in the wire type; nullptr without dense
};
bool DecodePush(std::string_view payload, int row_dim, size_t dense_size, WireFloat wire,
                PushRequest* push);

// The coordinator names the checkpoint root (its --checkpoint-dir, or the final
// model's); an older coordinator sends none: `root` is then empty and the PS
// uses its own --checkpoint-dir.
std::string EncodeCheckpoint(int64_t step, std::string_view root);
bool DecodeCheckpoint(std::string_view payload, int64_t* step, std::string* root);
// The reply: what the PS wrote (size, SHA-256 as 64 lower-case hex digits), for
// the coordinator's MANIFEST.
// The reply carries a delta's chain after the digest: u32 links, each i64 step, u64 bytes,
// 64 hex SHA-256; at most kMaxChainLinks (--checkpoint-full-every is bounded by it).
inline constexpr uint32_t kMaxChainLinks = 1000;
// Then the PS's embedding stats (5 x u64) after the chain.
std::string EncodeCheckpointReply(const ShardDigest& digest, const EmbeddingStats& stats = {});
std::optional<ShardDigest> DecodeCheckpointReply(std::string_view payload,
                                                 EmbeddingStats* stats = nullptr);

std::string EncodeDone(int32_t rank);
bool DecodeDone(std::string_view payload, int32_t* rank);
// The reply: the ranks of the workers this PS knows have finished.
std::string EncodeDoneReply(const std::vector<int32_t>& finished);
std::optional<std::vector<int32_t>> DecodeDoneReply(std::string_view payload);

}  // namespace kubetrain::trainer
