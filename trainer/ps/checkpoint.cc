#include "trainer/ps/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trainer/ps/shard.h"

namespace kubetrain::trainer {

namespace fs = std::filesystem;

std::string CheckpointDir(const std::string& root, int64_t step) {
  return (fs::path(root) / ("ckpt-" + std::to_string(step))).string();
}

std::string ShardPath(const std::string& root, int64_t step, int shard, int num_shards) {
  return (fs::path(CheckpointDir(root, step)) /
          ("shard-" + std::to_string(shard) + "-of-" + std::to_string(num_shards) + ".bin"))
      .string();
}

Status PrepareCheckpointDir(const std::string& root, int64_t step) {
  std::error_code ec;
  fs::create_directories(CheckpointDir(root, step), ec);
  if (ec) return Internal("cannot create " + CheckpointDir(root, step) + ": " + ec.message());
  return Status::Ok();
}

Status WriteManifest(const std::string& root, int64_t step, int num_shards) {
  for (int k = 0; k < num_shards; ++k) {
    if (!fs::exists(ShardPath(root, step, k, num_shards))) {
      return FailedPrecondition("checkpoint " + std::to_string(step) + " lacks shard " +
                                std::to_string(k));
    }
  }
  const nlohmann::json m = {{"step", step}, {"num_shards", num_shards}};
  return WriteFileAtomic((fs::path(CheckpointDir(root, step)) / "MANIFEST").string(), m.dump());
}

StatusOr<std::optional<int64_t>> LatestCheckpoint(const std::string& root, int num_shards) {
  std::optional<int64_t> best;
  std::error_code ec;
  if (!fs::exists(root, ec)) return best;
  fs::directory_iterator it(root, ec);
  if (ec) return Internal("cannot list checkpoint directory " + root + ": " + ec.message());
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0) continue;
    std::ifstream in(entry.path() / "MANIFEST");
    if (!in) continue;  // incomplete: never loaded
    try {
      const nlohmann::json m = nlohmann::json::parse(in);
      const int64_t step = m.at("step").get<int64_t>();
      const int n = m.at("num_shards").get<int>();
      if (n != num_shards) {
        return InvalidArgument("checkpoint " + entry.path().string() + " has " + std::to_string(n) +
                               " shards but the job has " + std::to_string(num_shards) +
                               " parameter servers");
      }
      if (!best || step > *best) best = step;
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgument("corrupt manifest in " + entry.path().string() + ": " + e.what());
    }
  }
  return best;
}

}  // namespace kubetrain::trainer
