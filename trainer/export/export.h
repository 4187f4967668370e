// Model export for serving: a trained model read back from its checkpoint, written as ONNX
// (model.onnx) with a JSON description of its inputs (model.json), and the trainer's own
// predictions for the same parameters (for comparison with a serving runtime).
//
// The exported graph computes exactly the trainer's forward pass (trainer/model/model.h):
//   Wide & Deep  inputs  dense   float32 [batch, 13]  sign(x) * log(1 + |x|) of I1..I13
//                        cat_ids int64   [batch, 26]  HashFeature(field, C<field+1>) as int64
//                row = LabelEncoder(cat_ids) (ai.onnx.ml: id -> table row; unknown -> row 0)
//                deep = Gemm/Relu stack over Concat(dense, Reshape(Gather(embedding, row)))
//                wide = ReduceSum(Gather(wide_weight, row), axis 1)
//                probability = Sigmoid(deep + wide)              float32 [batch, 1]
//   MLP          input   features float32 [batch, F]  as in the CSV, no transformation
//                probabilities = Softmax(Gemm/Relu stack)       float32 [batch, classes]
// The categorical hashing runs in the caller (model.json gives the exact recipe); ONNX has
// no operator for FNV-1a over strings.
//
// Unknown ids: the export holds the embedding rows that training updated. An id without
// such a row (never seen in training, or only seen by evaluation, which creates the row
// with its random initial value) gets row 0: a zero embedding and a zero wide weight. The
// trainer's --predict mode uses the same rule, so both give the same predictions; during
// training, evaluation instead uses the row's deterministic initial value.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trainer/data/reader.h"
#include "trainer/export/onnx.h"
#include "trainer/model/model.h"
#include "trainer/ps/optimizer.h"

namespace kubetrain::trainer {

// The architecture, from the trainer's flags.
struct ModelSpec {
  std::string kind;  // "wide_deep" or "mlp"
  std::vector<int> hidden;
  int embedding_dim = 16;  // wide_deep
  int num_features = 0;    // mlp
  int num_classes = 2;     // mlp

  // in, hidden..., out of the dense layers.
  std::vector<int> LayerSizes() const;
  size_t NumDenseParams() const;
  // Floats per embedding row (embedding + wide weight); 0 for the MLP.
  int SparseRowDim() const;
};

// A trained model's parameters.
struct TrainedModel {
  ModelSpec spec;
  int64_t step = 0;
  // What it was trained with (the checkpoint's shard layout depends on it); model.json
  // records it so that a server can read the checkpoint without the training flags.
  OptimizerKind optimizer = OptimizerKind::kAdagrad;
  // The dense layers' parameters, layer by layer: weights [out x in] row-major, then
  // bias [out] (the trainer's layout, trainer/model/layers.h).
  std::vector<float> dense;
  // The embedding rows that training updated: ids ascending, rows ids.size() x
  // SparseRowDim() (embedding, then the wide weight).
  std::vector<uint64_t> ids;
  std::vector<float> rows;

  // The row of `id`, or null when the model has none (then serving uses a zero row).
  const float* Row(uint64_t id) const;
};

// Reads the newest complete checkpoint under `root` (a directory or s3:// prefix, e.g.
// --output's model/), whatever its number of shards. `optimizer` must be the one it was
// trained with (its state is in the shard files). Errors: NotFound when there is no
// checkpoint; InvalidArgument when the checkpoint does not fit `spec`; I/O errors.
StatusOr<TrainedModel> ReadTrainedModel(const ModelSpec& spec, const OptimizerConfig& optimizer,
                                        const std::string& root);

// The architecture and optimizer that model.json (DescribeInputs) records. Errors:
// InvalidArgument for a description this trainer cannot read the checkpoint of (a
// model.json from before "optimizer" was recorded names none: then `*optimizer` is unset
// and the caller may try each kind).
struct ModelDescription {
  ModelSpec spec;
  std::optional<OptimizerKind> optimizer;
};
StatusOr<ModelDescription> ParseModelDescription(const nlohmann::json& model_json);

inline constexpr int64_t kOnnxIrVersion = 8;  // ONNX 1.10+
inline constexpr int64_t kOnnxOpset = 17;     // ai.onnx (ONNX 1.12+, onnxruntime 1.12+)
inline constexpr int64_t kOnnxMlOpset = 3;    // ai.onnx.ml (LabelEncoder-2)

// The ONNX ModelProto bytes. Errors: InvalidArgument for parameters that do not fit the
// architecture, or past `limit` (the 2 GiB of one ONNX file; smaller in tests). With
// `external`, the tensors of at least external->threshold bytes are streamed to
// external->sink (ONNX external data; see onnx::ExternalData) and only referenced.
StatusOr<std::string> ToOnnx(const TrainedModel& m, uint64_t limit = onnx::kMaxModelBytes,
                             onnx::ExternalData* external = nullptr);
// model.json: inputs (names, dtypes, shapes, preprocessing), outputs, opsets.
nlohmann::json DescribeInputs(const TrainedModel& m);

// The side file of an export with external data, beside model.onnx (which names it by this
// relative name, so the pair can be moved or downloaded together).
inline constexpr char kOnnxDataFile[] = "model.onnx.data";
// Automatic external data moves the tensors of at least this many bytes (onnx's default).
inline constexpr uint64_t kAutoExternalThreshold = 1024;

struct OnnxExportOptions {
  // Tensors of at least this many bytes go to model.onnx.data (ONNX external data). 0:
  // automatic, one self-contained model.onnx when the model fits in `limit`, else external
  // data for the tensors of at least kAutoExternalThreshold bytes.
  uint64_t external_threshold = 0;
  uint64_t limit = onnx::kMaxModelBytes;
};
struct OnnxExportFiles {
  bool external = false;
  uint64_t model_bytes = 0;  // model.onnx
  uint64_t data_bytes = 0;   // model.onnx.data
};
// Writes m as ONNX to `dir` (a local directory, created if needed, or an s3:// prefix):
// model.onnx.data first when external data is used (streamed: memory stays a few MiB
// beyond the model itself, local or S3), then model.onnx, then model.json (which records
// the side file's name, bytes and SHA-256). A model that ONNX cannot hold even so (its
// non-external part past `limit`) is not an I/O error: the reason goes to *unexportable and
// nothing is written. Errors: I/O errors of the writes.
StatusOr<OnnxExportFiles> WriteOnnxExport(const TrainedModel& m, const std::string& dir,
                                          const OnnxExportOptions& options,
                                          std::string* unexportable);

// Writes one JSON line per example of `reader` (at most max_examples; 0: all):
//   {"dense":[...],"cat_ids":[...],"label":y,"probs":[...]}
// with the model's inputs exactly as the ONNX graph takes them (cat_ids as int64) and
// the probabilities of the trainer's own forward pass (`model`, oneDNN) with `m`'s
// parameters. `model` must have m's architecture. Returns the number of examples.
StatusOr<int64_t> WritePredictions(Model& model, const TrainedModel& m, StripeReader& reader,
                                   int64_t max_examples, std::ostream& out);

}  // namespace kubetrain::trainer
