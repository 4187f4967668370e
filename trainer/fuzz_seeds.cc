// Writes the binary seed corpora of the trainer's fuzz targets (PS protocol
// frames, shard files, the checkpoint MANIFEST, export checkpoints) into the
// source tree: `fuzz_seeds <source dir>`. Built with KUBETRAIN_FUZZ only; run
// it again when a format changes (the text corpora are written by hand).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/storage/files.h"
#include "trainer/export/export.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/ps/shard.h"
#include "trainer/rpc/protocol.h"

namespace {

using namespace kubetrain;
using namespace kubetrain::trainer;
namespace fs = std::filesystem;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

std::string Read(const std::string& path) {
  StatusOr<std::string> s = storage::ReadObject(path);
  if (!s.ok()) std::abort();
  return *s;
}

// A shard for `config` with two updated embedding rows and one dense update.
std::string ShardBytes(const ShardConfig& config, const fs::path& tmp) {
  const size_t n = config.dense_end - config.dense_begin;
  std::vector<float> init(n, 0.25f), dense_grad(n, 0.5f);
  ParamShard shard(config, init.data());
  std::vector<uint64_t> ids = {3, 42};
  if (config.sparse_dim == 0) ids.clear();  // an MLP's PS has no embedding rows
  std::vector<float> grads(ids.size() * static_cast<size_t>(config.sparse_dim), 0.125f);
  shard.Hello(0, 77);
  (void)shard.ApplyPush(0, 77, 1, dense_grad.data(), ids.data(), ids.size(), grads.data());
  (void)shard.MarkFinished(0);
  const std::string path = (tmp / "shard.bin").string();
  if (!shard.Save(path).ok()) std::abort();
  return Read(path);
}

// The protocol target's first byte: row dim b & 7, dense size (b >> 3) & 7,
// bf16 when b & 0x40.
std::string Shape(int row_dim, int dense, WireFloat wire) {
  return std::string(
      1, static_cast<char>(row_dim | (dense << 3) | (wire == WireFloat::kBf16 ? 0x40 : 0)));
}

void ProtocolSeeds(const fs::path& dir) {
  for (WireFloat wire : {WireFloat::kF32, WireFloat::kBf16}) {
    const std::string shape = Shape(2, 3, wire), tag = WireFloatName(wire);
    HelloRequest hello;
    hello.rank = 1;
    hello.total_dense = 3;
    hello.row_dim = 2;
    hello.incarnation = 99;
    hello.wire = wire;
    Write(dir, "hello-" + tag, shape + EncodeHello(hello));
    std::string pull;
    EncodePull({1, 2, 3}, true, &pull);
    Write(dir, "pull-" + tag, shape + pull);
    const std::vector<float> rows = {0.5f, -1.f, 2.f, 0.25f}, dense = {1.f, 2.f, 3.f};
    std::string push;
    EncodePush(5, 1, {7, 8}, {0, 1}, rows.data(), 2, wire, &push);
    PutWireFloats(dense.data(), dense.size(), wire, &push);
    Write(dir, "push-" + tag, shape + push);
  }
  const std::string shape = Shape(2, 3, WireFloat::kF32);
  Write(dir, "hello-reply", shape + EncodeHelloReply(12));
  Write(dir, "checkpoint", shape + EncodeCheckpoint(40, "s3://bucket/run/"));
  Write(dir, "checkpoint-reply", shape + EncodeCheckpointReply(DigestOf("shard bytes")));
  Write(dir, "done", shape + EncodeDone(2));
  Write(dir, "done-reply", shape + EncodeDoneReply({0, 1, 3}));
  Write(dir, "wire-float", shape + "bf16");
}

ModelSpec WideSpec() {
  ModelSpec s;
  s.kind = "wide_deep";
  s.hidden = {4};
  s.embedding_dim = 2;
  return s;
}

ModelSpec MlpSpec() {
  ModelSpec s;
  s.kind = "mlp";
  s.hidden = {3};
  s.num_features = 4;
  s.num_classes = 2;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds <source dir>\n");
    return 2;
  }
  const fs::path src = argv[1];
  const fs::path tmp = fs::temp_directory_path() / "kubetrain-fuzz-seeds";
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  ProtocolSeeds(src / "trainer/rpc/testdata/fuzz/ps_protocol_fuzz");

  const fs::path shards = src / "trainer/ps/testdata/fuzz/ps_shard_fuzz";
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    ShardConfig c;
    c.dense_begin = 4;
    c.dense_end = 7;
    c.sparse_dim = 2;
    c.optimizer.kind = kind;
    Write(shards, "shard-slots-" + std::to_string(StateSlots(kind)), ShardBytes(c, tmp));
  }

  // The checkpoint target's step 1 (its Config() and update), so a MANIFEST
  // naming that shard's digest is a valid seed.
  {
    ShardConfig c;
    c.dense_end = 4;
    c.sparse_dim = 2;
    const std::vector<float> init(4, 0.25f), grad(2, 0.5f);
    ParamShard shard(c, init.data());
    const uint64_t id = 42;
    shard.Apply(nullptr, &id, 1, grad.data());
    const std::string root = (tmp / "ckpt").string();
    if (!PrepareCheckpointDir(root, 2).ok()) std::abort();
    StatusOr<ShardDigest> digest = shard.Save(ShardPath(root, 2, 0, 1));
    if (!digest.ok() || !WriteManifest(root, 2, {*digest}).ok()) std::abort();
    if (!WriteFinalMarker(root, 2).ok()) std::abort();
    const fs::path dir = src / "trainer/ps/testdata/fuzz/ps_checkpoint_fuzz";
    Write(dir, "manifest", Read(storage::JoinPath(CheckpointDir(root, 2), "MANIFEST")));
    Write(dir, "manifest-before-checksums", R"({"step":2,"num_shards":1})");
    Write(dir, "final", Read(storage::JoinPath(root, "FINAL")));
  }

  const fs::path exports = src / "trainer/export/testdata/fuzz/export_fuzz";
  for (const ModelSpec& spec : {WideSpec(), MlpSpec()}) {
    ShardConfig c;
    c.dense_end = spec.NumDenseParams();
    c.sparse_dim = spec.SparseRowDim();
    const std::string bytes = ShardBytes(c, tmp);
    Write(exports, spec.kind, bytes);
    Write(exports, spec.kind + "-with-manifest",
          std::string(R"({"step":3,"num_shards":1})") + '\0' + bytes);
  }
  fs::remove_all(tmp);
  return 0;
}
