#include "trainer/ps/embedding_store.h"

#include <algorithm>
#include <mutex>

namespace kubetrain::trainer {
namespace {

constexpr size_t kMinSlots = 16;

// Slots for `rows` rows at most 3/4 full.
size_t SlotsFor(size_t rows) {
  size_t slots = kMinSlots;
  while (rows > slots / 4 * 3) slots *= 2;
  return slots;
}

}  // namespace

EmbeddingStore::EmbeddingStore(size_t row_floats, StoreLimits limits)
    : row_floats_(row_floats),
      entry_bytes_(kHeadBytes + row_floats * sizeof(float)),
      limits_(limits),
      stripe_cap_(limits.capacity == 0 ? 0 : (limits.capacity + kStripes - 1) / kStripes),
      stripes_(new Stripe[kStripes]) {}

const EmbeddingStore::Plan& EmbeddingStore::MakePlan(const uint64_t* ids, size_t n) {
  thread_local Plan plan;
  plan.order.resize(n);
  plan.hash.resize(n);
  plan.hash_of.resize(n);
  uint32_t count[kStripes] = {};
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = Hash(ids[i]);
    plan.hash_of[i] = h;
    ++count[StripeOf(h)];
  }
  plan.begin[0] = 0;
  for (size_t s = 0; s < kStripes; ++s) plan.begin[s + 1] = plan.begin[s] + count[s];
  uint32_t next[kStripes];
  std::copy(plan.begin, plan.begin + kStripes, next);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = plan.hash_of[i];
    const uint32_t k = next[StripeOf(h)]++;
    plan.order[k] = static_cast<uint32_t>(i);
    plan.hash[k] = h;
  }
  return plan;
}

char* EmbeddingStore::Find(const Stripe& st, uint64_t id, uint64_t h) const {
  const int64_t r = FindRow(st, id, h);
  return r < 0 ? nullptr : Entry(st, static_cast<uint32_t>(r));
}

int64_t EmbeddingStore::FindRow(const Stripe& st, uint64_t id, uint64_t h) const {
  if (st.slots.empty()) return -1;
  const size_t mask = st.slots.size() - 1;
  const uint32_t tag = TagOf(h);
  for (size_t pos = tag & mask;; pos = (pos + 1) & mask) {
    const uint64_t slot = st.slots[pos];
    if (slot == 0) return -1;
    if (static_cast<uint32_t>(slot >> 32) != tag) continue;
    const uint32_t r = static_cast<uint32_t>(slot) - 1;
    uint64_t stored;
    std::memcpy(&stored, Entry(st, r), sizeof(stored));
    if (stored == id) return r;
  }
}

bool EmbeddingStore::Admit(Stripe& st, uint64_t h) {
  if (limits_.admit_count <= 1) return true;
  if (st.sketch.empty()) st.sketch.assign(kSketchDepth * kSketchWidth, 0);
  // Double hashing from a second mix of the hash: kSketchDepth independent-enough columns.
  const uint64_t g = Hash(h ^ 0x9e3779b97f4a7c15ULL);
  const uint32_t a = static_cast<uint32_t>(g), b = static_cast<uint32_t>(g >> 32) | 1;
  size_t pos[kSketchDepth];
  uint8_t least = 255;
  for (size_t d = 0; d < kSketchDepth; ++d) {
    pos[d] = d * kSketchWidth + ((a + d * b) & (kSketchWidth - 1));
    least = std::min(least, st.sketch[pos[d]]);
  }
  // Conservative update: only the counters at the minimum grow (less overestimation).
  if (least < 255) {
    for (size_t d = 0; d < kSketchDepth; ++d) {
      if (st.sketch[pos[d]] == least) ++st.sketch[pos[d]];
    }
    ++least;
  }
  if (++st.sketch_adds >= 8 * kSketchWidth) {  // age: sightings long past fade
    for (uint8_t& c : st.sketch) c = static_cast<uint8_t>(c >> 1);
    st.sketch_adds = 0;
  }
  return least >= limits_.admit_count;
}

char* EmbeddingStore::Insert(Stripe& st, uint64_t id, uint64_t h, uint32_t tick, bool capped) {
  if (capped && stripe_cap_ != 0 && st.live() >= stripe_cap_) EvictForRoom(st, tick);
  if (st.live() + 1 > st.slots.size() / 4 * 3) Grow(st);
  const size_t mask = st.slots.size() - 1;
  const uint32_t tag = TagOf(h);
  size_t pos = tag & mask;
  while (st.slots[pos] != 0) pos = (pos + 1) & mask;
  const uint32_t epoch = epoch_.load(std::memory_order_relaxed);
  uint32_t r;
  bool listed = false;
  if (!st.free.empty()) {
    r = st.free.back();
    st.free.pop_back();
    // A free row's tick holds the epoch it was stamped in before its eviction (Remove): when
    // that is this epoch, the row is on this epoch's changed list already.
    listed = st.changed_epoch == epoch && TickOf(Entry(st, r)) == epoch;
  } else {
    r = st.rows;
    if (r % kSlabRows == 0) {
      // Uninitialised: init() writes every float of a new row.
      st.slabs.emplace_back(new char[kSlabRows * entry_bytes_]);
    }
    ++st.rows;
  }
  st.slots[pos] = (static_cast<uint64_t>(tag) << 32) | (static_cast<uint64_t>(r) + 1);
  char* entry = Entry(st, r);
  std::memcpy(entry, &id, sizeof(id));
  Stamp(entry, tick, epoch);
  if (!listed) MarkChanged(st, r, epoch);
  return entry;
}

