#include "trainer/export/export.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <ostream>

#include "common/storage/files.h"
#include "common/storage/writer.h"
#include "kubetrain/version.h"
#include "trainer/export/onnx.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/ps/shard.h"

namespace kubetrain::trainer {
namespace {

constexpr int kNumDense = kCriteoDense;
constexpr int kNumCat = kCriteoCat;

onnx::Node MakeNode(std::string op, std::vector<std::string> in, std::vector<std::string> out,
                    std::vector<onnx::Attribute> attrs = {}, std::string domain = "") {
  onnx::Node n;
  n.op_type = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attributes = std::move(attrs);
  n.domain = std::move(domain);
  n.name = n.outputs.front();
  return n;
}

// Gemm (+ Relu but for the last layer) per dense layer, from `input`; returns the last
// output's name.
std::string AddDenseLayers(const TrainedModel& m, const std::string& input, onnx::Graph* g) {
  const std::vector<int> sizes = m.spec.LayerSizes();
  const float* p = m.dense.data();
  std::string x = input;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const int in = sizes[i], out = sizes[i + 1];
    const std::string l = "fc" + std::to_string(i);
    g->initializers.push_back(onnx::FloatTensor(l + ".weight", {out, in}, p));
    p += static_cast<size_t>(out) * in;
    g->initializers.push_back(onnx::FloatTensor(l + ".bias", {out}, p));
    p += out;
    // The trainer's weights are [out x in]: y = x W^T + b.
    g->nodes.push_back(
        MakeNode("Gemm", {x, l + ".weight", l + ".bias"}, {l}, {{"transB", int64_t{1}}}));
    x = l;
    if (i + 2 < sizes.size()) {
      g->nodes.push_back(MakeNode("Relu", {x}, {l + ".relu"}));
      x = l + ".relu";
    }
  }
  return x;
}

// A tensor of the trained rows' columns [column, column + width): a zero row (for unknown
// ids) and then one row per trained id, produced in 1 MiB pieces straight from m.rows (no
// copy of the table; `m` must outlive the tensor). Shape [rows + 1, width], or [rows + 1]
// for width 1.
onnx::Tensor RowsTensor(std::string name, const TrainedModel& m, int column, int width) {
  const auto rows = static_cast<int64_t>(m.ids.size());
  onnx::Tensor t;
  t.name = std::move(name);
  t.type = onnx::DataType::kFloat;
  t.dims = width == 1 ? std::vector<int64_t>{rows + 1} : std::vector<int64_t>{rows + 1, width};
  t.bytes = static_cast<uint64_t>(rows + 1) * width * sizeof(float);
  t.write = [&m, rows, column, width](const onnx::ByteSink& sink) -> Status {
    constexpr size_t kPiece = size_t{1} << 20;
    const size_t stride = static_cast<size_t>(m.spec.SparseRowDim());
    const size_t row_bytes = static_cast<size_t>(width) * sizeof(float);
    std::string piece;
    piece.reserve(kPiece + row_bytes);
    piece.append(row_bytes, '\0');  // little-endian host: float 0 is four zero bytes
    for (int64_t r = 0; r < rows; ++r) {
      piece.append(reinterpret_cast<const char*>(m.rows.data() + r * stride + column), row_bytes);
      if (piece.size() >= kPiece) {
        KT_RETURN_IF_ERROR(sink(piece));
        piece.clear();
      }
    }
    return sink(piece);
  };
  return t;
}

void BuildWideDeep(const TrainedModel& m, onnx::Graph* g) {
  const int dim = m.spec.embedding_dim;
  g->inputs.push_back({"dense",
                       onnx::DataType::kFloat,
                       {std::string("batch"), kNumDense},
                       "I1..I13 as sign(x) * log(1 + |x|); empty = 0"});
  g->inputs.push_back({"cat_ids",
                       onnx::DataType::kInt64,
                       {std::string("batch"), kNumCat},
                       "C1..C26 hashed (see model.json), as int64"});
  g->outputs.push_back(
      {"probability", onnx::DataType::kFloat, {std::string("batch"), 1}, "P(label = 1)"});

  // Table row 0 is the zero row for unknown ids; id ids[i] is row i + 1.
  std::vector<int64_t> keys(m.ids.size()), values(m.ids.size());
  for (size_t i = 0; i < m.ids.size(); ++i) {
    keys[i] = static_cast<int64_t>(m.ids[i]);  // the same 64 bits, two's complement
    values[i] = static_cast<int64_t>(i) + 1;
  }
  if (keys.empty()) {
    // No trained rows (e.g. --steps 0): every id is unknown. LabelEncoder needs a key;
    // this one maps to the zero row like the default.
    keys.push_back(0);
    values.push_back(0);
  }
  g->initializers.push_back(RowsTensor("embedding", m, 0, dim));
  g->initializers.push_back(RowsTensor("wide_weight", m, dim, 1));
  const int64_t flat_shape[] = {0, int64_t{kNumCat} * dim};  // 0: keep the batch dimension
  g->initializers.push_back(onnx::Int64Tensor("embedded_shape", {2}, flat_shape));
  const int64_t sum_axes[] = {1};
  g->initializers.push_back(onnx::Int64Tensor("wide_axes", {1}, sum_axes));

  g->nodes.push_back(MakeNode("LabelEncoder", {"cat_ids"}, {"row"},
                              {{"keys_int64s", std::move(keys)},
                               {"values_int64s", std::move(values)},
                               {"default_int64", int64_t{0}}},
                              "ai.onnx.ml"));
  g->nodes.push_back(
      MakeNode("Gather", {"embedding", "row"}, {"embedded"}, {{"axis", int64_t{0}}}));
  g->nodes.push_back(MakeNode("Reshape", {"embedded", "embedded_shape"}, {"embedded_flat"}));
  g->nodes.push_back(
      MakeNode("Concat", {"dense", "embedded_flat"}, {"deep_input"}, {{"axis", int64_t{1}}}));
  const std::string deep = AddDenseLayers(m, "deep_input", g);
  g->nodes.push_back(
      MakeNode("Gather", {"wide_weight", "row"}, {"wide_terms"}, {{"axis", int64_t{0}}}));
  g->nodes.push_back(
      MakeNode("ReduceSum", {"wide_terms", "wide_axes"}, {"wide"}, {{"keepdims", int64_t{1}}}));
  g->nodes.push_back(MakeNode("Add", {deep, "wide"}, {"logit"}));
  g->nodes.push_back(MakeNode("Sigmoid", {"logit"}, {"probability"}));
}

void BuildMlp(const TrainedModel& m, onnx::Graph* g) {
  g->inputs.push_back({"features",
                       onnx::DataType::kFloat,
                       {std::string("batch"), int64_t{m.spec.num_features}},
                       "the CSV's feature columns, as they are"});
  g->outputs.push_back({"probabilities",
                        onnx::DataType::kFloat,
                        {std::string("batch"), int64_t{m.spec.num_classes}},
                        "P(class = k) for k = 0..classes-1"});
  const std::string logits = AddDenseLayers(m, "features", g);
  g->nodes.push_back(MakeNode("Softmax", {logits}, {"probabilities"}, {{"axis", int64_t{1}}}));
}

}  // namespace

