// Embedding rows for millions of ids per parameter server: fixed-size rows of floats keyed by
// a 64-bit id, held with close to no overhead beyond their payload.
//
// Layout: the ids hash to one of kStripes stripes, each with its own lock, an open-addressing
// index and slabs of rows. A row is [id (8 bytes) | row_floats floats] inside a slab of
// kSlabRows rows (one allocation per slab, never per row); the index holds 8 bytes per slot
// (a 32-bit hash tag and the row's number in its stripe), linear probing, at most 3/4 full
// (doubling), so a growing stripe rehashes only its own index, from the tags, without
// touching a row. Rows are never removed or moved, so a pointer to a row stays valid for
// the store's life (until Clear / Swap).
//
// Order and determinism: Update visits a call's ids grouped by stripe, in the call's order
// within each stripe, and creates a missing row (init) when first visited; rows are
// numbered in creation order per stripe. So the contents (and ForEach's order) depend only
// on the sequence of Update calls, not on the number of threads that served them.
//
// Thread-safe: Read, Update, ForEach, size and bytes may be called from any threads at once
// (Read and ForEach lock stripes shared, Update exclusive, one stripe at a time: a call is
// not atomic across stripes). Reserve, Clear and Swap need the caller to exclude all other
// calls. The callbacks run under a stripe's lock and must not call back into the store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "trainer/model/parallel.h"

namespace kubetrain::trainer {

class EmbeddingStore {
 public:
  static constexpr int kStripeBits = 5;
  static constexpr size_t kStripes = size_t{1} << kStripeBits;
  static constexpr size_t kSlabRows = 256;

  explicit EmbeddingStore(size_t row_floats);
  EmbeddingStore(const EmbeddingStore&) = delete;
  EmbeddingStore& operator=(const EmbeddingStore&) = delete;

  size_t row_floats() const { return row_floats_; }

  // For each i in [0, n): fn(i, row) with the row of ids[i], or nullptr when there is none.
  template <typename Fn>
  void Read(const uint64_t* ids, size_t n, Fn fn) const {
    const Plan& plan = MakePlan(ids, n);
    for (size_t s = 0; s < kStripes; ++s) {
      if (plan.begin[s] == plan.begin[s + 1]) continue;
      const Stripe& st = stripes_[s];
      std::shared_lock lock(st.mu);
      for (uint32_t k = plan.begin[s]; k < plan.begin[s + 1]; ++k) {
        const size_t i = plan.order[k];
        fn(i, static_cast<const float*>(Find(st, ids[i], plan.hash[k])));
      }
    }
  }

  // For each i in [0, n): fn(i, row) with the row of ids[i], created first by init(id, row)
  // when missing; a repeated id gets its calls in the order of `ids`. With `parallel`, the
  // stripes are shared out over the compute threads (model/parallel.h): same result.
  template <typename Init, typename Fn>
  void Update(const uint64_t* ids, size_t n, bool parallel, Init init, Fn fn) {
    const Plan& plan = MakePlan(ids, n);
    ParallelParts(parallel, [&](int part, int parts) {
      for (size_t s = static_cast<size_t>(part); s < kStripes; s += static_cast<size_t>(parts)) {
        if (plan.begin[s] == plan.begin[s + 1]) continue;
        Stripe& st = stripes_[s];
        std::unique_lock lock(st.mu);
        for (uint32_t k = plan.begin[s]; k < plan.begin[s + 1]; ++k) {
          const size_t i = plan.order[k];
          bool created = false;
          float* row = FindOrInsert(st, ids[i], plan.hash[k], &created);
          if (created) init(ids[i], row);
          fn(i, row);
        }
      }
    });
  }

  // The row of `id` for filling from a checkpoint: a new one, its floats uninitialised, or
  // the one `id` has already (*created tells which). Not thread-safe (see above).
  float* Insert(uint64_t id, bool* created);

  // fn(id, row) for every row, stripe by stripe in creation order, each stripe locked shared
  // while it is visited: no copy of the table is made.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (size_t s = 0; s < kStripes; ++s) {
      const Stripe& st = stripes_[s];
      std::shared_lock lock(st.mu);
      for (uint32_t r = 0; r < st.rows; ++r) {
        const char* entry = Entry(st, r);
        uint64_t id;
        std::memcpy(&id, entry, sizeof(id));
        fn(id, reinterpret_cast<const float*>(entry + kIdBytes));
      }
    }
  }

  size_t size() const;
  // Bytes held: slabs, indexes and the stripes themselves.
  size_t bytes() const;
  // Sizes each stripe's index for `rows` rows in all (evenly hashed), so a restore of that
  // many rows does not rehash. Not thread-safe.
  void Reserve(size_t rows);
  void Clear();                      // Not thread-safe.
  void Swap(EmbeddingStore& other);  // Not thread-safe; row_floats must match.

 private:
  static constexpr size_t kIdBytes = sizeof(uint64_t);

  struct Stripe {
    mutable std::shared_mutex mu;
    // 0: empty; else (tag << 32) | (row number + 1). The slot of a key is its tag modulo
    // the index size, so a rehash needs only the slots.
    std::vector<uint64_t> slots;
    std::vector<std::unique_ptr<char[]>> slabs;
    uint32_t rows = 0;
  };
  // One call's ids grouped by stripe (a counting sort, stable): stripe s has
  // order[begin[s] .. begin[s + 1]), with each id's hash beside it. Per thread, reused.
  struct Plan {
    std::vector<uint32_t> order;
    std::vector<uint64_t> hash;
    std::vector<uint64_t> hash_of;  // by position in the call, before sorting
    uint32_t begin[kStripes + 1] = {};
  };

  static uint64_t Hash(uint64_t id) {
    // MurmurHash3's finaliser: every bit of the id reaches every bit of the hash (the ids
    // of one PS share their ShardOfId residue, so no raw bit range of them may be used).
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    id ^= id >> 33;
    id *= 0xc4ceb9fe1a85ec53ULL;
    id ^= id >> 33;
    return id;
  }
  static size_t StripeOf(uint64_t h) { return h & (kStripes - 1); }
  static uint32_t TagOf(uint64_t h) { return static_cast<uint32_t>(h >> 32); }

  static const Plan& MakePlan(const uint64_t* ids, size_t n);
  char* Entry(const Stripe& st, uint32_t r) const {
    return st.slabs[r / kSlabRows].get() + (r % kSlabRows) * entry_bytes_;
  }
  float* Find(const Stripe& st, uint64_t id, uint64_t h) const;
  float* FindOrInsert(Stripe& st, uint64_t id, uint64_t h, bool* created);
  void Grow(Stripe& st);

  // Constant after construction.
  const size_t row_floats_;
  const size_t entry_bytes_;
  std::unique_ptr<Stripe[]> stripes_;
};

}  // namespace kubetrain::trainer
