// libFuzzer target: a checkpoint MANIFEST and the FINAL marker (files in a
// checkpoint root that every pod of the job can write), as a restarting PS or
// worker reads them: FindCheckpoint over a root holding one good checkpoint
// (step 1) and the fuzzed MANIFEST of step 2 beside a copy of step 1's shard,
// then LoadShard of what it chose, and ReadFinalMarker.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/storage/files.h"
#include "common/storage/fuzz_temp_dir.h"
#include "spdlog/spdlog.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/ps/shard.h"

namespace {

using namespace kubetrain;
using namespace kubetrain::trainer;

ShardConfig Config() {
  ShardConfig c;
  c.dense_end = 4;
  c.sparse_dim = 2;
  return c;
}

// A fresh root with checkpoint 1 committed; its path.
const std::string& Root() {
  static const std::string root = [] {
    const std::string dir = storage::FuzzTempDir();
    const std::vector<float> init(4, 0.25f);
    ParamShard shard(Config(), init.data());
    const std::vector<float> grad(2, 0.5f);
    const uint64_t id = 42;
    shard.Apply(nullptr, &id, 1, grad.data());
    if (!PrepareCheckpointDir(dir, 1).ok()) std::abort();
    StatusOr<ShardDigest> digest = shard.Save(ShardPath(dir, 1, 0, 1));
    if (!digest.ok() || !WriteManifest(dir, 1, {*digest}).ok()) std::abort();
    if (!PrepareCheckpointDir(dir, 2).ok()) std::abort();
    std::filesystem::copy_file(ShardPath(dir, 1, 0, 1), ShardPath(dir, 2, 0, 1));
    return dir;
  }();
  return root;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // a warning per corrupt MANIFEST
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& root = Root();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!storage::WriteObject(storage::JoinPath(CheckpointDir(root, 2), "MANIFEST"), text).ok() ||
      !storage::WriteObject(storage::JoinPath(root, "FINAL"), text).ok()) {
    std::abort();
  }
  (void)ListCheckpoints(root, 1);
  StatusOr<std::optional<Checkpoint>> found = FindCheckpoint(root, 1);
  if (found.ok() && found->has_value()) {
    const std::vector<float> init(4, 0.f);
    ParamShard shard(Config(), init.data());
    (void)LoadShard(shard, root, **found, 0, 1);
  }
  (void)ReadFinalMarker(root);
  return 0;
}
