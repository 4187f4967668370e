#include "trainer/export/export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "trainer/export/protobuf.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/ps/shard.h"
#include "trainer/worker/params.h"

namespace kubetrain::trainer {
namespace {

namespace fs = std::filesystem;

std::string TempRoot() {
  static int n = 0;
  const fs::path p = fs::temp_directory_path() /
                     ("kt_export_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// A decoded message: its fields by number, in order.
using Message = std::multimap<int, proto::Field>;
Message Decode(std::string_view data) {
  Message m;
  proto::Reader r(data);
  while (!r.AtEnd()) {
    auto f = r.Next();
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) break;
    m.emplace(f->number, *f);
  }
  return m;
}
std::vector<std::string> Strings(const Message& m, int field) {
  std::vector<std::string> out;
  for (auto [it, end] = m.equal_range(field); it != end; ++it) out.emplace_back(it->second.data);
  return out;
}
std::vector<Message> Messages(const Message& m, int field) {
  std::vector<Message> out;
  for (auto [it, end] = m.equal_range(field); it != end; ++it)
    out.push_back(Decode(it->second.data));
  return out;
}
int64_t Int(const Message& m, int field) {
  auto it = m.find(field);
  EXPECT_NE(it, m.end()) << "field " << field << " missing";
  return it == m.end() ? -1 : static_cast<int64_t>(it->second.varint);
}

ModelSpec SmallWideDeep() {
  ModelSpec s;
  s.kind = "wide_deep";
  s.hidden = {3};
  s.embedding_dim = 2;
  return s;
}

TrainedModel SmallTrainedWideDeep() {
  TrainedModel m;
  m.spec = SmallWideDeep();
  m.step = 7;
  m.dense.resize(m.spec.NumDenseParams());
  for (size_t i = 0; i < m.dense.size(); ++i) m.dense[i] = 0.01f * static_cast<float>(i);
  m.ids = {5, 0xfedcba9876543210ULL};  // the second is negative as int64
  m.rows = {0.1f, 0.2f, 0.3f, -0.4f, -0.5f, 0.6f};
  return m;
}

TEST(ModelSpec, DenseParameterCountMatchesTheTrainersModels) {
  WideDeepConfig wd;
  wd.batch_size = 4;
  wd.embedding_dim = 8;
  wd.hidden = {16, 4};
  auto w = CreateWideDeep(wd);
  ASSERT_TRUE(w.ok());
  ModelSpec s;
  s.kind = "wide_deep";
  s.embedding_dim = 8;
  s.hidden = {16, 4};
  EXPECT_EQ(s.NumDenseParams(), (*w)->NumDenseParams());
  EXPECT_EQ(s.SparseRowDim(), (*w)->SparseRowDim());

  MlpClassifierConfig mc;
  mc.batch_size = 4;
  mc.num_features = 5;
  mc.num_classes = 3;
  mc.hidden = {7};
  auto mlp = CreateMlpClassifier(mc);
  ASSERT_TRUE(mlp.ok());
  ModelSpec t;
  t.kind = "mlp";
  t.num_features = 5;
  t.num_classes = 3;
  t.hidden = {7};
  EXPECT_EQ(t.NumDenseParams(), (*mlp)->NumDenseParams());
  EXPECT_EQ(t.SparseRowDim(), 0);
}

TEST(OnnxExport, WideDeepGraphHasTheTrainersForwardPass) {
  auto bytes = ToOnnx(SmallTrainedWideDeep());
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  const Message model = Decode(*bytes);
  EXPECT_EQ(Int(model, 1), kOnnxIrVersion);
  EXPECT_EQ(Strings(model, 2), std::vector<std::string>{"kubetrain-trainer"});
  std::map<std::string, int64_t> opsets;
  for (const Message& o : Messages(model, 8)) {
    const auto domain = Strings(o, 1);
    opsets[domain.empty() ? "" : domain[0]] = Int(o, 2);
  }
  EXPECT_EQ(opsets,
            (std::map<std::string, int64_t>{{"", kOnnxOpset}, {"ai.onnx.ml", kOnnxMlOpset}}));

  const auto graphs = Messages(model, 7);
  ASSERT_EQ(graphs.size(), 1u);
  const Message& g = graphs[0];
  std::vector<std::string> ops;
  const Message* label_encoder = nullptr;
  const auto nodes = Messages(g, 1);
  for (const Message& n : nodes) {
    ops.push_back(Strings(n, 4).at(0));
    if (ops.back() == "LabelEncoder") label_encoder = &n;
  }
  EXPECT_EQ(ops,
            (std::vector<std::string>{"LabelEncoder", "Gather", "Reshape", "Concat", "Gemm", "Relu",
                                      "Gemm", "Gather", "ReduceSum", "Add", "Sigmoid"}));
  ASSERT_NE(label_encoder, nullptr);
  EXPECT_EQ(Strings(*label_encoder, 7), std::vector<std::string>{"ai.onnx.ml"});
  std::map<std::string, std::vector<int64_t>> ints;
  for (const Message& a : Messages(*label_encoder, 5)) {
    auto& v = ints[Strings(a, 1).at(0)];
    for (auto [it, end] = a.equal_range(8); it != end; ++it) {
      v.push_back(static_cast<int64_t>(it->second.varint));
    }
    if (a.count(3)) v.push_back(Int(a, 3));
  }
  EXPECT_EQ(ints["keys_int64s"],
            (std::vector<int64_t>{5, static_cast<int64_t>(0xfedcba9876543210ULL)}));
  EXPECT_EQ(ints["values_int64s"], (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ints["default_int64"], (std::vector<int64_t>{0}));

  // Initializers: the tables have the zero row first, then the rows in id order.
  std::map<std::string, std::pair<std::vector<int64_t>, std::string>> init;
  for (const Message& t : Messages(g, 5)) {
    std::vector<int64_t> dims;
    for (auto [it, end] = t.equal_range(1); it != end; ++it) dims.push_back(it->second.varint);
    init[Strings(t, 8).at(0)] = {dims, Strings(t, 9).at(0)};
  }
  ASSERT_TRUE(init.count("embedding"));
  EXPECT_EQ(init["embedding"].first, (std::vector<int64_t>{3, 2}));
  std::vector<float> emb(6);
  std::memcpy(emb.data(), init["embedding"].second.data(), 24);
  EXPECT_EQ(emb, (std::vector<float>{0, 0, 0.1f, 0.2f, -0.4f, -0.5f}));
  std::vector<float> wide(3);
  ASSERT_EQ(init["wide_weight"].second.size(), 12u);
  std::memcpy(wide.data(), init["wide_weight"].second.data(), 12);
  EXPECT_EQ(wide, (std::vector<float>{0, 0.3f, 0.6f}));
  // fc0: [3 x (13 + 26 * 2)] then its bias; fc1: [1 x 3].
  EXPECT_EQ(init["fc0.weight"].first, (std::vector<int64_t>{3, 65}));
  EXPECT_EQ(init["fc0.bias"].first, (std::vector<int64_t>{3}));
  EXPECT_EQ(init["fc1.weight"].first, (std::vector<int64_t>{1, 3}));
  float w;
  std::memcpy(&w, init["fc1.weight"].second.data(), 4);
  EXPECT_EQ(w, 0.01f * static_cast<float>(3 * 65 + 3));

  std::vector<std::string> inputs, outputs;
  for (const Message& v : Messages(g, 11)) inputs.push_back(Strings(v, 1).at(0));
  for (const Message& v : Messages(g, 12)) outputs.push_back(Strings(v, 1).at(0));
  EXPECT_EQ(inputs, (std::vector<std::string>{"dense", "cat_ids"}));
  EXPECT_EQ(outputs, std::vector<std::string>{"probability"});
}

TEST(OnnxExport, MlpGraphEndsInSoftmax) {
  TrainedModel m;
  m.spec.kind = "mlp";
  m.spec.num_features = 4;
  m.spec.num_classes = 3;
  m.spec.hidden = {5, 6};
  m.dense.assign(m.spec.NumDenseParams(), 0.5f);
  auto bytes = ToOnnx(m);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  const Message model = Decode(*bytes);
  EXPECT_EQ(Messages(model, 8).size(), 1u);  // no ai.onnx.ml
  const Message g = Messages(model, 7).at(0);
  std::vector<std::string> ops;
  for (const Message& n : Messages(g, 1)) ops.push_back(Strings(n, 4).at(0));
  EXPECT_EQ(ops, (std::vector<std::string>{"Gemm", "Relu", "Gemm", "Relu", "Gemm", "Softmax"}));
  const auto json = DescribeInputs(m);
  EXPECT_EQ(json["inputs"][0]["name"], "features");
  EXPECT_EQ(json["outputs"][0]["shape"], nlohmann::json({-1, 3}));
}

TEST(OnnxExport, RefusesParametersThatDoNotFitTheArchitecture) {
  TrainedModel m = SmallTrainedWideDeep();
  m.dense.pop_back();
  EXPECT_EQ(ToOnnx(m).status().code(), StatusCode::kInvalidArgument);
  // Past the size limit (2 GiB; 100 bytes here).
  EXPECT_TRUE(ToOnnx(SmallTrainedWideDeep(), 1 << 20).ok());
  EXPECT_EQ(ToOnnx(SmallTrainedWideDeep(), 100).status().code(), StatusCode::kInvalidArgument);
}

TEST(OnnxExport, WideDeepWithoutTrainedRowsMapsEveryIdToTheZeroRow) {
  TrainedModel m = SmallTrainedWideDeep();
  m.ids.clear();
  m.rows.clear();
  auto bytes = ToOnnx(m);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  const Message g = Messages(Decode(*bytes), 7).at(0);
  const Message encoder = Messages(g, 1).at(0);
  ASSERT_EQ(Strings(encoder, 4).at(0), "LabelEncoder");
  for (const Message& a : Messages(encoder, 5)) {
    const std::string name = Strings(a, 1).at(0);
    if (name == "keys_int64s" || name == "values_int64s") {
      EXPECT_EQ(a.count(8), 1u) << name;
    }
    if (name == "values_int64s" || name == "default_int64") {
      EXPECT_EQ(name == "default_int64" ? Int(a, 3) : Int(a, 8), 0) << name;
    }
  }
  for (const Message& t : Messages(g, 5)) {
    if (Strings(t, 8).at(0) == "embedding") {
      EXPECT_EQ(Strings(t, 9).at(0), std::string(2 * sizeof(float), '\0'));  // one zero row
    }
  }
}

// A Wide & Deep model with `rows` trained rows (ids 1, 3, 5, ...), embedding dim 2.
TrainedModel WideDeepWithRows(int rows) {
  TrainedModel m = SmallTrainedWideDeep();
  m.ids.clear();
  m.rows.clear();
  for (int r = 0; r < rows; ++r) {
    m.ids.push_back(2 * static_cast<uint64_t>(r) + 1);
    for (int c = 0; c < m.spec.SparseRowDim(); ++c) m.rows.push_back(0.001f * r - 0.1f * c);
  }
  return m;
}

// The initializers of a ModelProto, by name.
std::map<std::string, Message> Initializers(std::string_view model) {
  std::map<std::string, Message> out;
  for (const Message& t : Messages(Messages(Decode(model), 7).at(0), 5))
    out[Strings(t, 8).at(0)] = t;
  return out;
}

// TensorProto.external_data as a map.
std::map<std::string, std::string> ExternalEntries(const Message& tensor) {
  std::map<std::string, std::string> out;
  for (const Message& e : Messages(tensor, 13)) out[Strings(e, 1).at(0)] = Strings(e, 2).at(0);
  return out;
}

// The layout onnx and onnxruntime read: a tensor of at least the threshold has no raw_data,
// data_location EXTERNAL and {location, offset, length}; its bytes sit at that offset
// (4096-aligned) in the side file and equal the inline export's raw_data. Smaller tensors
// stay inline.
TEST(OnnxExport, ExternalDataLayoutHasLocationOffsetLengthOfTheInlineBytes) {
  const TrainedModel m = WideDeepWithRows(300);
  auto inline_bytes = ToOnnx(m);
  ASSERT_TRUE(inline_bytes.ok()) << inline_bytes.status().ToString();
  std::string side;
  onnx::ExternalData ext;
  ext.location = "model.onnx.data";
  ext.threshold = 1000;
  ext.sink = [&](std::string_view b) {
    side.append(b);
    return Status::Ok();
  };
  auto bytes = ToOnnx(m, onnx::kMaxModelBytes, &ext);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(ext.written, side.size());
  const auto want = Initializers(*inline_bytes);
  const auto got = Initializers(*bytes);
  ASSERT_EQ(got.size(), want.size());
  int external = 0;
  for (const auto& [name, tensor] : got) {
    const std::string raw = Strings(want.at(name), 9).at(0);
    if (raw.size() < ext.threshold) {
      EXPECT_EQ(Strings(tensor, 9), std::vector<std::string>{raw}) << name;
      EXPECT_EQ(tensor.count(14), 0u) << name;
      continue;
    }
    ++external;
    EXPECT_EQ(tensor.count(9), 0u) << name << " has raw_data too";
    EXPECT_EQ(Int(tensor, 14), 1) << name;  // DataLocation EXTERNAL
    const auto entries = ExternalEntries(tensor);
    ASSERT_EQ(entries.size(), 3u) << name;
    EXPECT_EQ(entries.at("location"), "model.onnx.data");
    const uint64_t offset = std::stoull(entries.at("offset"));
    const uint64_t length = std::stoull(entries.at("length"));
    EXPECT_EQ(offset % onnx::kExternalAlign, 0u) << name;
    EXPECT_EQ(length, raw.size()) << name;
    ASSERT_LE(offset + length, side.size()) << name;
    EXPECT_TRUE(side.compare(offset, length, raw) == 0) << name << ": bytes differ";
    EXPECT_EQ(Strings(tensor, 8).at(0), name);
    EXPECT_EQ(Int(tensor, 2), Int(want.at(name), 2)) << name;  // data type
  }
  EXPECT_EQ(external, 2);  // embedding (301 x 2 floats) and wide_weight (301 floats)
  EXPECT_LT(bytes->size() + 2400, inline_bytes->size());
}

// A model past the size of one ONNX file (2 GiB; a small limit here) was
// exported as no model at all (ToOnnx's InvalidArgument, above); now its large tensors go to
// model.onnx.data and model.onnx names it.
TEST(WriteOnnxExport, ModelPastTheLimitGetsExternalDataInsteadOfNoModel) {
  const std::string dir = TempRoot();
  const TrainedModel m = WideDeepWithRows(300);
  auto inline_bytes = ToOnnx(m);
  ASSERT_TRUE(inline_bytes.ok());
  OnnxExportOptions o;
  o.limit = inline_bytes->size() - 300;  // the graph alone passes it
  ASSERT_EQ(ToOnnx(m, o.limit).status().code(), StatusCode::kInvalidArgument);
  std::string unexportable;
  auto files = WriteOnnxExport(m, dir, o, &unexportable);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(unexportable, "");
  EXPECT_TRUE(files->external);
  const auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string model = read(fs::path(dir) / "model.onnx");
  const std::string data = read(fs::path(dir) / kOnnxDataFile);
  EXPECT_EQ(model.size(), files->model_bytes);
  EXPECT_EQ(data.size(), files->data_bytes);
  const auto embedding = Initializers(model).at("embedding");
  EXPECT_EQ(ExternalEntries(embedding).at("location"), kOnnxDataFile);
  EXPECT_EQ(std::stoull(ExternalEntries(embedding).at("length")), 301u * 2 * sizeof(float));
  const auto json = nlohmann::json::parse(read(fs::path(dir) / "model.json"));
  EXPECT_EQ(json["external_data"]["file"], kOnnxDataFile);
  EXPECT_EQ(json["external_data"]["bytes"], data.size());
  EXPECT_EQ(json["external_data"]["sha256"].get<std::string>().size(), 64u);

  // Below the limit the export stays one file; with a threshold it goes external anyway.
  const std::string dir2 = TempRoot();
  auto one = WriteOnnxExport(m, dir2, OnnxExportOptions{}, &unexportable);
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->external);
  EXPECT_FALSE(fs::exists(fs::path(dir2) / kOnnxDataFile));
  EXPECT_EQ(read(fs::path(dir2) / "model.onnx"), *inline_bytes);
  OnnxExportOptions forced;
  forced.external_threshold = 100;
  auto ext = WriteOnnxExport(m, dir2, forced, &unexportable);
  ASSERT_TRUE(ext.ok());
  EXPECT_TRUE(ext->external);
  EXPECT_TRUE(fs::exists(fs::path(dir2) / kOnnxDataFile));

  // What does not fit even so (the LabelEncoder's keys stay in the model) is reported, and
  // nothing is written.
  const std::string dir3 = TempRoot();
  OnnxExportOptions tiny;
  tiny.limit = 1000;
  auto none = WriteOnnxExport(m, dir3, tiny, &unexportable);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_NE(unexportable, "");
  EXPECT_TRUE(fs::is_empty(dir3));
  fs::remove_all(dir);
  fs::remove_all(dir2);
  fs::remove_all(dir3);
}

TEST(ReadTrainedModel, KeepsTrainedRowsOnlyFromEveryShard) {
  const std::string root = TempRoot();
  const ModelSpec spec = SmallWideDeep();
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kSgd;
  opt.lr = 1.f;
  const int n = 2, dim = spec.SparseRowDim();
  std::vector<float> dense(spec.NumDenseParams());
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = static_cast<float>(i);
  // Ids spread over both shards; every other one is updated, the rest only pulled.
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; ids.size() < 12; id = id * 7919 + 13) ids.push_back(id);
  std::map<uint64_t, std::vector<float>> trained;
  std::vector<ShardDigest> digests;
  ASSERT_TRUE(PrepareCheckpointDir(root, 3).ok());
  for (int k = 0; k < n; ++k) {
    ShardConfig c;
    std::tie(c.dense_begin, c.dense_end) = DenseRange(dense.size(), k, n);
    c.sparse_dim = dim;
    c.optimizer = opt;
    ParamShard shard(c, dense.data() + c.dense_begin);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ShardOfId(ids[i], n) != k) continue;
      std::vector<float> row(dim);
      shard.PullSparse(&ids[i], 1, row.data());
      if (i % 2 == 0) {
        std::vector<float> grad(dim, -1.f);  // SGD with lr 1: row + 1
        shard.Apply(nullptr, &ids[i], 1, grad.data());
        for (float& v : row) v += 1.f;
        trained[ids[i]] = row;
      }
    }
    auto d = shard.Save(ShardPath(root, 3, k, n));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    digests.push_back(*d);
  }
  ASSERT_TRUE(WriteManifest(root, 3, digests).ok());

