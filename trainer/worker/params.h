// Where a worker's parameters live. The training loop is written against ParamClient, so
// the same loop runs single-process (LocalParams) and against parameter servers
// (RemoteParams in trainer/rpc/remote_params.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/model/model.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/ps/shard.h"

namespace kubetrain::trainer {

class ParamClient {
 public:
  virtual ~ParamClient() = default;
  // Fills `rows` (ids.size() x row dim) and the whole dense vector (unless `dense` is
  // null: a caller computing from DenseInPlace()).
  virtual Status Pull(const std::vector<uint64_t>& ids, float* rows, float* dense) = 0;
  // The dense parameters themselves when this client keeps them in this process: the
  // caller may compute from them between a Pull and the next Push instead of pulling a
  // copy (Push updates them in place). nullptr (the default): Pull copies them.
  virtual float* DenseInPlace() { return nullptr; }
  // The ids the next Pull will ask for, given before the current step's Push. An
  // implementation may fetch them now, while the caller computes, and answer that Pull
  // with these values (then they lack the current step's own update: one step stale). The
  // default does nothing: the next Pull reads after the Push, as without the hint.
  virtual void Prefetch(const std::vector<uint64_t>& ids) { (void)ids; }
  // A client that keeps the dense parameters in this process may take their optimizer
  // update in slices during the step, each as soon as the model has its final gradient
  // (Model::SetDenseGradReady: a layer's, right after its backward pass, while it is still
  // in cache): then BeginDenseUpdate opens a step's update, UpdateDense applies it to
  // parameters [begin, end) from `dense_grad` (the whole gradient vector), each parameter
  // once per step, and that step's Push gets no dense gradient. The default: not supported
  // (Push applies the whole dense gradient).
  virtual bool UpdatesDenseInSlices() const { return false; }
  virtual void BeginDenseUpdate() {}
  virtual void UpdateDense(const float* /*dense_grad*/, size_t /*begin*/, size_t /*end*/) {}
  // Sends this step's gradients. In synchronous mode it returns once every worker's
  // gradients for `step` are applied.
  virtual Status Push(int64_t step, const std::vector<uint64_t>& ids, const float* row_grads,
                      const float* dense_grad) = 0;
  // Saves and commits a complete checkpoint of all parameters for `step`.
  virtual Status SaveCheckpoint(const std::string& dir, int64_t step) = 0;
  // True once after a parameter server said it got SIGTERM and waits for a checkpoint
  // request before it exits (the coordinator then saves at the end of its step). The
  // default: parameters in this process, nobody to ask.
  virtual bool TakeCheckpointRequest() { return false; }
  // The embedding table's stats summed over its shards (rows, bytes, admitted, filtered,
  // evicted), as of the last checkpoint for parameter servers (their checkpoint replies
  // carry them); nullopt when there are none yet.
  virtual std::optional<EmbeddingStats> embedding_stats() const { return std::nullopt; }
};

// Shard configuration for PS `k` of `n`, for `model`.
ShardConfig MakeShardConfig(const Model& model, int k, int n, uint64_t seed,
                            const OptimizerConfig& optimizer,
                            const EmbeddingOptions& embedding = {});

// All parameters in this process: one shard covering everything.
class LocalParams : public ParamClient {
 public:
  LocalParams(const Model& model, uint64_t seed, const OptimizerConfig& optimizer,
              const EmbeddingOptions& embedding = {});

  // Loads the latest complete checkpoint under `dir`; returns its step, or nullopt.
  StatusOr<std::optional<int64_t>> Restore(const std::string& dir);

  Status Pull(const std::vector<uint64_t>& ids, float* rows, float* dense) override;
  float* DenseInPlace() override { return shard_->dense_data(); }
  bool UpdatesDenseInSlices() const override { return true; }
  void BeginDenseUpdate() override { shard_->BeginDenseUpdate(); }
  void UpdateDense(const float* dense_grad, size_t begin, size_t end) override {
    shard_->ApplyDense(dense_grad, begin, end);
  }
  Status Push(int64_t step, const std::vector<uint64_t>& ids, const float* row_grads,
              const float* dense_grad) override;
  Status SaveCheckpoint(const std::string& dir, int64_t step) override;
  std::optional<EmbeddingStats> embedding_stats() const override {
    return shard_->embedding_stats();
  }
  const ParamShard& shard() const { return *shard_; }

 private:
  std::unique_ptr<ParamShard> shard_;
};

// Every parameter of one committed checkpoint, loaded into this process (the evaluator):
// one shard per parameter server, embedding rows routed to shards as the servers route
// them, so Pull returns what the servers held at that step. Read-only: Push and
// SaveCheckpoint fail with FailedPrecondition. Not thread-safe beyond ParamShard's lock.
class CheckpointParams : public ParamClient {
 public:
  // Loads `checkpoint` (num_shards shards) under `root` with LoadShard, which checks each
  // shard against its MANIFEST. The model, seed and optimizer must be the job's (a shard
  // of another configuration is refused with InvalidArgument).
  static StatusOr<std::unique_ptr<CheckpointParams>> Load(const Model& model, uint64_t seed,
                                                          const OptimizerConfig& optimizer,
                                                          const std::string& root,
                                                          const Checkpoint& checkpoint,
                                                          int num_shards);

  Status Pull(const std::vector<uint64_t>& ids, float* rows, float* dense) override;
  Status Push(int64_t step, const std::vector<uint64_t>& ids, const float* row_grads,
              const float* dense_grad) override;
  Status SaveCheckpoint(const std::string& dir, int64_t step) override;

 private:
  CheckpointParams() = default;

  std::vector<std::unique_ptr<ParamShard>> shards_;
  int row_dim_ = 0;
  std::vector<float> rows_;  // one shard's rows, before they are put in place
  std::vector<uint64_t> ids_;
};

}  // namespace kubetrain::trainer
