#include "trainer/ps/shard.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/storage/files.h"
#include "common/storage/sigv4.h"
#include "common/storage/writer.h"
#include "trainer/model/model.h"
#include "trainer/model/parallel.h"
#include "trainer/ps/checkpoint.h"

namespace kubetrain::trainer {
namespace {

// Row counts from which pulls and updates of embedding rows are split over the compute
// threads (a Wide & Deep batch of 512 has ~10,000 distinct ids).
constexpr size_t kParallelRows = 2048;

// Format 1 has no push ledger; format 2 has it after the header; format 3 adds, after the
// dense section, its kind (0 full, 1 delta), the step of its base and the deleted ids.
constexpr char kMagicV1[8] = {'K', 'T', 'S', 'H', 'A', 'R', 'D', '1'};
constexpr char kMagicV2[8] = {'K', 'T', 'S', 'H', 'A', 'R', 'D', '2'};
constexpr char kMagic[8] = {'K', 'T', 'S', 'H', 'A', 'R', 'D', '3'};

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

// Locks `mu`, adding the wait to *wait_ns when another thread holds it.
std::unique_lock<std::mutex> LockCounted(std::mutex& mu, std::atomic<uint64_t>* wait_ns) {
  std::unique_lock<std::mutex> lock(mu, std::try_to_lock);
  if (lock.owns_lock()) return lock;
  const auto t0 = std::chrono::steady_clock::now();
  lock.lock();
  wait_ns->fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::steady_clock::now() - t0)
                                               .count()),
                     std::memory_order_relaxed);
  return lock;
}

// Deletions are logged only for incremental checkpoints, at most kMaxDeletions.
StoreLimits StoreLimitsOf(const ShardConfig& c) {
  StoreLimits l = c.embedding.limits;
  l.log_deletions = c.embedding.full_every > 1;
  l.list_changes = c.embedding.full_every > 1;
  l.max_deletions = ParamShard::kMaxDeletions;
  return l;
}

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
    : c_(config),
      slots_(StateSlots(config.optimizer.kind)),
      rows_(static_cast<size_t>(config.sparse_dim) * (1 + slots_) + 1, StoreLimitsOf(config)) {
  dense_.assign(dense_init, dense_init + dense_size());
  dense_state_.resize(dense_size() * slots_);
  InitState(c_.optimizer, dense_state_.data(), dense_size());
  scratch_.resize(dense_size());
}

size_t ParamShard::RowStride() const {
  return static_cast<size_t>(c_.sparse_dim) * (1 + slots_) + 1;
}

void ParamShard::InitRow(uint64_t id, float* row) const {
  InitSparseRow(c_.seed, id, c_.sparse_dim, row);
  InitState(c_.optimizer, row + c_.sparse_dim, c_.sparse_dim);
  row[RowStride() - 1] = 0.f;
}

void ParamShard::PullDense(float* out) const {
  std::lock_guard<std::mutex> lock(dense_mu_);
  ParallelCopy(out, dense_.data(), dense_.size());
}

void ParamShard::PullSparse(const uint64_t* ids, size_t n, float* out) {
  std::shared_lock table(table_mu_);
  // An id never pushed to reads as its initial row without becoming one: only trained rows
  // are kept (and checkpointed); Apply creates a row from the same initial value.
  const size_t dim = static_cast<size_t>(c_.sparse_dim);
  ParallelRanges(n, kParallelRows, [&](size_t b, size_t e) {
    rows_.Read(ids + b, e - b, [&](size_t i, const float* row) {
      float* dst = out + (b + i) * dim;
      if (row != nullptr) {
        std::memcpy(dst, row, dim * sizeof(float));
      } else {
        InitSparseRow(c_.seed, ids[b + i], c_.sparse_dim, dst);
      }
    });
  });
}

