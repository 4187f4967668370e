// Embedding rows for millions of ids per parameter server: fixed-size rows of floats keyed by
// a 64-bit id, held with close to no overhead beyond their payload, optionally bounded.
//
// Layout: the ids hash to one of kStripes stripes, each with its own lock, an open-addressing
// index and slabs of rows. A row is [id (8 bytes) | last tick (4) | epoch (4) | row_floats
// floats] inside a slab of kSlabRows rows (one allocation per slab, never per row); the index
// holds 8 bytes per slot (a 32-bit hash tag and the row's number in its stripe), linear
// probing, at most 3/4 full (doubling), so a growing stripe rehashes only its own index, from
// the tags, without touching a row. An evicted row leaves the index (backward-shift deletion,
// no tombstones) and its number goes on the stripe's free list, which the next new row of the
// stripe takes: memory stays bounded by the most rows ever live, never by the ids ever seen.
//
// Pointers: a row pointer handed to a callback is valid while that callback runs (the stripe's
// lock is held). Rows do not move, but an evicted row's memory is reused by another id, so no
// pointer may be kept past the call that gave it. Within one Update call every row it looks up
// stays put until the call's callbacks for that stripe have run (eviction passes over rows the
// running call touched).
//
// Bounds (StoreLimits, all optional):
//  - admission: an id gets a row at its admit_count-th Update; before that Update passes
//    nullptr to fn (the caller skips the update: counted as filtered, not stored). The counts
//    are a count-min sketch per stripe (4 rows of 8-bit saturating counters, conservative
//    update, 4 MiB per store in all), halved every 8 x width increments so old sightings
//    fade. A sketch errs only upwards (collisions admit an id early, never late) in a fixed
//    memory; an exact counter table would grow with the distinct ids seen, most of which a
//    Zipf tail sees once, which is the memory admission exists to save.
//  - capacity: at most ceil(capacity / kStripes) rows per stripe. A stripe that is full when a
//    new row is needed first evicts its least recently updated 1/16 (by tick: the number of
//    the Update call that last updated the row): one pass over the stripe's ticks, so the cost
//    per new row is O(16) amortised, and no list per row. Rows the running call touched are
//    never evicted, so a stripe may hold a call's worth of rows above its cap.
//  - EvictNotUpdatedIn(updates): drops rows not updated by the last `updates` Update calls
//    (the PS calls it at checkpoint time).
// Evicted ids are logged with their epoch (ForEachDeletedSince) for incremental checkpoints,
// until TrimDeletions.
//
// Epochs (incremental checkpoints): set_epoch(e) makes later updates stamp their rows with e;
// ForEachChangedSince(e) visits the rows stamped after e.
//
// Order and determinism: Update visits a call's ids grouped by stripe, in the call's order
// within each stripe, and creates a missing row (init) when first visited; rows are
// numbered in creation order per stripe (free numbers reused lowest-evicted-last). So the
// contents (and ForEach's order) depend only on the sequence of Update calls, not on the
// number of threads that served them.
//
// Thread-safe: Read, Update, ForEach*, EvictNotUpdatedIn, TrimDeletions, size, bytes and counters
// may be called from any threads at once (Read and ForEach lock stripes shared, Update and the
// eviction exclusive, one stripe at a time, passing over a busy stripe to come back to it: a call
// is not atomic across stripes). Reserve, Insert, Clear and Swap need the caller to exclude all
// other calls. The callbacks run under a stripe's lock and must not call back into the store.
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

struct StoreLimits {
  uint32_t admit_count = 0;  // 0 or 1: every id gets a row at its first update
  size_t capacity = 0;       // rows in all; 0: unbounded
  // Keep evicted ids for ForEachDeletedSince (incremental checkpoints need them), at most
  // max_deletions in all: past that, deletions() reports overflow until a TrimDeletions
  // covering it (the caller then writes a full checkpoint).
  bool log_deletions = false;
  size_t max_deletions = size_t{1} << 22;
  // List the rows stamped in the current epoch per stripe (4 bytes per changed row), so
  // ForEachChangedSince the previous epoch visits only those (incremental checkpoints).
  bool list_changes = false;
};

// What the bounds did, since construction (Clear keeps them).
struct StoreCounters {
  uint64_t admitted = 0;  // rows created by Update
  uint64_t filtered = 0;  // updates of ids not admitted yet (not stored)
  uint64_t evicted = 0;   // rows dropped by the capacity or EvictNotUpdatedIn
};

