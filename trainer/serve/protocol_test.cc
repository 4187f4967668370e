#include "trainer/serve/protocol.h"

#include <gtest/gtest.h>

#include <cmath>
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
       "binary tensor data extension"},
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
           "{\"binary_data\": true}}]"),
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