std::vector<int> ModelSpec::LayerSizes() const {
  std::vector<int> sizes;
  if (kind == "wide_deep") {
    sizes.push_back(kNumDense + kNumCat * embedding_dim);
  } else {
    sizes.push_back(num_features);
  }
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(kind == "wide_deep" ? 1 : num_classes);
  return sizes;
}

size_t ModelSpec::NumDenseParams() const {
  const std::vector<int> s = LayerSizes();
  size_t n = 0;
  for (size_t i = 0; i + 1 < s.size(); ++i) n += static_cast<size_t>(s[i + 1]) * (s[i] + 1);
  return n;
}

int ModelSpec::SparseRowDim() const {
  return kind == "wide_deep" ? embedding_dim + 1 : 0;
}

const float* TrainedModel::Row(uint64_t id) const {
  const auto it = std::lower_bound(ids.begin(), ids.end(), id);
  if (it == ids.end() || *it != id) return nullptr;
  return rows.data() + static_cast<size_t>(it - ids.begin()) * spec.SparseRowDim();
}

static const char* OptimizerName(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdagrad:
      return "adagrad";
    case OptimizerKind::kAdam:
      return "adam";
  }
  return "?";
}

StatusOr<ModelDescription> ParseModelDescription(const nlohmann::json& j) {
  ModelDescription d;
  try {
    d.spec.kind = j.at("model").get<std::string>();
    const auto layers = j.at("layers").get<std::vector<int>>();
    if (layers.size() < 2) return InvalidArgument("model.json: \"layers\" needs in and out sizes");
    for (int n : layers) {
      if (n <= 0 || n > (1 << 24)) return InvalidArgument("model.json: a layer size out of range");
    }
    d.spec.hidden.assign(layers.begin() + 1, layers.end() - 1);
    if (d.spec.kind == "wide_deep") {
      d.spec.embedding_dim = j.at("embedding_dim").get<int>();
      if (d.spec.embedding_dim <= 0 || d.spec.embedding_dim > 4096)
        return InvalidArgument("model.json: embedding_dim out of range");
      if (layers.front() != kNumDense + kNumCat * d.spec.embedding_dim || layers.back() != 1)
        return InvalidArgument("model.json: layers do not fit Wide & Deep");
    } else if (d.spec.kind == "mlp") {
      d.spec.num_features = layers.front();
      d.spec.num_classes = layers.back();
    } else {
      return InvalidArgument("model.json: unknown model \"" + d.spec.kind + "\"");
    }
    if (j.contains("optimizer")) {
      KT_ASSIGN_OR_RETURN(d.optimizer, ParseOptimizerKind(j.at("optimizer").get<std::string>()));
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("model.json: ") + e.what());
  }
  return d;
}