  auto m = ReadTrainedModel(spec, opt, root);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->step, 3);
  EXPECT_EQ(m->dense, dense);
  ASSERT_EQ(m->ids.size(), trained.size());
  size_t r = 0;
  for (const auto& [id, row] : trained) {  // std::map: ascending ids, as exported
    EXPECT_EQ(m->ids[r], id);
    ASSERT_NE(m->Row(id), nullptr);
    EXPECT_EQ(std::vector<float>(m->Row(id), m->Row(id) + dim), row);
    ++r;
  }
  for (size_t i = 1; i < ids.size(); i += 2) EXPECT_EQ(m->Row(ids[i]), nullptr);
  fs::remove_all(root);
}

TEST(ReadTrainedModel, ErrorsWithoutACheckpointOrForAnotherArchitecture) {
  const std::string root = TempRoot();
  OptimizerConfig opt;
  EXPECT_EQ(ReadTrainedModel(SmallWideDeep(), opt, root).status().code(), StatusCode::kNotFound);

  // A checkpoint of a single-process MLP, read as a model with other hidden layers.
  MlpClassifierConfig mc;
  mc.batch_size = 2;
  mc.num_features = 3;
  mc.hidden = {4};
  auto model = CreateMlpClassifier(mc);
  ASSERT_TRUE(model.ok());
  LocalParams params(**model, 1, opt);
  ASSERT_TRUE(params.SaveCheckpoint(root, 1).ok());
  ModelSpec spec;
  spec.kind = "mlp";
  spec.num_features = 3;
  spec.hidden = {4};
  auto ok = ReadTrainedModel(spec, opt, root);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  std::vector<float> expect((*model)->NumDenseParams());
  (*model)->InitDense(1, expect.data());
  EXPECT_EQ(ok->dense, expect);
  spec.hidden = {5};
  EXPECT_EQ(ReadTrainedModel(spec, opt, root).status().code(), StatusCode::kInvalidArgument);
  fs::remove_all(root);
}

