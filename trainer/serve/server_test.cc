#include "trainer/serve/server.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/http_test_client.h"
#include "common/storage/files.h"
#include "trainer/data/reader.h"
#include "trainer/worker/params.h"

namespace kubetrain::trainer::serve {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

// A job's --output for a small MLP (3 features, 2 classes) at `step`: the checkpoint in
// model/ (its initial parameters from `seed`) and model.json, as the trainer writes them.
// Returns the trainer's own model for comparison.
std::unique_ptr<Model> WriteMlpOutput(const std::string& dir, int64_t step, uint64_t seed,
                                      bool record_optimizer = true, std::vector<int> hidden = {4}) {
  MlpClassifierConfig c;
  c.batch_size = 2;
  c.num_features = 3;
  c.num_classes = 2;
  c.hidden = hidden;
  auto model = CreateMlpClassifier(c);
  EXPECT_TRUE(model.ok());
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kAdam;
  LocalParams params(**model, seed, opt);
  EXPECT_TRUE(params.SaveCheckpoint(storage::JoinPath(dir, "model"), step).ok());
  ModelSpec spec;
  spec.kind = "mlp";
  spec.num_features = 3;
  spec.num_classes = 2;
  spec.hidden = hidden;
  auto m = ReadTrainedModel(spec, opt, storage::JoinPath(dir, "model"));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  json j = DescribeInputs(*m);
  if (!record_optimizer) j.erase("optimizer");
  EXPECT_TRUE(storage::WriteObject(storage::JoinPath(dir, "model.json"), j.dump()).ok());
  (*model)->dense_params() = m->dense;
  return std::move(*model);
}

std::string TempDir() {
  static int n = 0;
  const fs::path p = fs::temp_directory_path() /
                     ("kt_serve_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::optional<http_test::Response> Post(int port, const std::string& path,
                                        const std::string& body) {
  return http_test::Get(port, path, 10s, "POST", "Content-Type: application/json\r\n", body);
}

// The OS threads of this process.
int ProcessThreads() {
  return static_cast<int>(
      std::distance(fs::directory_iterator("/proc/self/task"), fs::directory_iterator()));
}

// oneDNN fixes a primitive's thread count when Load creates it: a server loaded on a
// thread with the machine's OpenMP count ran --threads 1 on every core. Loads and runs on
// a fresh thread (its own OpenMP pool) whose count is 4: a predictor for 1 thread must
// never start an OpenMP thread, in Load (weight reorders) or in Run.
TEST(Predictor, ComputesOnTheThreadsItWasLoadedForWhateverTheLoadingThreadsCount) {
  const std::string dir = TempDir();
  WriteMlpOutput(dir, 1, 3, true, {512, 512});
  const auto threads_started = [&](int compute_threads) {
    int started = -1;
    std::thread([&] {
      omp_set_num_threads(4);
      const int before = ProcessThreads();
      PredictorOptions po;
      po.model_dir = dir;
      po.max_batch = 256;
      po.compute_threads = compute_threads;
      auto p = Predictor::Load(po);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      Batch b;
      b.size = 256;
      b.num_dense = 3;
      b.dense.assign(256 * 3, 0.5f);
      b.label.assign(256, 0.f);
      std::vector<float> probs;
      ASSERT_TRUE((*p)->Run(b, &probs).ok());
      started = ProcessThreads() - before;
    }).join();
    return started;
  };
  EXPECT_EQ(threads_started(1), 0);
  // Without the count (the old server's Load): the loading thread's 4, so the check
  // above can fail.
  EXPECT_GE(threads_started(0), 1);
}

// A job's --output for Wide & Deep (hidden {32, 8}) at `step` whose checkpoint holds the rows
// of the ids one step updated (`ids`, from `seed`'s initial values plus one update).
void WriteWideDeepOutput(const std::string& dir, int64_t step, uint64_t seed,
                         const std::vector<uint64_t>& ids) {
  WideDeepConfig c;
  c.batch_size = 2;
  c.hidden = {32, 8};
  auto model = CreateWideDeep(c);
  ASSERT_TRUE(model.ok());
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kAdagrad;
  LocalParams params(**model, seed, opt);
  const size_t dim = static_cast<size_t>((*model)->SparseRowDim());
  std::vector<float> rows(ids.size() * dim), dense((*model)->NumDenseParams());
  ASSERT_TRUE(params.Pull(ids, rows.data(), dense.data()).ok());
  std::vector<float> row_grads(rows.size()), dense_grad(dense.size());
  for (size_t i = 0; i < row_grads.size(); ++i) row_grads[i] = 0.1f * float(i % 7) - 0.3f;
  for (size_t i = 0; i < dense_grad.size(); ++i) dense_grad[i] = 0.01f * float(i % 5) - 0.02f;
  ASSERT_TRUE(params.Push(step, ids, row_grads.data(), dense_grad.data()).ok());
  ASSERT_TRUE(params.SaveCheckpoint(storage::JoinPath(dir, "model"), step).ok());
  ModelSpec spec;
  spec.kind = "wide_deep";
  spec.hidden = c.hidden;
  auto m = ReadTrainedModel(spec, opt, storage::JoinPath(dir, "model"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->ids.size(), ids.size());
  ASSERT_TRUE(
      storage::WriteObject(storage::JoinPath(dir, "model.json"), DescribeInputs(*m).dump()).ok());
}

// Wide & Deep in FP32 is served with its embeddings folded when the tables fit the budget,
// unfolded otherwise (over the budget, folding off, BF16), and says which; the folded and
// the unfolded give the same predictions within 1e-6, over batches padded to the sizes
// built and ids with and without trained rows (one in a field it was not trained in).
TEST(Predictor, FoldsWideDeepsEmbeddingsWhenTheyFitAndPredictsAsUnfolded) {
  const std::string dir = TempDir();
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 60; ++i) ids.push_back(i * 0x9e3779b97f4a7c15ULL + 11);
  WriteWideDeepOutput(dir, 4, 9, ids);
  Batch b;
  b.size = 5;  // padded to 8
  b.num_dense = kCriteoDense;
  b.num_cat = kCriteoCat;
  for (int s = 0; s < b.size; ++s) {
    for (int k = 0; k < kCriteoDense; ++k) b.dense.push_back(0.3f * float((s + k) % 5) - 0.5f);
    for (int f = 0; f < kCriteoCat; ++f) {
      // Trained ids, mostly in fields of their own; every third one none (an id no
      // training step updated: the zero row); example 4 uses field 0's id in field 5.
      uint64_t id = ids[static_cast<size_t>((s * 7 + f) % 60)];
      if ((s + f) % 3 == 0) id = 1000 + f;
      if (s == 4 && f == 5) id = ids[0];
      b.cat.push_back(id);
    }
  }
  b.label.assign(5, 0.f);
  const auto load = [&](size_t max_bytes, Precision precision) {
    PredictorOptions po;
    po.model_dir = dir;
    po.max_batch = 16;
    po.fold_max_bytes = max_bytes;
    po.precision = precision;
    auto p = Predictor::Load(po);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return std::move(*p);
  };
  const auto folded = load(size_t{1} << 20, Precision::kFp32);
  const auto unfolded = load(0, Precision::kFp32);
  EXPECT_TRUE(folded->folded());
  EXPECT_TRUE(folded->fold_path().starts_with("folded: 60 rows")) << folded->fold_path();
  EXPECT_FALSE(unfolded->folded());
  EXPECT_EQ(unfolded->fold_path(), "unfolded: folding is off");
  // 60 rows x 32 floats = 7,680 bytes: a budget of 7,679 is too small.
  const auto over = load(60 * 32 * sizeof(float) - 1, Precision::kFp32);
  EXPECT_FALSE(over->folded());
  EXPECT_TRUE(over->fold_path().starts_with("unfolded: the folded tables of 60 rows"))
      << over->fold_path();
  const auto bf16 = load(size_t{1} << 20, Precision::kBf16);
  EXPECT_FALSE(bf16->folded());
  EXPECT_EQ(bf16->fold_path(), "unfolded: the fold is FP32 and this model runs bf16");

  std::vector<float> want, got, again;
  ASSERT_TRUE(unfolded->Run(b, &want).ok());
  ASSERT_TRUE(folded->Run(b, &got).ok());
  ASSERT_TRUE(folded->Run(b, &again).ok());
  ASSERT_EQ(got.size(), 5u);
  for (int s = 0; s < 5; ++s) {
    EXPECT_NEAR(got[s], want[s], 1e-6) << s;
    EXPECT_EQ(again[s], got[s]) << s;
  }
  EXPECT_GT(std::abs(want[0] - want[1]) + std::abs(want[1] - want[2]), 1e-3);
  EXPECT_GT(folded->folded_rows(), 0u);
  EXPECT_EQ(unfolded->folded_rows(), 0u);
  // BF16 runs unfolded, so it gives BF16's numbers whatever the budget: within BF16's
  // rounding of the FP32 ones.
  std::vector<float> low;
  ASSERT_TRUE(bf16->Run(b, &low).ok());
  for (int s = 0; s < 5; ++s) EXPECT_NEAR(low[s], want[s], 2e-2) << s;
}

TEST(ModelServer, ServesTheTrainersPredictionsOverV2AndTfAndRefusesBadRequests) {
  const std::string dir = TempDir();
  auto model = WriteMlpOutput(dir, 5, 11, /*record_optimizer=*/false);
  PredictorOptions po;
  po.model_dir = dir;
  po.max_batch = 4;
  auto p = Predictor::Load(po);  // finds the optimizer from the shard layout
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->step(), 5);

  ServerOptions o;
  o.model_name = "m";
  o.batcher.max_batch = 4;
  o.http.max_body_bytes = 4096;
  o.max_request_examples = 8;
  o.http.max_requests_per_connection = 100;
  ModelServer server(o);
  auto port = server.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  EXPECT_EQ(http_test::Get(*port, "/v2/health/live", 5s)->status, 200);
  EXPECT_EQ(http_test::Get(*port, "/v2/health/ready", 5s)->status, 503);  // no model yet
  EXPECT_EQ(Post(*port, "/v2/models/m/infer", "{}")->status, 503);
  server.SetPredictor(std::move(*p));
  EXPECT_EQ(http_test::Get(*port, "/v2/health/ready", 5s)->status, 200);
  EXPECT_EQ(http_test::Get(*port, "/v2/models/m/ready", 5s)->status, 200);
  auto meta = http_test::Get(*port, "/v2/models/m", 5s);
  ASSERT_EQ(meta->status, 200);
  EXPECT_EQ(json::parse(meta->body)["versions"], json({"5"}));
  EXPECT_EQ(json::parse(meta->body)["inputs"][0]["shape"], json({-1, 3}));

  // The trainer's forward pass on the same two examples.
  Batch b;
  b.size = 2;
  b.num_dense = 3;
  b.dense = {0.5f, -1.f, 2.f, 3.f, 0.25f, -0.75f};
  b.label = {0, 0};
  std::vector<float> expect(4);
  ASSERT_TRUE(model->Predict(b, SparseLookup(), nullptr, expect.data()).ok());

  auto v2 = Post(*port, "/v2/models/m/infer",
                 R"({"inputs":[{"name":"features","datatype":"FP32","shape":[2,3],)"
                 R"("data":[0.5,-1,2,3,0.25,-0.75]}]})");
  ASSERT_TRUE(v2.has_value());
  ASSERT_EQ(v2->status, 200) << v2->body;
  // Within 1e-6: the server's inference primitives (blocked weights) sum in another order.
  const auto near = [](const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  };
  near(json::parse(v2->body)["outputs"][0]["data"].get<std::vector<float>>(), expect);
  auto tf = Post(*port, "/v1/models/m:predict", R"({"instances":[[0.5,-1,2],[3,0.25,-0.75]]})");
  ASSERT_EQ(tf->status, 200) << tf->body;
  const json rows = json::parse(tf->body)["predictions"];
  near(rows[1].get<std::vector<float>>(), std::vector<float>(expect.begin() + 2, expect.end()));
  EXPECT_EQ(http_test::Get(*port, "/v1/models/m", 5s)->status, 200);

  // Bad requests: 4xx with a JSON message; another model's name: 404; huge body: 413.
  auto bad = Post(*port, "/v2/models/m/infer",
                  R"({"inputs":[{"name":"features","datatype":"INT64",)"
                  R"("shape":[1,3],"data":[1,2,3]}]})");
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(json::parse(bad->body)["error"].get<std::string>().find("expected FP32"),
            std::string::npos);
  EXPECT_EQ(Post(*port, "/v2/models/m/infer", "{\"inputs\": [")->status, 400);
  EXPECT_EQ(Post(*port, "/v1/models/m:predict", R"({"instances":[[1,2]]})")->status, 400);
  EXPECT_EQ(Post(*port, "/v2/models/other/infer", "{}")->status, 404);
  EXPECT_EQ(Post(*port, "/v2/models/m/infer", std::string(5000, ' '))->status, 413);
  EXPECT_EQ(http_test::Get(*port, "/v2/models/m/infer", 5s)->status, 400);  // no body
  // More examples than a request may carry, in one request: 400; up to it, answered in
  // chunks of the batch size.
  json many = json::array();
  for (int i = 0; i < 9; ++i) many.push_back({1, 2, 3});
  EXPECT_EQ(Post(*port, "/v1/models/m:predict", json{{"instances", many}}.dump())->status, 400);
  many.erase(many.begin());
  auto eight = Post(*port, "/v1/models/m:predict", json{{"instances", many}}.dump());
  ASSERT_EQ(eight->status, 200) << eight->body;
  EXPECT_EQ(json::parse(eight->body)["predictions"].size(), 8u);

  // A hot reload: the next requests see the new model.
  const std::string newer = TempDir();
  auto model2 = WriteMlpOutput(newer, 9, 12);
  po.model_dir = newer;
  auto p2 = Predictor::Load(po);
  ASSERT_TRUE(p2.ok()) << p2.status().ToString();
  server.SetPredictor(std::move(*p2));
  EXPECT_EQ(json::parse(http_test::Get(*port, "/v2/models/m", 5s)->body)["versions"], json({"9"}));
  ASSERT_TRUE(model2->Predict(b, SparseLookup(), nullptr, expect.data()).ok());
  v2 = Post(*port, "/v2/models/m/infer",
            R"({"inputs":[{"name":"features","datatype":"FP32","shape":[2,3],)"
            R"("data":[0.5,-1,2,3,0.25,-0.75]}]})");
  near(json::parse(v2->body)["outputs"][0]["data"].get<std::vector<float>>(), expect);

  // Keep-alive: requests one after another on one connection, answered on the loop
  // thread (nothing else queued: no hand-off to the batcher).
  const int conn = http_test::Connect(*port);
  ASSERT_GE(conn, 0);
  const std::string body = R"({"inputs":[{"name":"features","datatype":"FP32","shape":[2,3],)"
                           R"("data":[0.5,-1,2,3,0.25,-0.75]}]})";
  for (int i = 0; i < 3; ++i) {
    auto r =
        http_test::RoundTrip(conn,
                             "POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body,
                             std::chrono::steady_clock::now() + 5s);
    ASSERT_TRUE(r.has_value()) << "request " << i << " on one connection";
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->head.find("Connection: keep-alive"), std::string::npos) << r->head;
    near(json::parse(r->body)["outputs"][0]["data"].get<std::vector<float>>(), expect);
  }
  ::close(conn);

