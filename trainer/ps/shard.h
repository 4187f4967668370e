// One parameter server's share of the model: a contiguous slice of the dense parameter
// vector, and the embedding rows whose id hashes to this shard (created by their first
// update; a pull of an id never updated returns its initial value and stores nothing),
// held in an EmbeddingStore (ps/embedding_store.h: striped locks, rows in slabs).
//
// Thread-safe. Pulls and pushes from many connections run at once: embedding rows are
// locked per stripe, the dense slice by its own mutex, the push ledger by its own. A push
// is atomic with respect to Save (a checkpoint holds all of it or none, with its ledger
// record) but not to a concurrent pull, which may see some of its rows updated and not
// others (as asynchronous training allows). Save stops pushes while it streams the rows;
// pulls go on.
//
// Lock order: push_mu_, table_mu_, dense_mu_, ledger_mu_ (then a stripe's, inside rows_).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trainer/ps/embedding_store.h"
#include "trainer/ps/ledger.h"
#include "trainer/ps/optimizer.h"

namespace kubetrain::trainer {

// Bounds on the embedding table (admission, capacity, eviction) and how
// checkpoints are written (full or incremental, chains kept).
struct EmbeddingOptions {
  StoreLimits limits;  // --embedding-admit-count, --embedding-capacity (EmbeddingStore)
  // Rows not updated by the last evict_after_updates updates of this shard are dropped when
  // a checkpoint is saved (--embedding-evict-steps times the updates per step); 0: never.
  uint32_t evict_after_updates = 0;
  // Every full_every-th checkpoint of a root is a full snapshot, the others deltas against
  // the previous one (--checkpoint-full-every); 1: every checkpoint is full.
  int full_every = 1;
};

struct ShardConfig {
  size_t dense_begin = 0;
  size_t dense_end = 0;
  int sparse_dim = 0;
  uint64_t seed = 1;  // embedding rows are initialised from (seed, id)
  OptimizerConfig optimizer;
  EmbeddingOptions embedding;
};

// The embedding table's size and what its bounds did: on the PS's /metrics, in its
// termination message, and (via the checkpoint reply) in the coordinator's final metrics.
struct EmbeddingStats {
  uint64_t rows = 0;
  uint64_t bytes = 0;
  uint64_t admitted = 0;
  uint64_t filtered = 0;
  uint64_t evicted = 0;
};

// One file of a checkpoint chain: the step it was saved for, its size and SHA-256.
struct ChainLink {
  int64_t step = 0;
  uint64_t bytes = 0;
  std::string sha256;

  friend bool operator==(const ChainLink&, const ChainLink&) = default;
};

// A shard file's size and SHA-256 (lower-case hex), as the checkpoint MANIFEST records them.
// A delta also names the files it applies on, `chain`: the full snapshot first, then every
// delta up to its parent (empty for a full snapshot).
struct ShardDigest {
  uint64_t bytes = 0;
  std::string sha256;
  std::vector<ChainLink> chain = {};

  friend bool operator==(const ShardDigest&, const ShardDigest&) = default;
};
ShardDigest DigestOf(std::string_view data);
// OK if `data` has the size and SHA-256 of `expect`; else Internal naming `name`.
Status CheckDigest(std::string_view data, const ShardDigest& expect, const std::string& name);

// Which PS holds embedding row `id`, and which dense slice PS `k` of `n` holds.
int ShardOfId(uint64_t id, int num_shards);
std::pair<size_t, size_t> DenseRange(size_t total, int k, int n);

class ParamShard {
 public:
  // `dense_init` points at this shard's slice of the initial dense values.
  ParamShard(const ShardConfig& config, const float* dense_init);

  size_t dense_size() const { return c_.dense_end - c_.dense_begin; }
  int sparse_dim() const { return c_.sparse_dim; }

