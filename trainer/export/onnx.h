// A minimal ONNX model writer: the subset of onnx.proto (ModelProto, GraphProto, NodeProto,
// AttributeProto, TensorProto, ValueInfoProto) that an exported kubetrain model uses,
// serialized with the protobuf encoder in protobuf.h. Field numbers are onnx.proto's.
//
// Plain data in, bytes out; no validation beyond what serialization needs (the export
// tests run onnx.checker and onnxruntime on the result).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace kubetrain::trainer::onnx {

// TensorProto.DataType values.
enum class DataType : int32_t { kFloat = 1, kInt64 = 7 };

// A constant tensor (a graph initializer), its elements little-endian in `raw`.
struct Tensor {
  std::string name;
  DataType type = DataType::kFloat;
  std::vector<int64_t> dims;
  std::string raw;
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

// The ModelProto bytes. Errors: InvalidArgument when the result would pass `limit` (by
// default protobuf's message limit, which readers such as onnxruntime and onnx refuse).
StatusOr<std::string> Serialize(const Model& model, uint64_t limit = kMaxModelBytes);

}  // namespace kubetrain::trainer::onnx
