#include "operator/runtime/memory.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace kubetrain::runtime {
namespace {

// glibc accepts the settings; allocation still works from many threads with
// the arena cap, and trimming after a large free is harmless.
TEST(MemoryTest, TuneMallocAndReleaseFreeMemory) {
  EXPECT_TRUE(TuneMalloc());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([] {
      std::vector<std::unique_ptr<char[]>> blocks;
      for (int i = 0; i < 1000; ++i) blocks.push_back(std::make_unique<char[]>(1000 + i));
    });
  }
  for (auto& t : threads) t.join();
  auto big = std::make_unique<char[]>(4 << 20);
  big[0] = 1;
  big.reset();
  ReleaseFreeMemory();
  auto again = std::make_unique<char[]>(64);
  EXPECT_NE(again.get(), nullptr);
}

}  // namespace
}  // namespace kubetrain::runtime