void EmbeddingStore::Remove(Stripe& st, uint32_t r, bool log) {
  char* entry = Entry(st, r);
  uint64_t id;
  std::memcpy(&id, entry, sizeof(id));
  const size_t mask = st.slots.size() - 1;
  const uint64_t want = static_cast<uint64_t>(r) + 1;
  size_t i = TagOf(Hash(id)) & mask;
  while (static_cast<uint32_t>(st.slots[i]) != want) i = (i + 1) & mask;
  // Backward-shift deletion: move later members of the probe run into the hole when their
  // home slot does not lie (cyclically) in (hole, their position].
  for (size_t j = (i + 1) & mask; st.slots[j] != 0; j = (j + 1) & mask) {
    const size_t home = static_cast<uint32_t>(st.slots[j] >> 32) & mask;
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    st.slots[i] = st.slots[j];
    i = j;
  }
  st.slots[i] = 0;
  Stamp(entry, /*tick=*/EpochOf(entry), kFreeEpoch);  // the epoch, for Insert's list check
  st.free.push_back(r);
  ++st.evicted;
  if (log && limits_.log_deletions) {
    const uint32_t epoch = epoch_.load(std::memory_order_relaxed);
    if (st.deleted.size() < limits_.max_deletions / kStripes + 1) {
      st.deleted.emplace_back(id, epoch);
    } else {
      st.overflow_epoch = epoch;
    }
  }
}

void EmbeddingStore::EvictForRoom(Stripe& st, uint32_t tick) {
  // The oldest 1/16 by age (AgeOf: right across a wrap of the count), at least one row: one
  // pass to find the cut, one to evict.
  const uint32_t now = tick_.load(std::memory_order_relaxed);
  thread_local std::vector<uint32_t> ages;
  ages.clear();
  for (uint32_t r = 0; r < st.rows; ++r) {
    const char* entry = Entry(st, r);
    if (EpochOf(entry) != kFreeEpoch && TickOf(entry) != tick)
      ages.push_back(AgeOf(now, TickOf(entry)));
  }
  if (ages.empty()) return;  // every row is the running call's: the cap gives way
  const size_t want = std::max<size_t>(1, stripe_cap_ / 16);
  const size_t nth = std::min(want, ages.size()) - 1;
  std::nth_element(ages.begin(), ages.begin() + static_cast<ptrdiff_t>(nth), ages.end(),
                   std::greater<uint32_t>());
  const uint32_t cut = ages[nth];
  size_t evicted = 0;
  for (uint32_t r = 0; r < st.rows && evicted < want; ++r) {
    const char* entry = Entry(st, r);
    if (EpochOf(entry) == kFreeEpoch || TickOf(entry) == tick || AgeOf(now, TickOf(entry)) < cut)
      continue;
    Remove(st, r, true);
    ++evicted;
  }
}

size_t EmbeddingStore::EvictNotUpdatedIn(uint32_t updates) {
  // A row updated by call t is updated "in the last `updates`" when now - t < updates.
  const uint32_t now = tick_.load(std::memory_order_relaxed);
  size_t n = 0;
  for (size_t s = 0; s < kStripes; ++s) {
    Stripe& st = stripes_[s];
    std::unique_lock lock(st.mu);
    for (uint32_t r = 0; r < st.rows; ++r) {
      const char* entry = Entry(st, r);
      if (EpochOf(entry) != kFreeEpoch && AgeOf(now, TickOf(entry)) >= updates) {
        Remove(st, r, true);
        ++n;
      }
    }
  }
  return n;
}

void EmbeddingStore::TrimDeletions(uint32_t epoch) {
  for (size_t s = 0; s < kStripes; ++s) {
    Stripe& st = stripes_[s];
    std::unique_lock lock(st.mu);
    std::erase_if(st.deleted, [&](const auto& d) { return d.second <= epoch; });
    if (st.overflow_epoch <= epoch) st.overflow_epoch = 0;
    if (st.deleted.empty()) st.deleted.shrink_to_fit();
  }
}

size_t EmbeddingStore::deletions() const {
  size_t n = 0;
  for (size_t s = 0; s < kStripes; ++s) {
    std::shared_lock lock(stripes_[s].mu);
    if (stripes_[s].overflow_epoch != 0) return SIZE_MAX;
    n += stripes_[s].deleted.size();
  }
  return n;
}

