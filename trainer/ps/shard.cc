#include "trainer/ps/shard.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "trainer/model/model.h"
#include "trainer/model/parallel.h"
#include "trainer/storage/files.h"
#include "trainer/storage/sigv4.h"

namespace kubetrain::trainer {
namespace {

// Row counts from which pulls and updates of embedding rows are split over the compute
// threads (a Wide & Deep batch of 512 has ~10,000 distinct ids).
constexpr size_t kParallelRows = 2048;
// How far ahead an update of embedding rows prefetches the row it will update.
constexpr size_t kPrefetchRows = 8;

// Format 1 has no push ledger; format 2 has it after the header.
constexpr char kMagicV1[8] = {'K', 'T', 'S', 'H', 'A', 'R', 'D', '1'};
constexpr char kMagic[8] = {'K', 'T', 'S', 'H', 'A', 'R', 'D', '2'};

template <typename T>
void Put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void PutFloats(std::string* out, const float* p, size_t n) {
  out->append(reinterpret_cast<const char*>(p), n * sizeof(float));
}

// Reads a shard file front to back. Every length is compared with the bytes left by
// division, never by a product or sum that could wrap.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  template <typename T>
  bool Get(T* v) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetFloats(float* p, size_t n) {
    if (n > remaining() / sizeof(float)) return false;
    if (n == 0) return true;  // p may be an empty vector's null data()
    std::memcpy(p, s_.data() + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
    return true;
  }
  size_t remaining() const { return s_.size() - pos_; }
  bool AtEnd() const { return pos_ == s_.size(); }
  // The rest, for a reader of its own; Skip() past what it consumed.
  std::string_view Rest() const { return s_.substr(pos_); }
  void Skip(size_t n) { pos_ += n; }

 private:
  const std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

ShardDigest DigestOf(std::string_view data) {
  return {data.size(), storage::Sha256Hex(data)};
}

Status CheckDigest(std::string_view data, const ShardDigest& expect, const std::string& name) {
  if (data.size() != expect.bytes) {
    return Internal(name + " has " + std::to_string(data.size()) + " bytes; its MANIFEST says " +
                    std::to_string(expect.bytes) + " (truncated or overwritten)");
  }
  if (!expect.sha256.empty() && storage::Sha256Hex(data) != expect.sha256) {
    return Internal(name + ": SHA-256 does not match its MANIFEST (the file is corrupt)");
  }
  return Status::Ok();
}

int ShardOfId(uint64_t id, int num_shards) {
  // Ids are already well mixed (HashFeature), but mix again so that any id source spreads.
  uint64_t h = id * 0x9e3779b97f4a7c15ULL;
  h ^= h >> 32;
  return static_cast<int>(h % static_cast<uint64_t>(num_shards));
}

std::pair<size_t, size_t> DenseRange(size_t total, int k, int n) {
  return {total * k / n, total * (k + 1) / n};
}

ParamShard::ParamShard(const ShardConfig& config, const float* dense_init)
    : c_(config), slots_(StateSlots(config.optimizer.kind)) {
  dense_.assign(dense_init, dense_init + dense_size());
  dense_state_.resize(dense_size() * slots_);
  InitState(c_.optimizer, dense_state_.data(), dense_size());
  scratch_.resize(dense_size());
}

size_t ParamShard::RowStride() const {
  return static_cast<size_t>(c_.sparse_dim) * (1 + slots_) + 1;
}

float* ParamShard::RowLocked(uint64_t id) {
  auto [it, inserted] = row_of_.emplace(id, arena_.size());
  if (inserted) {
    arena_.resize(arena_.size() + RowStride());
    float* row = arena_.data() + it->second;
    InitSparseRow(c_.seed, id, c_.sparse_dim, row);
    InitState(c_.optimizer, row + c_.sparse_dim, c_.sparse_dim);
    row[RowStride() - 1] = 0.f;
  }
  return arena_.data() + it->second;
}

void ParamShard::PullDense(float* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  ParallelCopy(out, dense_.data(), dense_.size());
}

void ParamShard::PullSparse(const uint64_t* ids, size_t n, float* out) {
  std::lock_guard<std::mutex> lock(mu_);
  // An id never pushed to reads as its initial row without becoming one: only trained rows
  // are kept (and checkpointed); Apply creates a row from the same initial value.
  // Lookups only (no insertion), so the rows are split over the compute threads.
  ParallelRanges(n, kParallelRows, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      float* dst = out + i * c_.sparse_dim;
      if (const auto it = row_of_.find(ids[i]); it != row_of_.end()) {
        std::memcpy(dst, arena_.data() + it->second, c_.sparse_dim * sizeof(float));
      } else {
        InitSparseRow(c_.seed, ids[i], c_.sparse_dim, dst);
      }
    }
  });
}

void ParamShard::Apply(const float* dense_grad, const uint64_t* ids, size_t n,
                       const float* row_grads, float scale) {
  std::lock_guard<std::mutex> lock(mu_);
  ApplyLocked(dense_grad, ids, n, row_grads, scale);
}

void ParamShard::BeginDenseUpdate() {
  std::lock_guard<std::mutex> lock(mu_);
  ++dense_updates_;
}

void ParamShard::ApplyDense(const float* dense_grad, size_t begin, size_t end) {
  std::lock_guard<std::mutex> lock(mu_);
  ApplyUpdateRange(c_.optimizer, dense_.data(), dense_state_.data(), dense_grad, dense_.size(),
                   begin, end, dense_updates_);
}

PushLedger::Outcome ParamShard::ApplyPush(int32_t rank, uint64_t incarnation, uint64_t seq,
                                          const float* dense_grad, const uint64_t* ids, size_t n,
                                          const float* row_grads) {
  std::lock_guard<std::mutex> lock(mu_);
  const PushLedger::Outcome outcome = ledger_.Admit(rank, incarnation, seq);
  if (outcome == PushLedger::Outcome::kApply) ApplyLocked(dense_grad, ids, n, row_grads, 1.f);
  return outcome;
}

void ParamShard::Hello(int32_t rank, uint64_t incarnation) {
  std::lock_guard<std::mutex> lock(mu_);
  ledger_.Hello(rank, incarnation);
}

void ParamShard::CountPush(int32_t rank, bool applied) {
  std::lock_guard<std::mutex> lock(mu_);
  ledger_.Count(rank, applied);
}

int ParamShard::MarkFinished(int32_t rank) {
  std::lock_guard<std::mutex> lock(mu_);
  return ledger_.MarkFinished(rank);
}

std::vector<int32_t> ParamShard::Finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {ledger_.finished().begin(), ledger_.finished().end()};
}

