#include "trainer/ps/checkpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "trainer/storage/files.h"

namespace kubetrain::trainer {

namespace fs = std::filesystem;

std::string CheckpointDir(const std::string& root, int64_t step) {
  return storage::JoinPath(root, "ckpt-" + std::to_string(step));
}

std::string ShardPath(const std::string& root, int64_t step, int shard, int num_shards) {
  return storage::JoinPath(CheckpointDir(root, step), "shard-" + std::to_string(shard) + "-of-" +
                                                          std::to_string(num_shards) + ".bin");
}

Status PrepareCheckpointDir(const std::string& root, int64_t step) {
  if (storage::IsS3Path(root)) return Status::Ok();  // S3 has no directories
  std::error_code ec;
  fs::create_directories(CheckpointDir(root, step), ec);
  if (ec) return Internal("cannot create " + CheckpointDir(root, step) + ": " + ec.message());
  return Status::Ok();
}

Status WriteManifest(const std::string& root, int64_t step, int num_shards) {
  for (int k = 0; k < num_shards; ++k) {
    auto exists = storage::ObjectExists(ShardPath(root, step, k, num_shards));
    if (!exists.ok()) return exists.status();
    if (!*exists) {
      return FailedPrecondition("checkpoint " + std::to_string(step) + " lacks shard " +
                                std::to_string(k));
    }
  }
  const nlohmann::json m = {{"step", step}, {"num_shards", num_shards}};
  // Created once, never replaced: a MANIFEST that exists describes a complete checkpoint
  // (S3: If-None-Match: *). One already there for this step is the same commit done twice.
  Status s = storage::WriteObject(storage::JoinPath(CheckpointDir(root, step), "MANIFEST"),
                                  m.dump(), storage::WriteMode::kCreateOnly, "application/json");
  if (s.code() == StatusCode::kAlreadyExists) return Status::Ok();
  return s;
}

StatusOr<std::optional<int64_t>> LatestCheckpoint(const std::string& root, int num_shards) {
  std::optional<int64_t> best;
  auto names = storage::ListObjects(root);
  if (!names.ok()) return names.status().WithContext("cannot list checkpoints in " + root);
  for (const std::string& name : *names) {
    // ckpt-<step>/MANIFEST only: a checkpoint without one is incomplete and never loaded.
    if (name.rfind("ckpt-", 0) != 0) continue;
    const size_t slash = name.find('/');
    if (slash == std::string::npos || name.substr(slash + 1) != "MANIFEST") continue;
    const std::string path = storage::JoinPath(root, name);
    auto text = storage::ReadObject(path);
    if (!text.ok()) return text.status();
    try {
      const nlohmann::json m = nlohmann::json::parse(*text);
      const int64_t step = m.at("step").get<int64_t>();
      const int n = m.at("num_shards").get<int>();
      if (n != num_shards) {
        return InvalidArgument("checkpoint " + CheckpointDir(root, step) + " has " +
                               std::to_string(n) + " shards but the job has " +
                               std::to_string(num_shards) + " parameter servers");
      }
      if (!best || step > *best) best = step;
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgument("corrupt manifest " + path + ": " + e.what());
    }
  }
  return best;
}

}  // namespace kubetrain::trainer
