#include "trainer/ps/ledger.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "trainer/ps/shard.h"

namespace kubetrain::trainer {
namespace {

using Outcome = PushLedger::Outcome;

TEST(PushLedgerTest, EachNumberIsAppliedOnceAndResentOnesAreCounted) {
  PushLedger l;
  l.Hello(0, 111);
  EXPECT_EQ(l.Admit(0, 111, 1), Outcome::kApply);
  EXPECT_EQ(l.Admit(0, 111, 1), Outcome::kDuplicate);  // re-sent after a lost reply
  EXPECT_EQ(l.Admit(0, 111, 2), Outcome::kApply);
  EXPECT_EQ(l.Admit(0, 111, 1), Outcome::kDuplicate);  // a late copy on an old connection
  EXPECT_EQ(l.Admit(0, 111, 2), Outcome::kDuplicate);
  // Numbers may skip (a PS restored from an older checkpoint), never go back.
  EXPECT_EQ(l.Admit(0, 111, 9), Outcome::kApply);
  EXPECT_EQ(l.Admit(0, 111, 5), Outcome::kDuplicate);
  EXPECT_EQ(l.last_seq(111), 9u);
  EXPECT_EQ(l.total(), (PushCounts{3, 4}));
  EXPECT_EQ(l.by_rank().at(0), (PushCounts{3, 4}));
}

TEST(PushLedgerTest, PushWithoutHelloIsRefused) {
  PushLedger l;
  EXPECT_EQ(l.Admit(0, 111, 1), Outcome::kUnknown);
  EXPECT_EQ(l.total(), (PushCounts{0, 0}));
}

TEST(PushLedgerTest, ARestartedWorkerIsNumberedAfreshAndItsOldPushesStayDeduplicated) {
  PushLedger l;
  l.Hello(2, 111);
  ASSERT_EQ(l.Admit(2, 111, 1), Outcome::kApply);
  ASSERT_EQ(l.Admit(2, 111, 2), Outcome::kApply);
  l.Hello(2, 222);  // the same rank, a new process
  EXPECT_EQ(l.Admit(2, 222, 1), Outcome::kApply);
  EXPECT_EQ(l.Admit(2, 111, 2), Outcome::kDuplicate);  // the old one's copy still in flight
  EXPECT_EQ(l.Admit(2, 111, 3), Outcome::kApply);      // a push it really made
  l.Hello(2, 111);                                     // a reconnect changes nothing
  EXPECT_EQ(l.Admit(2, 111, 3), Outcome::kDuplicate);
  EXPECT_EQ(l.by_rank().at(2), (PushCounts{4, 2}));
}

TEST(PushLedgerTest, OnlyTheNewestIncarnationsOfARankAreRemembered) {
  PushLedger l;
  l.Hello(1, 999);  // another rank's is never forgotten for rank 0's sake
  for (uint64_t inc = 1; inc <= PushLedger::kIncarnationsPerRank + 1; ++inc) {
    l.Hello(0, inc);
    ASSERT_EQ(l.Admit(0, inc, 1), Outcome::kApply);
  }
  // The oldest is forgotten: its pushes can no longer be told apart, so they are refused.
  EXPECT_EQ(l.Admit(0, 1, 2), Outcome::kUnknown);
  EXPECT_EQ(l.Admit(0, 2, 1), Outcome::kDuplicate);
  EXPECT_EQ(l.Admit(1, 999, 1), Outcome::kApply);
}

TEST(PushLedgerTest, SavedLedgerRestoresNumbersAndFinishedWorkers) {
  PushLedger a;
  a.Hello(0, 111);
  a.Hello(3, 333);
  ASSERT_EQ(a.Admit(0, 111, 5), Outcome::kApply);
  ASSERT_EQ(a.Admit(3, 333, 7), Outcome::kApply);
  a.MarkFinished(3);
  a.MarkFinished(1);
  std::string bytes;
  a.AppendTo(&bytes);
  bytes += "tail";
  PushLedger b;
  std::string_view in = bytes;
  ASSERT_TRUE(b.ReadFrom(&in).ok());
  EXPECT_EQ(in, "tail");  // read exactly its own bytes
  EXPECT_EQ(b.finished(), (std::set<int32_t>{1, 3}));
  EXPECT_EQ(b.Admit(0, 111, 5), Outcome::kDuplicate);
  EXPECT_EQ(b.Admit(3, 333, 8), Outcome::kApply);
  EXPECT_EQ(b.total(), (PushCounts{1, 1}));  // counts are the process's, not saved
  // Equal ledgers save equal bytes (hello order, not hash order).
  std::string again;
  a.AppendTo(&again);
  EXPECT_EQ(again + "tail", bytes);
}

TEST(PushLedgerTest, MalformedBytesAreRefusedAndChangeNothing) {
  PushLedger a;
  a.Hello(0, 111);
  ASSERT_EQ(a.Admit(0, 111, 5), Outcome::kApply);
  a.MarkFinished(0);
  std::string bytes;
  a.AppendTo(&bytes);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    PushLedger b;
    b.MarkFinished(9);
    std::string_view in = std::string_view(bytes).substr(0, cut);
    EXPECT_EQ(b.ReadFrom(&in).code(), StatusCode::kInvalidArgument) << cut;
    EXPECT_EQ(b.finished(), std::set<int32_t>{9}) << cut;
  }
  // A crafted count is checked against the bytes before anything is allocated.
  std::string crafted = bytes;
  crafted[0] = crafted[1] = crafted[2] = crafted[3] = '\xff';
  PushLedger c;
  std::string_view in = crafted;
  const Status s = c.ReadFrom(&in);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("do not fit"), std::string::npos) << s.message();
}