PushCounts ParamShard::Pushes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ledger_.total();
}

std::map<int32_t, PushCounts> ParamShard::PushesByRank() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ledger_.by_rank();
}

void ParamShard::ApplyLocked(const float* dense_grad, const uint64_t* ids, size_t n,
                             const float* row_grads, float scale) {
  if (dense_grad != nullptr && !dense_.empty()) {
    const float* g = dense_grad;
    if (scale != 1.f) {
      ParallelRanges(dense_.size(), size_t{1} << 16, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) scratch_[i] = dense_grad[i] * scale;
      });
      g = scratch_.data();
    }
    ++dense_updates_;
    ApplyUpdate(c_.optimizer, dense_.data(), dense_state_.data(), g, dense_.size(), dense_updates_);
  }
  if (n == 0) return;
  // Where each id's row is: found in parallel (lookups only), then the ids without a row get
  // one, in order, on this thread (insertion is not thread-safe; the arena may move, so
  // rows are kept as offsets).
  const bool parallel = n >= kParallelRows;
  constexpr size_t kNone = ~size_t{0};
  offsets_.resize(n);
  ParallelRanges(n, kParallelRows, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const auto it = row_of_.find(ids[i]);
      offsets_[i] = it == row_of_.end() ? kNone : it->second;
    }
  });
  for (size_t i = 0; i < n; ++i) {
    if (offsets_[i] == kNone) offsets_[i] = RowLocked(ids[i]) - arena_.data();
  }
  // The updates, split by row: a row's updates (an id may repeat in a push from the wire)
  // are all done by one thread, in the order of the push, so the result is the sequential
  // one whatever the thread count.
  const size_t stride = RowStride();
  ParallelParts(parallel, [&](int part, int parts) {
    std::vector<float> scaled(scale != 1.f ? c_.sparse_dim : 0);
    for (size_t i = 0; i < n; ++i) {
      // The rows are scattered over the arena: ask for one a few rows ahead (all of its
      // cache lines) so that its misses overlap this row's update.
      if (const size_t next = i + kPrefetchRows;
          next < n && (parts == 1 || static_cast<int>((offsets_[next] / stride) % parts) == part)) {
        const char* ahead = reinterpret_cast<const char*>(arena_.data() + offsets_[next]);
        for (size_t byte = 0; byte < stride * sizeof(float); byte += 64)
          __builtin_prefetch(ahead + byte, 1);
      }
      if (parts > 1 && static_cast<int>((offsets_[i] / stride) % parts) != part) continue;
      float* row = arena_.data() + offsets_[i];
      const float* g = row_grads + i * c_.sparse_dim;
      if (scale != 1.f) {
        for (int k = 0; k < c_.sparse_dim; ++k) scaled[k] = g[k] * scale;
        g = scaled.data();
      }
      float& count = row[stride - 1];
      count += 1.f;
      ApplyUpdate(c_.optimizer, row, row + c_.sparse_dim, g, c_.sparse_dim,
                  static_cast<int64_t>(count));
    }
  });
}