class EmbeddingStore {
 public:
  static constexpr int kStripeBits = 5;
  static constexpr size_t kStripes = size_t{1} << kStripeBits;
  static constexpr size_t kSlabRows = 256;
  static constexpr size_t kSketchDepth = 4;
  static constexpr size_t kSketchWidth = size_t{1} << 15;  // per stripe and sketch row

  explicit EmbeddingStore(size_t row_floats, StoreLimits limits = {});
  EmbeddingStore(const EmbeddingStore&) = delete;
  EmbeddingStore& operator=(const EmbeddingStore&) = delete;

  size_t row_floats() const { return row_floats_; }
  const StoreLimits& limits() const { return limits_; }

  // For each i in [0, n): fn(i, row) with the row of ids[i], or nullptr when there is none.
  template <typename Fn>
  void Read(const uint64_t* ids, size_t n, Fn fn) const {
    const Plan& plan = MakePlan(ids, n);
    std::vector<float*>& rows = RowScratch(n);  // sized here: nothing allocates under a lock
    VisitStripes<std::shared_lock<std::shared_mutex>>(plan, 0, 1, [&](size_t s) {
      const Stripe& st = stripes_[s];
      // First every lookup (independent, so their misses overlap), then the rows in order.
      rows.resize(plan.begin[s + 1] - plan.begin[s]);
      for (uint32_t k = plan.begin[s]; k < plan.begin[s + 1]; ++k) {
        PrefetchSlot(st, plan, k, plan.begin[s + 1]);
        char* entry = Find(st, ids[plan.order[k]], plan.hash[k]);
        rows[k - plan.begin[s]] = entry == nullptr ? nullptr : RowOf(entry);
      }
      for (size_t j = 0; j < rows.size(); ++j) {
        PrefetchRow(rows, j);
        fn(plan.order[plan.begin[s] + j], static_cast<const float*>(rows[j]));
      }
    });
  }

  // For each i in [0, n): fn(i, row) with the row of ids[i], created first by init(id, row)
  // when missing and admitted (see StoreLimits), or fn(i, nullptr) for an id not admitted
  // yet; a repeated id gets its calls in the order of `ids`. Every row passed is stamped
  // with this call's tick and the current epoch. With `parallel`, the stripes are shared out
  // over the compute threads (model/parallel.h): same result.
  template <typename Init, typename Fn>
  void Update(const uint64_t* ids, size_t n, bool parallel, Init init, Fn fn) {
    const Plan& plan = MakePlan(ids, n);
    const uint32_t tick = tick_.fetch_add(1, std::memory_order_relaxed) + 1;
    const uint32_t epoch = epoch_.load(std::memory_order_relaxed);
    ParallelParts(parallel, [&](int part, int parts) {
      std::vector<float*>& rows = RowScratch(n);  // sized here: nothing allocates under a lock
      VisitStripes<std::unique_lock<std::shared_mutex>>(plan, part, parts, [&](size_t s) {
        Stripe& st = stripes_[s];
        // First every lookup (independent, so their misses overlap; a missing row is created
        // at its first occurrence), then the updates in order, the rows asked for ahead.
        rows.resize(plan.begin[s + 1] - plan.begin[s]);
        for (uint32_t k = plan.begin[s]; k < plan.begin[s + 1]; ++k) {
          PrefetchSlot(st, plan, k, plan.begin[s + 1]);
          const uint64_t id = ids[plan.order[k]];
          const int64_t r = FindRow(st, id, plan.hash[k]);
          char* entry;
          if (r < 0) {
            if (!Admit(st, plan.hash[k])) {
              ++st.filtered;
              rows[k - plan.begin[s]] = nullptr;
              continue;
            }
            entry = Insert(st, id, plan.hash[k], tick);  // listed as changed by Insert
            ++st.admitted;
            init(id, RowOf(entry));
          } else {
            entry = Entry(st, static_cast<uint32_t>(r));
            if (EpochOf(entry) != epoch) MarkChanged(st, static_cast<uint32_t>(r), epoch);
          }
          Stamp(entry, tick, epoch);
          rows[k - plan.begin[s]] = RowOf(entry);
        }
        for (size_t j = 0; j < rows.size(); ++j) {
          PrefetchRow(rows, j);
          fn(plan.order[plan.begin[s] + j], rows[j]);
        }
      });
    });
  }

