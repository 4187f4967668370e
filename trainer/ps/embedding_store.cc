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

EmbeddingStore::EmbeddingStore(size_t row_floats)
    : row_floats_(row_floats),
      entry_bytes_(kIdBytes + row_floats * sizeof(float)),
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

float* EmbeddingStore::Find(const Stripe& st, uint64_t id, uint64_t h) const {
  if (st.slots.empty()) return nullptr;
  const size_t mask = st.slots.size() - 1;
  const uint32_t tag = TagOf(h);
  for (size_t pos = tag & mask;; pos = (pos + 1) & mask) {
    const uint64_t slot = st.slots[pos];
    if (slot == 0) return nullptr;
    if (static_cast<uint32_t>(slot >> 32) != tag) continue;
    char* entry = Entry(st, static_cast<uint32_t>(slot) - 1);
    uint64_t stored;
    std::memcpy(&stored, entry, sizeof(stored));
    if (stored == id) return reinterpret_cast<float*>(entry + kIdBytes);
  }
}

float* EmbeddingStore::FindOrInsert(Stripe& st, uint64_t id, uint64_t h, bool* created) {
  if (float* row = Find(st, id, h); row != nullptr) {
    *created = false;
    return row;
  }
  if (st.rows + 1 > st.slots.size() / 4 * 3) Grow(st);
  const size_t mask = st.slots.size() - 1;
  const uint32_t tag = TagOf(h);
  size_t pos = tag & mask;
  while (st.slots[pos] != 0) pos = (pos + 1) & mask;
  const uint32_t r = st.rows;
  if (r % kSlabRows == 0) {
    // Uninitialised: init() writes every float of a new row.
    st.slabs.emplace_back(new char[kSlabRows * entry_bytes_]);
  }
  ++st.rows;
  st.slots[pos] = (static_cast<uint64_t>(tag) << 32) | (static_cast<uint64_t>(r) + 1);
  char* entry = Entry(st, r);
  std::memcpy(entry, &id, sizeof(id));
  *created = true;
  return reinterpret_cast<float*>(entry + kIdBytes);
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
  return FindOrInsert(stripes_[StripeOf(h)], id, h, created);
}

size_t EmbeddingStore::size() const {
  size_t n = 0;
  for (size_t s = 0; s < kStripes; ++s) {
    std::shared_lock lock(stripes_[s].mu);
    n += stripes_[s].rows;
  }
  return n;
}

size_t EmbeddingStore::bytes() const {
  size_t n = sizeof(*this) + kStripes * sizeof(Stripe);
  for (size_t s = 0; s < kStripes; ++s) {
    const Stripe& st = stripes_[s];
    std::shared_lock lock(st.mu);
    n += st.slots.capacity() * sizeof(uint64_t) + st.slabs.capacity() * sizeof(st.slabs[0]) +
         st.slabs.size() * kSlabRows * entry_bytes_;
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
    st.rows = 0;
  }
}

void EmbeddingStore::Swap(EmbeddingStore& other) {
  std::swap(stripes_, other.stripes_);
}

}  // namespace kubetrain::trainer