size_t ParamShard::num_rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return row_of_.size();
}

int64_t ParamShard::updates() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dense_updates_;
}

void ParamShard::ForEachRow(const std::function<void(uint64_t, const float*, int64_t)>& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, offset] : row_of_) {
    const float* row = arena_.data() + offset;
    fn(id, row, static_cast<int64_t>(row[RowStride() - 1]));
  }
}

StatusOr<ShardDigest> ParamShard::Save(const std::string& path) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(64 + (dense_.size() + dense_state_.size()) * 4 + arena_.size() * 4 +
                row_of_.size() * 8);
    out.append(kMagic, sizeof(kMagic));
    Put<uint64_t>(&out, c_.dense_begin);
    Put<uint64_t>(&out, c_.dense_end);
    Put<int32_t>(&out, c_.sparse_dim);
    Put<int32_t>(&out, slots_);
    Put<int64_t>(&out, dense_updates_);
    ledger_.AppendTo(&out);
    PutFloats(&out, dense_.data(), dense_.size());
    PutFloats(&out, dense_state_.data(), dense_state_.size());
    Put<uint64_t>(&out, row_of_.size());
    for (const auto& [id, offset] : row_of_) {
      Put<uint64_t>(&out, id);
      PutFloats(&out, arena_.data() + offset, RowStride());
    }
  }
  KT_RETURN_IF_ERROR(storage::WriteObject(path, out));  // a local file or an S3 object
  return DigestOf(out);
}

Status ParamShard::Load(const std::string& path, const ShardDigest* expect) {
  auto read = storage::ReadObject(path);
  if (!read.ok()) return read.status().WithContext("checkpoint shard");
  if (expect != nullptr)
    KT_RETURN_IF_ERROR(CheckDigest(*read, *expect, "checkpoint shard " + path));
  return Restore(*read, path);
}

