#include "trainer/export/onnx.h"

#include <cstring>
#include <optional>

#include "trainer/export/protobuf.h"

namespace kubetrain::trainer::onnx {
namespace {

// onnx.proto field numbers.
namespace model_f {
constexpr int kIrVersion = 1, kProducerName = 2, kProducerVersion = 3, kDoc = 6, kGraph = 7,
              kOpsetImport = 8, kMetadata = 14;
}
namespace opset_f {
constexpr int kDomain = 1, kVersion = 2;
}
namespace entry_f {
constexpr int kKey = 1, kValue = 2;
}
namespace graph_f {
constexpr int kNode = 1, kName = 2, kInitializer = 5, kDoc = 10, kInput = 11, kOutput = 12;
}
namespace node_f {
constexpr int kInput = 1, kOutput = 2, kName = 3, kOpType = 4, kAttribute = 5, kDomain = 7;
}
namespace attr_f {
constexpr int kName = 1, kF = 2, kI = 3, kS = 4, kInts = 8, kType = 20;
// AttributeProto.AttributeType
constexpr int64_t kFloat = 1, kInt = 2, kString = 3, kIntsType = 7;
}  // namespace attr_f
namespace tensor_f {
constexpr int kDims = 1, kDataType = 2, kName = 8, kRawData = 9, kExternalData = 13,
              kDataLocation = 14;
constexpr int64_t kLocationExternal = 1;  // TensorProto.DataLocation.EXTERNAL
}  // namespace tensor_f
namespace value_f {
constexpr int kName = 1, kType = 2, kDoc = 3;
}
namespace type_f {
constexpr int kTensorType = 1;               // TypeProto
constexpr int kElemType = 1, kShape = 2;     // TypeProto.Tensor
constexpr int kDim = 1;                      // TensorShapeProto
constexpr int kDimValue = 1, kDimParam = 2;  // TensorShapeProto.Dimension
}  // namespace type_f

// Where an external tensor's bytes are.
struct ExternalRef {
  std::string location;
  uint64_t offset = 0, length = 0;
};

StatusOr<proto::Writer> EncodeTensor(const Tensor& t, const ExternalRef* ext) {
  proto::Writer w;
  for (int64_t d : t.dims) w.Int64(tensor_f::kDims, d);
  w.Int64(tensor_f::kDataType, static_cast<int32_t>(t.type));
  w.Bytes(tensor_f::kName, t.name);
  if (ext != nullptr) {
    const std::pair<const char*, std::string> entries[] = {{"location", ext->location},
                                                           {"offset", std::to_string(ext->offset)},
                                                           {"length", std::to_string(ext->length)}};
    for (const auto& [key, value] : entries) {
      proto::Writer e;
      e.Bytes(entry_f::kKey, key);
      e.Bytes(entry_f::kValue, value);
      w.Message(tensor_f::kExternalData, e);
    }
    w.Int64(tensor_f::kDataLocation, tensor_f::kLocationExternal);
  } else if (t.write) {
    std::string raw;
    raw.reserve(t.bytes);
    KT_RETURN_IF_ERROR(t.write([&](std::string_view b) {
      raw.append(b);
      return Status::Ok();
    }));
    if (raw.size() != t.bytes) return Internal("tensor " + t.name + ": wrong byte count");
    w.Bytes(tensor_f::kRawData, raw);
  } else {
    w.Bytes(tensor_f::kRawData, t.raw);
  }
  return w;
}

// Appends tensor `t` to the side file at the next aligned offset.
StatusOr<ExternalRef> WriteExternal(const Tensor& t, ExternalData* ext) {
  ExternalRef ref{ext->location,
                  (ext->written + kExternalAlign - 1) / kExternalAlign * kExternalAlign, t.size()};
  if (ref.offset > ext->written) {
    KT_RETURN_IF_ERROR(ext->sink(std::string(ref.offset - ext->written, '\0')));
  }
  uint64_t n = 0;
  const ByteSink counted = [&](std::string_view b) {
    n += b.size();
    return ext->sink(b);
  };
  if (t.write) {
    KT_RETURN_IF_ERROR(t.write(counted));
  } else {
    KT_RETURN_IF_ERROR(counted(t.raw));
  }
  if (n != ref.length) return Internal("tensor " + t.name + ": wrong byte count");
  ext->written = ref.offset + ref.length;
  return ref;
}

proto::Writer EncodeAttribute(const Attribute& a) {
  proto::Writer w;
  w.Bytes(attr_f::kName, a.name);
  if (const auto* i = std::get_if<int64_t>(&a.value)) {
    w.Int64(attr_f::kI, *i);
    w.Int64(attr_f::kType, attr_f::kInt);
  } else if (const auto* f = std::get_if<float>(&a.value)) {
    w.Float(attr_f::kF, *f);
    w.Int64(attr_f::kType, attr_f::kFloat);
  } else if (const auto* s = std::get_if<std::string>(&a.value)) {
    w.Bytes(attr_f::kS, *s);
    w.Int64(attr_f::kType, attr_f::kString);
  } else {
    // proto2 `repeated int64 ints = 8` is not packed: one tag per element.
    for (int64_t v : std::get<std::vector<int64_t>>(a.value)) w.Int64(attr_f::kInts, v);
    w.Int64(attr_f::kType, attr_f::kIntsType);
  }
  return w;
}

proto::Writer EncodeNode(const Node& n) {
  proto::Writer w;
  for (const auto& in : n.inputs) w.Bytes(node_f::kInput, in);
  for (const auto& out : n.outputs) w.Bytes(node_f::kOutput, out);
  if (!n.name.empty()) w.Bytes(node_f::kName, n.name);
  w.Bytes(node_f::kOpType, n.op_type);
  for (const auto& a : n.attributes) w.Message(node_f::kAttribute, EncodeAttribute(a));
  if (!n.domain.empty()) w.Bytes(node_f::kDomain, n.domain);
  return w;
}

proto::Writer EncodeValueInfo(const ValueInfo& v) {
  proto::Writer shape;
  for (const auto& d : v.dims) {
    proto::Writer dim;
    if (const auto* size = std::get_if<int64_t>(&d)) {
      dim.Int64(type_f::kDimValue, *size);
    } else {
      dim.Bytes(type_f::kDimParam, std::get<std::string>(d));
    }
    shape.Message(type_f::kDim, dim);
  }
  proto::Writer tensor_type;
  tensor_type.Int64(type_f::kElemType, static_cast<int32_t>(v.type));
  tensor_type.Message(type_f::kShape, shape);
  proto::Writer type;
  type.Message(type_f::kTensorType, tensor_type);
  proto::Writer w;
  w.Bytes(value_f::kName, v.name);
  w.Message(value_f::kType, type);
  if (!v.doc.empty()) w.Bytes(value_f::kDoc, v.doc);
  return w;
}

}  // namespace

Tensor FloatTensor(std::string name, std::vector<int64_t> dims, const float* data) {
  Tensor t;
  t.name = std::move(name);
  t.type = DataType::kFloat;
  t.dims = std::move(dims);
  size_t n = 1;
  for (int64_t d : t.dims) n *= static_cast<size_t>(d);
  t.raw.assign(reinterpret_cast<const char*>(data), n * sizeof(float));  // little-endian host
  return t;
}

Tensor Int64Tensor(std::string name, std::vector<int64_t> dims, const int64_t* data) {
  Tensor t;
  t.name = std::move(name);
  t.type = DataType::kInt64;
  t.dims = std::move(dims);
  size_t n = 1;
  for (int64_t d : t.dims) n *= static_cast<size_t>(d);
  t.raw.assign(reinterpret_cast<const char*>(data), n * sizeof(int64_t));
  return t;
}

StatusOr<std::string> Serialize(const Model& m, uint64_t limit, ExternalData* external) {
  const auto goes_out = [&](const Tensor& t) {
    return external != nullptr && t.size() >= external->threshold;
  };
  uint64_t payload = 0;
  for (const auto& t : m.graph.initializers) {
    if (!goes_out(t)) payload += t.size();
  }
  if (payload > limit) {
    return InvalidArgument("the model's parameters take " + std::to_string(payload) +
                           " bytes, more than one ONNX file can hold (" + std::to_string(limit) +
                           ")");
  }
  proto::Writer graph;
  for (const auto& n : m.graph.nodes) graph.Message(graph_f::kNode, EncodeNode(n));
  graph.Bytes(graph_f::kName, m.graph.name);
  if (external != nullptr) external->written = 0;
  for (const auto& t : m.graph.initializers) {
    std::optional<ExternalRef> ref;
    if (goes_out(t)) {
      KT_ASSIGN_OR_RETURN(ref, WriteExternal(t, external));
    }
    KT_ASSIGN_OR_RETURN(const proto::Writer tensor, EncodeTensor(t, ref ? &*ref : nullptr));
    graph.Message(graph_f::kInitializer, tensor);
  }
  if (!m.graph.doc.empty()) graph.Bytes(graph_f::kDoc, m.graph.doc);
  for (const auto& v : m.graph.inputs) graph.Message(graph_f::kInput, EncodeValueInfo(v));
  for (const auto& v : m.graph.outputs) graph.Message(graph_f::kOutput, EncodeValueInfo(v));
  if (graph.size() > limit) {
    return InvalidArgument("the model takes " + std::to_string(graph.size()) +
                           " bytes, more than one ONNX file can hold (" + std::to_string(limit) +
                           ")");
  }

  proto::Writer w;
  w.Int64(model_f::kIrVersion, m.ir_version);
  w.Bytes(model_f::kProducerName, m.producer_name);
  w.Bytes(model_f::kProducerVersion, m.producer_version);
  if (!m.doc.empty()) w.Bytes(model_f::kDoc, m.doc);
  w.Message(model_f::kGraph, graph);
  for (const auto& [domain, version] : m.opsets) {
    proto::Writer o;
    o.Bytes(opset_f::kDomain, domain);
    o.Int64(opset_f::kVersion, version);
    w.Message(model_f::kOpsetImport, o);
  }
  for (const auto& [key, value] : m.metadata) {
    proto::Writer e;
    e.Bytes(entry_f::kKey, key);
    e.Bytes(entry_f::kValue, value);
    w.Message(model_f::kMetadata, e);
  }
  return w.Take();
}

}  // namespace kubetrain::trainer::onnx
