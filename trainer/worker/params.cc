#include "trainer/worker/params.h"

#include "trainer/ps/checkpoint.h"

namespace kubetrain::trainer {

ShardConfig MakeShardConfig(const Model& model, int k, int n, uint64_t seed,
                            const OptimizerConfig& optimizer) {
  ShardConfig c;
  std::tie(c.dense_begin, c.dense_end) = DenseRange(model.NumDenseParams(), k, n);
  c.sparse_dim = model.SparseRowDim();
  c.seed = seed;
  c.optimizer = optimizer;
  return c;
}

LocalParams::LocalParams(const Model& model, uint64_t seed, const OptimizerConfig& optimizer) {
  std::vector<float> init(model.NumDenseParams());
  model.InitDense(seed, init.data());
  shard_ = std::make_unique<ParamShard>(MakeShardConfig(model, 0, 1, seed, optimizer), init.data());
}

StatusOr<std::optional<int64_t>> LocalParams::Restore(const std::string& dir) {
  auto found = FindCheckpoint(dir, 1);
  if (!found.ok()) return found.status();
  if (!found->has_value()) return std::optional<int64_t>();
  KT_RETURN_IF_ERROR(LoadShard(*shard_, dir, **found, 0, 1));
  return std::optional<int64_t>((*found)->step);
}

Status LocalParams::Pull(const std::vector<uint64_t>& ids, float* rows, float* dense) {
  if (!ids.empty()) shard_->PullSparse(ids.data(), ids.size(), rows);
  shard_->PullDense(dense);
  return Status::Ok();
}

Status LocalParams::Push(int64_t, const std::vector<uint64_t>& ids, const float* row_grads,
                         const float* dense_grad) {
  shard_->Apply(dense_grad, ids.data(), ids.size(), row_grads);
  return Status::Ok();
}

Status LocalParams::SaveCheckpoint(const std::string& dir, int64_t step) {
  KT_RETURN_IF_ERROR(PrepareCheckpointDir(dir, step));
  auto digest = shard_->Save(ShardPath(dir, step, 0, 1));
  if (!digest.ok()) return digest.status();
  return WriteManifest(dir, step, {*digest});
}

}  // namespace kubetrain::trainer