StatusOr<TrainedModel> ReadTrainedModel(const ModelSpec& spec, const OptimizerConfig& optimizer,
                                        const std::string& root) {
  if (spec.kind != "wide_deep" && spec.kind != "mlp") {
    return InvalidArgument("cannot export a model of kind \"" + spec.kind + "\"");
  }
  // The newest complete checkpoint, with as many shards as the job that wrote it had PS.
  KT_ASSIGN_OR_RETURN(auto found, FindCheckpoint(root, kAnyShardCount));
  if (!found.has_value()) return NotFound("no complete checkpoint in " + root);
  const int n = found->num_shards;
  TrainedModel m;
  m.spec = spec;
  m.step = found->step;
  m.optimizer = optimizer.kind;
  m.dense.assign(spec.NumDenseParams(), 0.f);
  const int dim = spec.SparseRowDim();
  std::vector<std::pair<uint64_t, size_t>> order;  // id -> position in `rows` as read
  std::vector<float> rows;
  for (int k = 0; k < n; ++k) {
    ShardConfig c;
    std::tie(c.dense_begin, c.dense_end) = DenseRange(m.dense.size(), k, n);
    c.sparse_dim = dim;
    c.optimizer = optimizer;
    ParamShard shard(c, m.dense.data() + c.dense_begin);
    KT_RETURN_IF_ERROR(LoadShard(shard, root, *found, k, n));
    shard.PullDense(m.dense.data() + c.dense_begin);
    shard.ForEachRow([&](uint64_t id, const float* values, int64_t updates) {
      if (updates == 0) return;  // only ever pulled: still its random initial value
      order.emplace_back(id, rows.size());
      rows.insert(rows.end(), values, values + dim);
    });
  }
  std::sort(order.begin(), order.end());
  m.ids.reserve(order.size());
  m.rows.reserve(rows.size());
  for (const auto& [id, at] : order) {
    m.ids.push_back(id);
    m.rows.insert(m.rows.end(), rows.begin() + at, rows.begin() + at + dim);
  }
  return m;
}

StatusOr<std::string> ToOnnx(const TrainedModel& m, uint64_t limit, onnx::ExternalData* external) {
  if (m.dense.size() != m.spec.NumDenseParams()) {
    return InvalidArgument("the model has " + std::to_string(m.dense.size()) +
                           " dense parameters; its architecture needs " +
                           std::to_string(m.spec.NumDenseParams()));
  }
  onnx::Model model;
  model.ir_version = kOnnxIrVersion;
  model.opsets = {{"", kOnnxOpset}};
  model.producer_name = "kubetrain-trainer";
  model.producer_version = kVersion;
  model.graph.name = m.spec.kind;
  model.metadata = {{"kubetrain.model", m.spec.kind}, {"kubetrain.step", std::to_string(m.step)}};
  if (m.spec.kind == "wide_deep") {
    model.opsets.emplace_back("ai.onnx.ml", kOnnxMlOpset);
    BuildWideDeep(m, &model.graph);
  } else {
    BuildMlp(m, &model.graph);
  }
  return onnx::Serialize(model, limit, external);
}

