// kubetrain-trainer processes with data, checkpoints and output in a real S3 server (the
// `s3` fixture's versitygw): striped streamed reads, shards uploaded by each PS, the
// MANIFEST committed last with a conditional PUT, resume from S3, and bad-input exit codes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/storage/files.h"
#include "common/storage/s3_client.h"
#include "tests/s3/s3_env.h"
#include "tests/tools/process.h"
#include "tests/tools/trainer_run.h"
#include "trainer/data/generator.h"
#include "trainer/observe/tfevents.h"

namespace kubetrain::trainer {
namespace {

namespace fs = std::filesystem;
using testing::FreePort;
using testing::LoopbackClusterConfig;
using testing::MergeFlags;
using testing::PollUntil;
using testing::Process;
using testing::ReadFile;
using testing::TrainerEnv;

constexpr const char* kKey = kubetrain::testing::kTestAuthKey;
constexpr auto kRunTimeout = std::chrono::seconds(300);

class TrainerS3Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::LoadS3Env();
    auto c = storage::S3ConfigFromEnv([](const char* n) { return std::getenv(n); });
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = new storage::S3Client(*c);
    ASSERT_TRUE(client_->CreateBucket(kBucket).ok());
    // Training data as 4 objects (2 per worker), evaluation data as one.
    const fs::path tmp = fs::temp_directory_path() / ("kt_s3_data_" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    for (int i = 0; i < 5; ++i) {
      GeneratorOptions g;
      g.sample_seed = 100 + static_cast<uint64_t>(i);
      const std::string name = i < 4 ? "train-" + std::to_string(i) + ".tsv" : "eval.tsv";
      ASSERT_TRUE(WriteSyntheticCriteo((tmp / name).string(), i < 4 ? 5000 : 3000, g).ok());
      ASSERT_TRUE(client_->Upload(kBucket, "data/" + name, ReadFile((tmp / name).string())).ok());
    }
    fs::remove_all(tmp);
  }
  static void TearDownTestSuite() { delete client_; }

  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ =
        (fs::temp_directory_path() / ("kt_s3_" + std::to_string(::getpid()) + "_" + name)).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    prefix_ = "s3://" + std::string(kBucket) + "/" + name + "/";
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Small, fast model flags reading the S3 data; a flag in `extra` that is also here
  // replaces this value.
  std::vector<std::string> Flags(const std::vector<std::string>& extra) const {
    std::vector<std::pair<std::string, std::string>> base = {
        {"--data", "s3://" + std::string(kBucket) + "/data/"},
        {"--batch-size", "128"},
        {"--layers", "64,32"},
        {"--embedding-dim", "8"},
        {"--optimizer", "adam"},
        {"--lr", "0.003"},
        {"--threads", "1"},
        {"--log-every", "100"},
        {"--startup-timeout", "60"},
        {"--reconnect-timeout", "60"}};
    return MergeFlags(std::move(base), extra);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  static std::string Cluster(const std::vector<int>& ps, const std::vector<int>& workers) {
    return LoopbackClusterConfig(ps, workers);
  }
  static std::map<std::string, std::string> Env(const std::string& cluster,
                                                const std::string& pod) {
    return TrainerEnv(cluster, pod, kKey);
  }
  std::unique_ptr<Process> Start(const std::vector<std::string>& flags,
                                 const std::map<std::string, std::string>& env,
                                 const std::string& log) const {
    return std::make_unique<Process>(KT_TRAINER_BIN, flags, env, Path(log),
                                     std::vector<std::string>{"TF_CONFIG"});
  }
  // The object's key under this test's prefix.
  std::string Key(const std::string& rel) const {
    return prefix_.substr(std::string("s3://").size() + std::string(kBucket).size() + 1) + rel;
  }
  bool Exists(const std::string& rel) const { return client_->Head(kBucket, Key(rel)).ok(); }

  static constexpr char kBucket[] = "trainer-s3";
  static inline storage::S3Client* client_ = nullptr;
  std::string dir_, prefix_;
};

TEST_F(TrainerS3Test, TwoPsTwoWorkersWithDataCheckpointsAndOutputInS3Finish) {
  const std::string cluster = Cluster({FreePort(), FreePort()}, {FreePort(), FreePort()});
  auto flags = [&](const std::string& name) {
    return Flags({"--steps", "200", "--checkpoint-dir", prefix_ + "ckpt/", "--checkpoint-every",
                  "100", "--output", prefix_ + "out/", "--termination-log", Path(name + ".json")});
  };
  auto ps0 = Start(flags("ps-0"), Env(cluster, "ps-0"), "ps-0.log");
  auto ps1 = Start(flags("ps-1"), Env(cluster, "ps-1"), "ps-1.log");
  auto w0 = Start(flags("worker-0"), Env(cluster, "worker-0"), "worker-0.log");
  auto w1 = Start(flags("worker-1"), Env(cluster, "worker-1"), "worker-1.log");
  ASSERT_EQ(w1->Wait(kRunTimeout), 0) << w1->Log();
  ASSERT_EQ(w0->Wait(kRunTimeout), 0) << w0->Log();
  ASSERT_EQ(ps0->Wait(kRunTimeout), 0) << ps0->Log();
  ASSERT_EQ(ps1->Wait(kRunTimeout), 0) << ps1->Log();
  // Every checkpoint is complete: both shards, and the MANIFEST.
  for (const char* step : {"100", "200"}) {
    for (const char* f : {"/shard-0-of-2.bin", "/shard-1-of-2.bin", "/MANIFEST"}) {
      EXPECT_TRUE(Exists("ckpt/ckpt-" + std::string(step) + f)) << step << f;
    }
  }
  // The output: the model as a committed checkpoint, and the metrics.
  EXPECT_TRUE(Exists("out/model/ckpt-200/MANIFEST"));
  EXPECT_TRUE(Exists("out/model/ckpt-200/shard-1-of-2.bin"));
  auto metrics_text = client_->Get(kBucket, Key("out/metrics.json"));
  ASSERT_TRUE(metrics_text.ok()) << metrics_text.status().ToString();
  const auto metrics = nlohmann::json::parse(*metrics_text);
  EXPECT_EQ(metrics["steps"].get<int>(), 200);
  EXPECT_EQ(metrics["eval"]["examples"].get<int>(), 3000);
  EXPECT_GT(metrics["eval"]["auc"].get<double>(), 0.7) << metrics.dump();
  // The model for serving, read back from the shards in S3: model.onnx (a ModelProto that
  // starts with ir_version 8: field 1, varint 8) and model.json.
  auto onnx = client_->Get(kBucket, Key("out/model.onnx"));
  ASSERT_TRUE(onnx.ok()) << onnx.status().ToString();
  EXPECT_EQ(onnx->substr(0, 2), std::string("\x08\x08"));
  auto described = client_->Get(kBucket, Key("out/model.json"));
  ASSERT_TRUE(described.ok()) << described.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(*described)["inputs"][1]["name"], "cat_ids");
  EXPECT_EQ(nlohmann::json::parse(*described)["step"].get<int>(), 200);
  // The same model exported to S3 with external data: model.onnx.data uploaded
  // beside model.onnx, which names it relatively (no s3:// in the model), model.json
  // recording its size.
  auto ext = Start(Flags({"--checkpoint-dir", prefix_ + "out/model/", "--export", prefix_ + "ext/",
                          "--onnx-external-threshold", "4096"}),
                   {}, "export-external.log");
  ASSERT_EQ(ext->Wait(kRunTimeout), 0) << ext->Log();
  auto side = client_->Head(kBucket, Key("ext/model.onnx.data"));
  ASSERT_TRUE(side.ok()) << side.status().ToString();
  auto ext_model = client_->Get(kBucket, Key("ext/model.onnx"));
  ASSERT_TRUE(ext_model.ok()) << ext_model.status().ToString();
  EXPECT_LT(ext_model->size(), onnx->size());
  EXPECT_NE(ext_model->find("model.onnx.data"), std::string::npos);
  EXPECT_EQ(ext_model->find("s3://"), std::string::npos);
  auto ext_json = client_->Get(kBucket, Key("ext/model.json"));
  ASSERT_TRUE(ext_json.ok()) << ext_json.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(*ext_json)["external_data"]["bytes"].get<int64_t>(), side->size);
  // Each worker streamed its own stripe of objects.
  EXPECT_EQ(nlohmann::json::parse(ReadFile(Path("worker-0.json")))["steps"].get<int>(), 200);
  // Logs that outlive pods: every replica's log tail, and each worker's TensorBoard events, in S3.
  for (const char* replica : {"worker-0", "worker-1", "ps-0", "ps-1"}) {
    auto log = client_->Get(kBucket, Key("out/logs/" + std::string(replica) + ".log"));
    ASSERT_TRUE(log.ok()) << replica << ": " << log.status().ToString();
    EXPECT_NE(log->find("[" + std::string(replica) + "]"), std::string::npos) << *log;
  }
  auto events = storage::ListObjects(prefix_ + "out/tensorboard/worker-0/");
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->front().rfind("events.out.tfevents.", 0), 0u) << events->front();
  auto bytes = client_->Get(kBucket, Key("out/tensorboard/worker-0/" + events->front()));
  ASSERT_TRUE(bytes.ok());
  auto records = observe::ParseRecords(*bytes);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  std::vector<int64_t> loss_steps;
  bool ps_bytes = false;
  for (const std::string& r : *records) {
    auto e = observe::DecodeEvent(r);
    ASSERT_TRUE(e.ok());
    for (const auto& [tag, value] : e->scalars) {
      if (tag == "train/loss") loss_steps.push_back(e->step);
      if (tag == "ps/sent_bytes") ps_bytes = value > 0;
    }
  }
  EXPECT_EQ(loss_steps.size(), 20u);  // every 10 steps of 200
  EXPECT_EQ(loss_steps.back(), 200);
  EXPECT_TRUE(ps_bytes);
}

