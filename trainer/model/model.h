// Models the trainer can run. A model owns its oneDNN primitives and a flat vector of its
// dense parameters and gradients; sparse parameters (embedding rows) are owned by the
// parameter store and passed in per step, so the same model object serves single-process
// and parameter-server training.
//
// Not thread-safe: one model per training thread. Errors from oneDNN come back as Status.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/model/batch.h"
#include "trainer/model/layers.h"

namespace kubetrain::trainer {

class Model {
 public:
  virtual ~Model() = default;

  virtual int batch_size() const = 0;
  // 1 for binary models (output is P(y = 1)), else the number of classes.
  virtual int num_outputs() const = 0;
  virtual size_t NumDenseParams() const = 0;
  // Floats per embedding row; 0 when the model has no sparse parameters.
  virtual int SparseRowDim() const = 0;
  // Deterministic initial dense parameters (every process computes the same values).
  virtual void InitDense(uint64_t seed, float* out) const = 0;

  // The model's current dense parameters (write pulled values here) and the gradients
  // of the last TrainStep.
  std::vector<float>& dense_params() { return params_; }
  const std::vector<float>& dense_grads() const { return grads_; }
  // Points the model at `params` (NumDenseParams() floats, valid while the model uses
  // them), which it then computes from instead of dense_params(), so a parameter store in
  // this process needs no copy per step; nullptr points it back at dense_params().
  virtual void UseDenseParams(float* params) = 0;

  // One forward + backward pass. `rows` holds lookup.ids.size() rows of SparseRowDim()
  // floats; `row_grads` (same shape) receives their gradients. Returns the mean loss.
  // The batch must have exactly batch_size() samples.
  virtual StatusOr<float> TrainStep(const Batch& batch, const SparseLookup& lookup,
                                    const float* rows, float* row_grads) = 0;
  // Forward only: writes batch_size() x num_outputs() probabilities.
  virtual Status Predict(const Batch& batch, const SparseLookup& lookup, const float* rows,
                         float* probs) = 0;

  // Flops of the MLP layers in one TrainStep (for the GFLOPS benchmark).
  virtual double MlpFlopsPerStep() const = 0;

  // Called by TrainStep with slices [begin, end) of the dense parameters, together covering
  // each parameter once per step, as soon as the slice's gradient in dense_grads() is final
  // and the step reads those parameters no more (with one compute thread: a layer's, right
  // after its backward pass, so its caller can update them while they are in cache). Called
  // on the thread that called TrainStep. Empty (the default): not called.
  using DenseGradReady = std::function<void(size_t begin, size_t end)>;
  void SetDenseGradReady(DenseGradReady fn) { grad_ready_ = std::move(fn); }

 protected:
  std::vector<float> params_;
  std::vector<float> grads_;
  DenseGradReady grad_ready_;
};

struct WideDeepConfig {
  int batch_size = 512;
  int num_dense = 13;
  int num_cat = 26;
  int embedding_dim = 16;
  std::vector<int> hidden = {1024, 512, 256};
  Precision precision = Precision::kFp32;  // of the MLP's inner products (see layers.h)
  // Predict only (serving): forward_inference primitives on weights reordered once, at
  // UseDenseParams, into oneDNN's preferred layout; TrainStep fails. Call UseDenseParams
  // again after the parameters change.
  bool inference_only = false;
};

// Wide & Deep for Criteo-format data.
//   deep: [dense features | embedding(cat_0) | ... | embedding(cat_25)] -> MLP(hidden, ReLU)
//         -> 1 logit
//   wide: sum over the categorical features of a scalar weight per hashed id
//   P(click) = sigmoid(deep + wide), trained with binary cross-entropy.
// An embedding row is embedding_dim + 1 floats: the embedding, then the wide weight, so
// one sparse pull serves both parts.
StatusOr<std::unique_ptr<Model>> CreateWideDeep(const WideDeepConfig& config);

struct MlpClassifierConfig {
  int batch_size = 128;
  int num_features = 0;
  int num_classes = 2;
  std::vector<int> hidden = {64};
  Precision precision = Precision::kFp32;
  bool inference_only = false;  // as WideDeepConfig's
};

// A plain MLP classifier over dense features with softmax cross-entropy.
StatusOr<std::unique_ptr<Model>> CreateMlpClassifier(const MlpClassifierConfig& config);

// Deterministic initial value of an embedding row from (seed, id) alone, so any PS
// shard creating the row lazily produces the same value: small uniform embedding,
// zero wide weight. dim <= 0 (no embeddings) writes nothing.
void InitSparseRow(uint64_t seed, uint64_t id, int dim, float* row);

// Threads for oneDNN: the container's CPU limit from cgroup v2 (cpu.max) or v1
// (cfs_quota/period), rounded up, capped by the visible cores; the visible cores when
// there is no limit.
int DefaultThreadCount();
// The CPU limit under a cgroup filesystem root (cgroup v2 cpu.max, else v1
// cpu/cpu.cfs_quota_us over cpu/cpu.cfs_period_us), rounded up; 0 when there is none.
int CgroupCpuLimit(const std::string& root);
// Sets oneDNN's (OpenMP) thread count for this process.
void SetComputeThreads(int n);
// The count last given to SetComputeThreads (1 before any call), for parallel loops that
// may run on threads other than the one that called it (OpenMP's own setting is per
// thread; a PS connection thread would otherwise use every visible core).
int ComputeThreads();

}  // namespace kubetrain::trainer
