#include "trainer/ps/embedding_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "trainer/model/model.h"
#include "trainer/ps/shard.h"

namespace kubetrain::trainer {
namespace {

constexpr size_t kFloats = 5;

// A row whose every float is `value` (a torn row would have two values).
void Fill(float* row, float value) {
  for (size_t k = 0; k < kFloats; ++k) row[k] = value;
}

// The id whose store hash (MurmurHash3's finaliser, embedding_store.h) is `h`: the
// finaliser's inverse (x ^= x >> 33 is its own inverse; each multiply is undone by the
// odd constant's inverse modulo 2^64, found by Newton's iteration).
uint64_t IdWithHash(uint64_t h) {
  const auto inverse = [](uint64_t c) {
    uint64_t x = c;
    for (int i = 0; i < 6; ++i) x *= 2 - c * x;
    return x;
  };
  h ^= h >> 33;
  h *= inverse(0xc4ceb9fe1a85ec53ULL);
  h ^= h >> 33;
  h *= inverse(0xff51afd7ed558ccdULL);
  h ^= h >> 33;
  return h;
}

// Reads ids one call at a time: the row's first float, or -1 for no row.
std::vector<float> ReadFirst(const EmbeddingStore& store, const std::vector<uint64_t>& ids) {
  std::vector<float> out(ids.size(), -2.f);
  store.Read(ids.data(), ids.size(),
             [&](size_t i, const float* row) { out[i] = row == nullptr ? -1.f : row[0]; });
  return out;
}

// Ids with the same stripe, the same 32-bit tag and so the same home slot differ only in
// hash bits the index does not keep: every lookup must compare the ids themselves, and
// probe past the others, also across the index's growth.
TEST(EmbeddingStoreTest, IdsWithTheSameStripeTagAndSlotAreKeptApart) {
  EmbeddingStore store(kFloats);
  std::vector<uint64_t> ids;
  for (uint64_t k = 0; k < 200; ++k) {
    // Same tag (high 32 bits), same stripe (low bits): only bits 5..31 differ.
    ids.push_back(IdWithHash((uint64_t{0x12345678} << 32) | (k << EmbeddingStore::kStripeBits)));
  }
  // Plus ordinary ids, so the stripe holds other keys in the probe chain.
  for (uint64_t id = 1; id <= 2000; ++id) ids.push_back(id * 7919);
  for (size_t i = 0; i < ids.size(); ++i) {
    const float v = static_cast<float>(i);
    store.Update(
        &ids[i], 1, false, [](uint64_t, float* row) { Fill(row, 0.f); },
        [&](size_t, float* row) { Fill(row, v); });
  }
  EXPECT_EQ(store.size(), ids.size());
  const std::vector<float> got = ReadFirst(store, ids);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(got[i], static_cast<float>(i)) << i;
  // An id with the same stripe and tag that was never inserted has no row.
  const uint64_t absent = IdWithHash((uint64_t{0x12345678} << 32) | (999u << 5));
  EXPECT_EQ(ReadFirst(store, {absent})[0], -1.f);
  // Iteration visits every row once, with its id.
  std::map<uint64_t, float> seen;
  store.ForEach([&](uint64_t id, const float* row) { seen[id] = row[0]; });
  ASSERT_EQ(seen.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(seen[ids[i]], static_cast<float>(i));
}

TEST(EmbeddingStoreTest, RepeatedIdInOneUpdateIsUpdatedInOrderAndCreatedOnce) {
  EmbeddingStore store(kFloats);
  const std::vector<uint64_t> ids = {5, 9, 5, 5, 9};
  int inits = 0;
  std::vector<size_t> order;
  store.Update(
      ids.data(), ids.size(), false,
      [&](uint64_t, float* row) {
        ++inits;
        Fill(row, 0.f);
      },
      [&](size_t i, float* row) {
        if (ids[i] == 5) order.push_back(i);
        row[0] = row[0] * 10 + static_cast<float>(i);
      });
  EXPECT_EQ(inits, 2);
  EXPECT_EQ(order, (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(ReadFirst(store, {5})[0], 23.f);  // ((0 * 10 + 0) * 10 + 2) * 10 + 3
}

// Writers add 1 to every float of rows shared between them while readers read: no update is
// lost (each row's count is the number of updates it got) and no read sees a torn row.
TEST(EmbeddingStoreTest, ConcurrentUpdatesAndReadsLoseNothingAndTearNothing) {
  EmbeddingStore store(kFloats);
  constexpr int kWriters = 4, kReaders = 2, kRounds = 200;
  constexpr uint64_t kIds = 3000;
  std::atomic<bool> writing{true};
  std::atomic<int64_t> torn{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::vector<uint64_t> ids;
      // Each writer updates the ids of its own residue and all ids divisible by 3.
      for (uint64_t id = 0; id < kIds; ++id)
        if (id % kWriters == static_cast<uint64_t>(w) || id % 3 == 0) ids.push_back(id + 1);
      for (int r = 0; r < kRounds; ++r) {
        store.Update(
            ids.data(), ids.size(), false, [](uint64_t, float* row) { Fill(row, 0.f); },
            [](size_t, float* row) {
              for (size_t k = 0; k < kFloats; ++k) row[k] += 1.f;
            });
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&] {
      std::vector<uint64_t> ids;
      for (uint64_t id = 0; id < kIds; ++id) ids.push_back(id + 1);
      while (writing.load()) {
        store.Read(ids.data(), ids.size(), [&](size_t, const float* row) {
          if (row == nullptr) return;
          for (size_t k = 1; k < kFloats; ++k)
            if (row[k] != row[0]) torn.fetch_add(1);
        });
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  writing = false;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(store.size(), kIds);
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < kIds; ++id) ids.push_back(id + 1);
  const std::vector<float> got = ReadFirst(store, ids);
  for (uint64_t id = 0; id < kIds; ++id) {
    const int writers = id % 3 == 0 ? kWriters : 1;
    ASSERT_EQ(got[id], static_cast<float>(writers * kRounds)) << "id " << id + 1;
  }
}

// Iterating (as a checkpoint does) while another thread inserts and updates rows visits each
// row once, whole, and sees every row that existed when it started.
TEST(EmbeddingStoreTest, ForEachDuringUpdatesSeesWholeRowsOnce) {
  EmbeddingStore store(kFloats);
  std::vector<uint64_t> first(5000);
  for (size_t i = 0; i < first.size(); ++i) first[i] = i + 1;
  const auto init = [](uint64_t, float* row) { Fill(row, 0.f); };
  const auto add = [](size_t, float* row) {
    for (size_t k = 0; k < kFloats; ++k) row[k] += 1.f;
  };
  store.Update(first.data(), first.size(), false, init, add);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::vector<uint64_t> ids(1000);
    for (uint64_t round = 0; !stop.load(); ++round) {
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = (round * 997 + i * 13) % 50000 + 1;
      store.Update(ids.data(), ids.size(), false, init, add);
    }
  });
  for (int pass = 0; pass < 20; ++pass) {
    std::map<uint64_t, int> visits;
    int64_t torn = 0;
    store.ForEach([&](uint64_t id, const float* row) {
      ++visits[id];
      for (size_t k = 1; k < kFloats; ++k)
        if (row[k] != row[0]) ++torn;
    });
    EXPECT_EQ(torn, 0);
    for (const auto& [id, n] : visits) ASSERT_EQ(n, 1) << id;
    for (const uint64_t id : first) ASSERT_EQ(visits.count(id), 1u) << id;
  }
  stop = true;
  writer.join();
}

// The store's contents do not depend on how many threads applied an update.
TEST(EmbeddingStoreTest, ParallelUpdateMatchesOneThreadRowForRow) {
  std::vector<uint64_t> ids;
  uint64_t x = 1;
  for (int i = 0; i < 20000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    ids.push_back(x >> 50);  // many repeats
  }
  std::vector<std::vector<std::pair<uint64_t, float>>> runs;
  SetComputeThreads(4);
  for (const bool parallel : {false, true}) {
    EmbeddingStore store(kFloats);
    store.Update(
        ids.data(), ids.size(), parallel, [](uint64_t id, float* row) { Fill(row, float(id % 7)); },
        [](size_t i, float* row) { row[0] = row[0] * 0.5f + static_cast<float>(i % 11); });
    runs.emplace_back();
    store.ForEach([&](uint64_t id, const float* row) { runs.back().emplace_back(id, row[0]); });
  }
  SetComputeThreads(1);
  EXPECT_EQ(runs[0], runs[1]);
}

// Memory per row close to the payload: at most 1.3x payload + 16 bytes once past the
// first slabs (Wide & Deep's rows: 16 values + 16 Adagrad slots + a count).
TEST(EmbeddingStoreTest, BytesPerRowAreCloseToThePayload) {
  constexpr size_t kRowFloats = 16 * 2 + 1;
  EmbeddingStore store(kRowFloats);
  std::vector<uint64_t> ids(200000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 2654435761u + 17;
  store.Update(
      ids.data(), ids.size(), false, [](uint64_t, float* row) { row[0] = 0.f; },
      [](size_t, float*) {});
  const double per_row = static_cast<double>(store.bytes()) / static_cast<double>(store.size());
  const double payload = 16 * 2 * sizeof(float);
  EXPECT_LE(per_row, 1.3 * payload + 16) << per_row << " bytes per row";
}

// A checkpoint taken while pushes and pulls run is one instant: every push is in it with
// its ledger record or neither (the row's update count equals the last number the ledger
// applied), and pulls are not stopped by the save.
TEST(ParamShardStoreTest, SaveDuringPushesAndPullsHoldsEachPushWithItsLedgerRecord) {
  std::string name = "kt_store_test_";  // built step by step: GCC 12 -Wrestrict on a + chain
  name += std::to_string(::getpid());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::create_directories(dir);
  ShardConfig c;
  c.sparse_dim = 4;
  ParamShard shard(c, nullptr);
  constexpr uint64_t kIncarnation = 42;
  shard.Hello(0, kIncarnation);
  std::vector<uint64_t> ids(512);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 1000003 + 1;
  const std::vector<float> grads(ids.size() * 4, 0.01f);
  std::atomic<bool> done{false};
  std::thread pusher([&] {
    for (uint64_t seq = 1; seq <= 400; ++seq) {
      ASSERT_EQ(
          shard.ApplyPush(0, kIncarnation, seq, nullptr, ids.data(), ids.size(), grads.data()),
          PushLedger::Outcome::kApply);
    }
    done = true;
  });
  std::thread puller([&] {
    std::vector<float> out(ids.size() * 4);
    while (!done.load()) shard.PullSparse(ids.data(), ids.size(), out.data());
  });
  int saves = 0;
  for (; saves < 20 || !done.load(); ++saves) {
    const std::string path = (dir / std::to_string(saves)).string();
    auto digest = shard.Save(path);
    ASSERT_TRUE(digest.ok()) << digest.status().ToString();
    ParamShard restored(c, nullptr);
    ASSERT_TRUE(restored.Load(path, &*digest).ok());
    // The ledger's record: a re-sent push up to it is a duplicate, the next one applies.
    int64_t count = -1;
    bool same = true;
    restored.ForEachRow([&](uint64_t, const float*, int64_t updates) {
      if (count >= 0 && updates != count) same = false;
      count = updates;
    });
    ASSERT_TRUE(same) << "rows of one push saved partly";
    if (count > 0) {
      restored.Hello(0, kIncarnation);
      EXPECT_EQ(restored.ApplyPush(0, kIncarnation, static_cast<uint64_t>(count), nullptr, nullptr,
                                   0, nullptr),
                PushLedger::Outcome::kDuplicate);
      EXPECT_EQ(restored.ApplyPush(0, kIncarnation, static_cast<uint64_t>(count) + 1, nullptr,
                                   nullptr, 0, nullptr),
                PushLedger::Outcome::kApply);
    }
    std::filesystem::remove(path);
  }
  pusher.join();
  puller.join();
  std::filesystem::remove_all(dir);
}

// One Update of `id` that fills its row with `value`; returns whether a row was passed.
bool Put(EmbeddingStore& store, uint64_t id, float value) {
  bool stored = false;
  store.Update(
      &id, 1, false, [](uint64_t, float* row) { Fill(row, 0.f); },
      [&](size_t, float* row) {
        if (row == nullptr) return;
        Fill(row, value);
        stored = true;
      });
  return stored;
}

TEST(EmbeddingStoreBoundsTest, AdmissionGivesAnIdARowOnlyAtItsNthUpdate) {
  EmbeddingStore store(kFloats, {.admit_count = 3, .capacity = 0, .log_deletions = false});
  EXPECT_FALSE(Put(store, 42, 1.f));
  EXPECT_FALSE(Put(store, 42, 2.f));
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(ReadFirst(store, {42})[0], -1.f);  // reads as its initial row: none stored
  EXPECT_TRUE(Put(store, 42, 3.f));
  EXPECT_EQ(ReadFirst(store, {42})[0], 3.f);
  EXPECT_TRUE(Put(store, 42, 4.f));  // admitted for good
  // Ids seen once each stay out: a long tail costs no rows.
  for (uint64_t id = 1000; id < 21000; ++id) Put(store, id, 1.f);
  EXPECT_EQ(store.size(), 1u);
  const StoreCounters c = store.counters();
  EXPECT_EQ(c.admitted, 1u);
  EXPECT_EQ(c.filtered, 2u + 20000u);
  EXPECT_EQ(c.evicted, 0u);
}

TEST(EmbeddingStoreBoundsTest, CapacityKeepsTheRecentlyUpdatedRowsAndBoundsMemory) {
  constexpr size_t kCap = 2048;
  EmbeddingStore store(kFloats, {.admit_count = 0, .capacity = kCap, .log_deletions = false});
  for (uint64_t id = 1; id <= 20000; ++id) Put(store, id, static_cast<float>(id));
  const size_t bytes_at_20k = store.bytes();
  EXPECT_LE(store.size(), kCap);
  EXPECT_GE(store.size(), kCap * 7 / 8);  // evicts a 1/16 batch at a time, not everything
  for (uint64_t id = 20001; id <= 200000; ++id) Put(store, id, static_cast<float>(id));
  EXPECT_LE(store.size(), kCap);
  // Evicted rows' slots are reused: memory does not grow with the ids seen.
  EXPECT_EQ(store.bytes(), bytes_at_20k);
  // The most recently updated ids are all there, with their own values.
  std::vector<uint64_t> recent;
  for (uint64_t id = 200000 - 500; id <= 200000; ++id) recent.push_back(id);
  const std::vector<float> got = ReadFirst(store, recent);
  for (size_t i = 0; i < recent.size(); ++i) EXPECT_EQ(got[i], static_cast<float>(recent[i]));
  // The oldest are gone; counters add up.
  EXPECT_EQ(ReadFirst(store, {1})[0], -1.f);
  const StoreCounters c = store.counters();
  EXPECT_EQ(c.admitted, 200000u);
  EXPECT_EQ(c.admitted - c.evicted, store.size());
  // Every live row is visited once by ForEach, holding its own id's value.
  size_t seen = 0;
  store.ForEach([&](uint64_t id, const float* row) {
    ++seen;
    EXPECT_EQ(row[0], static_cast<float>(id));
  });
  EXPECT_EQ(seen, store.size());
}

TEST(EmbeddingStoreBoundsTest, EvictNotUpdatedInDropsStaleRowsAndLogsThemAsDeletions) {
  EmbeddingStore store(kFloats, {.admit_count = 0, .capacity = 0, .log_deletions = true});
  for (uint64_t id = 1; id <= 1000; ++id) Put(store, id, 1.f);  // ticks 1..1000
  store.set_epoch(2);
  for (uint64_t id = 1; id <= 100; ++id) Put(store, id, 2.f);  // refreshed: ticks 1001..1100
  EXPECT_EQ(store.EvictNotUpdatedIn(100), 900u);  // keeps the rows of the last 100 calls
  EXPECT_EQ(store.size(), 100u);
  std::set<uint64_t> deleted;
  store.ForEachDeletedSince(1, [&](uint64_t id) { deleted.insert(id); });
  EXPECT_EQ(deleted.size(), 900u);
  EXPECT_EQ(*deleted.begin(), 101u);
  size_t changed = 0;
  store.ForEachChangedSince(1, [&](uint64_t id, const float*) {
    EXPECT_LE(id, 100u);
    ++changed;
  });
  EXPECT_EQ(changed, 100u);
  store.TrimDeletions(2);
  EXPECT_EQ(store.deletions(), 0u);
  // A deleted id comes back as a new row from its initial value.
  Put(store, 500, 5.f);
  EXPECT_EQ(ReadFirst(store, {500, 600}), (std::vector<float>{5.f, -1.f}));
}

// Pushes from several threads into a capped store (evicting all the time) while others pull
// and iterate: every row a reader sees is whole and belongs to the id it was asked for.
TEST(EmbeddingStoreBoundsTest, ConcurrentPullsPushesAndIterationWhileEvicting) {
  EmbeddingStore store(kFloats, {.admit_count = 2, .capacity = 1024, .log_deletions = true});
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0}, reads{0};
  const auto value_of = [](uint64_t id) { return static_cast<float>(id % 100000); };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> ids(64);
      uint64_t x = 12345 + static_cast<uint64_t>(t);
      for (int round = 0; round < 3000; ++round) {
        for (auto& id : ids) {
          x = x * 6364136223846793005ULL + 1442695040888963407ULL;
          id = (x >> 33) % 20000 + 1;
        }
        store.Update(
            ids.data(), ids.size(), false,
            [&](uint64_t id, float* row) { Fill(row, value_of(id)); },
            [&](size_t i, float* row) {
              if (row != nullptr) Fill(row, value_of(ids[i]));
            });
      }
    });
  }
  std::thread reader([&] {
    std::vector<uint64_t> ids(64);
    for (uint64_t k = 0; !stop.load(); ++k) {
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = (k * 64 + i) % 20000 + 1;
      store.Read(ids.data(), ids.size(), [&](size_t i, const float* row) {
        if (row == nullptr) return;
        reads.fetch_add(1);
        for (size_t f = 0; f < kFloats; ++f) {
          if (row[f] != value_of(ids[i])) bad.fetch_add(1);
        }
      });
      store.ForEach([&](uint64_t id, const float* row) {
        for (size_t f = 0; f < kFloats; ++f) {
          if (row[f] != value_of(id)) bad.fetch_add(1);
        }
      });
    }
  });
  for (auto& t : threads) t.join();
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  EXPECT_LE(store.size(), 1024u + 3 * 64);  // the cap, give or take running calls' rows
  EXPECT_GT(store.counters().evicted, 0u);
  EXPECT_GT(store.counters().filtered, 0u);
}

// The update count is 32 bits and wraps after ~4 billion pushes to a PS: ages are taken
// back from the current count, so the rows updated just after the wrap (small ticks) are the
// newest, not the oldest.
TEST(EmbeddingStoreBoundsTest, CapacityKeepsTheRecentRowsAcrossAWrapOfTheUpdateCount) {
  constexpr size_t kCap = 2048;
  EmbeddingStore store(kFloats, {.admit_count = 0, .capacity = kCap, .log_deletions = false});
  store.set_tick(UINT32_MAX - 10000);  // wraps at the 10,001st call below
  for (uint64_t id = 1; id <= 20000; ++id) Put(store, id, static_cast<float>(id));
  EXPECT_LT(store.tick(), 20000u);  // it did wrap
  EXPECT_LE(store.size(), kCap);
  std::vector<uint64_t> recent;
  for (uint64_t id = 20000 - 500; id <= 20000; ++id) recent.push_back(id);
  const std::vector<float> got = ReadFirst(store, recent);
  size_t kept = 0;
  for (size_t i = 0; i < recent.size(); ++i) kept += got[i] == static_cast<float>(recent[i]);
  EXPECT_EQ(kept, recent.size());
  // The rows of before the wrap are the ones that went.
  EXPECT_EQ(ReadFirst(store, {5000, 9000}), (std::vector<float>{-1.f, -1.f}));
  // EvictNotUpdatedIn counts back across the wrap too: the last 100 calls' rows stay.
  store.EvictNotUpdatedIn(100);
  EXPECT_EQ(store.size(), 100u);
  EXPECT_EQ(ReadFirst(store, {20000})[0], 20000.f);
}

// An incremental checkpoint reads the rows changed since the previous epoch from per-stripe
// lists, not from a scan: through updates, repeats, evictions and the reuse of evicted rows
// within the epoch, each live row stamped in the epoch is visited exactly once, and no other.
TEST(EmbeddingStoreBoundsTest, ChangedSinceThePreviousEpochVisitsEachChangedRowOnce) {
  constexpr size_t kCap = 4096;
  EmbeddingStore store(
      kFloats, {.admit_count = 0, .capacity = kCap, .log_deletions = true, .list_changes = true});
  for (uint64_t id = 1; id <= 3000; ++id) Put(store, id, 1.f);
  store.set_epoch(2);
  std::set<uint64_t> touched;
  for (uint64_t id = 1; id <= 3000; id += 7) {  // updated twice each: listed once
    Put(store, id, 2.f);
    Put(store, id, 2.f);
    touched.insert(id);
  }
  for (uint64_t id = 100000; id < 104000; ++id) {  // new rows: evictions and reuse in-epoch
    Put(store, id, 2.f);
    touched.insert(id);
  }
  std::set<uint64_t> live;
  store.ForEach([&](uint64_t id, const float*) { live.insert(id); });
  std::set<uint64_t> want;
  for (const uint64_t id : touched) {
    if (live.count(id) != 0) want.insert(id);
  }
  ASSERT_GT(store.counters().evicted, 1000u);  // rows were evicted and their numbers reused
  std::multiset<uint64_t> got;
  store.ForEachChangedSince(1, [&](uint64_t id, const float* row) {
    got.insert(id);
    EXPECT_EQ(row[0], 2.f);
  });
  EXPECT_EQ(got.size(), want.size());  // no row twice
  EXPECT_EQ(std::set<uint64_t>(got.begin(), got.end()), want);
  // A new epoch starts an empty list; older epochs fall back to the scan, same rows.
  size_t all_since_1 = 0;
  store.set_epoch(3);
  store.ForEachChangedSince(1, [&](uint64_t, const float*) { ++all_since_1; });
  EXPECT_EQ(all_since_1, want.size());
  size_t since_2 = 0;
  store.ForEachChangedSince(2, [&](uint64_t, const float*) { ++since_2; });
  EXPECT_EQ(since_2, 0u);
  Put(store, 1, 3.f);
  store.ForEachChangedSince(2, [&](uint64_t id, const float*) {
    ++since_2;
    EXPECT_EQ(id, 1u);
  });
  EXPECT_EQ(since_2, 1u);
}

}  // namespace
}  // namespace kubetrain::trainer