void ParamShard::Apply(const float* dense_grad, const uint64_t* ids, size_t n,
                       const float* row_grads, float scale) {
  std::shared_lock push(push_mu_);
  std::shared_lock table(table_mu_);
  ApplyDenseGrad(dense_grad, scale);
  ApplyRows(ids, n, row_grads, scale);
}

void ParamShard::BeginDenseUpdate() {
  std::shared_lock push(push_mu_);
  std::lock_guard<std::mutex> lock(dense_mu_);
  ++dense_updates_;
}

void ParamShard::ApplyDense(const float* dense_grad, size_t begin, size_t end) {
  std::shared_lock push(push_mu_);
  std::lock_guard<std::mutex> lock(dense_mu_);
  ApplyUpdateRange(c_.optimizer, dense_.data(), dense_state_.data(), dense_grad, dense_.size(),
                   begin, end, dense_updates_);
}

PushLedger::Outcome ParamShard::ApplyPush(int32_t rank, uint64_t incarnation, uint64_t seq,
                                          const float* dense_grad, const uint64_t* ids, size_t n,
                                          const float* row_grads) {
  // Held from the ledger's check to the end of the update: Save (exclusive) sees both the
  // record and the update or neither.
  std::shared_lock push(push_mu_);
  PushLedger::Outcome outcome;
  {
    const auto lock = LockCounted(ledger_mu_, &lock_wait_ns_);
    outcome = ledger_.Admit(rank, incarnation, seq);
  }
  if (outcome == PushLedger::Outcome::kApply) {
    std::shared_lock table(table_mu_);
    ApplyDenseGrad(dense_grad, 1.f);
    ApplyRows(ids, n, row_grads, 1.f);
  }
  return outcome;
}

void ParamShard::Hello(int32_t rank, uint64_t incarnation) {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  ledger_.Hello(rank, incarnation);
}

void ParamShard::CountPush(int32_t rank, bool applied) {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  ledger_.Count(rank, applied);
}

int ParamShard::MarkFinished(int32_t rank) {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  return ledger_.MarkFinished(rank);
}

std::vector<int32_t> ParamShard::Finished() const {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  return {ledger_.finished().begin(), ledger_.finished().end()};
}

PushCounts ParamShard::Pushes() const {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  return ledger_.total();
}

std::map<int32_t, PushCounts> ParamShard::PushesByRank() const {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  return ledger_.by_rank();
}