  // The row of `id` for filling from a checkpoint: a new one, its floats uninitialised, or
  // the one `id` has already (*created tells which); stamped with the current tick and
  // epoch. Ignores admission and capacity. Not thread-safe (see above).
  float* Insert(uint64_t id, bool* created);
  // Removes `id`'s row if it has one (a deletion read from a checkpoint; not logged). Not
  // thread-safe.
  bool Erase(uint64_t id);

  // fn(id, row) for every row, stripe by stripe in row-number order, each stripe locked
  // shared while it is visited: no copy of the table is made.
  template <typename Fn>
  void ForEach(Fn fn) const {
    ForEachChangedSince(0, fn);
  }
  // The same for the rows stamped with an epoch after `epoch` (0: every row). Since the
  // epoch before the current one (an incremental checkpoint's usual case) it visits only
  // those rows, from each stripe's list of the rows stamped in the current epoch, in the
  // order they were first stamped: the cost follows the changed rows, not the table.
  template <typename Fn>
  void ForEachChangedSince(uint32_t epoch, Fn fn) const {
    const uint32_t now = epoch_.load(std::memory_order_relaxed);
    for (size_t s = 0; s < kStripes; ++s) {
      const Stripe& st = stripes_[s];
      std::shared_lock lock(st.mu);
      if (limits_.list_changes && epoch != 0 && epoch + 1 == now &&
          changes_listed_.load(std::memory_order_relaxed)) {
        if (st.changed_epoch != now) continue;  // nothing stamped `now` in this stripe
        for (const uint32_t r : st.changed) {
          const char* entry = Entry(st, r);
          if (EpochOf(entry) != now) continue;  // evicted since (its number may be reused)
          uint64_t id;
          std::memcpy(&id, entry, sizeof(id));
          fn(id, reinterpret_cast<const float*>(entry + kHeadBytes));
        }
        continue;
      }
      for (uint32_t r = 0; r < st.rows; ++r) {
        const char* entry = Entry(st, r);
        const uint32_t e = EpochOf(entry);
        if (e == kFreeEpoch || e <= epoch) continue;
        uint64_t id;
        std::memcpy(&id, entry, sizeof(id));
        fn(id, reinterpret_cast<const float*>(entry + kHeadBytes));
      }
    }
  }
  // fn(id) for every id evicted in an epoch after `epoch` (and not trimmed), in eviction
  // order per stripe. An id may have a row again since (created later).
  template <typename Fn>
  void ForEachDeletedSince(uint32_t epoch, Fn fn) const {
    for (size_t s = 0; s < kStripes; ++s) {
      const Stripe& st = stripes_[s];
      std::shared_lock lock(st.mu);
      for (const auto& [id, e] : st.deleted) {
        if (e > epoch) fn(id);
      }
    }
  }
  // Forgets the deletions of epochs up to `epoch` (a full checkpoint holds what they did).
  void TrimDeletions(uint32_t epoch);
  // Deletions logged and not trimmed; SIZE_MAX when some were not logged (over the bound).
  size_t deletions() const;

  // Drops every row not updated by the last `updates` Update calls; returns how many.
  // Logged for ForEachDeletedSince.
  size_t EvictNotUpdatedIn(uint32_t updates);
  // The number of the last Update call (calls are numbered from 1, modulo 2^32: ticks are
  // compared by their distance back from the current one, so the count may wrap; a row not
  // updated for 2^32 calls looks recent again, which only delays its eviction).
  uint32_t tick() const { return tick_.load(std::memory_order_relaxed); }
  // Sets the tick count: a restore dates its rows on the saved update count (Insert stamps
  // the current tick), and tests of the wrap. Not thread-safe.
  void set_tick(uint32_t tick) { tick_.store(tick, std::memory_order_relaxed); }
  uint32_t epoch() const { return epoch_.load(std::memory_order_relaxed); }
  // Later updates stamp their rows with `epoch` (>= 1); the caller excludes Update meanwhile.
  // A later epoch than the current one starts the changed lists afresh (no row has it yet).
  void set_epoch(uint32_t epoch) {
    if (epoch > epoch_.load(std::memory_order_relaxed))
      changes_listed_.store(true, std::memory_order_relaxed);
    epoch_.store(epoch, std::memory_order_relaxed);
  }

