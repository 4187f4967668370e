#include "trainer/ps/ledger.h"

#include <algorithm>
#include <cstring>

namespace kubetrain::trainer {

namespace {

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
bool Get(std::string_view* in, T* v) {
  if (in->size() < sizeof(T)) return false;
  std::memcpy(v, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return true;
}

}  // namespace

void PushLedger::Hello(int32_t rank, uint64_t incarnation) {
  if (incarnations_.count(incarnation)) return;
  incarnations_[incarnation] = Entry{rank, 0, next_order_++};
  // Forget the rank's oldest incarnations beyond the bound.
  while (true) {
    int n = 0;
    auto oldest = incarnations_.end();
    for (auto it = incarnations_.begin(); it != incarnations_.end(); ++it) {
      if (it->second.rank != rank) continue;
      ++n;
      if (oldest == incarnations_.end() || it->second.order < oldest->second.order) oldest = it;
    }
    if (n <= kIncarnationsPerRank) break;
    incarnations_.erase(oldest);
  }
}

PushLedger::Outcome PushLedger::Admit(int32_t rank, uint64_t incarnation, uint64_t seq) {
  auto it = incarnations_.find(incarnation);
  if (it == incarnations_.end()) return Outcome::kUnknown;
  if (seq <= it->second.last_seq) {
    Count(rank, /*applied=*/false);
    return Outcome::kDuplicate;
  }
  it->second.last_seq = seq;
  Count(rank, /*applied=*/true);
  return Outcome::kApply;
}

void PushLedger::Count(int32_t rank, bool applied) {
  PushCounts& r = by_rank_[rank];
  if (applied) {
    ++total_.applied;
    ++r.applied;
  } else {
    ++total_.duplicate;
    ++r.duplicate;
  }
}

int PushLedger::MarkFinished(int32_t rank) {
  finished_.insert(rank);
  return static_cast<int>(finished_.size());
}

uint64_t PushLedger::last_seq(uint64_t incarnation) const {
  auto it = incarnations_.find(incarnation);
  return it == incarnations_.end() ? 0 : it->second.last_seq;
}

void PushLedger::AppendTo(std::string* out) const {
  // In hello order, so equal ledgers save equal bytes.
  std::vector<std::pair<uint64_t, Entry>> entries(incarnations_.begin(), incarnations_.end());
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
  Put<uint32_t>(out, static_cast<uint32_t>(entries.size()));
  for (const auto& [incarnation, e] : entries) {
    Put<int32_t>(out, e.rank);
    Put<uint64_t>(out, incarnation);
    Put<uint64_t>(out, e.last_seq);
    Put<uint64_t>(out, e.order);
  }
  Put<uint32_t>(out, static_cast<uint32_t>(finished_.size()));
  for (int32_t rank : finished_) Put<int32_t>(out, rank);
}

Status PushLedger::ReadFrom(std::string_view* in) {
  std::string_view cur = *in;
  const auto bad = [](const std::string& why) { return InvalidArgument("push ledger: " + why); };
  uint32_t n = 0;
  if (!Get(&cur, &n)) return bad("truncated");
  constexpr size_t kEntryBytes = 4 + 8 + 8 + 8;
  if (n > cur.size() / kEntryBytes) {
    return bad(std::to_string(n) + " incarnations do not fit in " + std::to_string(cur.size()) +
               " bytes");
  }
  std::unordered_map<uint64_t, Entry> incarnations;
  uint64_t next_order = 1;
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t incarnation = 0;
    Entry e;
    if (!Get(&cur, &e.rank) || !Get(&cur, &incarnation) || !Get(&cur, &e.last_seq) ||
        !Get(&cur, &e.order)) {
      return bad("truncated");
    }
    if (!incarnations.emplace(incarnation, e).second) return bad("an incarnation twice");
    next_order = std::max(next_order, e.order + 1);
  }
  uint32_t m = 0;
  if (!Get(&cur, &m)) return bad("truncated");
  if (m > cur.size() / 4) {
    return bad(std::to_string(m) + " finished workers do not fit in " + std::to_string(cur.size()) +
               " bytes");
  }
  std::set<int32_t> finished;
  for (uint32_t i = 0; i < m; ++i) {
    int32_t rank = 0;
    if (!Get(&cur, &rank)) return bad("truncated");
    finished.insert(rank);
  }
  incarnations_ = std::move(incarnations);
  next_order_ = next_order;
  finished_ = std::move(finished);
  *in = cur;
  return Status::Ok();
}

}  // namespace kubetrain::trainer
