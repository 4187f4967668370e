// libFuzzer target: a checkpoint shard file (read back from a shared volume or
// an S3 prefix the job's pods can write) through ParamShard::Restore. The
// shard is configured from the file's own header, within small bounds, so the
// fuzzer reaches the ledger, dense and row sections instead of stopping at the
// configuration check; a restored shard is then read whole.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "trainer/ps/optimizer.h"
#include "trainer/ps/shard.h"

namespace {

template <typename T>
T At(const uint8_t* data, size_t size, size_t offset) {
  T v{};
  if (offset + sizeof(T) <= size) std::memcpy(&v, data + offset, sizeof(T));
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubetrain::trainer;
  // Header: magic[8], u64 dense_begin, u64 dense_end, i32 sparse_dim, i32 slots.
  const uint64_t begin = At<uint64_t>(data, size, 8);
  const uint64_t end = At<uint64_t>(data, size, 16);
  const int32_t dim = At<int32_t>(data, size, 24);
  const int32_t slots = At<int32_t>(data, size, 28);
  ShardConfig config;
  if (begin <= end && end - begin <= 4096 && begin <= (uint64_t{1} << 40)) {
    config.dense_begin = begin;
    config.dense_end = end;
  }
  if (dim >= 0 && dim <= 64) config.sparse_dim = dim;
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    if (StateSlots(kind) == slots) config.optimizer.kind = kind;
  }
  const std::vector<float> dense_init(config.dense_end - config.dense_begin, 0.f);
  ParamShard shard(config, dense_init.data());
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (!shard.Restore(bytes, "fuzz").ok()) return 0;
  std::vector<float> dense(shard.dense_size());
  shard.PullDense(dense.data());
  size_t rows = 0;
  shard.ForEachRow([&](uint64_t, const float*, int64_t) { ++rows; });
  if (rows != shard.num_rows()) std::abort();
  (void)shard.Finished();
  (void)shard.PushesByRank();
  // An update after a restore: the ledger and the rows read are used as they are.
  std::vector<float> grad(static_cast<size_t>(shard.sparse_dim()), 0.1f);
  const uint64_t id = 7;
  shard.Hello(0, 1);
  (void)shard.ApplyPush(0, 1, 1, nullptr, &id, 1, grad.data());
  return 0;
}
