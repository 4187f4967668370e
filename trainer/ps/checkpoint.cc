#include "trainer/ps/checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "common/storage/files.h"

namespace kubetrain::trainer {

namespace fs = std::filesystem;

std::string CheckpointDir(const std::string& root, int64_t step) {
  return storage::JoinPath(root, "ckpt-" + std::to_string(step));
}

namespace {

std::string ShardFile(int shard, int num_shards) {
  return "shard-" + std::to_string(shard) + "-of-" + std::to_string(num_shards) + ".bin";
}

// The step of a listed name "ckpt-<step>/MANIFEST" (storage::ListObjects), or nullopt for
// any other name.
std::optional<int64_t> ManifestStep(const std::string& name) {
  constexpr std::string_view kPrefix = "ckpt-", kSuffix = "/MANIFEST";
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  const char* begin = name.data() + kPrefix.size();
  const char* end = name.data() + name.size() - kSuffix.size();
  int64_t step = -1;
  const auto [at, ec] = std::from_chars(begin, end, step);
  if (ec != std::errc() || at != end || step < 0) return std::nullopt;
  return step;
}

}  // namespace

std::string ShardPath(const std::string& root, int64_t step, int shard, int num_shards) {
  return storage::JoinPath(CheckpointDir(root, step), ShardFile(shard, num_shards));
}

std::string ManifestPath(const std::string& root, int64_t step) {
  return storage::JoinPath(CheckpointDir(root, step), "MANIFEST");
}

Status PrepareCheckpointDir(const std::string& root, int64_t step) {
  if (storage::IsS3Path(root)) return Status::Ok();  // S3 has no directories
  std::error_code ec;
  fs::create_directories(CheckpointDir(root, step), ec);
  if (ec) return Internal("cannot create " + CheckpointDir(root, step) + ": " + ec.message());
  return Status::Ok();
}

namespace {

// Why checkpoint `c` cannot be used, or "" if every shard matches its MANIFEST. Corrupt: a
// shard missing, or whose bytes disagree with the MANIFEST or (S3, DataLoss) with the
// checksum recorded at upload. Every other error (transient ones included, after the S3
// client's retries) is returned: it says nothing about the checkpoint.
StatusOr<std::string> CorruptionOf(const std::string& root, const Checkpoint& c, int num_shards) {
  for (int k = 0; k < num_shards && !c.shards.empty(); ++k) {
    // The shard's own file, then every file of its chain (a delta applies on them all).
    std::vector<ChainLink> links = c.shards[k].chain;
    links.push_back({c.step, c.shards[k].bytes, c.shards[k].sha256});
    for (const ChainLink& link : links) {
      const std::string path = ShardPath(root, link.step, k, num_shards);
      auto data = storage::ReadObject(path);
      if (data.status().code() == StatusCode::kNotFound) return "shard " + path + " is missing";
      if (data.status().code() == StatusCode::kDataLoss) return data.status().message();
      if (!data.ok()) return data.status().WithContext("checkpoint shard");
      Status s = CheckDigest(*data, {link.bytes, link.sha256, {}}, "shard " + path);
      if (!s.ok()) return s.message();
    }
  }
  return std::string();
}

}  // namespace

Status WriteManifest(const std::string& root, int64_t step,
                     const std::vector<ShardDigest>& shards) {
  const int num_shards = static_cast<int>(shards.size());
  nlohmann::json files = nlohmann::json::array();
  for (int k = 0; k < num_shards; ++k) {
    auto exists = storage::ObjectExists(ShardPath(root, step, k, num_shards));
    if (!exists.ok()) return exists.status();
    if (!*exists) {
      return FailedPrecondition("checkpoint " + std::to_string(step) + " lacks shard " +
                                std::to_string(k));
    }
    nlohmann::json file = {{"file", ShardFile(k, num_shards)},
                           {"bytes", shards[k].bytes},
                           {"sha256", shards[k].sha256}};
    if (!shards[k].chain.empty()) {
      // A delta: the files it applies on, full snapshot first (checkpoint.h).
      nlohmann::json chain = nlohmann::json::array();
      for (const ChainLink& l : shards[k].chain) {
        chain.push_back({{"step", l.step}, {"bytes", l.bytes}, {"sha256", l.sha256}});
      }
      file["chain"] = std::move(chain);
    }
    files.push_back(std::move(file));
  }
  const nlohmann::json m = {{"step", step}, {"num_shards", num_shards}, {"shards", files}};
  // Created once, never replaced: a MANIFEST that exists describes a complete checkpoint
  // (S3: If-None-Match: *). One already there for this step is the same commit done twice.
  Status s = storage::WriteObject(ManifestPath(root, step), m.dump(),
                                  storage::WriteMode::kCreateOnly, "application/json");
  if (s.code() == StatusCode::kAlreadyExists) return Status::Ok();
  return s;
}

StatusOr<CheckpointList> ListCheckpoints(const std::string& root, int num_shards) {
  auto names = storage::ListObjects(root);
  if (!names.ok()) return names.status().WithContext("cannot list checkpoints in " + root);
  CheckpointList list;
  for (const std::string& name : *names) {
    // ckpt-<step>/MANIFEST only: a checkpoint without one is incomplete and never loaded.
    if (!ManifestStep(name).has_value()) continue;
    const std::string path = storage::JoinPath(root, name);
    auto text = storage::ReadObject(path);
    if (text.status().code() == StatusCode::kDataLoss) {
      spdlog::warn("checkpoint manifest {} is corrupt ({}); skipping it", path,
                   text.status().message());
      list.corrupt.push_back(path + ": " + text.status().message());
      continue;
    }
    if (!text.ok()) return text.status();
    Checkpoint c;
    int n = 0;
    try {
      const nlohmann::json m = nlohmann::json::parse(*text);
      c.step = m.at("step").get<int64_t>();
      n = m.at("num_shards").get<int>();
      if (n <= 0) throw std::invalid_argument("num_shards must be positive");
      c.num_shards = n;
      if (m.contains("shards")) {
        for (const auto& f : m.at("shards")) {
          ShardDigest d{f.at("bytes").get<uint64_t>(), f.at("sha256").get<std::string>(), {}};
          if (f.contains("chain")) {
            for (const auto& l : f.at("chain")) {
              d.chain.push_back({l.at("step").get<int64_t>(), l.at("bytes").get<uint64_t>(),
                                 l.at("sha256").get<std::string>()});
              // Each link is an earlier checkpoint, in order: a chain cannot loop.
              const int64_t before = d.chain.size() > 1 ? d.chain[d.chain.size() - 2].step : -1;
              if (d.chain.back().step <= before || d.chain.back().step >= c.step) {
                throw std::invalid_argument("chain steps are not increasing before " +
                                            std::to_string(c.step));
              }
            }
          }
          c.shards.push_back(std::move(d));
        }
        if (static_cast<int>(c.shards.size()) != n) {
          throw std::invalid_argument("lists " + std::to_string(c.shards.size()) +
                                      " shards for num_shards " + std::to_string(n));
        }
      }
    } catch (const std::exception& e) {  // nlohmann::json::exception or the above
      spdlog::warn("checkpoint manifest {} is corrupt ({}); skipping it", path, e.what());
      list.corrupt.push_back(path + ": " + e.what());
      continue;
    }
    if (num_shards != kAnyShardCount && n != num_shards) {
      return InvalidArgument("checkpoint " + CheckpointDir(root, c.step) + " has " +
                             std::to_string(n) + " shards but the job has " +
                             std::to_string(num_shards) + " parameter servers");
    }
    list.committed.push_back(std::move(c));
  }
  std::sort(list.committed.begin(), list.committed.end(),
            [](const Checkpoint& a, const Checkpoint& b) { return a.step < b.step; });
  return list;
}

StatusOr<std::optional<Checkpoint>> FindCheckpoint(const std::string& root, int num_shards) {
  KT_ASSIGN_OR_RETURN(CheckpointList list, ListCheckpoints(root, num_shards));
  // Every committed checkpoint, newest first; a MANIFEST that does not parse is corrupt.
  std::vector<Checkpoint> found(std::make_move_iterator(list.committed.rbegin()),
                                std::make_move_iterator(list.committed.rend()));
  std::vector<std::string> corrupt = std::move(list.corrupt);
  for (size_t i = 0; i < found.size(); ++i) {
    auto why = CorruptionOf(root, found[i], found[i].num_shards);
    if (!why.ok()) return why.status();
    if (why->empty()) {
      if (!corrupt.empty()) {
        spdlog::warn("using checkpoint {}, the newest complete one that is not corrupt",
                     CheckpointDir(root, found[i].step));
      }
      return std::optional<Checkpoint>(std::move(found[i]));
    }
    spdlog::warn("checkpoint {} is corrupt ({}); falling back to the previous complete checkpoint",
                 CheckpointDir(root, found[i].step), *why);
    corrupt.push_back(CheckpointDir(root, found[i].step) + ": " + *why);
  }
  if (!corrupt.empty()) {
    std::string all;
    for (const auto& c : corrupt) all += (all.empty() ? "" : "; ") + c;
    return InvalidArgument("every checkpoint in " + root + " is corrupt (" + all +
                           "); move them away to start training over");
  }
  return std::optional<Checkpoint>();
}

StatusOr<int64_t> NewestCommittedStep(const std::string& root) {
  KT_ASSIGN_OR_RETURN(auto names, storage::ListObjects(root));
  std::optional<int64_t> newest;
  for (const std::string& name : names) {
    const std::optional<int64_t> step = ManifestStep(name);
    if (step.has_value() && (!newest || *step > *newest)) newest = step;
  }
  if (!newest) return NotFound("no committed checkpoint in " + root);
  return *newest;
}

StatusOr<std::optional<int64_t>> LatestCheckpoint(const std::string& root, int num_shards) {
  auto c = FindCheckpoint(root, num_shards);
  if (!c.ok()) return c.status();
  if (!c->has_value()) return std::optional<int64_t>();
  return std::optional<int64_t>((*c)->step);
}

Status LoadShard(ParamShard& shard, const std::string& root, const Checkpoint& checkpoint, int k,
                 int num_shards) {
  const std::string path = ShardPath(root, checkpoint.step, k, num_shards);
  if (checkpoint.shards.empty()) return shard.Load(path);  // a MANIFEST from before checksums
  const ShardDigest& digest = checkpoint.shards.at(k);
  // The chain's files, each checked against the MANIFEST again (they are read again).
  std::vector<ChainLink> links = digest.chain;
  links.push_back({checkpoint.step, digest.bytes, digest.sha256});
  std::vector<std::string> data, names;
  for (const ChainLink& link : links) {
    names.push_back(ShardPath(root, link.step, k, num_shards));
    auto read = storage::ReadObject(names.back());
    if (!read.ok()) return read.status().WithContext("checkpoint shard");
    KT_RETURN_IF_ERROR(
        CheckDigest(*read, {link.bytes, link.sha256, {}}, "checkpoint shard " + names.back()));
    data.push_back(std::move(*read));
  }
  if (links.size() > 1) {
    spdlog::info("shard {}: restoring checkpoint {} from a chain of {} files (full at step {})", k,
                 checkpoint.step, links.size(), links.front().step);
  }
  KT_RETURN_IF_ERROR(shard.RestoreChain({data.begin(), data.end()}, names));
  shard.NoteRestored(root, checkpoint.step, digest);
  return Status::Ok();
}

StatusOr<int> PruneCheckpointChains(const std::string& root, int keep_chains) {
  if (keep_chains < 1) return InvalidArgument("keep at least one checkpoint chain");
  KT_ASSIGN_OR_RETURN(CheckpointList list, ListCheckpoints(root, kAnyShardCount));
  // The step of the keep_chains-th newest full checkpoint: nothing before it is needed
  // unless a kept checkpoint's chain names it.
  std::optional<int64_t> cut;
  int fulls = 0;
  for (auto c = list.committed.rbegin(); c != list.committed.rend() && !cut; ++c) {
    const bool full = std::all_of(c->shards.begin(), c->shards.end(),
                                  [](const ShardDigest& d) { return d.chain.empty(); });
    if (full && ++fulls == keep_chains) cut = c->step;
  }
  if (!cut) return 0;
  std::set<int64_t> needed;
  for (const Checkpoint& c : list.committed) {
    if (c.step < *cut) continue;
    for (const ShardDigest& d : c.shards) {
      for (const ChainLink& l : d.chain) needed.insert(l.step);
    }
  }
  KT_ASSIGN_OR_RETURN(const std::vector<std::string> names, storage::ListObjects(root));
  std::vector<std::string> manifests, others;
  for (const std::string& name : names) {
    // "ckpt-<step>/<file>": a committed checkpoint's, a corrupt one's or an unfinished save's.
    constexpr std::string_view kPrefix = "ckpt-";
    const size_t slash = name.find('/');
    if (!name.starts_with(kPrefix) || slash == std::string::npos) continue;
    int64_t step = -1;
    const auto [at, ec] = std::from_chars(name.data() + kPrefix.size(), name.data() + slash, step);
    if (ec != std::errc() || at != name.data() + slash || step >= *cut || needed.count(step) != 0)
      continue;
    (name.ends_with("/MANIFEST") ? manifests : others).push_back(name);
  }
  int deleted = 0;
  for (const auto* group : {&manifests, &others}) {
    for (const std::string& name : *group) {
      KT_RETURN_IF_ERROR(storage::DeleteObject(storage::JoinPath(root, name)));
      ++deleted;
    }
  }
  if (deleted > 0) {
    spdlog::info("deleted {} files of checkpoints before step {} in {} (keeping {} chains)",
                 deleted, *cut, root, keep_chains);
  }
  return deleted;
}

Status WriteFinalMarker(const std::string& root, int64_t step) {
  const nlohmann::json m = {{"step", step}};
  return storage::WriteObject(storage::JoinPath(root, "FINAL"), m.dump() + "\n",
                              storage::WriteMode::kReplace, "application/json");
}

StatusOr<std::optional<int64_t>> ReadFinalMarker(const std::string& root) {
  const std::string path = storage::JoinPath(root, "FINAL");
  auto text = storage::ReadObject(path);
  if (text.status().code() == StatusCode::kNotFound) return std::optional<int64_t>();
  if (!text.ok()) return text.status();
  const nlohmann::json m = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("step") || !m["step"].is_number_integer()) {
    return InvalidArgument(path + " is not {\"step\": <n>}: " + text->substr(0, 200));
  }
  return std::optional<int64_t>(m["step"].get<int64_t>());
}

}  // namespace kubetrain::trainer