nlohmann::json DescribeInputs(const TrainedModel& m) {
  using nlohmann::json;
  json j = {{"format", "onnx"},
            {"file", "model.onnx"},
            {"ir_version", kOnnxIrVersion},
            {"opsets", {{"ai.onnx", kOnnxOpset}}},
            {"producer", std::string("kubetrain-trainer ") + kVersion},
            {"model", m.spec.kind},
            {"step", m.step},
            {"optimizer", OptimizerName(m.optimizer)},
            {"layers", m.spec.LayerSizes()}};
  if (m.spec.kind == "wide_deep") {
    j["opsets"]["ai.onnx.ml"] = kOnnxMlOpset;
    j["embedding_dim"] = m.spec.embedding_dim;
    j["embedding_rows"] = m.ids.size();
    j["inputs"] = json::array(
        {{{"name", "dense"},
          {"dtype", "float32"},
          {"shape", {-1, kNumDense}},
          {"source", "Criteo integer features I1..I13 (columns 2-14 of a line)"},
          {"preprocessing",
           "x -> sign(x) * log(1 + |x|), computed in double precision and rounded to float32; "
           "an empty field is x = 0"}},
         {{"name", "cat_ids"},
          {"dtype", "int64"},
          {"shape", {-1, kNumCat}},
          {"source", "Criteo categorical features C1..C26 (columns 15-40), raw strings"},
          {"preprocessing",
           {{"hash", "fnv1a64-field-seeded+murmur3-fmix-half"},
            {"recipe",
             "for field f = 0..25 (C1 is 0) and its value's bytes (as in the file, an empty "
             "field is the empty string): h = 0xcbf29ce484222325 ^ ((f + 1) * 0x100000001b3); "
             "for each byte b: h = (h ^ b) * 0x100000001b3; then h ^= h >> 33; "
             "h *= 0xff51afd7ed558ccd; h ^= h >> 33 (all mod 2^64); the input is h's 64 bits "
             "as a two's-complement int64"},
            {"unknown_ids",
             "an id without a trained row gets a zero embedding and a zero wide weight"}}}}});
    j["outputs"] = json::array({{{"name", "probability"},
                                 {"dtype", "float32"},
                                 {"shape", {-1, 1}},
                                 {"meaning", "P(label = 1)"}}});
  } else {
    j["inputs"] = json::array({{{"name", "features"},
                                {"dtype", "float32"},
                                {"shape", {-1, m.spec.num_features}},
                                {"source", "the feature columns of a dense_csv line"},
                                {"preprocessing", "none"}}});
    j["outputs"] = json::array({{{"name", "probabilities"},
                                 {"dtype", "float32"},
                                 {"shape", {-1, m.spec.num_classes}},
                                 {"meaning", "P(class = k), k = 0..classes-1"}}});
  }
  return j;
}

