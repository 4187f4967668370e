// libFuzzer target: what `kubetrain-trainer --export` reads from files, a
// checkpoint root's MANIFEST and shard, into ReadTrainedModel, and what it
// writes from them: the ONNX bytes (ToOnnx) and model.json (DescribeInputs).
//
// Input: "<MANIFEST>\0<shard>" when it starts with '{', else the shard alone
// under the MANIFEST {"step":3,"num_shards":1} (no checksums: trusted as is,
// so the shard's bytes reach the reader). The shard is read for two small
// models, a Wide & Deep and an MLP; seeds hold one valid shard of each.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/storage/files.h"
#include "common/storage/fuzz_temp_dir.h"
#include "spdlog/spdlog.h"
#include "trainer/export/export.h"
#include "trainer/ps/checkpoint.h"

namespace {

using namespace kubetrain;
using namespace kubetrain::trainer;

const std::string& Root() {
  static const std::string root = [] {
    const std::string dir = storage::FuzzTempDir();
    if (!PrepareCheckpointDir(dir, 3).ok()) std::abort();
    return dir;
  }();
  return root;
}

void Export(const ModelSpec& spec, const std::string& root) {
  StatusOr<TrainedModel> m = ReadTrainedModel(spec, OptimizerConfig{}, root);
  if (!m.ok()) return;
  (void)ToOnnx(*m, /*limit=*/1 << 20);
  (void)DescribeInputs(*m).dump();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& root = Root();
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view manifest = R"({"step":3,"num_shards":1})";
  std::string_view shard = input;
  if (!input.empty() && input[0] == '{') {
    const size_t nul = input.find('\0');
    manifest = input.substr(0, nul);
    shard = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  }
  if (!storage::WriteObject(ShardPath(root, 3, 0, 1), shard).ok() ||
      !storage::WriteObject(storage::JoinPath(CheckpointDir(root, 3), "MANIFEST"), manifest).ok()) {
    std::abort();
  }
  ModelSpec wide;
  wide.kind = "wide_deep";
  wide.hidden = {4};
  wide.embedding_dim = 2;
  Export(wide, root);
  ModelSpec mlp;
  mlp.kind = "mlp";
  mlp.hidden = {3};
  mlp.num_features = 4;
  mlp.num_classes = 2;
  Export(mlp, root);
  return 0;
}