  size_t size() const;
  StoreCounters counters() const;
  // Nanoseconds Read and Update have spent waiting for a stripe's lock held by another
  // thread (an uncontended lock costs no clock read), since construction.
  uint64_t lock_wait_ns() const { return lock_wait_ns_.load(std::memory_order_relaxed); }
  // Bytes held: slabs, indexes, free lists, sketches, deletion logs and the stripes.
  size_t bytes() const;
  // Sizes each stripe's index for `rows` rows in all (evenly hashed), so a restore of that
  // many rows does not rehash. Not thread-safe.
  void Reserve(size_t rows);
  void Clear();                      // Not thread-safe.
  void Swap(EmbeddingStore& other);  // Not thread-safe; row_floats and limits must match.

 private:
  static constexpr size_t kIdBytes = sizeof(uint64_t);
  static constexpr size_t kHeadBytes = kIdBytes + 2 * sizeof(uint32_t);
  static constexpr uint32_t kFreeEpoch = 0;

  struct Stripe {
    mutable std::shared_mutex mu;
    // 0: empty; else (tag << 32) | (row number + 1). The slot of a key is its tag modulo
    // the index size, so a rehash needs only the slots.
    std::vector<uint64_t> slots;
    std::vector<std::unique_ptr<char[]>> slabs;
    uint32_t rows = 0;            // row numbers handed out (live + free)
    std::vector<uint32_t> free;   // numbers of evicted rows, reused first
    std::vector<uint8_t> sketch;  // kSketchDepth x kSketchWidth, when admission is on
    uint64_t sketch_adds = 0;     // increments since the last halving
    std::vector<std::pair<uint64_t, uint32_t>> deleted;  // (id, epoch) evicted
    // The numbers of the rows stamped in epoch changed_epoch, each once (MarkChanged):
    // ForEachChangedSince's list for incremental checkpoints. Its capacity is kept across
    // epochs, so a steady run allocates nothing for it.
    std::vector<uint32_t> changed;
    uint32_t changed_epoch = 0;
    uint32_t overflow_epoch = 0;  // the last epoch a deletion was not logged in (0: none)
    uint64_t admitted = 0, filtered = 0, evicted = 0;
    size_t live() const { return rows - free.size(); }
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
  static float* RowOf(char* entry) { return reinterpret_cast<float*>(entry + kHeadBytes); }
  static uint32_t TickOf(const char* entry) {
    uint32_t t;
    std::memcpy(&t, entry + kIdBytes, sizeof(t));
    return t;
  }
  static uint32_t EpochOf(const char* entry) {
    uint32_t e;
    std::memcpy(&e, entry + kIdBytes + sizeof(uint32_t), sizeof(e));
    return e;
  }
  // Lists row `r` as stamped in `epoch` (the current one); the caller knows it is not listed
  // yet: its stamp is of an older epoch, or it is new. A list of an older epoch is dropped.
  void MarkChanged(Stripe& st, uint32_t r, uint32_t epoch) const {
    if (!limits_.list_changes) return;
    if (st.changed_epoch != epoch) {
      st.changed.clear();
      st.changed_epoch = epoch;
    }
    st.changed.push_back(r);
  }
  // How many Update calls back from `now` tick `t` was: the distance modulo 2^32, read as
  // signed so a call that started after `now` was read (concurrently) is 0, not 2^32 - 1.
  // Right across a wrap of the count, for distances under 2^31.
  static uint32_t AgeOf(uint32_t now, uint32_t t) {
    const auto d = static_cast<int32_t>(now - t);
    return d < 0 ? 0 : static_cast<uint32_t>(d);
  }
  static void Stamp(char* entry, uint32_t tick, uint32_t epoch) {
    std::memcpy(entry + kIdBytes, &tick, sizeof(tick));
    std::memcpy(entry + kIdBytes + sizeof(uint32_t), &epoch, sizeof(epoch));
  }

