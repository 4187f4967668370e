// --precision bf16 on a CPU without BF16: oneDNN is capped at AVX-512 without BF16 (its
// own DNNL_MAX_CPU_ISA mechanism, set before it picks an ISA, so this test is alone in
// its binary), as on a CPU that lacks AVX-512 BF16 and AMX.
#include <gtest/gtest.h>

#include "trainer/model/layers.h"
#include "trainer/model/model.h"

namespace kubetrain::trainer {
namespace {

TEST(PrecisionFallbackTest, Bf16FallsBackToFp32WithTheReasonWhereTheCpuLacksBf16) {
  ASSERT_EQ(dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core), dnnl::status::success)
      << "oneDNN picked its ISA before the test could cap it";
  EXPECT_FALSE(CpuHasNativeBf16());
  const PrecisionChoice c = ResolvePrecision(Precision::kBf16);
  EXPECT_EQ(c.precision, Precision::kFp32);
  EXPECT_NE(c.fallback.find("no BF16 instructions"), std::string::npos) << c.fallback;
  EXPECT_NE(c.fallback.find("AVX-512 BF16 or AMX"), std::string::npos) << c.fallback;
  EXPECT_NE(c.fallback.find("FP32"), std::string::npos) << c.fallback;
  // The model built with the resolved precision trains.
  WideDeepConfig wd;
  wd.batch_size = 4;
  wd.embedding_dim = 2;
  wd.hidden = {8};
  wd.precision = c.precision;
  EXPECT_TRUE(CreateWideDeep(wd).ok());
}

}  // namespace
}  // namespace kubetrain::trainer
