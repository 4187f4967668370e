#include "trainer/model/model.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>

#include "trainer/model/loss.h"
#include "trainer/model/parallel.h"

namespace kubetrain::trainer {
namespace {

// Batch sizes and embedding row counts from which the gather into the MLP's input and the
// scatter of its gradient back to the rows are split over the compute threads.
constexpr size_t kParallelSamples = 128;
constexpr size_t kParallelRows = 2048;
// The embedding dimension the gather and scatter are compiled for (any other runs too).
constexpr int kCommonDim = 16;

// dst[i] += src[i] for i < n.
void AddTo(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Creates the MLP in -> hidden... -> out and binds it to `params` and `grads`, which are
// resized to its parameter count and zeroed.
StatusOr<std::unique_ptr<Mlp>> CreateBoundMlp(DnnlContext* ctx, int batch, int in,
                                              const std::vector<int>& hidden, int out,
                                              Precision precision, bool inference,
                                              std::vector<float>& params,
                                              std::vector<float>& grads) {
  std::vector<int> sizes = {in};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(out);
  KT_ASSIGN_OR_RETURN(std::unique_ptr<Mlp> mlp,
                      Mlp::Create(ctx, batch, sizes, precision, inference));
  params.assign(mlp->NumParams(), 0.f);
  grads.assign(mlp->NumParams(), 0.f);
  mlp->Bind(params.data(), grads.data());
  return mlp;
}

class WideDeep : public Model {
 public:
  explicit WideDeep(const WideDeepConfig& c) : c_(c) {}

  Status Build() {
    KT_ASSIGN_OR_RETURN(mlp_, CreateBoundMlp(&ctx_, c_.batch_size, InputWidth(), c_.hidden, 1,
                                             c_.precision, c_.inference_only, params_, grads_));
    sizes_ = {InputWidth()};
    sizes_.insert(sizes_.end(), c_.hidden.begin(), c_.hidden.end());
    sizes_.push_back(1);
    dense_ = params_.data();
    input_.resize(static_cast<size_t>(c_.batch_size) * InputWidth());
    diff_input_.resize(input_.size());
    logits_.resize(c_.batch_size);
    diff_logits_.resize(c_.batch_size);
    return Status::Ok();
  }

  int batch_size() const override { return c_.batch_size; }
  int num_outputs() const override { return 1; }
  size_t NumDenseParams() const override { return params_.size(); }
  int SparseRowDim() const override { return c_.embedding_dim + 1; }
  void InitDense(uint64_t seed, float* out) const override { mlp_->Init(seed, out); }
  void UseDenseParams(float* params) override {
    dense_ = params != nullptr ? params : params_.data();
    mlp_->Bind(dense_, grads_.data());
  }
  // The embeddings' gradients need the first layer's backward-data pass.
  double MlpFlopsPerStep() const override { return mlp_->FlopsPerStep(/*input_grad=*/true); }

  StatusOr<float> TrainStep(const Batch& b, const SparseLookup& lookup, const float* rows,
                            float* row_grads) override {
    KT_RETURN_IF_ERROR(CheckBatch(b));
    if (c_.inference_only) return FailedPrecondition("an inference-only model does not train");
    const int threads = std::min(ComputeThreads(), b.size);
    if (threads > 1 && !omp_in_parallel())
      return TrainStepInLanes(threads, b, lookup, rows, row_grads);
    try {
      Forward(b, lookup, rows);
      const float loss =
          SigmoidBinaryCrossEntropy(logits_.data(), b.label.data(), b.size, diff_logits_.data());
      mlp_->Backward(diff_logits_.data(), diff_input_.data(), grad_ready_ ? &grad_ready_ : nullptr);
      // Scatter the input gradient back to the rows, split by row over the compute threads.
      const size_t num_rows = lookup.ids.size();
      ParallelParts(num_rows >= kParallelRows, [&](int part, int parts) {
        ScatterRowGrads(b, lookup, row_grads, part, parts);
      });
      return loss;
    } catch (const dnnl::error& e) {
      return Internal(std::string("oneDNN: ") + e.what());
    }
  }

  Status Predict(const Batch& b, const SparseLookup& lookup, const float* rows,
                 float* probs) override {
    KT_RETURN_IF_ERROR(CheckBatch(b));
    try {
      Forward(b, lookup, rows);
    } catch (const dnnl::error& e) {
      return Internal(std::string("oneDNN: ") + e.what());
    }
    for (int s = 0; s < b.size; ++s) probs[s] = Sigmoid(logits_[s]);
    return Status::Ok();
  }

 private:
  int InputWidth() const { return c_.num_dense + c_.num_cat * c_.embedding_dim; }

  Status CheckBatch(const Batch& b) const {
    if (b.size != c_.batch_size || b.num_dense != c_.num_dense || b.num_cat != c_.num_cat) {
      return InvalidArgument("batch shape (" + std::to_string(b.size) + ", " +
                             std::to_string(b.num_dense) + " dense, " + std::to_string(b.num_cat) +
                             " categorical) does not match the model");
    }
    return Status::Ok();
  }

  // The MLP's input for samples [begin, end) and their wide logits (into logits_).
  void Gather(const Batch& b, const SparseLookup& lookup, const float* rows, size_t begin,
              size_t end) {
    if (c_.embedding_dim == kCommonDim) {
      GatherDim<kCommonDim>(b, lookup, rows, begin, end);
    } else {
      GatherDim<0>(b, lookup, rows, begin, end);
    }
  }

  // Gather with the embedding dimension kDim known at compile time (0: c_.embedding_dim), so
  // that the common one copies each embedding with whole-vector moves, not a memcpy call.
  template <int kDim>
  void GatherDim(const Batch& b, const SparseLookup& lookup, const float* rows, size_t begin,
                 size_t end) {
    const int edim = kDim > 0 ? kDim : c_.embedding_dim;
    const int dim = edim + 1;
    const int in = InputWidth();
    for (size_t s = begin; s < end; ++s) {
      float* x = input_.data() + s * in;
      std::memcpy(x, b.dense.data() + s * c_.num_dense, sizeof(float) * c_.num_dense);
      float wide = 0.f;
      for (int f = 0; f < c_.num_cat; ++f) {
        const float* __restrict row =
            rows + static_cast<size_t>(lookup.index[s * c_.num_cat + f]) * dim;
        float* __restrict e = x + c_.num_dense + f * edim;
        for (int k = 0; k < edim; ++k) e[k] = row[k];
        wide += row[edim];
      }
      logits_[s] = wide;
    }
  }

  // Part `part` of `parts` of the scatter of diff_input_ back to the rows: the rows r with
  // r % parts == part (all of them when parts is 1). The wide weight's gradient is the
  // logit's gradient itself. Every occurrence of a row is added by the same part in sample
  // order, so the sums are the sequential ones at any number of parts.
  void ScatterRowGrads(const Batch& b, const SparseLookup& lookup, float* row_grads, int part,
                       int parts) const {
    if (c_.embedding_dim == kCommonDim) {
      ScatterRowGradsDim<kCommonDim>(b, lookup, row_grads, part, parts);
    } else {
      ScatterRowGradsDim<0>(b, lookup, row_grads, part, parts);
    }
  }

  template <int kDim>
  void ScatterRowGradsDim(const Batch& b, const SparseLookup& lookup, float* row_grads, int part,
                          int parts) const {
    const int edim = kDim > 0 ? kDim : c_.embedding_dim;
    const int dim = edim + 1;
    const int in = InputWidth();
    const size_t num_rows = lookup.ids.size();
    for (size_t r = static_cast<size_t>(part); r < num_rows; r += parts) {
      std::memset(row_grads + r * dim, 0, sizeof(float) * dim);
    }
    for (int s = 0; s < b.size; ++s) {
      const float* d = diff_input_.data() + static_cast<size_t>(s) * in + c_.num_dense;
      for (int f = 0; f < c_.num_cat; ++f) {
        const int r = lookup.index[s * c_.num_cat + f];
        if (parts > 1 && r % parts != part) continue;
        float* __restrict g = row_grads + static_cast<size_t>(r) * dim;
        const float* __restrict e = d + f * edim;
        for (int k = 0; k < edim; ++k) g[k] += e[k];
        g[edim] += diff_logits_[s];
      }
    }
  }

  void Forward(const Batch& b, const SparseLookup& lookup, const float* rows) {
    // The MLP's input, one sample per thread at a time.
    ParallelRanges(b.size, kParallelSamples,
                   [&](size_t begin, size_t end) { Gather(b, lookup, rows, begin, end); });
    const float* deep = mlp_->Forward(input_.data());
    for (int s = 0; s < b.size; ++s) logits_[s] += deep[s];
  }

  // Data-parallel lanes, for more than one compute thread: lane k of n owns samples
  // [batch * k / n, batch * (k + 1) / n) of every batch and an MLP of its own for that many
  // samples whose oneDNN primitives run on one thread, bound to the shared parameters and
  // to gradients of its own (lane 0: grads_).
  struct Lane {
    int begin = 0, end = 0;
    DnnlContext ctx;
    std::unique_ptr<Mlp> mlp;
    std::vector<float> grads;  // empty for lane 0
    double loss_sum = 0;
    std::string error;  // of the last step or of building the lane; empty: none
  };

  // (Re)builds n lanes, each on the thread that will run it, with OpenMP told to use one
  // thread there so oneDNN builds its primitives for one thread.
  Status BuildLanes(int n) {
    lanes_.clear();
    lanes_.resize(n);
    std::vector<Status> errors(n);
#pragma omp parallel num_threads(n)
    {
      omp_set_num_threads(1);  // this implicit task only
      for (int k = omp_get_thread_num(); k < n; k += omp_get_num_threads()) {
        try {
          auto lane = std::make_unique<Lane>();
          lane->begin = static_cast<int>(static_cast<int64_t>(c_.batch_size) * k / n);
          lane->end = static_cast<int>(static_cast<int64_t>(c_.batch_size) * (k + 1) / n);
          auto mlp = Mlp::Create(&lane->ctx, lane->end - lane->begin, sizes_, c_.precision);
          if (!mlp.ok()) {
            errors[k] = mlp.status();
            continue;
          }
          lane->mlp = std::move(*mlp);
          if (k > 0) lane->grads.assign(grads_.size(), 0.f);
          lanes_[k] = std::move(lane);
        } catch (const dnnl::error& e) {
          errors[k] = Internal(std::string("oneDNN: ") + e.what());
        } catch (const std::bad_alloc&) {
          errors[k] = Internal("out of memory building the compute lanes");
        }
      }
    }
    for (const Status& e : errors) {
      if (!e.ok()) {
        lanes_.clear();
        return e;
      }
    }
    return Status::Ok();
  }

  // TrainStep over `n` lanes in one parallel region: each thread runs the forward and
  // backward pass of its lanes' samples, then (after one barrier) its part of the embedding
  // gradient scatter and its range of the sum of the lanes' dense gradients (lane order, so
  // the result depends on n alone).
  StatusOr<float> TrainStepInLanes(int n, const Batch& b, const SparseLookup& lookup,
                                   const float* rows, float* row_grads) {
    if (static_cast<int>(lanes_.size()) != n) KT_RETURN_IF_ERROR(BuildLanes(n));
    const size_t num_params = grads_.size();
    const int in = InputWidth();
#pragma omp parallel num_threads(n)
    {
      omp_set_num_threads(1);
      const int t = omp_get_thread_num();
      const int nt = omp_get_num_threads();
      for (int k = t; k < n; k += nt) {
        Lane& lane = *lanes_[k];
        lane.error.clear();
        try {
          lane.mlp->Bind(dense_, k == 0 ? grads_.data() : lane.grads.data());
          Gather(b, lookup, rows, lane.begin, lane.end);
          const size_t first = static_cast<size_t>(lane.begin);
          const float* deep = lane.mlp->Forward(input_.data() + first * in);
          for (int s = lane.begin; s < lane.end; ++s) logits_[s] += deep[s - lane.begin];
          lane.loss_sum = SigmoidBinaryCrossEntropySum(
              logits_.data() + first, b.label.data() + first, lane.end - lane.begin, b.size,
              diff_logits_.data() + first);
          lane.mlp->Backward(diff_logits_.data() + first, diff_input_.data() + first * in);
        } catch (const dnnl::error& e) {
          lane.error = std::string("oneDNN: ") + e.what();
        }
      }
#pragma omp barrier
      bool failed = false;
      for (const auto& lane : lanes_) failed |= !lane->error.empty();
      if (!failed) {
        ScatterRowGrads(b, lookup, row_grads, t, nt);
        const size_t lo = num_params * t / nt, hi = num_params * (t + 1) / nt;
        for (int k = 1; k < n; ++k)
          AddTo(grads_.data() + lo, lanes_[k]->grads.data() + lo, hi - lo);
      }
    }
    double loss = 0;
    for (const auto& lane : lanes_) {
      if (!lane->error.empty()) return Internal(lane->error);
      loss += lane->loss_sum;
    }
    if (grad_ready_) grad_ready_(0, num_params);
    return static_cast<float>(loss / b.size);
  }

  const WideDeepConfig c_;
  DnnlContext ctx_;
  std::unique_ptr<Mlp> mlp_;
  std::vector<int> sizes_;  // of the MLP's layers, input first
  float* dense_ = nullptr;  // the parameters the model computes from (UseDenseParams)
  std::vector<float> input_, diff_input_, logits_, diff_logits_;
  std::vector<std::unique_ptr<Lane>> lanes_;  // built by the first step on > 1 thread
};

class MlpClassifier : public Model {
 public:
  explicit MlpClassifier(const MlpClassifierConfig& c) : c_(c) {}

  Status Build() {
    if (c_.num_classes < 2) return InvalidArgument("an MLP classifier needs at least 2 classes");
    KT_ASSIGN_OR_RETURN(
        mlp_, CreateBoundMlp(&ctx_, c_.batch_size, c_.num_features, c_.hidden, c_.num_classes,
                             c_.precision, c_.inference_only, params_, grads_));
    diff_logits_.resize(static_cast<size_t>(c_.batch_size) * c_.num_classes);
    return Status::Ok();
  }

  int batch_size() const override { return c_.batch_size; }
  int num_outputs() const override { return c_.num_classes; }
  size_t NumDenseParams() const override { return params_.size(); }
  int SparseRowDim() const override { return 0; }
  void InitDense(uint64_t seed, float* out) const override { mlp_->Init(seed, out); }
  void UseDenseParams(float* params) override {
    mlp_->Bind(params != nullptr ? params : params_.data(), grads_.data());
  }
  double MlpFlopsPerStep() const override { return mlp_->FlopsPerStep(/*input_grad=*/false); }

  StatusOr<float> TrainStep(const Batch& b, const SparseLookup&, const float*, float*) override {
    KT_RETURN_IF_ERROR(CheckBatch(b));
    if (c_.inference_only) return FailedPrecondition("an inference-only model does not train");
    try {
      const float* logits = mlp_->Forward(b.dense.data());
      const float loss =
          SoftmaxCrossEntropy(logits, b.label.data(), b.size, c_.num_classes, diff_logits_.data());
      mlp_->Backward(diff_logits_.data(), nullptr, grad_ready_ ? &grad_ready_ : nullptr);
      return loss;
    } catch (const dnnl::error& e) {
      return Internal(std::string("oneDNN: ") + e.what());
    }
  }

  Status Predict(const Batch& b, const SparseLookup&, const float*, float* probs) override {
    KT_RETURN_IF_ERROR(CheckBatch(b));
    const float* logits;
    try {
      logits = mlp_->Forward(b.dense.data());
    } catch (const dnnl::error& e) {
      return Internal(std::string("oneDNN: ") + e.what());
    }
    for (int s = 0; s < b.size; ++s) {
      const float* z = logits + static_cast<size_t>(s) * c_.num_classes;
      float* p = probs + static_cast<size_t>(s) * c_.num_classes;
      const float m = *std::max_element(z, z + c_.num_classes);
      float sum = 0;
      for (int k = 0; k < c_.num_classes; ++k) sum += (p[k] = std::exp(z[k] - m));
      for (int k = 0; k < c_.num_classes; ++k) p[k] /= sum;
    }
    return Status::Ok();
  }

 private:
  Status CheckBatch(const Batch& b) const {
    if (b.size != c_.batch_size || b.num_dense != c_.num_features) {
      return InvalidArgument("batch shape (" + std::to_string(b.size) + ", " +
                             std::to_string(b.num_dense) + " features) does not match the model");
    }
    for (int s = 0; s < b.size; ++s) {
      if (b.label[s] < 0 || b.label[s] >= static_cast<float>(c_.num_classes)) {
        return InvalidArgument("label " + std::to_string(b.label[s]) + " is not a class in [0, " +
                               std::to_string(c_.num_classes) + ")");
      }
    }
    return Status::Ok();
  }

  const MlpClassifierConfig c_;
  DnnlContext ctx_;
  std::unique_ptr<Mlp> mlp_;
  std::vector<float> diff_logits_;
};

}  // namespace

StatusOr<std::unique_ptr<Model>> CreateWideDeep(const WideDeepConfig& config) {
  if (config.embedding_dim <= 0) return InvalidArgument("embedding dimension must be positive");
  auto m = std::make_unique<WideDeep>(config);
  KT_RETURN_IF_ERROR(m->Build());
  return std::unique_ptr<Model>(std::move(m));
}

StatusOr<std::unique_ptr<Model>> CreateMlpClassifier(const MlpClassifierConfig& config) {
  auto m = std::make_unique<MlpClassifier>(config);
  KT_RETURN_IF_ERROR(m->Build());
  return std::unique_ptr<Model>(std::move(m));
}

void InitSparseRow(uint64_t seed, uint64_t id, int dim, float* row) {
  if (dim <= 0) return;  // a model without embeddings (an MLP's PS asked for ids): no row
  uint64_t state = seed ^ (id * 0x9e3779b97f4a7c15ULL);
  for (int k = 0; k + 1 < dim; ++k) row[k] = 0.05f * UniformSym(state);
  row[dim - 1] = 0.f;
}

int CgroupCpuLimit(const std::string& root) {
  try {
    // cgroup v2: "max 100000" or "<quota> <period>".
    std::ifstream v2(root + "/cpu.max");
    std::string quota;
    long period = 0;
    if (v2 >> quota >> period) {
      if (quota == "max" || period <= 0) return 0;
      const long q = std::stol(quota);
      return q > 0 ? static_cast<int>((q + period - 1) / period) : 0;
    }
    // cgroup v1: quota -1 means no limit.
    std::ifstream q1(root + "/cpu/cpu.cfs_quota_us");
    std::ifstream p1(root + "/cpu/cpu.cfs_period_us");
    long q = 0;
    if (q1 >> q && p1 >> period && q > 0 && period > 0) {
      return static_cast<int>((q + period - 1) / period);
    }
  } catch (const std::exception&) {
    // Garbled files: no limit known.
  }
  return 0;
}

int DefaultThreadCount() {
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int limit = CgroupCpuLimit("/sys/fs/cgroup");
  return limit > 0 ? std::min(limit, cores) : cores;
}

namespace {
std::atomic<int> compute_threads{1};
}  // namespace

void SetComputeThreads(int n) {
  compute_threads.store(std::max(1, n), std::memory_order_relaxed);
  omp_set_num_threads(std::max(1, n));
}

int ComputeThreads() {
  return compute_threads.load(std::memory_order_relaxed);
}

}  // namespace kubetrain::trainer
