// KT_SIMD_CLONES: a loop-heavy function compiled for AVX-512, AVX2 and baseline
// x86-64, the variant picked at load time (GCC's target_clones). The loops it marks
// have no branches, so each clone vectorises; results are bit-identical across clones
// where the file is built without FP contraction. Elsewhere it expands to nothing.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define KT_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KT_SIMD_CLONES
#endif
