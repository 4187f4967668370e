// The process's malloc: fewer arenas, and freed pages given back.
//
//   runtime::TuneMalloc();        // first thing in main, before any thread
//   ...
//   runtime::ReleaseFreeMemory();  // after a big transient (an informer's list)
#pragma once

#include <cstddef>

namespace kubetrain::runtime {

struct MallocTuning {
  // At most this many malloc arenas (glibc's default is 8 per core): each
  // thread that allocates gets an arena that keeps what it freed, so a
  // controller with a dozen threads holds many partly empty heaps.
  int max_arenas = 2;
  // Blocks from this size up are mmapped and unmapped when freed. Fixed, so
  // glibc does not raise it after the first big free (a list page's body and
  // JSON would then stay in the heap for good).
  size_t mmap_threshold = 128 * 1024;
  // No fast bins: a freed small block goes to the thread's tcache or is
  // merged at once, instead of waiting in a fast bin until the next large
  // malloc consolidates them all (malloc_consolidate). The operator frees
  // many small blocks (JSON nodes, strings) between large ones (watch event
  // buffers; malloc_consolidate was 4% of the operator's CPU at 500 TFJobs).
  // Without fast bins (GLIBC_TUNABLES=glibc.malloc.mxfast=0, which this
  // setting equals), single runs of compare_training_operator.sh at 500
  // TFJobs: 8.6 against 9.0 operator CPU s, and 7.3 against 8.4 for a build
  // that read each TFJob once; peak RSS the same.
  bool fast_bins = false;
};

// Applies `tuning` with mallopt (glibc; a no-op elsewhere). Returns false when
// malloc refused a setting. Call before the process starts threads.
bool TuneMalloc(const MallocTuning& tuning = {});

// Gives free heap pages back to the system (malloc_trim; a no-op elsewhere).
void ReleaseFreeMemory();

}  // namespace kubetrain::runtime
