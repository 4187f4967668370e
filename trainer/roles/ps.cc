#include <spdlog/spdlog.h>

#include <vector>

#include "trainer/metrics/metrics.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/roles/role.h"
#include "trainer/rpc/ps_server.h"
#include "trainer/stop/stop.h"

namespace kubetrain::trainer::roles {

RoleResult RunPs(const Config& c, const ClusterInfo& cluster, Model& model,
                 const OptimizerConfig& opt, const AuthKey& key) {
  const int k = cluster.index, n = cluster.NumPs();
  std::vector<float> init(model.NumDenseParams());
  model.InitDense(c.seed, init.data());
  auto embedding = BuildEmbeddingOptions(c, c.sync ? 1 : cluster.NumTrainers());
  if (!embedding.ok()) return embedding.status();
  const ShardConfig sc = MakeShardConfig(model, k, n, c.seed, opt, *embedding);
  ParamShard shard(sc, init.data() + sc.dense_begin);
  TrainerMetrics::Global().SetEmbeddingSource(
      [&shard] { return EmbeddingArray(shard.embedding_stats()); });
  struct Unset {
    ~Unset() { TrainerMetrics::Global().ClearEmbeddingSource(); }
  } unset;
  if (!c.checkpoint_dir.empty()) {
    auto latest = FindCheckpoint(c.checkpoint_dir, n);
    if (!latest.ok()) return latest.status();
    if (latest->has_value()) {
      Status s = LoadShard(shard, c.checkpoint_dir, **latest, k, n);
      if (!s.ok()) return s.WithContext("restore");
      spdlog::info("restored shard from checkpoint {} ({} rows)", (*latest)->step,
                   shard.num_rows());
    }
  }
  int port = c.listen_port;
  if (port < 0) {
    auto hp = SplitHostPort(cluster.Members("ps")[k]);
    if (!hp.ok()) return hp.status();
    port = hp->port;
  }
  auto listener = Listener::Listen(port);
  if (!listener.ok()) return listener.status();
  PsServerOptions o;
  o.shard_index = k;
  o.num_shards = n;
  o.num_trainers = cluster.NumTrainers();
  o.sync = c.sync;
  o.checkpoint_dir = c.checkpoint_dir;
  o.key = key;
  o.total_dense = model.NumDenseParams();
  o.stop_requested = StopRequested;
  o.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.stop_timeout_s * 500));
  PsServer server(&shard, std::move(*listener), o);
  Status s = server.Serve();
  if (server.stopped_on_signal()) {
    std::string cost;
    if (server.saved_on_stop() >= 0) {
      cost =
          fmt::format("stopped by SIGTERM; this shard is in checkpoint {}", server.saved_on_stop());
      spdlog::info("{}", cost);
    } else {
      cost = c.checkpoint_dir.empty()
                 ? "stopped by SIGTERM: no --checkpoint-dir, so this shard's training is lost "
                   "(the job starts over)"
                 : "stopped by SIGTERM without a checkpoint request: this shard's updates since "
                   "its last checkpoint are lost";
    }
    return StoppedSaying(c, cost);
  }
  if (!s.ok()) return s;
  // Each push applied once (ps/ledger.h): per worker rank, what was applied and what was
  // a re-sent duplicate, acknowledged and not applied again.
  const PushCounts pushes = shard.Pushes();
  nlohmann::json by_rank = nlohmann::json::object();
  for (const auto& [rank, counts] : shard.PushesByRank()) {
    by_rank[std::to_string(rank)] = {{"applied", counts.applied}, {"duplicate", counts.duplicate}};
  }
  WriteTerminationMessage(c, {{"task", cluster.TaskName()},
                              {"embedding_rows", shard.num_rows()},
                              {"embedding", EmbeddingJson(shard.embedding_stats())},
                              {"updates", shard.updates()},
                              {"pushes_applied", pushes.applied},
                              {"pushes_duplicate", pushes.duplicate},
                              {"pushes_by_worker", by_rank}});
  spdlog::info(
      "done: {} embedding rows, {} dense updates, {} pushes applied, {} duplicates not "
      "applied",
      shard.num_rows(), shard.updates(), pushes.applied, pushes.duplicate);
  return Ending::kDone;
}

}  // namespace kubetrain::trainer::roles