  void PullDense(float* out) const;
  // The dense slice itself, for a caller in this process that computes from it between
  // calls (LocalParams): the pointer stays valid for the shard's life (Restore copies into
  // it), and reading through it is safe only while no other thread updates the shard.
  float* dense_data() { return dense_.data(); }
  // Writes n rows of sparse_dim floats; unknown ids get their deterministic initial row,
  // which is not stored (checkpoints hold only rows that were updated).
  void PullSparse(const uint64_t* ids, size_t n, float* out);
  // Applies one optimizer update. `dense_grad` may be null (no dense update). Gradients
  // are multiplied by `scale` first (1 / #workers for synchronous averaging).
  void Apply(const float* dense_grad, const uint64_t* ids, size_t n, const float* row_grads,
             float scale = 1.f);
  // Apply's dense update in slices, for a caller in this process that has each slice's
  // gradient at a different time (LocalParams, layer by layer during the backward pass):
  // BeginDenseUpdate counts one update; ApplyDense then updates dense parameters [begin,
  // end) of the slice from `dense_grad` (the whole slice's gradient), with the arithmetic of
  // Apply. Every parameter must get exactly one ApplyDense per BeginDenseUpdate, and Apply
  // is then called without a dense gradient.
  void BeginDenseUpdate();
  void ApplyDense(const float* dense_grad, size_t begin, size_t end);
  // Applies push `seq` of worker (`rank`, `incarnation`) unless the ledger says it was
  // applied already (see ps/ledger.h): the check records it, so of two copies racing on two
  // connections one applies, and Save waits for the update, so a checkpoint never holds
  // the record without the update.
  PushLedger::Outcome ApplyPush(int32_t rank, uint64_t incarnation, uint64_t seq,
                                const float* dense_grad, const uint64_t* ids, size_t n,
                                const float* row_grads);

  // The push ledger (ps/ledger.h), under its lock.
  void Hello(int32_t rank, uint64_t incarnation);
  void CountPush(int32_t rank, bool applied);  // synchronous training: counting only
  int MarkFinished(int32_t rank);              // returns how many workers have finished
  std::vector<int32_t> Finished() const;
  PushCounts Pushes() const;
  std::map<int32_t, PushCounts> PushesByRank() const;

  size_t num_rows() const;
  // Rows, bytes and what admission and eviction did (EmbeddingStore::counters).
  EmbeddingStats embedding_stats() const;
  // Bytes the embedding rows take in memory (their store's slabs and index).
  size_t embedding_bytes() const;
  int64_t updates() const;
  // Nanoseconds updates and pulls have waited for a lock another thread held (the dense
  // slice's, the ledger's, the embedding stripes'), since construction; for benchmarks.
  uint64_t lock_wait_ns() const;

  // Calls fn(id, values, updates) for every embedding row: its sparse_dim() values and the
  // number of optimizer updates it received (0 only for a row from a checkpoint written
  // before pulls stopped creating rows). Rows are visited in place (no copy), each stripe
  // of the store locked shared while it is: fn must not call back into the shard.
  void ForEachRow(const std::function<void(uint64_t, const float*, int64_t)>& fn) const;

