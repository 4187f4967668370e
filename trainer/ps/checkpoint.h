// Checkpoint layout and commit protocol.
//
// Layout: <dir>/ckpt-<step>/shard-<k>-of-<n>.bin for every PS k, then
//         <dir>/ckpt-<step>/MANIFEST (JSON: step, num_shards).
// Flow: the coordinator asks every PS to save its shard for `step` (each writes its file
//   atomically and acknowledges); only after all have acknowledged does it write MANIFEST,
//   itself atomically.
// Guarantees: a checkpoint directory with a MANIFEST has every shard complete; a crash at
//   any point leaves at most an incomplete directory, which is never loaded.
// Assumptions: every PS and the coordinator see the same root: a shared volume, or an S3
//   prefix (root "s3://bucket/prefix/": each PS uploads its shard object, the MANIFEST is
//   written with If-None-Match: * so it is created once and never replaced; S3 is strongly
//   consistent, so a listed MANIFEST's shards are readable). See trainer/storage/files.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "operator/common/status.h"

namespace kubetrain::trainer {

std::string CheckpointDir(const std::string& root, int64_t step);
std::string ShardPath(const std::string& root, int64_t step, int shard, int num_shards);
// Creates ckpt-<step>/ (idempotent).
Status PrepareCheckpointDir(const std::string& root, int64_t step);
// Commits checkpoint `step`: call only once every shard file is written.
Status WriteManifest(const std::string& root, int64_t step, int num_shards);

// The highest step with a MANIFEST for `num_shards` shards, or nullopt when there is none.
// A checkpoint written with a different number of shards is an error (InvalidArgument),
// not silently ignored.
StatusOr<std::optional<int64_t>> LatestCheckpoint(const std::string& root, int num_shards);

}  // namespace kubetrain::trainer