// A SIGTERM'd process saves its log tail to an S3 --output too.
TEST_F(TrainerS3Test, SigtermSavesTheLogTailInS3) {
  auto p = Start(Flags({"--steps", "1000000", "--log-every", "1", "--no-eval", "--output",
                        prefix_ + "out/", "--termination-log", Path("p.json")}),
                 {}, "p.log");
  ASSERT_TRUE(PollUntil([&] { return p->Log().find("] step 20 ") != std::string::npos; },
                        std::chrono::seconds(120)))
      << p->Log();
  p->Signal(SIGTERM);
  ASSERT_EQ(p->Wait(std::chrono::seconds(60)), 143) << p->Log();
  auto log = client_->Get(kBucket, Key("out/logs/local-0.log"));
  ASSERT_TRUE(log.ok()) << log.status().ToString() << "\n" << p->Log();
  EXPECT_NE(log->find("stopped by SIGTERM at step"), std::string::npos) << *log;
}

TEST_F(TrainerS3Test, KilledPsResumesFromTheCheckpointInS3) {
  const std::string cluster = Cluster({FreePort()}, {FreePort()});
  auto flags = [&](const std::string& name) {
    return Flags({"--steps", "1500", "--checkpoint-dir", prefix_ + "ckpt/", "--checkpoint-every",
                  "20", "--log-every", "500", "--termination-log", Path(name + ".json"),
                  "--eval-examples", "500"});
  };
  auto ps = Start(flags("ps"), Env(cluster, "ps-0"), "ps.log");
  auto worker = Start(flags("worker"), Env(cluster, "worker-0"), "worker.log");
  PollUntil(
      [&] {
        return Exists("ckpt/ckpt-20/MANIFEST") || worker->Wait(std::chrono::seconds(0)) != -1;
      },
      std::chrono::seconds(120));
  ASSERT_TRUE(Exists("ckpt/ckpt-20/MANIFEST")) << worker->Log();
  ps->Kill();
  ps = Start(flags("ps2"), Env(cluster, "ps-0"), "ps2.log");
  ASSERT_EQ(worker->Wait(kRunTimeout), 0) << worker->Log();
  ASSERT_EQ(ps->Wait(kRunTimeout), 0) << ps->Log();
  EXPECT_NE(ps->Log().find("restored shard from checkpoint"), std::string::npos) << ps->Log();
  EXPECT_NE(worker->Log().find("reconnecting"), std::string::npos) << worker->Log();
  EXPECT_TRUE(Exists("ckpt/ckpt-1500/MANIFEST"));
}

