// The BF16 inner products against FP32 on the same parameters and inputs, and the choice
// of precision. (The fallback on a CPU without BF16 is in precision_fallback_test.cc: it
// needs a process whose oneDNN has not picked its ISA yet.)
#include <gtest/gtest.h>

#include <cmath>

#include "trainer/model/layers.h"
#include "trainer/model/model.h"

namespace kubetrain::trainer {
namespace {

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

// ||a - b|| / ||b||.
double RelativeError(const float* a, const float* b, size_t n) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// BF16 keeps 8 significant bits (relative rounding error <= 2^-9 per value); products
// accumulate in FP32. Stated tolerances, norm-wise (||bf16 - fp32|| / ||fp32||):
//  - a linear layer, forward and all gradients: 1% (measured 0.3-0.55%);
//  - a ReLU MLP's output: 2% (measured about 0.4%);
//  - a ReLU MLP's gradients: 10% (measured 3-8%). The extra error is not arithmetic: the
//    ReLU units whose pre-activation lies within BF16 rounding of 0 switch on or off, and
//    each such unit changes its gradient by its whole value.
constexpr double kLinearTolerance = 0.01;
constexpr double kForwardTolerance = 0.02;
constexpr double kReluGradTolerance = 0.1;

TEST(Bf16MlpTest, ALinearLayerIsWithinBf16Rounding) {
  if (!CpuHasNativeBf16()) GTEST_SKIP() << ResolvePrecision(Precision::kBf16).fallback;
  const int batch = 64, in = 96, out = 128;
  DnnlContext ctx;
  auto fp32 = Mlp::Create(&ctx, batch, {in, out}, Precision::kFp32);
  auto bf16 = Mlp::Create(&ctx, batch, {in, out}, Precision::kBf16);
  ASSERT_TRUE(fp32.ok() && bf16.ok());
  std::vector<float> params = RandomVector((*fp32)->NumParams(), 1);
  std::vector<float> g32(params.size()), g16(params.size());
  (*fp32)->Bind(params.data(), g32.data());
  (*bf16)->Bind(params.data(), g16.data());
  const std::vector<float> x = RandomVector(static_cast<size_t>(batch) * in, 2);
  const std::vector<float> dy = RandomVector(static_cast<size_t>(batch) * out, 3);
  const float* y32 = (*fp32)->Forward(x.data());
  const float* y16 = (*bf16)->Forward(x.data());
  EXPECT_LT(RelativeError(y16, y32, dy.size()), kLinearTolerance);
  std::vector<float> dx32(x.size()), dx16(x.size());
  (*fp32)->Backward(dy.data(), dx32.data());
  (*bf16)->Backward(dy.data(), dx16.data());
  const size_t nw = static_cast<size_t>(in) * out;
  EXPECT_LT(RelativeError(dx16.data(), dx32.data(), dx32.size()), kLinearTolerance);
  EXPECT_LT(RelativeError(g16.data(), g32.data(), nw), kLinearTolerance);
  EXPECT_LT(RelativeError(g16.data() + nw, g32.data() + nw, out), kLinearTolerance);
  // And it is BF16 arithmetic, not FP32 under another name.
  EXPECT_GT(RelativeError(y16, y32, dy.size()), 1e-4);
}

TEST(PrecisionTest, ParsesAndNames) {
  EXPECT_EQ(*ParsePrecision("fp32"), Precision::kFp32);
  EXPECT_EQ(*ParsePrecision("bf16"), Precision::kBf16);
  EXPECT_FALSE(ParsePrecision("fp16").ok());
  EXPECT_STREQ(PrecisionName(Precision::kBf16), "bf16");
}

TEST(PrecisionTest, Fp32IsAlwaysKept) {
  const PrecisionChoice c = ResolvePrecision(Precision::kFp32);
  EXPECT_EQ(c.precision, Precision::kFp32);
  EXPECT_TRUE(c.fallback.empty());
}

TEST(PrecisionTest, Bf16IsUsedWhereTheCpuHasIt) {
  const PrecisionChoice c = ResolvePrecision(Precision::kBf16);
  if (CpuHasNativeBf16()) {
    EXPECT_EQ(c.precision, Precision::kBf16);
    EXPECT_TRUE(c.fallback.empty());
  } else {
    EXPECT_EQ(c.precision, Precision::kFp32);
    EXPECT_NE(c.fallback.find("FP32"), std::string::npos) << c.fallback;
  }
}

TEST(Bf16MlpTest, ForwardAndGradientsAreCloseToFp32) {
  if (!CpuHasNativeBf16()) GTEST_SKIP() << ResolvePrecision(Precision::kBf16).fallback;
  const int batch = 64;
  const std::vector<int> sizes = {96, 128, 64, 1};
  DnnlContext ctx;
  auto fp32 = Mlp::Create(&ctx, batch, sizes, Precision::kFp32);
  auto bf16 = Mlp::Create(&ctx, batch, sizes, Precision::kBf16);
  ASSERT_TRUE(fp32.ok()) << fp32.status().ToString();
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  const size_t n = (*fp32)->NumParams();
  ASSERT_EQ((*bf16)->NumParams(), n);
  std::vector<float> params(n), grads32(n), grads16(n);
  (*fp32)->Init(7, params.data());
  (*fp32)->Bind(params.data(), grads32.data());
  (*bf16)->Bind(params.data(), grads16.data());
  const std::vector<float> x = RandomVector(static_cast<size_t>(batch) * sizes[0], 1);
  const std::vector<float> dy = RandomVector(static_cast<size_t>(batch) * sizes.back(), 2);

  const float* y32 = (*fp32)->Forward(x.data());
  const float* y16 = (*bf16)->Forward(x.data());
  const size_t ny = static_cast<size_t>(batch) * sizes.back();
  EXPECT_LT(RelativeError(y16, y32, ny), kForwardTolerance);

  std::vector<float> dx32(x.size()), dx16(x.size());
  (*fp32)->Backward(dy.data(), dx32.data());
  (*bf16)->Backward(dy.data(), dx16.data());
  EXPECT_LT(RelativeError(dx16.data(), dx32.data(), dx32.size()), kReluGradTolerance);
  // Every layer's weight and bias gradients.
  size_t offset = 0;
  for (const auto& layer : (*fp32)->layers()) {
    const size_t nw = static_cast<size_t>(layer->in()) * layer->out();
    EXPECT_LT(RelativeError(grads16.data() + offset, grads32.data() + offset, nw),
              kReluGradTolerance)
        << "weights of layer " << layer->in() << "x" << layer->out();
    EXPECT_LT(
        RelativeError(grads16.data() + offset + nw, grads32.data() + offset + nw, layer->out()),
        kReluGradTolerance)
        << "bias of layer " << layer->in() << "x" << layer->out();
    offset += layer->NumParams();
  }
  // The parameters themselves are untouched FP32 (the BF16 copies are the layers' own).
  std::vector<float> fresh(n);
  (*fp32)->Init(7, fresh.data());
  EXPECT_EQ(params, fresh);
}

TEST(Bf16MlpTest, WeightsChangedBetweenStepsAreSeen) {
  // The BF16 copy of the weights is made per Forward: a pull or an update between steps
  // must show in the next output.
  if (!CpuHasNativeBf16()) GTEST_SKIP() << ResolvePrecision(Precision::kBf16).fallback;
  const int batch = 8;
  DnnlContext ctx;
  auto mlp = Mlp::Create(&ctx, batch, {16, 8, 1}, Precision::kBf16);
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  std::vector<float> params((*mlp)->NumParams()), grads(params.size());
  (*mlp)->Init(3, params.data());
  (*mlp)->Bind(params.data(), grads.data());
  const std::vector<float> x = RandomVector(static_cast<size_t>(batch) * 16, 4);
  const std::vector<float> before((*mlp)->Forward(x.data()), (*mlp)->Forward(x.data()) + batch);
  params.back() += 1.f;  // the output layer's bias
  const float* after = (*mlp)->Forward(x.data());
  for (int s = 0; s < batch; ++s) EXPECT_NEAR(after[s], before[s] + 1.f, 0.02f) << s;
}

TEST(Bf16MlpTest, WideDeepTrainStepIsCloseToFp32) {
  if (!CpuHasNativeBf16()) GTEST_SKIP() << ResolvePrecision(Precision::kBf16).fallback;
  WideDeepConfig c;
  c.batch_size = 32;
  c.embedding_dim = 8;
  c.hidden = {64, 32};
  auto m32 = CreateWideDeep(c);
  c.precision = Precision::kBf16;
  auto m16 = CreateWideDeep(c);
  ASSERT_TRUE(m32.ok() && m16.ok());
  (*m32)->InitDense(1, (*m32)->dense_params().data());
  (*m16)->InitDense(1, (*m16)->dense_params().data());
  Batch b;
  b.size = c.batch_size;
  b.num_dense = c.num_dense;
  b.num_cat = c.num_cat;
  b.dense = RandomVector(static_cast<size_t>(b.size) * b.num_dense, 5);
  uint64_t state = 9;
  for (int i = 0; i < b.size * b.num_cat; ++i) b.cat.push_back(SplitMix64(state) % 50);
  for (int i = 0; i < b.size; ++i) b.label.push_back(static_cast<float>(SplitMix64(state) % 2));
  const SparseLookup lookup = SparseLookup::Build(b);
  const std::vector<float> rows = RandomVector(lookup.ids.size() * (*m32)->SparseRowDim(), 6, 0.5f);
  std::vector<float> rg32(rows.size()), rg16(rows.size());
  auto l32 = (*m32)->TrainStep(b, lookup, rows.data(), rg32.data());
  auto l16 = (*m16)->TrainStep(b, lookup, rows.data(), rg16.data());
  ASSERT_TRUE(l32.ok() && l16.ok());
  EXPECT_NEAR(*l16, *l32, 0.01 * std::fabs(*l32));
  EXPECT_LT(RelativeError(rg16.data(), rg32.data(), rg32.size()), kReluGradTolerance);
  EXPECT_LT(RelativeError((*m16)->dense_grads().data(), (*m32)->dense_grads().data(),
                          (*m32)->dense_grads().size()),
            kReluGradTolerance);
}

}  // namespace
}  // namespace kubetrain::trainer
