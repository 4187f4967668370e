// Wide & Deep with its embeddings folded into its first layer: an inference-only rewrite of
// the same arithmetic, for serving. The first layer's pre-activation of an example is
//   b1 + W1_dense x dense + sum over fields f of W1_f x E[id_f]
// (W1_f: the first layer's columns of field f's embedding), and T_f[id] = W1_f x E[id], a
// row of hidden[0] floats, depends on (field, id) alone. So it is computed once and kept,
// and an example then costs one row addition per field instead of embedding_dim x hidden[0]
// multiply-adds per field (at 1024-512-256 with 16-float embeddings, 40% of the model's
// multiply-adds). The rest of the MLP runs as oneDNN inner products, as unfolded.
//
// Which field an id belongs to is not in the checkpoint (an id hashes (field, value), rows
// are keyed by id alone), so the tables fill as (field, id) pairs arrive, into a store of at
// most `max_bytes`; a pair that finds the store full is computed for its batch alone, by the
// same code, so a result never depends on what was kept. An id without a trained row adds
// nothing and has no wide weight: the zero row of --predict and of the ONNX export.
//
// Flow per batch: (1) on the calling thread, each (example, field) is resolved to its kept
//   row, filling the tables; (2) over the compute threads, each example's first layer is
//   bias + dense terms + its rows, then ReLU; (3) the rest of the MLP (oneDNN); (4) the
//   wide weights, then the sigmoid, as Model::Predict does.
// Thread safety: Predict from one thread at a time (it fills the tables). The TrainedModel
// must outlive the fold and not change.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "common/status.h"
#include "trainer/export/export.h"
#include "trainer/model/batch.h"
#include "trainer/model/layers.h"

namespace kubetrain::trainer::serve {

// Unmaps EmbeddingFold's store.
struct FoldStoreUnmap {
  size_t bytes = 0;
  void operator()(float* p) const;
};

class EmbeddingFold {
 public:
  // The bytes the tables take when every trained row is kept once (an id is met in one
  // field, as data hashed by HashFeature gives): what a fold needs to hold the model.
  static size_t BytesFor(const TrainedModel& m);

  // A fold of `m` (Wide & Deep, FP32) computing batches of each of `sizes`, keeping at most
  // `max_bytes` of tables. Errors: InvalidArgument for another model or no hidden layer;
  // Internal from oneDNN.
  static StatusOr<std::unique_ptr<EmbeddingFold>> Create(const TrainedModel& m,
                                                         const std::vector<int>& sizes,
                                                         size_t max_bytes);

  // b.size must be one of the sizes; writes b.size probabilities.
  Status Predict(const Batch& b, float* probs);

  // (field, id) rows kept so far, and their bytes; rows folded for one batch only because the
  // store was full (since Create). Any thread (as of the last Predict).
  size_t kept_rows() const { return kept_.load(std::memory_order_relaxed); }
  size_t kept_bytes() const { return kept_rows() * width_ * sizeof(float); }
  uint64_t unkept_rows() const { return unkept_.load(std::memory_order_relaxed); }

 private:
  EmbeddingFold() = default;

  // A kept row of one field's table: the trained row's id, its place in store_ and its wide
  // weight. row < 0: an empty slot.
  struct Entry {
    uint64_t id = 0;
    int32_t row = -1;
    float wide = 0.f;
  };
  struct Table {
    std::vector<Entry> slots;  // open addressing, power of two, at most half full
    size_t size = 0;
  };
  // What an (example, field) adds: a kept row, or a trained row to fold for this batch
  // (store full), or nothing (no trained row).
  struct Ref {
    const float* folded = nullptr;
    const float* embedding = nullptr;
    int field = 0;
  };

  Ref Resolve(int field, uint64_t id, float* wide);
  // T_field[id] of the embedding `e` into out (width_ floats).
  void FoldRow(int field, const float* e, float* out) const;

  // Constant after Create.
  const TrainedModel* m_ = nullptr;
  int num_dense_ = 0, num_cat_ = 0, edim_ = 0, width_ = 0;
  std::vector<float> bias_;           // width_
  std::vector<float> dense_weights_;  // num_dense_ x width_: W1's dense columns, transposed
  std::vector<double> emb_weights_;   // num_cat_ x edim_ x width_: W1's embedding columns
  size_t capacity_ = 0;               // rows store_ can hold
  std::vector<float> rest_params_;    // layers 2.., as in TrainedModel::dense
  DnnlContext ctx_;
  std::map<int, std::unique_ptr<Mlp>> rest_;  // batch size -> layers 2.. (oneDNN)

  // Filled by Predict.
  // capacity_ x width_ floats, mapped at Create (2 MiB pages where the kernel gives them) and
  // touched (resident) only as rows are kept.
  std::unique_ptr<float[], FoldStoreUnmap> store_;
  size_t used_ = 0;
  std::atomic<size_t> kept_{0};  // used_, published at the end of Predict
  std::atomic<uint64_t> unkept_{0};
  std::vector<Table> tables_;  // one per field
  // Scratch of Predict.
  std::vector<Ref> refs_;
  std::vector<float> first_, wide_, scratch_;
};

}  // namespace kubetrain::trainer::serve