TEST(ReadTrainedModel, ReadsTheNewestCheckpointWhateverTheShardCountOfOlderOnes) {
  // An --output reused by a run with another number of PS: model/ holds a 2-shard
  // checkpoint at step 1 and a 1-shard one at step 5. Export and serving take step 5.
  const std::string root = TempRoot();
  OptimizerConfig opt;
  MlpClassifierConfig mc;
  mc.batch_size = 2;
  mc.num_features = 3;
  mc.hidden = {4};
  auto model = CreateMlpClassifier(mc);
  ASSERT_TRUE(model.ok());
  std::vector<float> old_dense((*model)->NumDenseParams(), 7.f);
  std::vector<ShardDigest> digests;
  ASSERT_TRUE(PrepareCheckpointDir(root, 1).ok());
  for (int k = 0; k < 2; ++k) {
    ShardConfig c;
    std::tie(c.dense_begin, c.dense_end) = DenseRange(old_dense.size(), k, 2);
    c.optimizer = opt;
    ParamShard shard(c, old_dense.data() + c.dense_begin);
    auto d = shard.Save(ShardPath(root, 1, k, 2));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    digests.push_back(*d);
  }
  ASSERT_TRUE(WriteManifest(root, 1, digests).ok());
  LocalParams params(**model, 1, opt);
  ASSERT_TRUE(params.SaveCheckpoint(root, 5).ok());
  ModelSpec spec;
  spec.kind = "mlp";
  spec.num_features = 3;
  spec.hidden = {4};
  auto m = ReadTrainedModel(spec, opt, root);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->step, 5);
  std::vector<float> expect((*model)->NumDenseParams());
  (*model)->InitDense(1, expect.data());
  EXPECT_EQ(m->dense, expect);
  fs::remove_all(root);
}

}  // namespace
}  // namespace kubetrain::trainer
