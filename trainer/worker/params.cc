#include "trainer/worker/params.h"

#include <algorithm>

#include "trainer/ps/checkpoint.h"

namespace kubetrain::trainer {

ShardConfig MakeShardConfig(const Model& model, int k, int n, uint64_t seed,
                            const OptimizerConfig& optimizer, const EmbeddingOptions& embedding) {
  ShardConfig c;
  std::tie(c.dense_begin, c.dense_end) = DenseRange(model.NumDenseParams(), k, n);
  c.sparse_dim = model.SparseRowDim();
  c.seed = seed;
  c.optimizer = optimizer;
  c.embedding = embedding;
  return c;
}

LocalParams::LocalParams(const Model& model, uint64_t seed, const OptimizerConfig& optimizer,
                         const EmbeddingOptions& embedding) {
  std::vector<float> init(model.NumDenseParams());
  model.InitDense(seed, init.data());
  shard_ = std::make_unique<ParamShard>(MakeShardConfig(model, 0, 1, seed, optimizer, embedding),
                                        init.data());
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
  if (dense != nullptr) shard_->PullDense(dense);
  return Status::Ok();
}

Status LocalParams::Push(int64_t, const std::vector<uint64_t>& ids, const float* row_grads,
                         const float* dense_grad) {
  shard_->Apply(dense_grad, ids.data(), ids.size(), row_grads);
  return Status::Ok();
}

Status LocalParams::SaveCheckpoint(const std::string& dir, int64_t step) {
  KT_RETURN_IF_ERROR(PrepareCheckpointDir(dir, step));
  auto digest = shard_->SaveCheckpoint(dir, step, 0, 1);
  if (!digest.ok()) return digest.status();
  return WriteManifest(dir, step, {*digest});
}

StatusOr<std::unique_ptr<CheckpointParams>> CheckpointParams::Load(
    const Model& model, uint64_t seed, const OptimizerConfig& optimizer, const std::string& root,
    const Checkpoint& checkpoint, int num_shards) {
  if (num_shards <= 0) return InvalidArgument("a checkpoint has at least one shard");
  std::unique_ptr<CheckpointParams> p(new CheckpointParams());
  p->row_dim_ = model.SparseRowDim();
  std::vector<float> init(model.NumDenseParams());
  model.InitDense(seed, init.data());
  for (int k = 0; k < num_shards; ++k) {
    const ShardConfig c = MakeShardConfig(model, k, num_shards, seed, optimizer);
    auto shard = std::make_unique<ParamShard>(c, init.data() + c.dense_begin);
    KT_RETURN_IF_ERROR(LoadShard(*shard, root, checkpoint, k, num_shards));
    p->shards_.push_back(std::move(shard));
  }
  return p;
}

Status CheckpointParams::Pull(const std::vector<uint64_t>& ids, float* rows, float* dense) {
  const int n = static_cast<int>(shards_.size());
  size_t offset = 0;
  for (int k = 0; k < n; ++k) {
    shards_[k]->PullDense(dense + offset);
    offset += shards_[k]->dense_size();
    if (ids.empty()) continue;
    if (n == 1) {
      shards_[k]->PullSparse(ids.data(), ids.size(), rows);
      continue;
    }
    ids_.clear();
    for (uint64_t id : ids) {
      if (ShardOfId(id, n) == k) ids_.push_back(id);
    }
    rows_.resize(ids_.size() * row_dim_);
    shards_[k]->PullSparse(ids_.data(), ids_.size(), rows_.data());
    size_t next = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ShardOfId(ids[i], n) != k) continue;
      std::copy_n(rows_.data() + next++ * row_dim_, row_dim_,
                  rows + i * static_cast<size_t>(row_dim_));
    }
  }
  return Status::Ok();
}

Status CheckpointParams::Push(int64_t, const std::vector<uint64_t>&, const float*, const float*) {
  return FailedPrecondition("a loaded checkpoint is read-only");
}

Status CheckpointParams::SaveCheckpoint(const std::string&, int64_t) {
  return FailedPrecondition("a loaded checkpoint is read-only");
}

}  // namespace kubetrain::trainer
