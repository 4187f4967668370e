// libFuzzer target: the payload of a parameter-server frame (what a PS reads
// from any authenticated peer, and a worker from its PS), through every
// decoder in rpc/protocol.h; a decoded pull or push is then served by a
// ParamShard the way PsServer::Handle does (ids and rows copied out, rows
// pulled, the push applied through the ledger), so a bound that is off shows
// as an ASan report.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/ps/shard.h"
#include "trainer/rpc/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubetrain::trainer;
  if (size < 1) return 0;
  // The first byte picks the shape a push is decoded against (row dim, dense
  // size, wire float), as the PS knows them from its config and the hello.
  const int row_dim = data[0] & 7;  // 0: a model without embeddings (an MLP)
  const size_t dense_size = (data[0] >> 3) & 7;
  const WireFloat wire = (data[0] & 0x40) ? WireFloat::kBf16 : WireFloat::kF32;
  const std::string_view payload(reinterpret_cast<const char*>(data) + 1, size - 1);

  HelloRequest hello;
  if (DecodeHello(payload, &hello)) (void)EncodeHello(hello);
  (void)DecodeHelloReply(payload);
  ShardConfig config;
  config.dense_end = dense_size;
  config.sparse_dim = row_dim;
  const std::vector<float> dense_init(dense_size, 0.5f);
  ParamShard shard(config, dense_init.data());
  PullRequest pull;
  if (DecodePull(payload, &pull)) {
    std::vector<uint64_t> ids(pull.n);
    if (!ids.empty()) std::memcpy(ids.data(), pull.ids, ids.size() * sizeof(uint64_t));
    std::vector<float> out(ids.size() * row_dim + (pull.want_dense ? dense_size : 0));
    if (!ids.empty()) shard.PullSparse(ids.data(), ids.size(), out.data());
    if (pull.want_dense) shard.PullDense(out.data() + ids.size() * row_dim);
    std::string reply;
    PutWireFloats(out.data(), out.size(), wire, &reply);
  }
  PushRequest push;
  if (DecodePush(payload, row_dim, dense_size, wire, &push)) {
    std::vector<uint64_t> ids(push.n);
    if (!ids.empty()) std::memcpy(ids.data(), push.ids, ids.size() * sizeof(uint64_t));
    std::vector<float> rows(ids.size() * row_dim);
    GetWireFloats(push.rows, rows.size(), wire, rows.data());
    std::vector<float> dense(push.dense != nullptr ? dense_size : 0);
    if (push.dense != nullptr) GetWireFloats(push.dense, dense.size(), wire, dense.data());
    shard.Hello(0, 1);
    (void)shard.ApplyPush(0, 1, push.seq, push.dense != nullptr ? dense.data() : nullptr,
                          ids.data(), ids.size(), rows.data());
  }
  int64_t step = 0;
  std::string root;
  if (DecodeCheckpoint(payload, &step, &root)) (void)EncodeCheckpoint(step, root);
  if (auto digest = DecodeCheckpointReply(payload)) (void)EncodeCheckpointReply(*digest);
  int32_t rank = 0;
  if (DecodeDone(payload, &rank)) (void)EncodeDone(rank);
  if (auto finished = DecodeDoneReply(payload)) (void)EncodeDoneReply(*finished);
  (void)ParseWireFloat(payload);
  return 0;
}