StoreCounters EmbeddingStore::counters() const {
  StoreCounters c;
  for (size_t s = 0; s < kStripes; ++s) {
    std::shared_lock lock(stripes_[s].mu);
    c.admitted += stripes_[s].admitted;
    c.filtered += stripes_[s].filtered;
    c.evicted += stripes_[s].evicted;
  }
  return c;
}

void EmbeddingStore::Grow(Stripe& st) {
  std::vector<uint64_t> slots(std::max(kMinSlots, st.slots.size() * 2), 0);
  const size_t mask = slots.size() - 1;
  for (const uint64_t slot : st.slots) {
    if (slot == 0) continue;
    size_t pos = static_cast<uint32_t>(slot >> 32) & mask;
    while (slots[pos] != 0) pos = (pos + 1) & mask;
    slots[pos] = slot;
  }
  st.slots = std::move(slots);
}

float* EmbeddingStore::Insert(uint64_t id, bool* created) {
  const uint64_t h = Hash(id);
  Stripe& st = stripes_[StripeOf(h)];
  const uint32_t tick = tick_.load(std::memory_order_relaxed);
  const uint32_t epoch = epoch_.load(std::memory_order_relaxed);
  const int64_t r = FindRow(st, id, h);
  *created = r < 0;
  char* entry;
  if (r < 0) {
    entry = Insert(st, id, h, tick, /*capped=*/false);  // a restore fills what was saved
  } else {
    entry = Entry(st, static_cast<uint32_t>(r));
    if (EpochOf(entry) != epoch) MarkChanged(st, static_cast<uint32_t>(r), epoch);
  }
  Stamp(entry, tick, epoch);
  return RowOf(entry);
}

bool EmbeddingStore::Erase(uint64_t id) {
  const uint64_t h = Hash(id);
  Stripe& st = stripes_[StripeOf(h)];
  const int64_t r = FindRow(st, id, h);
  if (r < 0) return false;
  Remove(st, static_cast<uint32_t>(r), false);
  --st.evicted;  // a restore's deletion is not an eviction of this run
  return true;
}

size_t EmbeddingStore::size() const {
  size_t n = 0;
  for (size_t s = 0; s < kStripes; ++s) {
    std::shared_lock lock(stripes_[s].mu);
    n += stripes_[s].live();
  }
  return n;
}

size_t EmbeddingStore::bytes() const {
  size_t n = sizeof(*this) + kStripes * sizeof(Stripe);
  for (size_t s = 0; s < kStripes; ++s) {
    const Stripe& st = stripes_[s];
    std::shared_lock lock(st.mu);
    n += st.slots.capacity() * sizeof(uint64_t) + st.slabs.capacity() * sizeof(st.slabs[0]) +
         st.slabs.size() * kSlabRows * entry_bytes_ + st.free.capacity() * sizeof(uint32_t) +
         st.sketch.capacity() + st.deleted.capacity() * sizeof(st.deleted[0]) +
         st.changed.capacity() * sizeof(uint32_t);
  }
  return n;
}

void EmbeddingStore::Reserve(size_t rows) {
  // A little above the even share: stripes are filled unevenly by a few percent.
  const size_t per_stripe = rows / kStripes + rows / kStripes / 16 + 16;
  for (size_t s = 0; s < kStripes; ++s) {
    Stripe& st = stripes_[s];
    while (st.slots.size() < SlotsFor(per_stripe)) Grow(st);
    st.slabs.reserve((per_stripe + kSlabRows - 1) / kSlabRows);
  }
}

void EmbeddingStore::Clear() {
  for (size_t s = 0; s < kStripes; ++s) {
    Stripe& st = stripes_[s];
    std::vector<uint64_t>().swap(st.slots);
    std::vector<std::unique_ptr<char[]>>().swap(st.slabs);
    std::vector<uint32_t>().swap(st.free);
    std::vector<std::pair<uint64_t, uint32_t>>().swap(st.deleted);
    std::vector<uint32_t>().swap(st.changed);
    st.changed_epoch = 0;
    st.rows = 0;
  }
  changes_listed_.store(false, std::memory_order_relaxed);
}

void EmbeddingStore::Swap(EmbeddingStore& other) {
  std::swap(stripes_, other.stripes_);
  changes_listed_.store(false, std::memory_order_relaxed);
  other.changes_listed_.store(false, std::memory_order_relaxed);
  // The counters describe this run, not the table: they stay with their store.
  for (size_t s = 0; s < kStripes; ++s) {
    std::swap(stripes_[s].admitted, other.stripes_[s].admitted);
    std::swap(stripes_[s].filtered, other.stripes_[s].filtered);
    std::swap(stripes_[s].evicted, other.stripes_[s].evicted);
  }
}

}  // namespace kubetrain::trainer
