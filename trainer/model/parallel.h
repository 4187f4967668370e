// Splitting loops over the compute threads (SetComputeThreads) with OpenMP, for the work
// around the oneDNN primitives: the optimizer, embedding gathers and scatters, parameter
// copies. Each helper runs the loop on the calling thread when there is one compute
// thread or the loop is too small to be worth waking another (then results are the same
// by construction: every helper gives each element to exactly one thread, which does it in
// the sequential order).
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstring>

#include "trainer/model/model.h"

namespace kubetrain::trainer {

// Calls f(begin, end) on disjoint contiguous ranges covering [0, n): one range per compute
// thread when n >= min_parallel, else f(0, n) on this thread.
template <typename F>
void ParallelRanges(size_t n, size_t min_parallel, F f) {
  const int threads = ComputeThreads();
  if (n < min_parallel || threads == 1 || omp_in_parallel()) {
    f(size_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    f(n * t / nt, n * (t + 1) / nt);
  }
}

// Calls f(part, parts) once per compute thread (part in [0, parts)) when `parallel`, else
// f(0, 1) on this thread. For loops that split their work by a key (e.g. an embedding
// row), so that all the work on one key is done by one thread in order.
template <typename F>
void ParallelParts(bool parallel, F f) {
  const int threads = ComputeThreads();
  if (!parallel || threads == 1 || omp_in_parallel()) {
    f(0, 1);
    return;
  }
#pragma omp parallel num_threads(threads)
  f(omp_get_thread_num(), omp_get_num_threads());
}

// memcpy of n floats, split over the compute threads when large.
inline void ParallelCopy(float* dst, const float* src, size_t n) {
  if (n == 0) return;  // dst or src may be an empty vector's null data()
  ParallelRanges(n, size_t{1} << 16, [&](size_t b, size_t e) {
    std::memcpy(dst + b, src + b, (e - b) * sizeof(float));
  });
}

}  // namespace kubetrain::trainer
