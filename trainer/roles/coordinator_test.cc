#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "trainer/roles/role.h"

namespace kubetrain::trainer::roles {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// WaitForWorkers on a FakeClock in a thread of its own: the test advances the time one
// poll at a time, once the wait sleeps again, and sees each poll as a done_count call.
class WaitForWorkersTest : public ::testing::Test {
 protected:
  void Start(int trainers, int done, Clock::Duration timeout) {
    WorkersWait w;
    w.trainers = trainers;
    w.done = done;
    w.timeout = timeout;
    w.clock = &clock_;
    thread_ = std::thread([this, w] {
      result_ = WaitForWorkers(
          w,
          [this]() -> StatusOr<int> {
            polls_++;
            if (!error_.ok()) return error_;
            return finished_.load();
          },
          [this] { return stop_.load(); });
      returned_ = true;
    });
  }
  // Advances one poll interval once the wait sleeps.
  void NextPoll() {
    ASSERT_TRUE(clock_.AwaitWaiters(1, seconds(10))) << "the wait does not sleep on the clock";
    clock_.Advance(milliseconds(200));
  }
  // The wait's result, once it returns (within 10 s of real time, else a failure).
  StatusOr<WorkersWaitEnd> Result() {
    const auto deadline = std::chrono::steady_clock::now() + seconds(10);
    while (!returned_ && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(1));  // polling with a deadline
    }
    if (!returned_) {
      ADD_FAILURE() << "the wait did not return";
      return Internal("the wait did not return");
    }
    thread_.join();
    return *result_;
  }
  void TearDown() override {
    if (thread_.joinable()) {  // a failed assertion left it waiting: end it
      stop_ = true;
      clock_.Advance(seconds(3600));
      thread_.join();
    }
  }

  FakeClock clock_;
  std::thread thread_;
  std::atomic<int> finished_{0};
  std::atomic<int> polls_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> returned_{false};
  Status error_;
  std::optional<StatusOr<WorkersWaitEnd>> result_;
};

TEST_F(WaitForWorkersTest, PollsEvery200msOfTheClockUntilEveryWorkerHasFinished) {
  const Clock::TimePoint start = clock_.Now();
  finished_ = 1;
  Start(/*trainers=*/3, /*done=*/1, seconds(60));
  NextPoll();
  NextPoll();
  ASSERT_TRUE(clock_.AwaitWaiters(1, seconds(10)));
  EXPECT_EQ(polls_, 2);
  EXPECT_FALSE(returned_);
  finished_ = 3;
  clock_.Advance(milliseconds(200));
  const auto r = Result();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, WorkersWaitEnd::kAllFinished);
  EXPECT_EQ(polls_, 3);
  EXPECT_EQ(clock_.Now() - start, milliseconds(600));
}

TEST_F(WaitForWorkersTest, ReturnsAtOnceWhenEveryWorkerHadFinished) {
  Start(/*trainers=*/2, /*done=*/2, seconds(60));
  const auto r = Result();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, WorkersWaitEnd::kAllFinished);
  EXPECT_EQ(polls_, 0);
}

TEST_F(WaitForWorkersTest, MissingWorkersAreDeadlineExceededOnlyOnceTheTimeoutHasPassed) {
  finished_ = 1;
  Start(/*trainers=*/2, /*done=*/1, seconds(1));
  for (int i = 0; i < 5; ++i) NextPoll();  // at the deadline, not past it: still waiting
  ASSERT_TRUE(clock_.AwaitWaiters(1, seconds(10)));
  EXPECT_FALSE(returned_);
  clock_.Advance(milliseconds(200));
  const auto r = Result();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r.status().message(), "only 1 of 2 workers finished within --finish-timeout");
  EXPECT_EQ(polls_, 6);
}

TEST_F(WaitForWorkersTest, AStopRequestEndsTheWaitBeforeTheNextPoll) {
  Start(/*trainers=*/2, /*done=*/0, seconds(60));
  NextPoll();
  ASSERT_TRUE(clock_.AwaitWaiters(1, seconds(10)));
  stop_ = true;
  clock_.Advance(milliseconds(200));
  const auto r = Result();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, WorkersWaitEnd::kStopRequested);
  EXPECT_EQ(polls_, 2);
}

TEST_F(WaitForWorkersTest, AnErrorCountingFinishedWorkersEndsTheWait) {
  error_ = Unavailable("ps-1 unreachable");
  Start(/*trainers=*/2, /*done=*/0, seconds(60));
  NextPoll();
  const auto r = Result();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(polls_, 1);
}

}  // namespace
}  // namespace kubetrain::trainer::roles
