// A minibatch as the model sees it: dense features already transformed, categorical
// features already hashed to 64-bit ids. Plain data, shared by data/ and model/.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kubetrain::trainer {

struct Batch {
  int size = 0;
  int num_dense = 0;
  int num_cat = 0;
  std::vector<float> dense;   // size x num_dense, row-major
  std::vector<uint64_t> cat;  // size x num_cat hashed ids
  std::vector<float> label;   // size; 0/1 for binary models, the class index otherwise
};

// Pads a batch holding `real` examples (1 <= real <= size) to `size`, the batch size the
// model's primitives were built for, by repeating its last real example. Callers use only
// the first `real` outputs. Which example pads changes no result (padding is neither scored
// nor printed and adds no new ids); the last is what evaluation always used, and the one
// routine keeps evaluation and --predict from differing in it.
inline void PadBatch(Batch& b, int real, int size) {
  const size_t nd = static_cast<size_t>(b.num_dense), nc = static_cast<size_t>(b.num_cat);
  const size_t last = static_cast<size_t>(real - 1);
  b.size = size;
  b.dense.resize(static_cast<size_t>(size) * nd);
  b.cat.resize(static_cast<size_t>(size) * nc);
  b.label.resize(static_cast<size_t>(size));
  for (size_t s = static_cast<size_t>(real); s < static_cast<size_t>(size); ++s) {
    std::copy_n(b.dense.begin() + last * nd, nd, b.dense.begin() + s * nd);
    std::copy_n(b.cat.begin() + last * nc, nc, b.cat.begin() + s * nc);
    b.label[s] = b.label[last];
  }
}

// The distinct ids of a batch and, for every (sample, field), the position of its id in
// `ids`. Rows are pulled and pushed once per distinct id, not once per occurrence.
struct SparseLookup {
  std::vector<uint64_t> ids;
  std::vector<int> index;  // size x num_cat

  static SparseLookup Build(const Batch& b) {
    SparseLookup l;
    l.Assign(b);
    return l;
  }

  // Rebuilds this lookup from `b`, reusing its storage, so a training loop that keeps one
  // lookup allocates nothing per step once the sizes have settled.
  void Assign(const Batch& b) {
    // Open addressing with linear probing over a power-of-two table at most half full:
    // one flat allocation instead of a node per distinct id (13k lookups per batch of
    // Wide & Deep). Ids keep their order of first occurrence.
    const size_t n = b.cat.size();
    index.resize(n);
    ids.clear();
    ids.reserve(n);
    int bits = 4;
    while ((size_t{1} << bits) < 2 * n) ++bits;
    const size_t mask = (size_t{1} << bits) - 1;
    slot_.assign(mask + 1, -1);  // position in ids, or -1 when empty
    for (size_t i = 0; i < n; ++i) {
      const uint64_t id = b.cat[i];
      size_t h = static_cast<size_t>((id * 0x9e3779b97f4a7c15ULL) >> (64 - bits));
      while (slot_[h] >= 0 && ids[slot_[h]] != id) h = (h + 1) & mask;
      if (slot_[h] < 0) {
        slot_[h] = static_cast<int>(ids.size());
        ids.push_back(id);
      }
      index[i] = slot_[h];
    }
  }

 private:
  std::vector<int> slot_;  // scratch for Assign
};

}  // namespace kubetrain::trainer