Status ParamShard::Restore(std::string_view data, const std::string& path) {
  Cursor cur(data);
  char magic[8];
  uint64_t begin = 0, end = 0, rows = 0;
  int32_t dim = 0, slots = 0;
  int64_t updates = 0;
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("checkpoint shard " + path + ": " + why);
  };
  if (!cur.Get(&magic)) return bad("not a kubetrain shard file");
  const bool v1 = std::memcmp(magic, kMagicV1, sizeof(kMagicV1)) == 0;
  if (!v1 && std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    if (std::memcmp(magic, kMagic, 7) == 0) {
      return bad("shard format " + std::string(1, magic[7]) +
                 " is newer than this trainer reads (2); run the trainer version that wrote it");
    }
    return bad("not a kubetrain shard file");
  }
  if (!cur.Get(&begin) || !cur.Get(&end) || !cur.Get(&dim) || !cur.Get(&slots) ||
      !cur.Get(&updates)) {
    return bad("truncated header");
  }
  if (begin != c_.dense_begin || end != c_.dense_end || dim != c_.sparse_dim || slots != slots_) {
    return bad("written for dense slice [" + std::to_string(begin) + ", " + std::to_string(end) +
               "), row dim " + std::to_string(dim) + ", " + std::to_string(slots) +
               " optimizer slots; this shard has [" + std::to_string(c_.dense_begin) + ", " +
               std::to_string(c_.dense_end) + "), " + std::to_string(c_.sparse_dim) + ", " +
               std::to_string(slots_) + " (model or optimizer flags changed?)");
  }
  PushLedger ledger;
  if (!v1) {
    std::string_view rest = cur.Rest();
    const size_t before = rest.size();
    if (Status s = ledger.ReadFrom(&rest); !s.ok()) return bad(s.message());
    cur.Skip(before - rest.size());
  }
  std::vector<float> dense(dense_size()), state(dense_size() * slots_);
  if (!cur.GetFloats(dense.data(), dense.size()) || !cur.GetFloats(state.data(), state.size()) ||
      !cur.Get(&rows)) {
    return bad("truncated dense section");
  }
  // Each row is its id and RowStride() floats: the count must fit the bytes that follow
  // (checked by division, so a crafted count can neither wrap nor make us allocate).
  const size_t row_bytes = sizeof(uint64_t) + RowStride() * sizeof(float);
  if (rows > cur.remaining() / row_bytes || rows * row_bytes != cur.remaining()) {
    return bad("the header says " + std::to_string(rows) + " rows of " + std::to_string(row_bytes) +
               " bytes but " + std::to_string(cur.remaining()) + " bytes follow");
  }
  std::unordered_map<uint64_t, size_t> row_of;
  row_of.reserve(rows);
  std::vector<float> arena(rows * RowStride());
  for (uint64_t r = 0; r < rows; ++r) {
    uint64_t id;
    if (!cur.Get(&id) || !cur.GetFloats(arena.data() + r * RowStride(), RowStride())) {
      return bad("truncated row section");
    }
    row_of[id] = r * RowStride();
    // The row's update count is a float (the arena's last slot); ForEachRow converts it to
    // int64, which is undefined for NaN, infinities and values past 2^63.
    const float count = arena[r * RowStride() + RowStride() - 1];
    if (!(count >= 0.f && count < 0x1p63f)) {
      return bad("row " + std::to_string(r) + " has update count " + std::to_string(count));
    }
  }
  if (!cur.AtEnd()) return bad("trailing bytes");
  std::lock_guard<std::mutex> lock(mu_);
  // Copied, not moved: dense_data() stays valid.
  std::copy(dense.begin(), dense.end(), dense_.begin());
  dense_state_ = std::move(state);
  dense_updates_ = updates;
  row_of_ = std::move(row_of);
  arena_ = std::move(arena);
  ledger_ = std::move(ledger);
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, const std::string& data) {
  return storage::WriteFileAtomic(path, data);
}

}  // namespace kubetrain::trainer
