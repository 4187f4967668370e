#include "operator/local/console.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace kubetrain::local {
namespace {

// Captures what a Console writes.
class Captured {
 public:
  Captured() : out_(open_memstream(&buf_, &size_)) {}
  ~Captured() {
    std::fclose(out_);
    std::free(buf_);
  }
  std::FILE* file() { return out_; }
  std::string text() {
    std::fflush(out_);
    return std::string(buf_, size_);
  }

 private:
  char* buf_ = nullptr;
  size_t size_ = 0;
  std::FILE* out_;
};

TEST(ParseStepLineTest, ReadsTheTrainersProgressLines) {
  int64_t step = 0;
  double loss = 0;
  EXPECT_TRUE(ParseStepLine("[...] [worker-0] step 120 loss 0.4375 (35 steps/s)", step, loss));
  EXPECT_EQ(step, 120);
  EXPECT_DOUBLE_EQ(loss, 0.4375);
  EXPECT_FALSE(ParseStepLine("evaluating on 1000 examples", step, loss));
  EXPECT_FALSE(ParseStepLine("substep 7 loss 1", step, loss));
  EXPECT_EQ(step, 120);
}

TEST(ParseStepLineTest, OutOfRangeKeepsTheLastValues) {
  int64_t step = 5;
  double loss = 1.5;
  EXPECT_TRUE(ParseStepLine("step 99999999999999999999999 loss 2", step, loss));
  EXPECT_EQ(step, 5);
  EXPECT_DOUBLE_EQ(loss, 1.5);
}

TEST(ConsoleTest, PadsTheNameColumnWithoutColour) {
  Captured c;
  Console console(c.file(), /*color=*/false, /*progress_bar=*/false,
                  [] { return std::vector<ReplicaProgress>{}; });
  console.SetNameWidth(10);
  console.Line("worker-0", "hello");
  console.Say("started");
  EXPECT_EQ(c.text(), "worker-0   | hello\nkubetrain  | started\n");
}

TEST(ConsoleTest, GivesEachReplicaItsOwnColour) {
  Captured c;
  Console console(c.file(), /*color=*/true, /*progress_bar=*/false,
                  [] { return std::vector<ReplicaProgress>{}; });
  console.AddReplica("ps-0");
  console.AddReplica("worker-0");
  console.AddReplica("ps-0");  // keeps its colour
  console.Line("worker-0", "x");
  console.Line("ps-0", "y");
  EXPECT_EQ(c.text(), "\033[33mworker-0  |\033[0m x\n\033[36mps-0      |\033[0m y\n");
}

TEST(ConsoleTest, DrawsTheProgressBarAfterEachLineAndClearsIt) {
  Captured c;
  Console console(c.file(), /*color=*/false, /*progress_bar=*/true, [] {
    return std::vector<ReplicaProgress>{{"worker-0", 50, 100, 0.5}, {"worker-1", 100, 100, 0.25}};
  });
  console.Line("worker-0", "a");
  console.ClearProgress();
  EXPECT_EQ(c.text(),
            "worker-0  | a\n[######################........]  75%  worker-0 50/100 loss 0.5000"
            "  worker-1 100/100 loss 0.2500\r\033[2K");
}

}  // namespace
}  // namespace kubetrain::local