StatusOr<OnnxExportFiles> WriteOnnxExport(const TrainedModel& m, const std::string& dir,
                                          const OnnxExportOptions& o, std::string* unexportable) {
  unexportable->clear();
  OnnxExportFiles files;
  nlohmann::json description = DescribeInputs(m);
  std::string model_bytes;
  // Inline first unless told otherwise: one self-contained file when it fits.
  if (o.external_threshold == 0) {
    auto inline_bytes = ToOnnx(m, o.limit);
    if (inline_bytes.ok()) {
      model_bytes = std::move(*inline_bytes);
    } else if (inline_bytes.status().code() != StatusCode::kInvalidArgument) {
      return inline_bytes.status();
    } else {
      spdlog::info(
          "the model does not fit in one ONNX file ({}); writing its tensors of at "
          "least {} bytes to {}",
          inline_bytes.status().message(), kAutoExternalThreshold, kOnnxDataFile);
    }
  }
  if (model_bytes.empty()) {
    // Flow: the side file streams to its writer while the model is serialized (no copy of
    // the tables) -> committed -> model.onnx, which names it, after it -> model.json last.
    const std::string data_path = storage::JoinPath(dir, kOnnxDataFile);
    KT_ASSIGN_OR_RETURN(auto writer, storage::ObjectWriter::Open(data_path));
    Status sink_error;
    onnx::ExternalData ext;
    ext.location = kOnnxDataFile;
    ext.threshold = o.external_threshold > 0 ? o.external_threshold : kAutoExternalThreshold;
    ext.sink = [&](std::string_view b) {
      sink_error = writer->Append(b);
      return sink_error;
    };
    auto bytes = ToOnnx(m, o.limit, &ext);
    if (!bytes.ok()) {
      if (sink_error.ok() && bytes.status().code() == StatusCode::kInvalidArgument) {
        *unexportable = bytes.status().message();
        return files;  // the writer, uncommitted, leaves nothing
      }
      return bytes.status();
    }
    KT_ASSIGN_OR_RETURN(const storage::WrittenObject data, writer->Commit());
    model_bytes = std::move(*bytes);
    files.external = true;
    files.data_bytes = data.bytes;
    description["external_data"] = {{"file", kOnnxDataFile},
                                    {"bytes", data.bytes},
                                    {"sha256", data.sha256},
                                    {"threshold_bytes", ext.threshold}};
  }
  files.model_bytes = model_bytes.size();
  KT_RETURN_IF_ERROR(storage::WriteObject(storage::JoinPath(dir, "model.onnx"), model_bytes));
  KT_RETURN_IF_ERROR(storage::WriteObject(storage::JoinPath(dir, "model.json"),
                                          description.dump(2) + "\n", storage::WriteMode::kReplace,
                                          "application/json"));
  return files;
}

StatusOr<int64_t> WritePredictions(Model& model, const TrainedModel& m, StripeReader& reader,
                                   int64_t max_examples, std::ostream& out) {
  if (model.NumDenseParams() != m.dense.size() || model.SparseRowDim() != m.spec.SparseRowDim()) {
    return InvalidArgument("the model's architecture does not match the trained parameters");
  }
  model.dense_params() = m.dense;
  const int outputs = model.num_outputs();
  const int dim = model.SparseRowDim();
  std::vector<float> probs(static_cast<size_t>(model.batch_size()) * outputs), rows;
  Batch batch;
  SparseLookup lookup;
  int64_t written = 0;
  while (max_examples <= 0 || written < max_examples) {
    KT_ASSIGN_OR_RETURN(const int real, reader.Next(model.batch_size(), &batch));
    if (real == 0) break;
    // A short final batch is padded; the padding is not printed.
    const int nd = batch.num_dense, nc = batch.num_cat;
    PadBatch(batch, real, model.batch_size());
    lookup.Assign(batch);
    rows.assign(lookup.ids.size() * dim, 0.f);  // unknown ids: the zero row
    for (size_t i = 0; i < lookup.ids.size(); ++i) {
      if (const float* r = m.Row(lookup.ids[i])) std::copy_n(r, dim, rows.data() + i * dim);
    }
    KT_RETURN_IF_ERROR(model.Predict(batch, lookup, rows.data(), probs.data()));
    for (int s = 0; s < real && (max_examples <= 0 || written < max_examples); ++s, ++written) {
      nlohmann::json line;
      line["dense"] = std::vector<float>(batch.dense.begin() + static_cast<size_t>(s) * nd,
                                         batch.dense.begin() + static_cast<size_t>(s + 1) * nd);
      std::vector<int64_t> ids(nc);
      for (int f = 0; f < nc; ++f) {
        ids[f] = static_cast<int64_t>(batch.cat[static_cast<size_t>(s) * nc + f]);
      }
      line["cat_ids"] = ids;
      line["label"] = batch.label[s];
      line["probs"] = std::vector<float>(probs.begin() + static_cast<size_t>(s) * outputs,
                                         probs.begin() + static_cast<size_t>(s + 1) * outputs);
      out << line.dump() << "\n";
    }
  }
  if (!out) return Internal("writing the predictions failed");
  return written;
}

}  // namespace kubetrain::trainer