  // Writes the shard and its push ledger to `path` (a local file, atomically, or an S3
  // object); returns the size and SHA-256 of what it wrote, for the checkpoint's MANIFEST.
  // Format 2 (magic KTSHARD2): format 1's header, the ledger, then format 1's sections.
  // The file or S3 object is written as the rows are read (storage::ObjectWriter: a 1 MiB
  // buffer, or a few multipart parts on S3; hashed on the way), never holding a copy of the
  // table, for a full snapshot and a delta alike. Pushes wait while Save runs; pulls do not.
  // Always a full snapshot; evicts nothing and leaves the incremental bookkeeping alone.
  StatusOr<ShardDigest> Save(const std::string& path) const;
  // Saves checkpoint `step` of `root` as shard `k` of `n` (ShardPath): first evicts the rows
  // not updated for evict_after_updates updates, then writes a delta against this shard's
  // previous save under `root` (its rows changed since, whole; the ids evicted since, as
  // deletions; the dense slice and ledger whole) or, every full_every-th time, for a first
  // save, a save of a step not after the previous one, or past kMaxDeletions, a full
  // snapshot. The digest's chain names the files the delta applies on. Format 3.
  // Flow: rows are stamped with the store's epoch when updated; a save writes the rows
  // stamped after its parent's epoch, then starts a new epoch; the parent need not be
  // committed (its file and digest are what the chain names).
  StatusOr<ShardDigest> SaveCheckpoint(const std::string& root, int64_t step, int k, int n);
  static constexpr size_t kMaxDeletions = size_t{1} << 22;
  // Replaces this shard's contents with a file written by Save() for the same slice. With
  // `expect`, the bytes must have that size and SHA-256 first. Errors: NotFound; Internal
  // when the bytes do not match `expect`; InvalidArgument if the file is for a different
  // configuration or malformed (nothing is allocated before its sizes are checked). Reads
  // format 1 (written before the ledger: the ledger is then empty) and format 2.
  Status Load(const std::string& path, const ShardDigest* expect = nullptr);
  // The same from bytes already read (`name` is for messages).
  Status Restore(std::string_view data, const std::string& name);
  // Restores a chain: files[0] a full snapshot, each later one a delta on it (deletions
  // first, then its rows; the dense slice, its state and the ledger from the last file).
  // Nothing changes unless every file parses. Each row is dated (its tick, for eviction)
  // by the update count in the header of the newest file holding it, and the store's tick
  // resumes from the last file's count: rows keep their age. With `root`, the next
  // SaveCheckpoint of `root` may write a delta on checkpoint `step` (whose shard is the last
  // file, `last`).
  Status RestoreChain(const std::vector<std::string_view>& files,
                      const std::vector<std::string>& names);
  void NoteRestored(const std::string& root, int64_t step, const ShardDigest& last);

 private:
  // Row layout in the store: [values (dim) | state (slots x dim) | update count (1)].
  size_t RowStride() const;
  void InitRow(uint64_t id, float* row) const;
  // The dense and row parts of an update; the caller holds push_mu_ and table_mu_ shared.
  void ApplyDenseGrad(const float* dense_grad, float scale);
  void ApplyRows(const uint64_t* ids, size_t n, const float* row_grads, float scale);
  // The file's bytes before the deletions (header, ledger, dense, kind, base step), under
  // the locks Save holds.
  std::string HeadLocked(bool delta, int64_t base_step) const;
  // Writes the file: `deleted` ids then the rows stamped after `since_epoch` (0: all).
  StatusOr<ShardDigest> WriteLocked(const std::string& path, bool delta, int64_t base_step,
                                    uint32_t since_epoch) const;

  // The previous SaveCheckpoint per root, for the next delta. Guarded by push_mu_ (exclusive).
  struct Saved {
    int64_t step = 0;
    uint32_t epoch = 0;  // rows stamped after it changed since
    ShardDigest digest;  // with its chain
  };
  std::map<std::string, Saved> saved_;

  // Constant after construction.
  const ShardConfig c_;
  const int slots_;

  // Shared by every update (Apply*, BeginDenseUpdate); exclusive for Save and Restore.
  mutable std::shared_mutex push_mu_;
  // Shared by every use of rows_; exclusive for Restore, which swaps it.
  mutable std::shared_mutex table_mu_;
  EmbeddingStore rows_;  // guarded by table_mu_ (and its stripes' own locks)

  mutable std::mutex dense_mu_;
  std::vector<float> dense_;        // guarded by dense_mu_
  std::vector<float> dense_state_;  // guarded by dense_mu_
  int64_t dense_updates_ = 0;       // guarded by dense_mu_
  std::vector<float> scratch_;      // guarded by dense_mu_; a scaled dense gradient

  mutable std::mutex ledger_mu_;
  PushLedger ledger_;  // guarded by ledger_mu_

  // Waits for dense_mu_ and ledger_mu_ (the store counts its own).
  mutable std::atomic<uint64_t> lock_wait_ns_{0};
};

// Writes `data` to `path` atomically: a reader sees the old file or the whole new one,
// also after a crash (temp file in the same directory, fsync, rename, fsync directory).
Status WriteFileAtomic(const std::string& path, const std::string& data);

}  // namespace kubetrain::trainer
