// The request and response formats of kubetrain-serve: KServe's Open Inference Protocol
// v2 (REST), TensorFlow Serving's REST predict API, and raw Criteo lines, all turned into
// one Batch of examples exactly as the trainer's own readers make them (so a served
// prediction equals `kubetrain-trainer --predict`'s for the same example).
//
// Tensors (model.json's "inputs"; shapes are [batch, n], row-major):
//   Wide & Deep  dense        FP32  [n, 13]  I1..I13 already transformed (model.json)
//                cat_ids      INT64 [n, 26]  C1..C26 already hashed (model.json's recipe)
//           or   criteo_line  BYTES [n]      raw lines (label first, or without the label);
//                                            the server applies the transform and hashing
//   MLP          features     FP32  [n, F]
// Output: "probability" FP32 [n, 1] (Wide & Deep), "probabilities" FP32 [n, classes].
//
// Guarantees: every error is InvalidArgument with a message naming what was wrong (the
// tensor, its shape, dtype or the JSON position); nothing here throws. Bodies nested more
// than kMaxJsonDepth deep are refused before they are parsed.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trainer/model/batch.h"

namespace kubetrain::trainer::serve {

inline constexpr int kMaxJsonDepth = 16;

// What the served model takes and gives (from model.json).
struct TensorLayout {
  bool wide_deep = true;
  int num_dense = 13;    // Wide & Deep
  int num_cat = 26;      // Wide & Deep
  int num_features = 0;  // MLP
  int num_outputs = 1;
  std::string output_name = "probability";
};

enum class RequestForm { kV2, kTfInstances, kTfInputs };

struct ParsedRequest {
  RequestForm form = RequestForm::kV2;
  std::string id;              // v2 "id", echoed back
  Batch examples;              // examples.size rows; labels unused
  bool binary_output = false;  // v2: the output asked as binary data (RenderV2Binary)
};

// POST /v2/models/{name}/infer. At most `max_examples` rows. A hand-written strict reader
// takes the common shape of the request (FP32 / INT64 tensors as JSON data) straight into
// the Batch with std::from_chars (~10x nlohmann's speed at batch 256); whatever it does not
// take, errors included, goes to ParseV2InferReference, so answers and messages are the
// reference's.
//
// The binary tensor data extension (KServe / Triton): with `json_length` (the request's
// Inference-Header-Content-Length) the body is that many bytes of JSON, then the binary
// data of the inputs that give "parameters": {"binary_data_size": n}, in input order, raw
// little-endian (BYTES: a 4-byte length before each element). The sizes must fit the
// shapes and sum to exactly the bytes after the JSON; a header past the body, a size past
// the data, bytes left over, binary_data_size without the header: InvalidArgument. Binary
// data is checked like JSON data (finite FP32). An output asked with
// "parameters": {"binary_data": true}, or the request's "binary_data_output": true, sets
// binary_output (also for JSON inputs).
StatusOr<ParsedRequest> ParseV2Infer(std::string_view body, const TensorLayout& layout,
                                     int max_examples,
                                     std::optional<size_t> json_length = std::nullopt);
// The same through nlohmann-json: every form and every error message. For ParseV2Infer's
// fallback, its tests and the fuzz target (which checks that both agree).
StatusOr<ParsedRequest> ParseV2InferReference(std::string_view body, const TensorLayout& layout,
                                              int max_examples,
                                              std::optional<size_t> json_length = std::nullopt);
// POST /v1/models/{name}:predict ("instances" or "inputs"). At most `max_examples` rows.
StatusOr<ParsedRequest> ParseTfPredict(std::string_view body, const TensorLayout& layout,
                                       int max_examples);

// The response body for `request` with probs (examples.size x layout.num_outputs).
std::string RenderV2(const ParsedRequest& request, const TensorLayout& layout,
                     std::string_view model_name, std::string_view version,
                     const std::vector<float>& probs);
// The same answer with the output as binary data (the extension): the JSON header, whose
// output has "parameters": {"binary_data_size": 4 x values} instead of "data", then the
// FP32 values little-endian. *json_length: the header's bytes (the response's
// Inference-Header-Content-Length).
std::string RenderV2Binary(const ParsedRequest& request, const TensorLayout& layout,
                           std::string_view model_name, std::string_view version,
                           const std::vector<float>& probs, size_t* json_length);
std::string RenderTf(const ParsedRequest& request, const TensorLayout& layout,
                     const std::vector<float>& probs);

// GET /v2/models/{name}: name, versions, platform, inputs and outputs, and `parameters`
// (string values; e.g. embedding_fold, which forward pass runs) when there are any.
std::string RenderV2Metadata(const TensorLayout& layout, std::string_view model_name,
                             std::string_view version,
                             const std::map<std::string, std::string>& parameters = {});
// An error body: {"error": message} (both protocols use this shape).
std::string RenderError(std::string_view message);

}  // namespace kubetrain::trainer::serve
