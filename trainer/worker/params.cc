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
  auto latest = LatestCheckpoint(dir, 1);
  if (!latest.ok() || !latest->has_value()) return latest;
  KT_RETURN_IF_ERROR(shard_->Load(ShardPath(dir, **latest, 0, 1)));
  return latest;
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
  KT_RETURN_IF_ERROR(shard_->Save(ShardPath(dir, step, 0, 1)));
  return WriteManifest(dir, step, 1);
}

}  // namespace kubetrain::trainer
