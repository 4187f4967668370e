// Checkpoint layout and commit protocol. This module is the one owner of the layout: every
// reader (the trainer's roles, the evaluator, export, kubetrain-serve) finds "the newest
// committed checkpoint under a root" and "the files of checkpoint N" through it.
//
// Layout: <dir>/ckpt-<step>/shard-<k>-of-<n>.bin for every PS k, then
//         <dir>/ckpt-<step>/MANIFEST (JSON: step, num_shards, and per shard its file, size
//         in bytes and SHA-256 as the PS computed them on the bytes it wrote; for a delta,
//         "chain": the files it applies on, [{step, bytes, sha256}], full snapshot first).
// Incremental checkpoints (--checkpoint-full-every K > 1): a PS writes a full snapshot every
//   K-th checkpoint and in between a delta against its previous file (rows changed since,
//   ids evicted since as deletions, dense slice and ledger whole; ParamShard::SaveCheckpoint).
//   A checkpoint is complete when its MANIFEST exists and every file of every shard's chain
//   matches the size and SHA-256 the MANIFEST records for it: a corrupt or missing link
//   makes every checkpoint built on it corrupt, so FindCheckpoint falls back to the newest
//   one whose chain is whole (the full snapshot and its deltas before the corrupt one).
//   A chain's earlier files may belong to checkpoints never committed (a save whose MANIFEST
//   was not written): they are named and checked by the MANIFEST that uses them.
// Flow: the coordinator asks every PS to save its shard for `step` (each writes its file
//   atomically and acknowledges with the file's size and SHA-256); only after all have
//   acknowledged does it write MANIFEST, itself atomically.
// Guarantees: a checkpoint directory with a MANIFEST has every shard complete; a crash at
//   any point leaves at most an incomplete directory, which is never loaded. A shard that
//   was later truncated, altered or lost no longer matches its MANIFEST: that checkpoint is
//   skipped (with a warning naming it) and the previous complete one is used, by every
//   process alike, since each checks every shard the same way. Transient read errors are
//   returned, never taken for corruption: only a MANIFEST that does not parse, a shard that
//   is missing or disagrees with the MANIFEST, or (S3) an object whose bytes disagree with
//   the checksum recorded at its upload (DataLoss, after the client read it twice) is
//   corrupt. A 5xx, timeout or refused connection that outlasts the S3 client's retries
//   fails the process (exit 200, retryable) instead of losing progress to an older
//   checkpoint.
// Assumptions: every PS and the coordinator see the same root: a shared volume, or an S3
//   prefix (root "s3://bucket/prefix/": each PS uploads its shard object, the MANIFEST is
//   written with If-None-Match: * so it is created once and never replaced; S3 is strongly
//   consistent, so a listed MANIFEST's shards are readable). See common/storage/files.h.
//   A MANIFEST written before checksums (no "shards") is trusted as it is.
// The end of a run: once the coordinator has committed the run's last checkpoint it writes
//   <dir>/FINAL ({"step": N}), so an evaluator knows checkpoint N is the final one. A later
//   run in the same directory (more --steps) replaces FINAL when it ends; until then FINAL
//   names an older step, which a reader compares with the steps it expects.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/ps/shard.h"

namespace kubetrain::trainer {

std::string CheckpointDir(const std::string& root, int64_t step);
std::string ShardPath(const std::string& root, int64_t step, int shard, int num_shards);
// <root>/ckpt-<step>/MANIFEST: present once checkpoint `step` is committed.
std::string ManifestPath(const std::string& root, int64_t step);
// Creates ckpt-<step>/ (idempotent).
Status PrepareCheckpointDir(const std::string& root, int64_t step);
// Commits checkpoint `step` with one digest per shard (shards.size() shards): call only
// once every shard file is written.
Status WriteManifest(const std::string& root, int64_t step, const std::vector<ShardDigest>& shards);

// A complete checkpoint whose every shard matched its MANIFEST when it was found.
struct Checkpoint {
  int64_t step = 0;
  std::vector<ShardDigest> shards;  // empty for a MANIFEST from before checksums
  int num_shards = 0;               // as its MANIFEST records
};

// As the `num_shards` of ListCheckpoints and FindCheckpoint: take each checkpoint with the
// number of shards its MANIFEST records. For a reader of a finished model (export,
// serving) that does not know how many parameter servers wrote it.
inline constexpr int kAnyShardCount = 0;

// Every committed checkpoint (a MANIFEST that parses) in step order, shards not checked,
// and the MANIFESTs that do not parse or are corrupt objects ("<path>: why"). Errors:
// InvalidArgument for a checkpoint written with a different number of shards; I/O errors as they
// come.
struct CheckpointList {
  std::vector<Checkpoint> committed;
  std::vector<std::string> corrupt;
};
StatusOr<CheckpointList> ListCheckpoints(const std::string& root, int num_shards);

// The newest complete checkpoint for `num_shards` shards whose shards all match their
// MANIFEST, or nullopt when there is no checkpoint. Corrupt ones (a MANIFEST that does not
// parse, a shard missing, of the wrong size or checksum) are skipped with a warning. Errors:
// InvalidArgument for a checkpoint written with a different number of shards, or when
// checkpoints exist but every one is corrupt (starting over would silently lose the
// training); I/O errors as they come.
StatusOr<std::optional<Checkpoint>> FindCheckpoint(const std::string& root, int num_shards);
// FindCheckpoint's step.
StatusOr<std::optional<int64_t>> LatestCheckpoint(const std::string& root, int num_shards);

// The step of the newest committed checkpoint (a ckpt-<step>/MANIFEST) under `root`, from
// one listing and no reads: a cheap "is there something newer" for a poller, which then
// reads it through FindCheckpoint (which skips a corrupt one). NotFound when there is none.
StatusOr<int64_t> NewestCommittedStep(const std::string& root);

// Loads shard `k` of `checkpoint` into `shard`, checking it against the MANIFEST again (it
// is read again).
Status LoadShard(ParamShard& shard, const std::string& root, const Checkpoint& checkpoint, int k,
                 int num_shards);

// Garbage collection of incremental checkpoints (--checkpoint-keep-chains): once the
// `keep_chains`-th newest full checkpoint (every shard a full snapshot) is committed, every
// file of a checkpoint before it is deleted (each MANIFEST first, so a crash half-way leaves
// incomplete checkpoints, never loaded, which the next call deletes), except the files a kept
// checkpoint's chain names. Kept: the newest `keep_chains` chains whole, so the fallback past
// a corrupt link (FindCheckpoint) has a complete older chain to go to (keep_chains >= 2);
// the exactly-once ledger is in every shard file, so it needs nothing older. Returns the
// number of files deleted. Errors: InvalidArgument for keep_chains < 1; I/O errors as they
// come (what was deleted before one stays deleted; the rest waits for the next call).
StatusOr<int> PruneCheckpointChains(const std::string& root, int keep_chains);

// Marks checkpoint `step` (committed) as the run's last one: <root>/FINAL.
Status WriteFinalMarker(const std::string& root, int64_t step);
// The step <root>/FINAL names, or nullopt when there is none. Errors: InvalidArgument for a
// FINAL that is not {"step": <n>}; I/O errors as they come.
StatusOr<std::optional<int64_t>> ReadFinalMarker(const std::string& root);

}  // namespace kubetrain::trainer