  const std::string metrics = http_test::Get(*port, "/metrics", 5s)->body;
  EXPECT_EQ(metrics.find("kubetrain_serve_inline_requests_total 0\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kubetrain_serve_requests_total{protocol=\"v2\",code=\"200\"} 5"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kubetrain_serve_model_step 9"), std::string::npos);

  // The binary tensor data extension, as tritonclient sends it: the JSON header's length
  // in Inference-Header-Content-Length, the FP32 values after it; the output asked as
  // binary comes back the same way.
  const std::vector<float> features = {0.5f, -1.f, 2.f, 3.f, 0.25f, -0.75f};
  const std::string header =
      R"({"inputs":[{"name":"features","datatype":"FP32","shape":[2,3],)"
      R"("parameters":{"binary_data_size":24}}],)"
      R"("outputs":[{"name":"probabilities","parameters":{"binary_data":true}}]})";
  const std::string raw(reinterpret_cast<const char*>(features.data()), 24);
  const auto binary_post = [&](const std::string& path, const std::string& length,
                               const std::string& payload) {
    return http_test::Get(*port, path, 10s, "POST",
                          "Inference-Header-Content-Length: " + length + "\r\n", payload);
  };
  auto bin = binary_post("/v2/models/m/infer", std::to_string(header.size()), header + raw);
  ASSERT_TRUE(bin.has_value());
  ASSERT_EQ(bin->status, 200) << bin->body;
  const std::string length_header = "\r\nInference-Header-Content-Length: ";
  const size_t at = bin->head.find(length_header);
  ASSERT_NE(at, std::string::npos) << bin->head;
  const size_t json_length = std::stoul(bin->head.substr(at + length_header.size()));
  ASSERT_EQ(bin->body.size(), json_length + 16);
  EXPECT_EQ(
      json::parse(bin->body.substr(0, json_length))["outputs"][0]["parameters"]["binary_data_size"],
      16);
  std::vector<float> got(4);
  std::memcpy(got.data(), bin->body.data() + json_length, 16);
  near(got, expect);
  // Sizes that do not fit: 400 with the reason, and the server goes on.
  EXPECT_EQ(binary_post("/v2/models/m/infer", "99999", header + raw)->status, 400);
  EXPECT_EQ(binary_post("/v2/models/m/infer", "12x", header + raw)->status, 400);
  auto short_data =
      binary_post("/v2/models/m/infer", std::to_string(header.size()), header + raw.substr(0, 20));
  EXPECT_EQ(short_data->status, 400);
  EXPECT_NE(short_data->body.find("only 20 bytes"), std::string::npos) << short_data->body;

  // /versions/{v}: the served version (the step, 9) answers; another is a 404 naming it.
  EXPECT_EQ(http_test::Get(*port, "/v2/models/m/versions/9", 5s)->status, 200);
  EXPECT_EQ(http_test::Get(*port, "/v2/models/m/versions/9/ready", 5s)->status, 200);
  auto by_version =
      binary_post("/v2/models/m/versions/9/infer", std::to_string(header.size()), header + raw);
  ASSERT_EQ(by_version->status, 200) << by_version->body;
  EXPECT_EQ(by_version->body.substr(json_length), bin->body.substr(json_length));
  auto old_version = Post(*port, "/v2/models/m/versions/5/infer", body);
  EXPECT_EQ(old_version->status, 404);
  EXPECT_NE(json::parse(old_version->body)["error"].get<std::string>().find(
                "no version \"5\"; it serves version 9"),
            std::string::npos)
      << old_version->body;
  EXPECT_EQ(http_test::Get(*port, "/v2/models/m/versions/5", 5s)->status, 404);
  EXPECT_EQ(http_test::Get(*port, "/v2/models/m/versions/9/other", 5s)->status, 404);

  // Expect: 100-continue (curl sends it for bodies over 1 KiB): the headers alone get
  // "100 Continue", then the body its answer, on the same connection.
  std::string padded = body;
  padded.insert(padded.size() - 1, ",\"pad\":\"" + std::string(2000, 'x') + "\"");
  const int fd = http_test::Connect(*port);
  ASSERT_GE(fd, 0);
  const std::string head = "POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                           std::to_string(padded.size()) + "\r\nExpect: 100-continue\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  std::string interim;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (interim.find("\r\n\r\n") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 100) != 1) continue;
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    interim.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
  auto answer = http_test::RoundTrip(fd, padded, std::chrono::steady_clock::now() + 5s);
  ASSERT_TRUE(answer.has_value());
  ASSERT_EQ(answer->status, 200) << answer->body;
  near(json::parse(answer->body)["outputs"][0]["data"].get<std::vector<float>>(), expect);
  ::close(fd);

  // Draining: not ready, inference refused.
  server.Drain();
  fs::remove_all(dir);
  fs::remove_all(newer);
}

}  // namespace
}  // namespace kubetrain::trainer::serve