// A checkpoint whose upload was cut off (a shard object written, no MANIFEST: the PS or the
// coordinator died before the commit) is never the one resumed from.
TEST_F(TrainerS3Test, InterruptedCheckpointLeavesThePreviousOneTheNewestComplete) {
  auto flags = [&](const std::string& name, const std::string& steps) {
    return Flags({"--steps", steps, "--checkpoint-dir", prefix_ + "ckpt/", "--checkpoint-every",
                  "30", "--no-eval", "--termination-log", Path(name + ".json")});
  };
  // Single process: a complete checkpoint at 30 and at 60.
  auto first = Start(flags("first", "60"), {}, "first.log");
  ASSERT_EQ(first->Wait(kRunTimeout), 0) << first->Log();
  ASSERT_TRUE(Exists("ckpt/ckpt-60/MANIFEST"));
  // Step 90's upload "killed half-way": its shard is there, cut short, and no MANIFEST.
  auto shard = client_->Get(kBucket, Key("ckpt/ckpt-60/shard-0-of-1.bin"));
  ASSERT_TRUE(shard.ok());
  ASSERT_TRUE(
      client_
          ->Put(kBucket, Key("ckpt/ckpt-90/shard-0-of-1.bin"), shard->substr(0, shard->size() / 2))
          .ok());
  auto resumed = Start(flags("resumed", "100"), {}, "resumed.log");
  ASSERT_EQ(resumed->Wait(kRunTimeout), 0) << resumed->Log();
  EXPECT_NE(resumed->Log().find("resumed from checkpoint 60"), std::string::npos) << resumed->Log();
  // It then checkpointed 90 again (whole this time) and 100.
  EXPECT_TRUE(Exists("ckpt/ckpt-90/MANIFEST"));
  EXPECT_TRUE(Exists("ckpt/ckpt-100/MANIFEST"));
}