// ParamShard: the ledger check and the update are one step, and the ledger is saved with the
// parameters.

ShardConfig Config() {
  ShardConfig c;
  c.dense_begin = 0;
  c.dense_end = 4;
  c.sparse_dim = 2;
  c.optimizer.kind = OptimizerKind::kSgd;
  c.optimizer.lr = 1.f;
  return c;
}

TEST(ParamShardPushTest, TwoCopiesOfAPushRacingApplyOnce) {
  const std::vector<float> init(4, 0.f), grad(4, 1.f);
  ParamShard shard(Config(), init.data());
  constexpr int kPushes = 200;
  for (int w = 0; w < 2; ++w) shard.Hello(w, 100 + w);
  // Two connections of each worker deliver every push: exactly one copy applies.
  std::vector<std::thread> threads;
  for (int copy = 0; copy < 2; ++copy) {
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w] {
        for (uint64_t seq = 1; seq <= kPushes; ++seq) {
          (void)shard.ApplyPush(w, 100 + w, seq, grad.data(), nullptr, 0, nullptr);
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(shard.updates(), 2 * kPushes);
  EXPECT_EQ(shard.Pushes(), (PushCounts{2 * kPushes, 2 * kPushes}));
  std::vector<float> dense(4);
  shard.PullDense(dense.data());
  EXPECT_FLOAT_EQ(dense[0], -2.f * kPushes);
}

std::string TempDir() {
  const auto d = std::filesystem::temp_directory_path() /
                 ("kt_ledger_" + std::to_string(::getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(ParamShardPushTest, ARestoredShardRemembersAppliedPushesAndFinishedWorkers) {
  const std::string dir = TempDir();
  const std::vector<float> init(4, 0.f), grad(4, 1.f);
  ParamShard a(Config(), init.data());
  a.Hello(0, 100);
  ASSERT_EQ(a.ApplyPush(0, 100, 1, grad.data(), nullptr, 0, nullptr), Outcome::kApply);
  ASSERT_EQ(a.ApplyPush(0, 100, 2, grad.data(), nullptr, 0, nullptr), Outcome::kApply);
  a.MarkFinished(1);
  ASSERT_TRUE(a.Save(dir + "/s.bin").ok());
  // Push 3 is lost with the PS's memory; push 2 is in the checkpoint.
  ASSERT_EQ(a.ApplyPush(0, 100, 3, grad.data(), nullptr, 0, nullptr), Outcome::kApply);

  ParamShard b(Config(), init.data());
  ASSERT_TRUE(b.Load(dir + "/s.bin").ok());
  EXPECT_EQ(b.Finished(), std::vector<int32_t>{1});
  b.Hello(0, 100);  // the worker reconnects and re-sends push 3, then an old copy of 2
  EXPECT_EQ(b.ApplyPush(0, 100, 3, grad.data(), nullptr, 0, nullptr), Outcome::kApply);
  EXPECT_EQ(b.ApplyPush(0, 100, 2, grad.data(), nullptr, 0, nullptr), Outcome::kDuplicate);
  EXPECT_EQ(b.updates(), 3);
  std::vector<float> dense(4);
  b.PullDense(dense.data());
  EXPECT_FLOAT_EQ(dense[0], -3.f);
  std::filesystem::remove_all(dir);
}

TEST(ParamShardPushTest, FormatOneShardsStillLoadWithAnEmptyLedger) {
  const std::string dir = TempDir();
  const std::vector<float> init(4, 0.5f);
  ParamShard a(Config(), init.data());
  std::vector<float> row_grads(4, 0.25f);
  const uint64_t ids[2] = {7, 9};
  a.Apply(nullptr, ids, 2, row_grads.data());  // two rows
  ASSERT_TRUE(a.Save(dir + "/v3.bin").ok());
  // Format 2 is format 3 without its kind, base step and deletions (17 bytes after the
  // 40-byte header, the empty ledger's 8 bytes and 4 dense floats); format 1 is format 2
  // without the ledger and with magic KTSHARD1.
  const std::string v3 = ReadAll(dir + "/v3.bin");
  ASSERT_EQ(v3.substr(0, 8), "KTSHARD3");
  ASSERT_EQ(v3.substr(40, 8), std::string(8, '\0'));
  ASSERT_EQ(v3.substr(64, 17),
            std::string(1, '\0') + std::string(8, '\xff') + std::string(8, '\0'));
  std::string v2 = v3.substr(0, 64) + v3.substr(81);
  v2[7] = '2';
  std::string v1 = v2.substr(0, 40) + v2.substr(48);
  v1[7] = '1';
  ASSERT_TRUE(WriteFileAtomic(dir + "/v1.bin", v1).ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/v2.bin", v2).ok());
  ParamShard b(Config(), init.data());
  b.MarkFinished(4);
  ASSERT_TRUE(b.Load(dir + "/v1.bin").ok());
  EXPECT_EQ(b.num_rows(), 2u);
  EXPECT_TRUE(b.Finished().empty());
  ASSERT_TRUE(b.Load(dir + "/v2.bin").ok());
  EXPECT_EQ(b.num_rows(), 2u);
  // A newer format is named as such.
  std::string v4 = v3;
  v4[7] = '4';
  ASSERT_TRUE(WriteFileAtomic(dir + "/v4.bin", v4).ok());
  const Status s = b.Load(dir + "/v4.bin");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("newer than this trainer reads"), std::string::npos) << s.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kubetrain::trainer
