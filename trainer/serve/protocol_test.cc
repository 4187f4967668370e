#include "trainer/serve/protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "trainer/data/reader.h"

namespace kubetrain::trainer::serve {
namespace {

using nlohmann::json;

TensorLayout WideDeep() {
  return TensorLayout{};
}

TensorLayout Mlp(int features, int classes) {
  TensorLayout l;
  l.wide_deep = false;
  l.num_features = features;
  l.num_outputs = classes;
  l.output_name = "probabilities";
  return l;
}

// A Criteo line (label first, tab-separated) whose dense features are 1..13 and whose
// categorical values are "v0".."v25"; the 12th integer field is empty.
std::string Line(int label) {
  std::string s = std::to_string(label);
  for (int i = 0; i < 13; ++i) {
    s.push_back('\t');
    if (i != 11) s.append(std::to_string(i + 1));
  }
  for (int i = 0; i < 26; ++i) s.append("\tv").append(std::to_string(i));
  return s;
}

json DenseRow() {
  json row = json::array();
  for (int i = 0; i < 13; ++i) row.push_back(TransformCount(i == 11 ? 0 : i + 1));
  return row;
}

json CatRow() {
  json row = json::array();
  for (int i = 0; i < 26; ++i)
    row.push_back(static_cast<int64_t>(HashFeature(i, std::string("v").append(std::to_string(i)))));
  return row;
}

json V2(json inputs) {
  return json{{"id", "r1"}, {"inputs", std::move(inputs)}};
}

json V2Tensor(const std::string& name, const std::string& dtype, json shape, json data) {
  return json{{"name", name}, {"datatype", dtype}, {"shape", shape}, {"data", data}};
}

// The message of a request that must fail with InvalidArgument.
std::string Error(const StatusOr<ParsedRequest>& r) {
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(ServeProtocol, V2TensorsCriteoLinesAndTfFormsGiveTheSameExamples) {
  const TensorLayout l = WideDeep();
  json dense = DenseRow(), cat = CatRow();
  json flat_dense = dense, flat_cat = cat;
  for (const json& v : DenseRow()) flat_dense.push_back(v);  // two rows
  for (const json& v : CatRow()) flat_cat.push_back(v);
  auto tensors = ParseV2Infer(V2({V2Tensor("dense", "FP32", {2, 13}, flat_dense),
                                  V2Tensor("cat_ids", "INT64", {2, 26}, flat_cat)})
                                  .dump(),
                              l, 10);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  EXPECT_EQ(tensors->id, "r1");
  ASSERT_EQ(tensors->examples.size, 2);

  // The trainer's own reader on the same line.
  Batch expect;
  expect.size = 1;
  expect.num_dense = 13;
  expect.num_cat = 26;
  expect.dense.resize(13);
  expect.cat.resize(26);
  expect.label.resize(1);
  ASSERT_TRUE(ParseCriteoLine(Line(1), '\t', &expect, 0).ok());
  EXPECT_EQ(
      std::vector<float>(tensors->examples.dense.begin(), tensors->examples.dense.begin() + 13),
      expect.dense);
  EXPECT_EQ(
      std::vector<uint64_t>(tensors->examples.cat.begin(), tensors->examples.cat.begin() + 26),
      expect.cat);

  // Raw lines, with and without the label, tab- or comma-separated.
  std::string no_label = Line(0).substr(2);
  std::string commas = Line(1);
  std::replace(commas.begin(), commas.end(), '\t', ',');
  auto lines =
      ParseV2Infer(V2({V2Tensor("criteo_line", "BYTES", {2}, {Line(1), no_label})}).dump(), l, 10);
  ASSERT_TRUE(lines.ok()) << lines.status().ToString();
  EXPECT_EQ(lines->examples.dense, tensors->examples.dense);
  EXPECT_EQ(lines->examples.cat, tensors->examples.cat);
  auto tf_lines = ParseTfPredict(json{{"instances", {commas, Line(1)}}}.dump(), l, 10);
  ASSERT_TRUE(tf_lines.ok()) << tf_lines.status().ToString();
  EXPECT_EQ(tf_lines->examples.cat, tensors->examples.cat);

  // TF Serving rows and columns.
  auto rows = ParseTfPredict(
      json{{"instances",
            {{{"dense", dense}, {"cat_ids", cat}}, {{"dense", dense}, {"cat_ids", cat}}}}}
          .dump(),
      l, 10);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(rows->form, RequestForm::kTfInstances);
  EXPECT_EQ(rows->examples.dense, tensors->examples.dense);
  EXPECT_EQ(rows->examples.cat, tensors->examples.cat);
  auto cols = ParseTfPredict(
      json{{"inputs", {{"dense", {dense, dense}}, {"cat_ids", {cat, cat}}}}}.dump(), l, 10);
  ASSERT_TRUE(cols.ok()) << cols.status().ToString();
  EXPECT_EQ(cols->form, RequestForm::kTfInputs);
  EXPECT_EQ(cols->examples.cat, tensors->examples.cat);

  const std::vector<float> probs = {0.25f, 0.75f};
  EXPECT_EQ(json::parse(RenderTf(*rows, l, probs)),
            json::parse(R"({"predictions":[[0.25],[0.75]]})"));
  EXPECT_EQ(json::parse(RenderTf(*cols, l, probs)), json::parse(R"({"outputs":[[0.25],[0.75]]})"));
  const json v2 = json::parse(RenderV2(*tensors, l, "m", "7", probs));
  EXPECT_EQ(v2["id"], "r1");
  EXPECT_EQ(v2["model_version"], "7");
  EXPECT_EQ(v2["outputs"][0]["shape"], json({2, 1}));
  EXPECT_EQ(v2["outputs"][0]["data"], json({0.25, 0.75}));
}

TEST(ServeProtocol, MlpTakesFeaturesAsV2TensorOrTfRows) {
  const TensorLayout l = Mlp(3, 2);
  auto v2 = ParseV2Infer(V2({V2Tensor("features", "FP32", {2, 3}, {{1, 2, 3}, {4, 5, 6}})}).dump(),
                         l, 10);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ(v2->examples.dense, std::vector<float>({1, 2, 3, 4, 5, 6}));
  auto tf = ParseTfPredict(R"({"instances": [[1, 2, 3], [4, 5, 6]]})", l, 10);
  ASSERT_TRUE(tf.ok()) << tf.status().ToString();
  EXPECT_EQ(tf->examples.dense, v2->examples.dense);
  auto cols = ParseTfPredict(R"({"inputs": [[1, 2, 3], [4, 5, 6]]})", l, 10);
  ASSERT_TRUE(cols.ok()) << cols.status().ToString();
  EXPECT_EQ(cols->examples.dense, v2->examples.dense);
  EXPECT_EQ(
      json::parse(RenderTf(*tf, l, {0.1f, 0.9f, 0.8f, 0.2f}))["predictions"][1][0].get<float>(),
      0.8f);
}

TEST(ServeProtocol, BadRequestsGetAMessageNamingTheProblem) {
  const TensorLayout l = WideDeep();
  const json dense = DenseRow(), cat = CatRow();
  const json good_cat = V2Tensor("cat_ids", "INT64", {1, 26}, cat);
  struct Case {
    std::string body;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"{\"inputs\": [", "malformed JSON"},
      {"not json", "malformed JSON"},
      {"[1, 2]", "must be a JSON object"},
      {std::string(100, '[') + std::string(100, ']'), "nested deeper"},
      {"{}", "needs \"inputs\""},
      {V2({V2Tensor("dense", "FP32", {1, 12}, json::array()), good_cat}).dump(),
       "shape [1, 12], expected [n, 13]"},
      {V2({V2Tensor("dense", "FP32", {1, 13, 1}, dense), good_cat}).dump(), "expected [n, 13]"},
      {V2({V2Tensor("dense", "FP64", {1, 13}, dense), good_cat}).dump(),
       "datatype FP64, expected FP32"},
      {V2({V2Tensor("dense", "FP32", {1, 13}, dense), V2Tensor("cat_ids", "FP32", {1, 26}, cat)})
           .dump(),
       "datatype FP32, expected INT64"},
      {V2({V2Tensor("dense", "FP32", {2, 13}, dense), good_cat}).dump(),
       "shape says 26 values, data has 13"},
      {V2({V2Tensor("dense", "FP32", {1, 13}, dense)}).dump(), "missing input cat_ids"},
      {V2({V2Tensor("dense", "FP32", {1, 13}, json::array({"a", 1})), good_cat}).dump(),
       "FP32 data must be numbers"},
      {V2({V2Tensor("dense", "FP32", {1, 13}, dense),
           V2Tensor("cat_ids", "INT64", {1, 26}, json::array({1.5}))})
           .dump(),
       "INT64 data must be integers"},
      {V2({V2Tensor("dense", "FP32", {1, 13}, dense),
           V2Tensor("cat_ids", "INT64", {1, 26}, json::array({uint64_t{1} << 63}))})
           .dump(),
       "out of INT64 range"},
      {V2({V2Tensor("pixels", "FP32", {1, 13}, dense)}).dump(), "unknown input \"pixels\""},
      {V2({V2Tensor("criteo_line", "BYTES", {1}, {"1\t2\t3"})}).dump(), "criteo_line 0:"},
      {V2({V2Tensor("criteo_line", "BYTES", {0}, json::array())}).dump(), "no examples"},
      {json{{"inputs",
             {{{"name", "dense"},
               {"datatype", "FP32"},
               {"shape", {1, 13}},
               {"parameters", {{"binary_data_size", 52}}}}}}}
           .dump(),
       "binary_data_size without the Inference-Header-Content-Length header"},
      {R"({"instances": [[1, 2]]})", "Wide & Deep instance is an object"},
      {R"({"instances": [], "inputs": {}})", "exactly one of"},
      {json{{"instances", {{{"dense", json::array({1, 2})}, {"cat_ids", cat}}}}}.dump(),
       "list of 13 values, got 2 values"},
      {json{{"inputs", {{"dense", {dense, dense}}, {"cat_ids", {cat}}}}}.dump(),
       "dense has 2 rows but cat_ids has 1"},
  };
  for (const Case& c : cases) {
    const bool tf = c.body.find("instances") != std::string::npos ||
                    c.body.find("\"inputs\":{\"") != std::string::npos;
    const std::string message =
        Error(tf ? ParseTfPredict(c.body, l, 10) : ParseV2Infer(c.body, l, 10));
    EXPECT_NE(message.find(c.says), std::string::npos)
        << "body " << c.body.substr(0, 200) << "\n said: " << message << "\n expected: " << c.says;
  }
  // More examples than a request may carry.
  json many = json::array();
  for (int i = 0; i < 11; ++i) many.push_back(Line(1));
  EXPECT_NE(Error(ParseTfPredict(json{{"instances", many}}.dump(), l, 10)).find("at most 10"),
            std::string::npos);
  // Error bodies are JSON also for hostile bytes.
  EXPECT_EQ(json::parse(RenderError("bad \xff byte"))["error"].get<std::string>().substr(0, 4),
            "bad ");
}

// The hand-written reader (ParseV2Infer) and the nlohmann one agree on every body: the
// shapes real clients send (tritonclient's key order, nested rows, "outputs" with
// binary_data false, unknown keys, odd spacing) and near misses that must still fail with
// the reference's message.
TEST(ServeProtocol, FastV2ReaderAgreesWithTheReferenceReader) {
  const TensorLayout l = WideDeep();
  const std::string dense =
      "[0.6931471805599453, 1, -0, 2.5e-3, 1E2, 0.0, 3, 4, 5, 6, 7, 8, 1.0000000000000002]";
  const std::string cat =
      "[1, -9223372036854775808, 9223372036854775807, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, "
      "14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26]";
  auto body = [&](const std::string& d, const std::string& c, const std::string& extra = "") {
    return "{\"id\": \"r7\", \"inputs\": [{\"name\": \"dense\", \"shape\": [1, 13], "
           "\"datatype\": \"FP32\", \"data\": " +
           d + "}, {\"name\":\"cat_ids\",\"datatype\":\"INT64\",\"shape\":[1,26],\"data\":" + c +
           ", \"x\": {\"y\": [null, true, false, \"z\"]}}]" + extra + "}";
  };
  const std::vector<std::string> good = {
      body(dense, cat),
      body("[" + dense + "]", "[" + cat + "]"),
      body(dense, cat,
           ", \"outputs\": [{\"name\": \"probability\", \"parameters\": "
           "{\"binary_data\": false, \"k\": 1}}], \"parameters\": {}"),
      " \n" + body(dense, cat) + "\t\r\n",
      // Sorted keys ("data" before "name"), as nlohmann writes them.
      json::parse(body(dense, cat)).dump(),
      // The output asked as binary data (the fast reader leaves it to the reference).
      body(dense, cat,
           ", \"outputs\": [{\"name\": \"probability\", \"parameters\": "
           "{\"binary_data\": true}}]"),
      body(dense, cat, ", \"parameters\": {\"binary_data_output\": true}"),
  };
  for (const std::string& b : good) {
    auto fast = ParseV2Infer(b, l, 10);
    auto ref = ParseV2InferReference(b, l, 10);
    ASSERT_TRUE(fast.ok()) << fast.status().ToString() << "\n" << b;
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    EXPECT_EQ(fast->id, "r7");
    EXPECT_EQ(fast->examples.dense, ref->examples.dense) << b;
    EXPECT_EQ(fast->examples.cat, ref->examples.cat) << b;
    EXPECT_EQ(fast->examples.size, 1);
    EXPECT_EQ(fast->binary_output, ref->binary_output) << b;
    EXPECT_EQ(fast->binary_output, b.find(": true}") != std::string::npos) << b;
  }
  // `dense` / `cat` with the first value replaced.
  auto d0 = [&](const std::string& v) { return "[" + v + dense.substr(dense.find(',')); };
  auto c0 = [&](const std::string& v) { return "[" + v + cat.substr(cat.find(',')); };
  std::vector<std::string> bad = {
      body(d0("01"), cat),                     // leading zero
      body(d0(".5"), cat),                     // no integer part
      body(d0("1."), cat),                     // no fraction digits
      body(d0("NaN"), cat),                    // not JSON
      body(d0("1e39"), cat),                   // beyond FP32
      body(dense, c0("1.0")),                  // a fraction as INT64
      body(dense, c0("9223372036854775808")),  // beyond INT64
      body(dense + ",", cat),                  // trailing comma
      body(dense, cat, ", \"outputs\": [{\"name\": \"other\"}]"),
      body(dense, cat,
           ", \"outputs\": [{\"name\": \"probability\", \"parameters\": "
           "{\"binary_data\": 1}}]"),
      body(dense, cat, ", \"parameters\": {\"binary_data_output\": \"yes\"}"),
      body(dense, cat) + "x",           // trailing bytes
      body(dense, cat).substr(0, 100),  // cut short
  };
  for (const std::string& b : bad) {
    auto fast = ParseV2Infer(b, l, 10);
    auto ref = ParseV2InferReference(b, l, 10);
    ASSERT_FALSE(ref.ok()) << b;
    ASSERT_FALSE(fast.ok()) << b;
    EXPECT_EQ(fast.status().message(), ref.status().message());
  }
  // An underflowing number is 0 to both (from_chars calls it out of range: the fallback).
  auto tiny = ParseV2Infer(body(d0("1e-400"), cat), l, 10);
  ASSERT_TRUE(tiny.ok()) << tiny.status().ToString();
  EXPECT_EQ(tiny->examples.dense[0], 0.f);
}

TEST(ServeProtocol, RenderedFloatsReadBackAsTheSameFp32) {
  const TensorLayout l = Mlp(1, 4);
  ParsedRequest r;
  r.form = RequestForm::kV2;
  r.examples.size = 2;
  const std::vector<float> probs = {0.1f, 1e-30f, 0.99999994f, 1.f / 3,
                                    0.f,  1.f,    6e-8f,       std::nanf("")};
  const json v2 = json::parse(RenderV2(r, l, "m\"q", "3", probs));
  EXPECT_EQ(v2["model_name"], "m\"q");
  EXPECT_EQ(v2["outputs"][0]["shape"], json({2, 4}));
  for (size_t i = 0; i + 1 < probs.size(); ++i)
    EXPECT_EQ(v2["outputs"][0]["data"][i].get<float>(), probs[i]) << i;
  EXPECT_TRUE(v2["outputs"][0]["data"][7].is_null());
  r.form = RequestForm::kTfInstances;
  const json tf = json::parse(RenderTf(r, l, probs));
  EXPECT_EQ(tf["predictions"][1][2].get<float>(), 6e-8f);
}

}  // namespace
}  // namespace kubetrain::trainer::serve

