// A trained model loaded for serving: the committed checkpoint a job wrote (read by the
// exporter's ReadTrainedModel, the code behind `kubetrain-trainer --export/--predict`) and
// the trainer's own oneDNN forward pass (Model::Predict), so a served probability is the
// one `--predict` prints.
//
// Layout of `model_dir` (a job's --output, local or s3://): model.json (architecture,
// optimizer, inputs) and model/ (the checkpoint root). `checkpoint_dir` overrides model/.
//
// Batches of any size up to max_batch run on a model built for the next power of two
// (padded by PadBatch, the trainer's one routine; padding is not returned): oneDNN
// primitives are built once per size at Load, never per request. Unknown ids get the zero
// row, as in --predict and the ONNX export.
//
// Wide & Deep in FP32 runs with its embeddings folded into its first layer (EmbeddingFold,
// trainer/serve/fold.h) when the folded tables of the trained rows fit
// options.fold_max_bytes; otherwise, and under BF16, unfolded (Model::Predict). fold_path()
// says which and why; both give --predict's numbers within FP32 rounding.
//
// Thread safety: Load from any thread (it sets that thread's compute threads when
// options.compute_threads > 0); Run from one thread at a time (the batcher's).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/export/export.h"
#include "trainer/model/layers.h"
#include "trainer/model/model.h"
#include "trainer/serve/fold.h"
#include "trainer/serve/protocol.h"

namespace kubetrain::trainer::serve {

struct PredictorOptions {
  std::string model_dir;
  std::string checkpoint_dir;  // empty: <model_dir>/model
  Precision precision = Precision::kFp32;
  int max_batch = 256;
  // Inference-only models (forward_inference, weights pre-reordered to oneDNN's blocked
  // layout at Load); false: the trainer's training models, for bench/serve/predictor_bench.
  bool inference_primitives = true;
  // The threads every batch computes on. oneDNN (OpenMP runtime) fixes a primitive's
  // thread count when it is created, from the creating thread's OpenMP count, and runs it
  // with that many whatever the running thread's count is later: so Load sets this count
  // on its own thread (SetComputeThreads) before it builds any primitive. 0: leave the
  // calling thread's count (the machine's cores unless set).
  int compute_threads = 0;
  // The most the folded embedding tables may take (EmbeddingFold; they fill as ids
  // arrive, into a store of twice the trained rows at most); a model whose trained rows
  // need more is served unfolded. 0: never fold.
  size_t fold_max_bytes = size_t{256} << 20;
};

class Predictor {
 public:
  // Errors: NotFound when there is no model.json or no committed checkpoint yet;
  // InvalidArgument when they do not fit together; I/O errors as they come.
  static StatusOr<std::unique_ptr<Predictor>> Load(const PredictorOptions& options);

  const TensorLayout& layout() const { return layout_; }
  int64_t step() const { return model_.step; }
  std::string_view kind() const { return model_.spec.kind; }
  int max_batch() const { return max_batch_; }
  const std::string& checkpoint_root() const { return root_; }
  // Whether the embeddings are folded into the first layer, and a line saying which path
  // runs and why ("folded: ..." or "unfolded: ...").
  bool folded() const { return fold_ != nullptr; }
  const std::string& fold_path() const { return fold_path_; }
  // The folded rows kept so far (0 unfolded). Any thread.
  size_t folded_rows() const { return fold_ ? fold_->kept_rows() : 0; }

  // `examples.size` (1..max_batch) rows -> probs (size x layout().num_outputs).
  Status Run(const Batch& examples, std::vector<float>* probs);

 private:
  Predictor() = default;

  // Constant after Load.
  TrainedModel model_;
  TensorLayout layout_;
  std::string root_;
  int max_batch_ = 0;
  std::vector<int> sizes_;                         // the batch sizes computed, ascending
  std::map<int, std::unique_ptr<Model>> by_size_;  // batch size -> oneDNN model (unfolded)
  std::unique_ptr<EmbeddingFold> fold_;            // or the folded model
  std::string fold_path_;
  // Scratch of Run.
  Batch padded_;
  SparseLookup lookup_;
  std::vector<float> rows_, out_;
};

}  // namespace kubetrain::trainer::serve
