#include "operator/runtime/memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kubetrain::runtime {

bool TuneMalloc(const MallocTuning& tuning) {
#if defined(__GLIBC__)
  bool ok = mallopt(M_ARENA_MAX, tuning.max_arenas) == 1;
  ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(tuning.mmap_threshold)) == 1 && ok;
  if (!tuning.fast_bins) ok = mallopt(M_MXFAST, 0) == 1 && ok;
  return ok;
#else
  (void)tuning;
  return true;
#endif
}

void ReleaseFreeMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace kubetrain::runtime