  // Calls visit(s) for each stripe s of part `part` (of `parts`) that `plan` has ids in,
  // holding the stripe's lock (Lock: shared or exclusive), each lock taken once per call.
  // Stripes another thread holds are passed over and come back later; only when none of
  // those left can be had at once does it wait (counted in lock_wait_ns_): first spinning
  // over them for up to kSpinNs (a stripe is held for one call's few dozen rows, microseconds,
  // far less than a sleep and a wake-up cost on a busy machine), then sleeping on the first.
  // Concurrent callers start at different stripes, so pushes that touch every stripe do not
  // queue behind each other in lockstep. Each stripe's ids are visited in the call's order
  // whatever the stripe order. Allocates nothing.
  template <typename Lock, typename Visit>
  void VisitStripes(const Plan& plan, int part, int parts, Visit visit) const {
    uint16_t pending[kStripes];
    size_t count = 0;
    const size_t start = next_start_.fetch_add(37, std::memory_order_relaxed);
    for (size_t k = 0; k < kStripes; ++k) {
      const size_t s = (start + k) % kStripes;
      if (static_cast<int>(s % static_cast<size_t>(parts)) == part &&
          plan.begin[s] != plan.begin[s + 1])
        pending[count++] = static_cast<uint16_t>(s);
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
      if (left == count) {  // every stripe left is busy: spin, then sleep on the first
        const auto t0 = std::chrono::steady_clock::now();
        Lock lock;
        size_t got = left;
        for (auto now = t0; got == left && now - t0 < std::chrono::nanoseconds(kSpinNs);
             now = std::chrono::steady_clock::now()) {
          for (size_t k = 0; k < left && got == left; ++k) {
            Lock tried(stripes_[pending[k]].mu, std::try_to_lock);
            if (tried.owns_lock()) {
              lock = std::move(tried);
              got = k;
            }
          }
          for (int p = 0; got == left && p < 16; ++p) __builtin_ia32_pause();
        }
        if (got == left) {
          lock = Lock(stripes_[pending[0]].mu);
          got = 0;
        }
        lock_wait_ns_.fetch_add(
            static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now() - t0)
                                      .count()),
            std::memory_order_relaxed);
        visit(pending[got]);
        std::copy(pending + got + 1, pending + left, pending + got);
        --left;
      }
      count = left;
    }
  }
  static constexpr int64_t kSpinNs = 20000;
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
    for (size_t b = 0; b < entry_bytes_ - kHeadBytes; b += 64) __builtin_prefetch(row + b, 1);
  }
  static const Plan& MakePlan(const uint64_t* ids, size_t n);
  // The calling thread's row-pointer buffer, with room for n (one stripe's share of a call).
  static std::vector<float*>& RowScratch(size_t n) {
    thread_local std::vector<float*> rows;
    rows.reserve(n);
    return rows;
  }
  char* Entry(const Stripe& st, uint32_t r) const {
    return st.slabs[r / kSlabRows].get() + (r % kSlabRows) * entry_bytes_;
  }
  char* Find(const Stripe& st, uint64_t id, uint64_t h) const;
  int64_t FindRow(const Stripe& st, uint64_t id, uint64_t h) const;  // -1: none
  // A new row for `id` (not present): evicts first when the stripe is at its cap (sparing
  // rows stamped `tick`) when `capped`, takes a free number or a new one.
  char* Insert(Stripe& st, uint64_t id, uint64_t h, uint32_t tick, bool capped = true);
  // Counts a sighting of hash `h`; true once it has been seen admit_count times.
  bool Admit(Stripe& st, uint64_t h);
  // Removes row `r` from the index, marks it free, logs the deletion if `log`.
  void Remove(Stripe& st, uint32_t r, bool log);
  // Evicts the least recently updated 1/16 of a full stripe (by distance back from `tick`,
  // so a wrapped count orders rightly), sparing rows stamped `tick`.
  void EvictForRoom(Stripe& st, uint32_t tick);
  void Grow(Stripe& st);

  // Constant after construction.
  const size_t row_floats_;
  const size_t entry_bytes_;
  const StoreLimits limits_;
  const size_t stripe_cap_;  // rows per stripe; 0: unbounded
  std::unique_ptr<Stripe[]> stripes_;
  std::atomic<uint32_t> tick_{0};
  std::atomic<uint32_t> epoch_{1};
  // False from a Swap or Clear to the next set_epoch: rows swapped in were stamped by another
  // store, unlisted, so ForEachChangedSince scans until a new epoch starts.
  std::atomic<bool> changes_listed_{true};
  mutable std::atomic<uint64_t> lock_wait_ns_{0};
  mutable std::atomic<size_t> next_start_{0};  // where the next call starts (VisitStripes)
};

}  // namespace kubetrain::trainer
