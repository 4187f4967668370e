// A minimal ONNX model writer: the subset of onnx.proto (ModelProto, GraphProto, NodeProto,
// AttributeProto, TensorProto, ValueInfoProto) that an exported kubetrain model uses,
// serialized with the protobuf encoder in protobuf.h. Field numbers are onnx.proto's.
//
// Plain data in, bytes out; no validation beyond what serialization needs (the export
// tests run onnx.checker and onnxruntime on the result).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace kubetrain::trainer::onnx {

// TensorProto.DataType values.
enum class DataType : int32_t { kFloat = 1, kInt64 = 7 };

// Receives bytes in order; an error stops the writer that calls it.
using ByteSink = std::function<Status(std::string_view)>;

// A constant tensor (a graph initializer), its elements little-endian in `raw`, or, for a
// large one, produced in order by `write` (`bytes` in all) so that it can be streamed to an
// external data file without a copy of the whole tensor.
struct Tensor {
  std::string name;
  DataType type = DataType::kFloat;
  std::vector<int64_t> dims;
  std::string raw;
  uint64_t bytes = 0;
  std::function<Status(const ByteSink&)> write;

  uint64_t size() const { return write ? bytes : raw.size(); }
};
Tensor FloatTensor(std::string name, std::vector<int64_t> dims, const float* data);
Tensor Int64Tensor(std::string name, std::vector<int64_t> dims, const int64_t* data);

struct Attribute {
  std::string name;
  std::variant<int64_t, float, std::string, std::vector<int64_t>> value;
};

struct Node {
  std::string op_type;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<Attribute> attributes;
  std::string domain;  // "" is the default ONNX domain
  std::string name;
};

// A graph input or output: element type and shape; a dimension is a fixed size or a
// symbolic name (e.g. "batch").
struct ValueInfo {
  std::string name;
  DataType type = DataType::kFloat;
  std::vector<std::variant<int64_t, std::string>> dims;
  std::string doc;
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;  // in topological order
  std::vector<Tensor> initializers;
  std::vector<ValueInfo> inputs;
  std::vector<ValueInfo> outputs;
  std::string doc;
};

struct Model {
  int64_t ir_version = 8;
  std::vector<std::pair<std::string, int64_t>> opsets;  // (domain, version)
  std::string producer_name;
  std::string producer_version;
  std::string doc;
  std::vector<std::pair<std::string, std::string>> metadata;
  Graph graph;
};

// Protobuf's limit: 2 GiB - 1 per message (signed 32-bit sizes in every implementation).
inline constexpr uint64_t kMaxModelBytes = (uint64_t{1} << 31) - 1;

// ONNX external data (onnx.proto's TensorProto.external_data): initializers of at least
// `threshold` bytes are written to a side file instead of the model, each at an offset
// aligned to kExternalAlign (so readers can map it), and the model's TensorProto names it:
// data_location = EXTERNAL, external_data = {location, offset, length}. `location` is
// relative to the directory of the model file, as the ONNX spec requires.
inline constexpr uint64_t kExternalAlign = 4096;
struct ExternalData {
  std::string location;       // e.g. "model.onnx.data"
  uint64_t threshold = 1024;  // onnx.external_data_helper's default size_threshold
  ByteSink sink;              // receives the side file's bytes, front to back
  uint64_t written = 0;       // set by Serialize: the side file's length
};

// The ModelProto bytes. With `external`, large initializers go to external->sink (first, in
// graph order) and only their references to the model. Errors: InvalidArgument when the
// model (without the external tensors) would pass `limit` (by default protobuf's message
// limit, which readers such as onnxruntime and onnx refuse), checked before the sink gets
// anything when the inline tensors alone pass it; the sink's error.
StatusOr<std::string> Serialize(const Model& model, uint64_t limit = kMaxModelBytes,
                                ExternalData* external = nullptr);

}  // namespace kubetrain::trainer::onnx
