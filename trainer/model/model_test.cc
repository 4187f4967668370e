// Gradient checks: every analytic gradient (oneDNN backward primitives, the losses, the
// embedding scatter) against central finite differences of the forward pass.
#include "trainer/model/model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "trainer/model/layers.h"
#include "trainer/model/loss.h"

namespace kubetrain::trainer {
namespace {

// One compute thread: these tests check numbers, not speed, and OpenMP threads that spin
// while waiting make them many times slower on a shared, oversubscribed CI machine.
class OneComputeThread : public ::testing::Environment {
 public:
  void SetUp() override { SetComputeThreads(1); }
};
[[maybe_unused]] ::testing::Environment* const kOneComputeThread =
    ::testing::AddGlobalTestEnvironment(new OneComputeThread);

std::vector<float> RandomVector(size_t n, uint64_t seed, float scale = 1.f) {
  std::vector<float> v(n);
  for (auto& x : v) x = scale * UniformSym(seed);
  return v;
}

// Central difference of f around x[i].
double NumericGrad(const std::function<double()>& f, float* x, double eps) {
  const float saved = *x;
  *x = static_cast<float>(saved + eps);
  const double up = f();
  *x = static_cast<float>(saved - eps);
  const double down = f();
  *x = saved;
  return (up - down) / (2 * eps);
}

void ExpectClose(double analytic, double numeric, const std::string& what) {
  EXPECT_NEAR(analytic, numeric, 2e-3 + 0.03 * std::fabs(numeric)) << what;
}

class DenseLayerGradTest : public ::testing::TestWithParam<bool> {};

TEST_P(DenseLayerGradTest, BackwardMatchesFiniteDifferences) {
  const bool relu = GetParam();
  const int batch = 3, in = 5, out = 4;
  DnnlContext ctx;
  auto layer = DenseLayer::Create(&ctx, batch, in, out, relu);
  ASSERT_TRUE(layer.ok()) << layer.status().ToString();
  DenseLayer& l = **layer;
  std::vector<float> params = RandomVector(l.NumParams(), 1);
  std::vector<float> grads(l.NumParams());
  std::vector<float> x = RandomVector(static_cast<size_t>(batch) * in, 2);
  const std::vector<float> r = RandomVector(static_cast<size_t>(batch) * out, 3);
  l.Bind(params.data(), grads.data());

  // Loss = sum(output .* r), so d loss / d output = r.
  auto loss = [&]() {
    l.Forward(x.data());
    double s = 0;
    for (size_t i = 0; i < r.size(); ++i) s += static_cast<double>(l.output()[i]) * r[i];
    return s;
  };
  loss();
  // Keep clear of ReLU's kink, where finite differences are meaningless.
  for (int s = 0; s < batch; ++s) {
    for (int o = 0; o < out; ++o) {
      double pre = params[static_cast<size_t>(out) * in + o];
      for (int i = 0; i < in; ++i) pre += params[o * in + i] * x[s * in + i];
      ASSERT_GT(std::fabs(pre), 0.005) << "sample " << s << ", output " << o;
    }
  }
  std::vector<float> dx(x.size());
  l.Backward(r.data(), dx.data());
  const std::vector<float> analytic_params = grads;

  for (size_t i = 0; i < params.size(); ++i) {
    ExpectClose(analytic_params[i], NumericGrad(loss, &params[i], 1e-3),
                "param " + std::to_string(i));
  }
  for (size_t i = 0; i < x.size(); ++i) {
    ExpectClose(dx[i], NumericGrad(loss, &x[i], 1e-3), "input " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutRelu, DenseLayerGradTest, ::testing::Bool());

// What oneDNN's own primitives give for one FP32 ReLU layer's backward pass: the inner
// product (ReLU post-op) forward, eltwise ReLU backward from the output, then the inner
// product's backward weights (with the bias gradient) and backward data.
struct Reference {
  std::vector<float> grads, dx;
};
Reference OneDnnReluLayerBackward(int batch, int in, int out, const std::vector<float>& params,
                                  const std::vector<float>& x, const std::vector<float>& dy) {
  using dnnl::memory;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const memory::desc src_md({batch, in}, dt::f32, tag::nc), w_md({out, in}, dt::f32, tag::oi),
      b_md({out}, dt::f32, tag::x), dst_md({batch, out}, dt::f32, tag::nc);
  Reference r;
  r.grads.assign(params.size(), 0.f);
  r.dx.assign(x.size(), 0.f);
  std::vector<float> y(static_cast<size_t>(batch) * out), dpre(y.size());
  float* w = const_cast<float*>(params.data());
  const size_t nw = static_cast<size_t>(out) * in;
  memory src_m(src_md, eng, const_cast<float*>(x.data())), w_m(w_md, eng, w),
      b_m(b_md, eng, w + nw), y_m(dst_md, eng, y.data()),
      dy_m(dst_md, eng, const_cast<float*>(dy.data())), dpre_m(dst_md, eng, dpre.data()),
      dw_m(w_md, eng, r.grads.data()), db_m(b_md, eng, r.grads.data() + nw),
      dx_m(src_md, eng, r.dx.data());
  dnnl::post_ops ops;
  ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  const dnnl::inner_product_forward::desc fwd(dnnl::prop_kind::forward_training, src_md, w_md, b_md,
                                              dst_md);
  const dnnl::inner_product_forward::primitive_desc hint(fwd, eng);
  dnnl::inner_product_forward(dnnl::inner_product_forward::primitive_desc(fwd, attr, eng))
      .execute(stream, {{DNNL_ARG_SRC, src_m},
                        {DNNL_ARG_WEIGHTS, w_m},
                        {DNNL_ARG_BIAS, b_m},
                        {DNNL_ARG_DST, y_m}});
  const dnnl::algorithm relu = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
  dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(
                             dnnl::eltwise_backward::desc(relu, dst_md, dst_md, 0.f, 0.f), eng,
                             dnnl::eltwise_forward::primitive_desc(
                                 dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training,
                                                             relu, dst_md, 0.f, 0.f),
                                 eng)))
      .execute(stream,
               {{DNNL_ARG_DST, y_m}, {DNNL_ARG_DIFF_DST, dy_m}, {DNNL_ARG_DIFF_SRC, dpre_m}});
  dnnl::inner_product_backward_weights(
      dnnl::inner_product_backward_weights::primitive_desc(
          dnnl::inner_product_backward_weights::desc(src_md, w_md, b_md, dst_md), eng, hint))
      .execute(stream, {{DNNL_ARG_SRC, src_m},
                        {DNNL_ARG_DIFF_DST, dpre_m},
                        {DNNL_ARG_DIFF_WEIGHTS, dw_m},
                        {DNNL_ARG_DIFF_BIAS, db_m}});
  dnnl::inner_product_backward_data(
      dnnl::inner_product_backward_data::primitive_desc(
          dnnl::inner_product_backward_data::desc(src_md, w_md, dst_md), eng, hint))
      .execute(stream,
               {{DNNL_ARG_DIFF_DST, dpre_m}, {DNNL_ARG_WEIGHTS, w_m}, {DNNL_ARG_DIFF_SRC, dx_m}});
  stream.wait();
  return r;
}

// DenseLayer computes an FP32 ReLU layer's ReLU backward and bias gradient itself, in one
// pass: its gradients must be oneDNN's bit for bit (signed zeros included), serial and split
// over two threads, for a Wide & Deep sized layer and a small one whose width is not a
// multiple of 16, into a buffer of its own and in place over a scratch incoming gradient.
TEST(DenseLayerTest, FusedReluBackwardGivesOneDnnsBits) {
  struct Shape {
    int batch, in, out;
  };
  for (const Shape& sh : {Shape{512, 429, 1024}, Shape{7, 5, 21}}) {
    for (int threads : {1, 2}) {
      for (bool scratch : {false, true}) {
        SCOPED_TRACE("batch " + std::to_string(sh.batch) + " out " + std::to_string(sh.out) +
                     ", threads " + std::to_string(threads) + (scratch ? ", in place" : ""));
        SetComputeThreads(threads);
        DnnlContext ctx;
        auto layer = DenseLayer::Create(&ctx, sh.batch, sh.in, sh.out, /*relu=*/true);
        ASSERT_TRUE(layer.ok()) << layer.status().ToString();
        DenseLayer& l = **layer;
        const std::vector<float> params = RandomVector(l.NumParams(), 11, 0.1f);
        std::vector<float> x = RandomVector(static_cast<size_t>(sh.batch) * sh.in, 12);
        std::vector<float> dy = RandomVector(static_cast<size_t>(sh.batch) * sh.out, 13);
        dy[1] = 0.f;  // signed zeros in the incoming gradient too
        dy[2] = -0.f;
        const Reference want = OneDnnReluLayerBackward(sh.batch, sh.in, sh.out, params, x, dy);
        std::vector<float> p = params, grads(l.NumParams(), 123.f), dx(x.size(), 123.f);
        l.Bind(p.data(), grads.data());
        l.Forward(x.data());
        std::vector<float> dy_arg = dy;
        l.Backward(dy_arg.data(), dx.data(), scratch);
        if (!scratch) {
          EXPECT_EQ(dy_arg, dy) << "the incoming gradient was not the layer's to change";
        }
        size_t zeros = 0;
        for (float y : std::vector<float>(l.output(), l.output() + dy.size())) zeros += y == 0.f;
        EXPECT_GT(zeros, 0u) << "ReLU never clipped: the test would not cover the mask";
        EXPECT_EQ(std::memcmp(grads.data(), want.grads.data(), grads.size() * sizeof(float)), 0)
            << "weight or bias gradients differ from oneDNN's";
        EXPECT_EQ(std::memcmp(dx.data(), want.dx.data(), dx.size() * sizeof(float)), 0)
            << "input gradients differ from oneDNN's";
      }
    }
  }
  SetComputeThreads(1);
}

TEST(BatchTest, PadBatchRepeatsTheLastRealExample) {
  Batch b;
  b.size = 2;
  b.num_dense = 2;
  b.num_cat = 1;
  b.dense = {1, 2, 3, 4};
  b.cat = {10, 20};
  b.label = {0, 1};
  PadBatch(b, 2, 4);
  EXPECT_EQ(b.size, 4);
  EXPECT_EQ(b.dense, (std::vector<float>{1, 2, 3, 4, 3, 4, 3, 4}));
  EXPECT_EQ(b.cat, (std::vector<uint64_t>{10, 20, 20, 20}));
  EXPECT_EQ(b.label, (std::vector<float>{0, 1, 1, 1}));
}

TEST(DenseLayerTest, RejectsNonPositiveSizes) {
  DnnlContext ctx;
  auto layer = DenseLayer::Create(&ctx, 0, 3, 3, true);
  ASSERT_FALSE(layer.ok());
  EXPECT_EQ(layer.status().code(), StatusCode::kInvalidArgument);
}

TEST(LossTest, SigmoidBceGradientAndStability) {
  std::vector<float> z = {-3.f, -0.5f, 0.f, 0.7f, 4.f};
  const std::vector<float> y = {0, 1, 1, 0, 1};
  std::vector<float> g(z.size());
  SigmoidBinaryCrossEntropy(z.data(), y.data(), 5, g.data());
  auto f = [&]() {
    return static_cast<double>(SigmoidBinaryCrossEntropy(z.data(), y.data(), 5, nullptr));
  };
  for (size_t i = 0; i < z.size(); ++i) ExpectClose(g[i], NumericGrad(f, &z[i], 1e-2), "logit");
  // Huge logits neither overflow nor lose the loss.
  const float big[2] = {1000.f, -1000.f};
  const float lab[2] = {0.f, 1.f};
  EXPECT_NEAR(SigmoidBinaryCrossEntropy(big, lab, 2, nullptr), 1000.f, 1e-3);
}

TEST(LossTest, SoftmaxCrossEntropyGradient) {
  std::vector<float> z = RandomVector(12, 9, 2.f);  // 4 samples x 3 classes
  const std::vector<float> y = {0, 2, 1, 2};
  std::vector<float> g(z.size());
  const float l = SoftmaxCrossEntropy(z.data(), y.data(), 4, 3, g.data());
  EXPECT_GT(l, 0.f);
  auto f = [&]() {
    return static_cast<double>(SoftmaxCrossEntropy(z.data(), y.data(), 4, 3, nullptr));
  };
  for (size_t i = 0; i < z.size(); ++i) ExpectClose(g[i], NumericGrad(f, &z[i], 1e-2), "logit");
}

Batch SmallCriteoBatch(int size, int num_dense, int num_cat) {
  Batch b;
  b.size = size;
  b.num_dense = num_dense;
  b.num_cat = num_cat;
  b.dense = RandomVector(static_cast<size_t>(size) * num_dense, 21);
  for (int i = 0; i < size * num_cat; ++i)
    b.cat.push_back(static_cast<uint64_t>(i % 5));  // shared ids
  for (int i = 0; i < size; ++i) b.label.push_back(static_cast<float>(i % 2));
  return b;
}

TEST(WideDeepTest, GradientsMatchFiniteDifferences) {
  WideDeepConfig c;
  c.batch_size = 4;
  c.num_dense = 3;
  c.num_cat = 2;
  c.embedding_dim = 3;
  c.hidden = {6, 5};
  auto model = CreateWideDeep(c);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  m.InitDense(7, m.dense_params().data());
  const Batch b = SmallCriteoBatch(c.batch_size, c.num_dense, c.num_cat);
  const SparseLookup lookup = SparseLookup::Build(b);
  ASSERT_EQ(lookup.ids.size(), 5u);
  const int dim = m.SparseRowDim();
  ASSERT_EQ(dim, 4);
  std::vector<float> rows = RandomVector(lookup.ids.size() * dim, 8, 0.5f);
  std::vector<float> row_grads(rows.size());
  auto loss = [&]() {
    std::vector<float> scratch(rows.size());
    return static_cast<double>(*m.TrainStep(b, lookup, rows.data(), scratch.data()));
  };
  ASSERT_TRUE(m.TrainStep(b, lookup, rows.data(), row_grads.data()).ok());
  const std::vector<float> dense_grads = m.dense_grads();
  for (size_t i = 0; i < rows.size(); ++i) {
    ExpectClose(row_grads[i], NumericGrad(loss, &rows[i], 1e-3), "row value " + std::to_string(i));
  }
  for (size_t i = 0; i < m.NumDenseParams(); ++i) {
    ExpectClose(dense_grads[i], NumericGrad(loss, &m.dense_params()[i], 1e-4),
                "dense param " + std::to_string(i));
  }
}

// A batch large enough for the parallel gather and scatter (2,048+ distinct rows, most
// repeated across samples): two compute threads give the one-thread loss and gradients
// (up to the GEMMs' rounding, which may depend on the thread count).
TEST(WideDeepTest, TwoThreadsGiveTheOneThreadGradients) {
  WideDeepConfig c;
  c.batch_size = 256;
  c.embedding_dim = 8;
  c.hidden = {32, 16};
  Batch b;
  b.size = c.batch_size;
  b.num_dense = c.num_dense;
  b.num_cat = c.num_cat;
  b.dense = RandomVector(static_cast<size_t>(b.size) * b.num_dense, 3);
  uint64_t seed = 4;
  for (int i = 0; i < b.size * b.num_cat; ++i) b.cat.push_back(SplitMix64(seed) % 4000);
  for (int s = 0; s < b.size; ++s) b.label.push_back(static_cast<float>(s % 3 == 0));
  const SparseLookup lookup = SparseLookup::Build(b);
  ASSERT_GT(lookup.ids.size(), 2048u);
  ASSERT_LT(lookup.ids.size(), b.cat.size());
  struct Result {
    float loss = 0;
    std::vector<float> row_grads, dense_grads;
  };
  const auto run = [&](int threads) {
    SetComputeThreads(threads);
    auto model = CreateWideDeep(c);
    EXPECT_TRUE(model.ok());
    Model& m = **model;
    m.InitDense(7, m.dense_params().data());
    const std::vector<float> rows = RandomVector(lookup.ids.size() * m.SparseRowDim(), 8, 0.5f);
    Result r;
    r.row_grads.assign(rows.size(), 123.f);  // the scatter must overwrite, not add to, these
    auto loss = m.TrainStep(b, lookup, rows.data(), r.row_grads.data());
    EXPECT_TRUE(loss.ok());
    r.loss = *loss;
    r.dense_grads = m.dense_grads();
    SetComputeThreads(1);
    return r;
  };
  const Result one = run(1), two = run(2);
  EXPECT_NEAR(one.loss, two.loss, 1e-6);
  ASSERT_EQ(one.row_grads.size(), two.row_grads.size());
  const auto close = [](float x, float y) {
    return std::fabs(x - y) <= 1e-6f + 1e-4f * std::fabs(x);
  };
  size_t diff = 0;
  for (size_t i = 0; i < one.row_grads.size(); ++i)
    diff += !close(one.row_grads[i], two.row_grads[i]);
  EXPECT_EQ(diff, 0u);
  diff = 0;
  for (size_t i = 0; i < one.dense_grads.size(); ++i) {
    diff += !close(one.dense_grads[i], two.dense_grads[i]);
  }
  EXPECT_EQ(diff, 0u);
}

TEST(WideDeepTest, RejectsBatchOfWrongShape) {
  WideDeepConfig c;
  c.batch_size = 4;
  c.num_dense = 3;
  c.num_cat = 2;
  c.embedding_dim = 2;
  c.hidden = {4};
  auto model = CreateWideDeep(c);
  ASSERT_TRUE(model.ok());
  const Batch b = SmallCriteoBatch(3, 3, 2);
  const SparseLookup lookup = SparseLookup::Build(b);
  std::vector<float> rows(lookup.ids.size() * 3), grads(rows.size());
  auto r = (*model)->TrainStep(b, lookup, rows.data(), grads.data());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(MlpClassifierTest, GradientsMatchFiniteDifferences) {
  MlpClassifierConfig c;
  c.batch_size = 4;
  c.num_features = 3;
  c.num_classes = 3;
  c.hidden = {5};
  auto model = CreateMlpClassifier(c);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model& m = **model;
  m.InitDense(3, m.dense_params().data());
  Batch b = SmallCriteoBatch(4, 3, 0);
  b.label = {0, 2, 1, 2};
  const SparseLookup lookup;
  ASSERT_TRUE(m.TrainStep(b, lookup, nullptr, nullptr).ok());
  const std::vector<float> analytic = m.dense_grads();
  auto loss = [&]() { return static_cast<double>(*m.TrainStep(b, lookup, nullptr, nullptr)); };
  for (size_t i = 0; i < analytic.size(); ++i) {
    ExpectClose(analytic[i], NumericGrad(loss, &m.dense_params()[i], 1e-3),
                "param " + std::to_string(i));
  }
  std::vector<float> probs(12);
  ASSERT_TRUE(m.Predict(b, lookup, nullptr, probs.data()).ok());
  EXPECT_NEAR(probs[0] + probs[1] + probs[2], 1.f, 1e-5);
  b.label[0] = 3;  // not a class
  EXPECT_FALSE(m.TrainStep(b, lookup, nullptr, nullptr).ok());
}

TEST(InitTest, DeterministicFromSeed) {
  std::vector<float> a(5), b(5), c(5);
  InitSparseRow(1, 42, 5, a.data());
  InitSparseRow(1, 42, 5, b.data());
  InitSparseRow(1, 43, 5, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a[4], 0.f);  // wide weight starts at zero
}

TEST(ThreadsTest, DefaultThreadCountIsPositive) {
  EXPECT_GE(DefaultThreadCount(), 1);
}

TEST(ThreadsTest, CpuLimitFromCgroupV2AndV1) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("kt_cgroup_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "cpu");
  auto write = [](const fs::path& p, const std::string& text) { std::ofstream(p) << text; };
  EXPECT_EQ(CgroupCpuLimit(root.string()), 0);  // no files: no limit
  write(root / "cpu" / "cpu.cfs_quota_us", "250000\n");
  write(root / "cpu" / "cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(CgroupCpuLimit(root.string()), 3);  // v1: 2.5 CPUs round up
  write(root / "cpu" / "cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(CgroupCpuLimit(root.string()), 0);
  write(root / "cpu.max", "max 100000\n");  // v2 takes precedence
  EXPECT_EQ(CgroupCpuLimit(root.string()), 0);
  write(root / "cpu.max", "150000 100000\n");
  EXPECT_EQ(CgroupCpuLimit(root.string()), 2);
  write(root / "cpu.max", "garbage 100000\n");
  EXPECT_EQ(CgroupCpuLimit(root.string()), 0);
  fs::remove_all(root);
}

// Serving's models: forward_inference on weights reordered once (blocked) at
// UseDenseParams give the training model's probabilities within 1e-6, at the batch sizes
// the server builds (1 and a batch the blocked kernels split), and refuse to train.
TEST(WideDeepTest, InferenceOnlyPredictsAsTheTrainingModelAndDoesNotTrain) {
  for (const int batch : {1, 64}) {
    WideDeepConfig c;
    c.batch_size = batch;
    c.embedding_dim = 16;
    c.hidden = {96, 48};
    auto train = CreateWideDeep(c);
    c.inference_only = true;
    auto infer = CreateWideDeep(c);
    ASSERT_TRUE(train.ok() && infer.ok());
    std::vector<float> params((*train)->NumDenseParams());
    (*train)->InitDense(7, params.data());
    (*train)->UseDenseParams(params.data());
    (*infer)->UseDenseParams(params.data());
    Batch b;
    b.size = batch;
    b.num_dense = c.num_dense;
    b.num_cat = c.num_cat;
    b.dense = RandomVector(static_cast<size_t>(b.size) * b.num_dense, 3);
    uint64_t seed = 4;
    for (int i = 0; i < b.size * b.num_cat; ++i) b.cat.push_back(SplitMix64(seed) % 400);
    b.label.assign(batch, 0.f);
    const SparseLookup lookup = SparseLookup::Build(b);
    const std::vector<float> rows =
        RandomVector(lookup.ids.size() * (*train)->SparseRowDim(), 8, 0.5f);
    std::vector<float> want(batch), got(batch);
    ASSERT_TRUE((*train)->Predict(b, lookup, rows.data(), want.data()).ok());
    ASSERT_TRUE((*infer)->Predict(b, lookup, rows.data(), got.data()).ok());
    for (int s = 0; s < batch; ++s) EXPECT_NEAR(got[s], want[s], 1e-6) << s;
    std::vector<float> row_grads(rows.size());
    EXPECT_EQ((*infer)->TrainStep(b, lookup, rows.data(), row_grads.data()).status().code(),
              StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace kubetrain::trainer