void ParamShard::ApplyDenseGrad(const float* dense_grad, float scale) {
  if (dense_grad == nullptr || dense_.empty()) return;
  const auto lock = LockCounted(dense_mu_, &lock_wait_ns_);
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

void ParamShard::ApplyRows(const uint64_t* ids, size_t n, const float* row_grads, float scale) {
  if (n == 0) return;
  // The store groups the ids by stripe and, for a large push, shares the stripes out over
  // the compute threads: a row's updates (an id may repeat in a push from the wire) are all
  // done by one thread, in the order of the push, so the result is the sequential one
  // whatever the thread count.
  const size_t stride = RowStride();
  const size_t dim = static_cast<size_t>(c_.sparse_dim);
  rows_.Update(
      ids, n, n >= kParallelRows, [&](uint64_t id, float* row) { InitRow(id, row); },
      [&](size_t i, float* row) {
        if (row == nullptr) return;  // not admitted yet: counted by the store, not stored
        const float* g = row_grads + i * dim;
        thread_local std::vector<float> scaled;
        if (scale != 1.f) {
          scaled.resize(dim);
          for (size_t k = 0; k < dim; ++k) scaled[k] = g[k] * scale;
          g = scaled.data();
        }
        float& count = row[stride - 1];
        count += 1.f;
        ApplyUpdate(c_.optimizer, row, row + dim, g, dim, static_cast<int64_t>(count));
      });
}

size_t ParamShard::num_rows() const {
  std::shared_lock table(table_mu_);
  return rows_.size();
}

EmbeddingStats ParamShard::embedding_stats() const {
  std::shared_lock table(table_mu_);
  const StoreCounters c = rows_.counters();
  return {rows_.size(), rows_.bytes(), c.admitted, c.filtered, c.evicted};
}

size_t ParamShard::embedding_bytes() const {
  std::shared_lock table(table_mu_);
  return rows_.bytes();
}

uint64_t ParamShard::lock_wait_ns() const {
  std::shared_lock table(table_mu_);
  return lock_wait_ns_.load(std::memory_order_relaxed) + rows_.lock_wait_ns();
}

int64_t ParamShard::updates() const {
  std::lock_guard<std::mutex> lock(dense_mu_);
  return dense_updates_;
}

void ParamShard::ForEachRow(const std::function<void(uint64_t, const float*, int64_t)>& fn) const {
  std::shared_lock table(table_mu_);
  const size_t stride = RowStride();
  rows_.ForEach(
      [&](uint64_t id, const float* row) { fn(id, row, static_cast<int64_t>(row[stride - 1])); });
}

std::string ParamShard::HeadLocked(bool delta, int64_t base_step) const {
  std::string out;
  out.reserve(64 + (dense_.size() + dense_state_.size()) * 4);
  out.append(kMagic, sizeof(kMagic));
  Put<uint64_t>(&out, c_.dense_begin);
  Put<uint64_t>(&out, c_.dense_end);
  Put<int32_t>(&out, c_.sparse_dim);
  Put<int32_t>(&out, slots_);
  Put<int64_t>(&out, dense_updates_);
  ledger_.AppendTo(&out);
  PutFloats(&out, dense_.data(), dense_.size());
  PutFloats(&out, dense_state_.data(), dense_state_.size());
  Put<uint8_t>(&out, delta ? 1 : 0);
  Put<int64_t>(&out, base_step);
  return out;
}

StatusOr<ShardDigest> ParamShard::WriteLocked(const std::string& path, bool delta,
                                              int64_t base_step, uint32_t since_epoch) const {
  std::string head;
  {
    std::scoped_lock lock(dense_mu_, ledger_mu_);
    head = HeadLocked(delta, base_step);
  }
  // Deletions (a delta only), then the row count: counted first, so rows stream after it.
  std::vector<uint64_t> deleted;
  if (delta) rows_.ForEachDeletedSince(since_epoch, [&](uint64_t id) { deleted.push_back(id); });
  Put<uint64_t>(&head, deleted.size());
  head.append(reinterpret_cast<const char*>(deleted.data()), deleted.size() * sizeof(uint64_t));
  uint64_t count = 0;
  rows_.ForEachChangedSince(since_epoch, [&](uint64_t, const float*) { ++count; });
  Put<uint64_t>(&head, count);
  const size_t stride = RowStride();
  // Local or S3, through one writer: rows go out 1 MiB at a time, so memory stays a buffer
  // (a few parts on S3, multipart upload) whatever the table's size.
  KT_ASSIGN_OR_RETURN(auto out, storage::ObjectWriter::Open(path));
  KT_RETURN_IF_ERROR(out->Append(head));
  Status s;
  std::string chunk;
  chunk.reserve((size_t{1} << 20) + 64 + stride * sizeof(float));
  rows_.ForEachChangedSince(since_epoch, [&](uint64_t id, const float* row) {
    Put<uint64_t>(&chunk, id);
    PutFloats(&chunk, row, stride);
    if (chunk.size() >= (size_t{1} << 20)) {
      if (s.ok()) s = out->Append(chunk);
      chunk.clear();
    }
  });
  if (s.ok()) s = out->Append(chunk);
  KT_RETURN_IF_ERROR(s);
  KT_ASSIGN_OR_RETURN(const storage::WrittenObject written, out->Commit());
  return ShardDigest{written.bytes, written.sha256};
}

StatusOr<ShardDigest> ParamShard::Save(const std::string& path) const {
  // No update runs while the rows are read (a checkpoint is one instant); pulls go on.
  std::unique_lock push(push_mu_);
  std::shared_lock table(table_mu_);
  return WriteLocked(path, false, -1, 0);
}

StatusOr<ShardDigest> ParamShard::SaveCheckpoint(const std::string& root, int64_t step, int k,
                                                 int n) {
  std::unique_lock push(push_mu_);
  std::shared_lock table(table_mu_);
  const EmbeddingOptions& o = c_.embedding;
  if (o.evict_after_updates != 0) rows_.EvictNotUpdatedIn(o.evict_after_updates);
  const auto prev = saved_.find(root);
  const bool delta = o.full_every > 1 && prev != saved_.end() && prev->second.step < step &&
                     prev->second.digest.chain.size() + 1 < static_cast<size_t>(o.full_every) &&
                     rows_.deletions() <= kMaxDeletions;
  const uint32_t since = delta ? prev->second.epoch : 0;
  KT_ASSIGN_OR_RETURN(ShardDigest digest, WriteLocked(ShardPath(root, step, k, n), delta,
                                                      delta ? prev->second.step : -1, since));
  if (delta) {
    digest.chain = prev->second.digest.chain;
    digest.chain.push_back(
        {prev->second.step, prev->second.digest.bytes, prev->second.digest.sha256});
  }
  // A new epoch: rows updated from now on are the next delta's.
  const uint32_t epoch = rows_.epoch();
  saved_[root] = {step, epoch, digest};
  rows_.set_epoch(epoch + 1);
  uint32_t keep = epoch;  // deletions every root's next delta still needs
  for (const auto& [r, sv] : saved_) keep = std::min(keep, sv.epoch);
  rows_.TrimDeletions(keep);
  return digest;
}

void ParamShard::NoteRestored(const std::string& root, int64_t step, const ShardDigest& last) {
  std::unique_lock push(push_mu_);
  std::shared_lock table(table_mu_);
  saved_.clear();
  const uint32_t epoch = rows_.epoch();
  saved_[root] = {step, epoch, last};
  rows_.set_epoch(epoch + 1);
}

Status ParamShard::Load(const std::string& path, const ShardDigest* expect) {
  auto read = storage::ReadObject(path);
  if (!read.ok()) return read.status().WithContext("checkpoint shard");
  if (expect != nullptr)
    KT_RETURN_IF_ERROR(CheckDigest(*read, *expect, "checkpoint shard " + path));
  return Restore(*read, path);
}

Status ParamShard::Restore(std::string_view data, const std::string& path) {
  return RestoreChain({data}, {path});
}

Status ParamShard::RestoreChain(const std::vector<std::string_view>& files,
                                const std::vector<std::string>& names) {
  if (files.empty() || files.size() != names.size()) {
    return InvalidArgument("a checkpoint chain has one name per file, at least one file");
  }
  EmbeddingStore store(RowStride());
  std::vector<float> dense(dense_size()), state(dense_size() * slots_);
  // The shard's update count at each file's save: a row's last update is dated by the
  // newest file that holds it (the store's tick counts updates as this count does, one per
  // push or step), so rows keep their age across a restore instead of all counting as
  // updated at it (which kept them from --embedding-evict-steps and the capacity's LRU).
  int64_t updates = 0;
  PushLedger ledger;
  for (size_t f = 0; f < files.size(); ++f) {
    Cursor cur(files[f]);
    const std::string& path = names[f];
    char magic[8];
    uint64_t begin = 0, end = 0, rows = 0;
    int32_t dim = 0, slots = 0;
    const auto bad = [&](const std::string& why) {
      return InvalidArgument("checkpoint shard " + path + ": " + why);
    };
    if (!cur.Get(&magic)) return bad("not a kubetrain shard file");
    const bool v1 = std::memcmp(magic, kMagicV1, sizeof(kMagicV1)) == 0;
    const bool v2 = std::memcmp(magic, kMagicV2, sizeof(kMagicV2)) == 0;
    if (!v1 && !v2 && std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
      if (std::memcmp(magic, kMagic, 7) == 0) {
        return bad("shard format " + std::string(1, magic[7]) +
                   " is newer than this trainer reads (3); run the trainer version that wrote it");
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
    ledger = PushLedger();
    if (!v1) {
      std::string_view rest = cur.Rest();
      const size_t before = rest.size();
      if (Status s = ledger.ReadFrom(&rest); !s.ok()) return bad(s.message());
      cur.Skip(before - rest.size());
    }
    if (!cur.GetFloats(dense.data(), dense.size()) || !cur.GetFloats(state.data(), state.size())) {
      return bad("truncated dense section");
    }
    bool delta = false;
    if (!v1 && !v2) {
      uint8_t kind = 0;
      int64_t base = 0;
      uint64_t deletions = 0;
      if (!cur.Get(&kind) || !cur.Get(&base) || !cur.Get(&deletions) || kind > 1) {
        return bad("truncated or bad delta header");
      }
      delta = kind == 1;
      if (deletions > cur.remaining() / sizeof(uint64_t)) return bad("truncated deletions");
      for (uint64_t d = 0; d < deletions; ++d) {
        uint64_t id = 0;
        cur.Get(&id);
        store.Erase(id);
      }
    }
    if (delta != (f > 0)) {
      return bad(f == 0 ? "is a delta, but the chain must start with a full snapshot"
                        : "is a full snapshot inside a chain of deltas");
    }
    if (!cur.Get(&rows)) return bad("truncated dense section");
    // Each row is its id and RowStride() floats: the count must fit the bytes that follow
    // (checked by division, so a crafted count can neither wrap nor make us allocate).
    const size_t row_bytes = sizeof(uint64_t) + RowStride() * sizeof(float);
    if (rows > cur.remaining() / row_bytes || rows * row_bytes != cur.remaining()) {
      return bad("the header says " + std::to_string(rows) + " rows of " +
                 std::to_string(row_bytes) + " bytes but " + std::to_string(cur.remaining()) +
                 " bytes follow");
    }
    if (f == 0) store.Reserve(rows);
    store.set_tick(static_cast<uint32_t>(updates));  // modulo 2^32, as the tick counts
    for (uint64_t r = 0; r < rows; ++r) {
      uint64_t id;
      if (!cur.Get(&id)) return bad("truncated row section");
      // A repeated id (not written by Save) keeps its last row, as before.
      bool created = false;
      float* row = store.Insert(id, &created);
      if (!cur.GetFloats(row, RowStride())) return bad("truncated row section");
      // The row's update count is a float (its last slot); ForEachRow converts it to int64,
      // which is undefined for NaN, infinities and values past 2^63.
      const float count = row[RowStride() - 1];
      if (!(count >= 0.f && count < 0x1p63f)) {
        return bad("row " + std::to_string(r) + " has update count " + std::to_string(count));
      }
    }
    if (!cur.AtEnd()) return bad("trailing bytes");
  }
  std::unique_lock push(push_mu_);
  std::unique_lock table(table_mu_);
  std::scoped_lock lock(dense_mu_, ledger_mu_);
  // Copied, not moved: dense_data() stays valid.
  std::copy(dense.begin(), dense.end(), dense_.begin());
  dense_state_ = std::move(state);
  dense_updates_ = updates;
  rows_.Swap(store);
  rows_.set_tick(static_cast<uint32_t>(updates));  // the rows' dates are on this count
  ledger_ = std::move(ledger);
  saved_.clear();  // a new table: the next checkpoint of any root is full (or NoteRestored)
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, const std::string& data) {
  return storage::WriteFileAtomic(path, data);
}

}  // namespace kubetrain::trainer
