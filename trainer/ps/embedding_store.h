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
// (Read and ForEach lock stripes shared, Update exclusive, one stripe at a time, passing
// over a busy stripe to come back to it: a call is not atomic across stripes). Reserve, Clear and
// Swap need the caller to exclude all other calls. The callbacks run under a stripe's lock and must
// not call back into the store.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
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
    VisitStripes<std::shared_lock<std::shared_mutex>>(plan, 0, 1, [&](size_t s) {
      const Stripe& st = stripes_[s];
      // First every lookup (independent, so their misses overlap), then the rows in order.
      thread_local std::vector<float*> rows;
      rows.resize(plan.begin[s + 1] - plan.begin[s]);
      for (uint32_t k = plan.begin[s]; k < plan.begin[s + 1]; ++k) {
        PrefetchSlot(st, plan, k, plan.begin[s + 1]);
        rows[k - plan.begin[s]] = Find(st, ids[plan.order[k]], plan.hash[k]);
      }
      for (size_t j = 0; j < rows.size(); ++j) {
        PrefetchRow(rows, j);
        fn(plan.order[plan.begin[s] + j], static_cast<const float*>(rows[j]));
      }
    });
  }

  // For each i in [0, n): fn(i, row) with the row of ids[i], created first by init(id, row)
  // when missing; a repeated id gets its calls in the order of `ids`. With `parallel`, the
  // stripes are shared out over the compute threads (model/parallel.h): same result.
  template <typename Init, typename Fn>
  void Update(const uint64_t* ids, size_t n, bool parallel, Init init, Fn fn) {
    const Plan& plan = MakePlan(ids, n);
    ParallelParts(parallel, [&](int part, int parts) {
      VisitStripes<std::unique_lock<std::shared_mutex>>(plan, part, parts, [&](size_t s) {
        Stripe& st = stripes_[s];
        // First every lookup (independent, so their misses overlap; a missing row is created
        // at its first occurrence), then the updates in order, the rows asked for ahead.
        thread_local std::vector<float*> rows;
        rows.resize(plan.begin[s + 1] - plan.begin[s]);
        for (uint32_t k = plan.begin[s]; k < plan.begin[s + 1]; ++k) {
          PrefetchSlot(st, plan, k, plan.begin[s + 1]);
          const uint64_t id = ids[plan.order[k]];
          bool created = false;
          float* row = FindOrInsert(st, id, plan.hash[k], &created);
          if (created) init(id, row);
          rows[k - plan.begin[s]] = row;
        }
        for (size_t j = 0; j < rows.size(); ++j) {
          PrefetchRow(rows, j);
          fn(plan.order[plan.begin[s] + j], rows[j]);
        }
      });
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
  // Nanoseconds Read and Update have spent waiting for a stripe's lock held by another
  // thread (an uncontended lock costs no clock read), since construction.
  uint64_t lock_wait_ns() const { return lock_wait_ns_.load(std::memory_order_relaxed); }
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

  // Calls visit(s) for each stripe s of part `part` (of `parts`) that `plan` has ids in,
  // holding the stripe's lock (Lock: shared or exclusive). Stripes another thread holds are
  // passed over and come back later; only when none of those left can be had at once does
  // it wait (counted in lock_wait_ns_) for the first. Concurrent callers start at different
  // stripes, so pushes that touch every stripe do not queue behind each other in lockstep.
  // Each stripe's ids are visited in the call's order whatever the stripe order.
  template <typename Lock, typename Visit>
  void VisitStripes(const Plan& plan, int part, int parts, Visit visit) const {
    uint8_t pending[kStripes];
    size_t count = 0;
    const size_t start = next_start_.fetch_add(7, std::memory_order_relaxed);
    for (size_t k = 0; k < kStripes; ++k) {
      const size_t s = (start + k) % kStripes;
      if (static_cast<int>(s % static_cast<size_t>(parts)) == part &&
          plan.begin[s] != plan.begin[s + 1])
        pending[count++] = static_cast<uint8_t>(s);
    }
    while (count > 0) {
      size_t left = 0;
      for (size_t k = 0; k < count; ++k) {
        Lock lock(stripes_[pending[k]].mu, std::try_to_lock);
        if (lock.owns_lock()) {
          visit(pending[k]);
        } else {
          pending[left++] = pending[k];
        }
      }
      if (left == count) {  // every stripe left is busy: wait for the first
        Lock lock(stripes_[pending[0]].mu, std::defer_lock);
        const auto t0 = std::chrono::steady_clock::now();
        lock.lock();
        lock_wait_ns_.fetch_add(
            static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now() - t0)
                                      .count()),
            std::memory_order_relaxed);
        visit(pending[0]);
        std::copy(pending + 1, pending + left, pending);
        --left;
      }
      count = left;
    }
  }
  // The index and rows are far bigger than the caches: lookups ask for the slot of the id
  // kSlotAhead places on, updates for the row kRowAhead places on, so misses overlap.
  static constexpr uint32_t kSlotAhead = 8;
  static constexpr size_t kRowAhead = 8;
  static void PrefetchSlot(const Stripe& st, const Plan& plan, uint32_t k, uint32_t end) {
    if (k + kSlotAhead < end && !st.slots.empty()) {
      __builtin_prefetch(&st.slots[TagOf(plan.hash[k + kSlotAhead]) & (st.slots.size() - 1)]);
    }
  }
  void PrefetchRow(const std::vector<float*>& rows, size_t j) const {
    if (j + kRowAhead >= rows.size() || rows[j + kRowAhead] == nullptr) return;
    const char* row = reinterpret_cast<const char*>(rows[j + kRowAhead]);
    for (size_t b = 0; b < entry_bytes_ - kIdBytes; b += 64) __builtin_prefetch(row + b, 1);
  }
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
  mutable std::atomic<uint64_t> lock_wait_ns_{0};
  mutable std::atomic<size_t> next_start_{0};  // where the next call starts (VisitStripes)
};

}  // namespace kubetrain::trainer