// Two checkpoints in S3 (steps 20 and 40), then the newest corrupted behind the server's
// back by `corrupt` (given the stored files of ckpt-40's shard and MANIFEST; the posix
// backend keeps the checksum recorded at upload): the export and a resumed run both fall
// back to checkpoint 20, naming the corrupt object `what`.
class TrainerS3FallbackTest : public TrainerS3Test {
 protected:
  void Run(const std::string& what,
           const std::function<void(const fs::path& shard, const fs::path& manifest)>& corrupt) {
    auto flags = [&](const std::string& name, const std::vector<std::string>& extra) {
      std::vector<std::string> f = {
          "--checkpoint-dir", prefix_ + "ckpt/",   "--checkpoint-every", "20",
          "--no-eval",        "--termination-log", Path(name + ".json")};
      f.insert(f.end(), extra.begin(), extra.end());
      return Flags(f);
    };
    auto first = Start(flags("first", {"--steps", "40"}), {}, "first.log");
    ASSERT_EQ(first->Wait(kRunTimeout), 0) << first->Log();
    ASSERT_TRUE(Exists("ckpt/ckpt-20/MANIFEST"));
    ASSERT_TRUE(Exists("ckpt/ckpt-40/MANIFEST"));
    const fs::path stored =
        fs::path(std::getenv("KUBETRAIN_TEST_S3_DIR")) / "data" / kBucket / Key("ckpt/ckpt-40");
    ASSERT_TRUE(fs::exists(stored / "shard-0-of-1.bin")) << stored;
    corrupt(stored / "shard-0-of-1.bin", stored / "MANIFEST");
    const std::string named = prefix_ + "ckpt/ckpt-40/" + what;

    auto exported = Start(flags("export", {"--export", Path("export")}), {}, "export.log");
    ASSERT_EQ(exported->Wait(kRunTimeout), 0) << exported->Log();
    EXPECT_NE(exported->Log().find("exported the model (step 20"), std::string::npos)
        << exported->Log();
    EXPECT_NE(exported->Log().find(named), std::string::npos) << exported->Log();
    EXPECT_TRUE(fs::exists(Path("export/model.onnx")));

    auto resumed = Start(flags("resumed", {"--steps", "60"}), {}, "resumed.log");
    ASSERT_EQ(resumed->Wait(kRunTimeout), 0) << resumed->Log();
    EXPECT_NE(resumed->Log().find("resumed from checkpoint 20"), std::string::npos)
        << resumed->Log();
    EXPECT_NE(resumed->Log().find(named), std::string::npos) << resumed->Log();
    EXPECT_TRUE(Exists("ckpt/ckpt-60/MANIFEST"));
  }
};