namespace kubetrain::trainer::serve {
namespace {

// `values` as the binary extension sends them (little-endian, as this machine).
template <typename T>
std::string Raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A BYTES tensor's binary data: a 4-byte length before each element.
std::string RawBytes(const std::vector<std::string>& elements) {
  std::string out;
  for (const std::string& e : elements) {
    const auto n = static_cast<uint32_t>(e.size());
    out.append(reinterpret_cast<const char*>(&n), sizeof n).append(e);
  }
  return out;
}

json BinaryTensor(const std::string& name, const std::string& dtype, json shape, size_t bytes) {
  return json{{"name", name},
              {"datatype", dtype},
              {"shape", shape},
              {"parameters", {{"binary_data_size", bytes}}}};
}

// The binary tensor data extension: the JSON header, then each binary input's bytes.
TEST(ServeProtocol, BinaryTensorDataGivesTheSameExamplesAsJsonAndIsBoundedByItsSizes) {
  const TensorLayout l = WideDeep();
  std::vector<float> dense;
  std::vector<int64_t> cat;
  for (int r = 0; r < 2; ++r) {
    for (const json& v : DenseRow()) dense.push_back(v.get<float>() + static_cast<float>(r));
    for (const json& v : CatRow()) cat.push_back(v.get<int64_t>() + r);
  }
  cat[1] = std::numeric_limits<int64_t>::min();  // ids are all 64 bits
  auto from_json = ParseV2Infer(
      V2({V2Tensor("dense", "FP32", {2, 13}, dense), V2Tensor("cat_ids", "INT64", {2, 26}, cat)})
          .dump(),
      l, 10);
  ASSERT_TRUE(from_json.ok()) << from_json.status().ToString();
  const std::string header = V2({BinaryTensor("dense", "FP32", {2, 13}, 2 * 13 * 4),
                                 BinaryTensor("cat_ids", "INT64", {2, 26}, 2 * 26 * 8)})
                                 .dump();
  const std::string data = Raw(dense) + Raw(cat);
  auto binary = ParseV2Infer(header + data, l, 10, header.size());
  ASSERT_TRUE(binary.ok()) << binary.status().ToString();
  EXPECT_EQ(binary->id, "r1");
  EXPECT_EQ(binary->examples.size, 2);
  EXPECT_EQ(binary->examples.dense, from_json->examples.dense);
  EXPECT_EQ(binary->examples.cat, from_json->examples.cat);
  EXPECT_FALSE(binary->binary_output);

  // One input binary, the other JSON; and the output asked as binary.
  json mixed = V2({V2Tensor("dense", "FP32", {2, 13}, dense),
                   BinaryTensor("cat_ids", "INT64", {2, 26}, 2 * 26 * 8)});
  mixed["outputs"] = {{{"name", "probability"}, {"parameters", {{"binary_data", true}}}}};
  auto half = ParseV2Infer(mixed.dump() + Raw(cat), l, 10, mixed.dump().size());
  ASSERT_TRUE(half.ok()) << half.status().ToString();
  EXPECT_EQ(half->examples.cat, from_json->examples.cat);
  EXPECT_TRUE(half->binary_output);

  // Criteo lines as binary BYTES.
  const std::string lines_header =
      V2({BinaryTensor("criteo_line", "BYTES", {2}, RawBytes({Line(1), Line(0)}).size())}).dump();
  auto lines =
      ParseV2Infer(lines_header + RawBytes({Line(1), Line(0)}), l, 10, lines_header.size());
  ASSERT_TRUE(lines.ok()) << lines.status().ToString();
  auto lines_json =
      ParseV2Infer(V2({V2Tensor("criteo_line", "BYTES", {2}, {Line(1), Line(0)})}).dump(), l, 10);
  ASSERT_TRUE(lines_json.ok());
  EXPECT_EQ(lines->examples.cat, lines_json->examples.cat);
  EXPECT_EQ(lines->examples.dense, lines_json->examples.dense);

  // Every size is checked against the header, the shapes and the body: a clear 400.
  const std::string one_dense = V2({BinaryTensor("dense", "FP32", {2, 13}, 104),
                                    BinaryTensor("cat_ids", "INT64", {2, 26}, 416)})
                                    .dump();
  std::vector<float> nan = dense;
  nan[5] = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    std::string body;
    size_t json_length;
    std::string says;
  };
  const std::vector<Case> cases = {
      {header + data, header.size() + data.size() + 1, "the body has"},
      {header + data.substr(0, data.size() - 1), header.size(), "bytes of binary data are left"},
      {header + data + "x", header.size(), "1 bytes of binary data follow"},
      {header + data, header.size() - 1, "malformed JSON"},
      {V2({BinaryTensor("dense", "FP32", {2, 13}, 100),
           BinaryTensor("cat_ids", "INT64", {2, 26}, 420)})
               .dump() +
           data,
       0, "(104 bytes), binary_data_size is 100"},
      {header + Raw(nan) + Raw(cat), header.size(), "value 5 of the binary data is not a finite"},
      {V2({BinaryTensor("dense", "FP32", {2, 13}, uint64_t{1} << 62)}).dump() + data, 0,
       "only 520 bytes of binary data are left"},
      {V2({json{{"name", "dense"},
                {"datatype", "FP32"},
                {"shape", {2, 13}},
                {"parameters", {{"binary_data_size", -4}}}}})
           .dump(),
       0, "binary_data_size must be a non-negative integer"},
      {V2({json{{"name", "dense"},
                {"datatype", "FP32"},
                {"shape", {2, 13}},
                {"data", dense},
                {"parameters", {{"binary_data_size", 104}}}}})
               .dump() +
           Raw(dense),
       0, "both \"data\" and binary_data_size"},
      {V2({BinaryTensor("criteo_line", "BYTES", {2}, RawBytes({Line(1)}).size() + 7)}).dump() +
           RawBytes({Line(1)}) + std::string("\x10\0\0\0abc", 7),
       0, "an element runs past its binary data"},
      {V2({BinaryTensor("criteo_line", "BYTES", {2}, 3)}).dump() + "abc", 0,
       "binary data ends in a length"},
      {V2({BinaryTensor("criteo_line", "BYTES", {1}, RawBytes({Line(1), Line(0)}).size())}).dump() +
           RawBytes({Line(1), Line(0)}),
       0, "shape says 1 elements, the binary data has more than 1"},
  };
  for (const Case& c : cases) {
    // json_length 0: the JSON is the body up to where its header ends (the first "}]}").
    const size_t n = c.json_length > 0 ? c.json_length : c.body.find("}]}") + 3;
    const std::string message = Error(ParseV2Infer(c.body, l, 10, n));
    EXPECT_NE(message.find(c.says), std::string::npos)
        << "body " << c.body.substr(0, 200) << "\n said: " << message << "\n expected: " << c.says;
  }
}

TEST(ServeProtocol, BinaryOutputIsTheJsonHeaderThenTheFp32Values) {
  const TensorLayout l = Mlp(3, 2);
  ParsedRequest r;
  r.form = RequestForm::kV2;
  r.id = "q";
  r.examples.size = 2;
  const std::vector<float> probs = {0.1f, 0.9f, 0.25f, 0.75f};
  size_t json_length = 0;
  const std::string body = RenderV2Binary(r, l, "m", "7", probs, &json_length);
  ASSERT_EQ(body.size(), json_length + 16);
  const json head = json::parse(body.substr(0, json_length));
  EXPECT_EQ(head["id"], "q");
  EXPECT_EQ(head["model_version"], "7");
  EXPECT_EQ(head["outputs"][0]["parameters"]["binary_data_size"], 16);
  EXPECT_EQ(head["outputs"][0]["shape"], json({2, 2}));
  EXPECT_FALSE(head["outputs"][0].contains("data"));
  std::vector<float> got(4);
  std::memcpy(got.data(), body.data() + json_length, 16);
  EXPECT_EQ(got, probs);
}

}  // namespace
}  // namespace kubetrain::trainer::serve
