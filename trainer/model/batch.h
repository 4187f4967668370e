// A minibatch as the model sees it: dense features already transformed, categorical
// features already hashed to 64-bit ids. Plain data, shared by data/ and model/.
#pragma once

#include <cstdint>
#include <unordered_map>
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

// The distinct ids of a batch and, for every (sample, field), the position of its id in
// `ids`. Rows are pulled and pushed once per distinct id, not once per occurrence.
struct SparseLookup {
  std::vector<uint64_t> ids;
  std::vector<int> index;  // size x num_cat

  static SparseLookup Build(const Batch& b) {
    SparseLookup l;
    l.index.resize(b.cat.size());
    std::unordered_map<uint64_t, int> pos;
    pos.reserve(b.cat.size());
    for (size_t i = 0; i < b.cat.size(); ++i) {
      auto [it, inserted] = pos.emplace(b.cat[i], static_cast<int>(l.ids.size()));
      if (inserted) l.ids.push_back(b.cat[i]);
      l.index[i] = it->second;
    }
    return l;
  }
};

}  // namespace kubetrain::trainer