TEST_F(TrainerS3FallbackTest, TruncatedShardOfTheNewestCheckpointFallsBackToThePreviousOne) {
  Run("shard-0-of-1.bin", [](const fs::path& shard, const fs::path&) {
    fs::resize_file(shard, fs::file_size(shard) / 2);
  });
}

TEST_F(TrainerS3FallbackTest, OverwrittenShardOfTheNewestCheckpointFallsBackToThePreviousOne) {
  Run("shard-0-of-1.bin", [](const fs::path& shard, const fs::path&) {
    const std::string garbage(fs::file_size(shard), 'x');  // same size, other bytes
    std::ofstream(shard, std::ios::binary | std::ios::trunc) << garbage;
  });
}

TEST_F(TrainerS3FallbackTest, GarbledManifestOfTheNewestCheckpointFallsBackToThePreviousOne) {
  Run("MANIFEST", [](const fs::path&, const fs::path& manifest) {
    std::ofstream(manifest, std::ios::binary | std::ios::trunc) << "{\"step\": 40, \"num_sh";
  });
}

TEST_F(TrainerS3Test, BadS3InputGivesClearErrorsAndTheRightExitCodes) {
  // Wrong secret: permanent (1), naming the bucket.
  auto wrong = std::make_unique<Process>(
      KT_TRAINER_BIN, Flags({"--steps", "10", "--no-eval", "--termination-log", Path("w.json")}),
      std::map<std::string, std::string>{{"AWS_SECRET_ACCESS_KEY", "wrong"}}, Path("wrong.log"),
      std::vector<std::string>{"CLUSTER_CONFIG", "POD_NAME", "TF_CONFIG"});
  EXPECT_EQ(wrong->Wait(kRunTimeout), 1) << wrong->Log();
  EXPECT_NE(wrong->Log().find("s3://trainer-s3"), std::string::npos) << wrong->Log();
  EXPECT_NE(wrong->Log().find("SignatureDoesNotMatch"), std::string::npos) << wrong->Log();
  // Missing bucket: permanent (1), naming it.
  auto missing = Start(Flags({"--data", "s3://no-such-bucket-kt/data/", "--steps", "10",
                              "--no-eval", "--termination-log", Path("m.json")}),
                       {}, "missing.log");
  EXPECT_EQ(missing->Wait(kRunTimeout), 1) << missing->Log();
  EXPECT_NE(missing->Log().find("no-such-bucket-kt"), std::string::npos) << missing->Log();
  // Unreachable endpoint: retryable (200).
  auto down = std::make_unique<Process>(
      KT_TRAINER_BIN, Flags({"--steps", "10", "--no-eval", "--termination-log", Path("d.json")}),
      std::map<std::string, std::string>{{"AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1"},
                                         {"AWS_MAX_ATTEMPTS", "2"}},
      Path("down.log"), std::vector<std::string>{"CLUSTER_CONFIG", "POD_NAME", "TF_CONFIG"});
  EXPECT_EQ(down->Wait(kRunTimeout), 200) << down->Log();
  // A truncated shard in the newest complete checkpoint: a clear error naming the object.
  auto first = Start(Flags({"--steps", "20", "--checkpoint-dir", prefix_ + "ckpt/", "--no-eval",
                            "--termination-log", Path("f.json")}),
                     {}, "first.log");
  ASSERT_EQ(first->Wait(kRunTimeout), 0) << first->Log();
  const fs::path stored = fs::path(std::getenv("KUBETRAIN_TEST_S3_DIR")) / "data" / kBucket /
                          Key("ckpt/ckpt-20/shard-0-of-1.bin");
  ASSERT_TRUE(fs::exists(stored)) << stored;
  fs::resize_file(stored, fs::file_size(stored) / 2);
  auto cut = Start(Flags({"--steps", "40", "--checkpoint-dir", prefix_ + "ckpt/", "--no-eval",
                          "--termination-log", Path("c.json")}),
                   {}, "cut.log");
  EXPECT_NE(cut->Wait(kRunTimeout), 0) << cut->Log();
  EXPECT_NE(cut->Log().find(prefix_ + "ckpt/ckpt-20/shard-0-of-1.bin"), std::string::npos)
      << cut->Log();
}

}  // namespace
}  // namespace kubetrain::trainer

namespace kubetrain::trainer {
namespace {

// SIGTERM while a checkpoint is being uploaded to S3. The model is large
// (about 110 MB of parameters and Adam state) so an upload takes long enough to be caught
// in progress: the test signals once the trainer has logged that it started saving.
class TrainerS3SigtermTest : public TrainerS3Test {
 protected:
  std::vector<std::string> BigFlags(const std::string& name, const std::string& steps,
                                    const std::string& stop_timeout) const {
    return Flags({"--layers", "4096,2048", "--steps", steps, "--checkpoint-dir", prefix_ + "ckpt/",
                  "--checkpoint-every", "3", "--log-every", "1", "--no-eval", "--stop-timeout",
                  stop_timeout, "--termination-log", Path(name + ".json")});
  }
  // Starts a run, waits for checkpoint 3 to be committed and checkpoint 6's save to start,
  // then sends SIGTERM.
  std::unique_ptr<Process> SigtermDuringTheSaveOf6(const std::string& stop_timeout) {
    auto p = Start(BigFlags("first", "1000", stop_timeout), {}, "first.log");
    EXPECT_TRUE(PollUntil(
        [&] {
          return p->Log().find("saving checkpoint 6") != std::string::npos ||
                 p->Wait(std::chrono::seconds(0)) != -1;
        },
        kRunTimeout))
        << p->Log();
    EXPECT_TRUE(Exists("ckpt/ckpt-3/MANIFEST"));
    p->Signal(SIGTERM);
    EXPECT_EQ(p->Wait(std::chrono::seconds(120)), 143) << p->Log();
    EXPECT_FALSE(p->signaled()) << p->Log();
    return p;
  }
};

// The grace period is too short for the upload (--stop-timeout 0.1 s): the watchdog ends
// the process half-way; checkpoint 6 is never committed, checkpoint 3 is intact and the
// next run resumes from it.
TEST_F(TrainerS3SigtermTest, CutUploadLeavesThePreviousCheckpointAndTheNextRunResumesFromIt) {
  auto first = SigtermDuringTheSaveOf6("0.1");
  // The premise: the save was cut by the stop timeout, not finished.
  ASSERT_NE(first->Log().find("still running --stop-timeout"), std::string::npos) << first->Log();
  EXPECT_EQ(first->Log().find("checkpoint 6 committed"), std::string::npos) << first->Log();
  EXPECT_FALSE(Exists("ckpt/ckpt-6/MANIFEST"));
  auto resumed = Start(BigFlags("resumed", "4", "25"), {}, "resumed.log");
  ASSERT_EQ(resumed->Wait(kRunTimeout), 0) << resumed->Log();
  EXPECT_NE(resumed->Log().find("resumed from checkpoint 3 "), std::string::npos) << resumed->Log();
}

// Enough time (--stop-timeout 60 s): the upload in progress finishes and commits, it is the
// step reached, so the process exits 143 without a second save; the next run resumes there.
TEST_F(TrainerS3SigtermTest, UploadInProgressFinishesAndIsTheCheckpointToResumeFrom) {
  auto first = SigtermDuringTheSaveOf6("60");
  EXPECT_NE(first->Log().find("checkpoint 6 committed"), std::string::npos) << first->Log();
  EXPECT_EQ(first->Log().find("saving checkpoint 7"), std::string::npos) << first->Log();
  EXPECT_TRUE(Exists("ckpt/ckpt-6/MANIFEST"));
  auto resumed = Start(BigFlags("resumed", "7", "25"), {}, "resumed.log");
  ASSERT_EQ(resumed->Wait(kRunTimeout), 0) << resumed->Log();
  EXPECT_NE(resumed->Log().find("resumed from checkpoint 6 "), std::string::npos) << resumed->Log();
}

}  // namespace
}  // namespace kubetrain::trainer
