#include "operator/runtime/workqueue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "operator/runtime/controller.h"
#include "operator/runtime/metrics.h"

namespace kubetrain::runtime {
namespace {

using namespace std::chrono_literals;

TEST(ItemBackoffTest, DoublesFrom5msAndCapsAt1000s) {
  ItemBackoff b(5ms, 1000s);
  EXPECT_EQ(b.When("k"), 5ms);
  EXPECT_EQ(b.When("k"), 10ms);
  EXPECT_EQ(b.When("k"), 20ms);
  EXPECT_EQ(b.NumRequeues("k"), 3);
  EXPECT_EQ(b.When("other"), 5ms);  // per item
  for (int i = 0; i < 100; ++i) (void)b.When("k");
  EXPECT_EQ(b.When("k"), 1000s);
  b.Forget("k");
  EXPECT_EQ(b.NumRequeues("k"), 0);
  EXPECT_EQ(b.When("k"), 5ms);
}

TEST(WorkQueueTest, DuplicateAddsAreQueuedOnce) {
  WorkQueue q;
  q.Add("a");
  q.Add("a");
  q.Add("b");
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(*q.Get(), "a");
  EXPECT_EQ(*q.Get(), "b");
}

TEST(WorkQueueTest, ItemAddedWhileProcessingIsProcessedAgainAfterDone) {
  WorkQueue q;
  q.Add("a");
  auto k = q.Get();
  ASSERT_EQ(*k, "a");
  q.Add("a");  // while processing: not handed out twice
  EXPECT_EQ(q.Len(), 0u);
  q.Done("a");
  EXPECT_EQ(q.Len(), 1u);  // ... but queued again on Done
  EXPECT_EQ(*q.Get(), "a");
  q.Done("a");
  EXPECT_EQ(q.Len(), 0u);
}

// Delays are measured on the queue's clock: a FakeClock delivers at the
// deadline exactly, without the test waiting for it.
WorkQueueOptions OnClock(Clock* clock) {
  WorkQueueOptions o;
  o.clock = clock;
  return o;
}

TEST(WorkQueueTest, AddAfterDeliversAtTheDelayNotBefore) {
  FakeClock clock;
  WorkQueue q(OnClock(&clock));
  q.AddAfter("a", 50ms);
  clock.Advance(49ms);
  // Not due: the timer was not woken, so this is no race.
  EXPECT_EQ(q.Len(), 0u);
  EXPECT_EQ(q.DelayedLen(), 1u);
  EXPECT_TRUE(q.Idle());
  clock.Advance(1ms);
  EXPECT_FALSE(q.Idle());    // due now, whether or not the timer has run
  EXPECT_EQ(*q.Get(), "a");  // blocks until the timer moves it
  EXPECT_EQ(q.DelayedLen(), 0u);
}

// The real clock still works (the default).
TEST(WorkQueueTest, AddAfterOnTheRealClockDelivers) {
  WorkQueue q;
  const auto start = std::chrono::steady_clock::now();
  q.AddAfter("a", 20ms);
  EXPECT_EQ(*q.Get(), "a");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
}

TEST(WorkQueueTest, EarlierAddAfterOvertakesALaterOne) {
  FakeClock clock;
  WorkQueue q(OnClock(&clock));
  q.AddAfter("late", 10s);
  q.AddAfter("soon", 10ms);
  clock.Advance(10ms);
  EXPECT_EQ(*q.Get(), "soon");
  EXPECT_EQ(q.DelayedLen(), 1u);  // "late" still waits
  q.Done("soon");
  EXPECT_TRUE(q.Idle());
  clock.Advance(10s);
  EXPECT_EQ(*q.Get(), "late");
}

// A key waits at most once: a later AddAfter of a waiting key keeps the
// earlier time, an earlier one moves it forward (client-go's delaying queue).
TEST(WorkQueueTest, DelayedKeyIsKeptOnceAtItsEarliestTime) {
  FakeClock clock;
  WorkQueue q(OnClock(&clock));
  q.AddAfter("a", 10s);
  q.AddAfter("a", 20s);
  EXPECT_EQ(q.DelayedLen(), 1u);
  q.AddAfter("a", 10ms);  // earlier: overtakes the 10 s entry
  EXPECT_EQ(q.DelayedLen(), 1u);
  clock.Advance(10ms);
  EXPECT_EQ(*q.Get(), "a");
  q.Done("a");
  EXPECT_EQ(q.DelayedLen(), 0u);
  EXPECT_TRUE(q.Idle());
}

// 10,000 jobs created and deleted, each requeued by its
// timers and by retries, leave one delayed entry per key, not one per call.
TEST(WorkQueueTest, TenThousandJobsRequeuedManyTimesHoldOneDelayedItemEach) {
  WorkQueueOptions opts;
  opts.base_delay = 1s;
  opts.qps = 0;
  WorkQueue q(opts);
  constexpr int kJobs = 10'000;
  for (int round = 0; round < 5; ++round) {
    for (int j = 0; j < kJobs; ++j) {
      const std::string key = "ns/job-" + std::to_string(j);
      q.AddAfter(key, std::chrono::seconds(600 + round));  // deadline/TTL requeues
      q.AddRateLimited(key);                               // a retry after an error
    }
  }
  std::printf("work queue: %d jobs x 10 requeues -> %zu delayed items\n", kJobs, q.DelayedLen());
  EXPECT_EQ(q.DelayedLen(), static_cast<size_t>(kJobs));
  for (int j = 0; j < kJobs; ++j) q.Forget("ns/job-" + std::to_string(j));  // deleted jobs
}

TEST(WorkQueueTest, AddRateLimitedBacksOffPerItem) {
  FakeClock clock;
  WorkQueue q(OnClock(&clock));
  q.AddRateLimited("a");  // 5 ms
  q.AddRateLimited("a");  // 10 ms: the earlier 5 ms entry stays
  EXPECT_EQ(q.NumRequeues("a"), 2);
  clock.Advance(4ms);
  EXPECT_TRUE(q.Idle());
  clock.Advance(1ms);
  EXPECT_EQ(*q.Get(), "a");
  q.Done("a");
  q.AddRateLimited("a");  // third failure: 5 ms * 2^2
  clock.Advance(19ms);
  EXPECT_TRUE(q.Idle());
  clock.Advance(1ms);
  EXPECT_EQ(*q.Get(), "a");
  q.Done("a");
  q.Forget("a");
  EXPECT_EQ(q.NumRequeues("a"), 0);
}

TEST(WorkQueueTest, ShutDownDrainsQueuedItemsThenReturnsNullopt) {
  WorkQueue q;
  q.Add("a");
  q.Add("b");
  q.ShutDown();
  q.Add("c");  // ignored
  EXPECT_EQ(*q.Get(), "a");
  EXPECT_EQ(*q.Get(), "b");
  EXPECT_FALSE(q.Get().has_value());
}

TEST(WorkQueueTest, ShutDownAndDrainWaitsForInFlightItems) {
  WorkQueue q;
  q.Add("a");
  auto k = q.Get();
  std::atomic<bool> done{false};
  std::thread worker([&] {
    std::this_thread::sleep_for(50ms);  // simulated work, not synchronisation
    done = true;
    q.Done(*k);
  });
  EXPECT_TRUE(q.ShutDownAndDrain(10s));
  EXPECT_TRUE(done.load());
  worker.join();
}

TEST(RunWorkersTest, ResultDecidesForgetRequeueOrRetry) {
  WorkQueue q(WorkQueueOptions{1ms, 1s, 1000, 1000, ""});
  std::mutex mu;
  std::map<std::string, int> calls;
  std::atomic<int> finished{0};
  Reconciler r = [&](const std::string& key) -> StatusOr<ReconcileResult> {
    int n;
    {
      std::lock_guard lock(mu);
      n = ++calls[key];
    }
    if (key == "flaky" && n < 3) return Unavailable("transient");
    // An error's code does not make it permanent: a 422 is retried too.
    if (key == "refused" && n < 2) return InvalidArgument("Invalid (422)");
    if (key == "bad") {
      ++finished;
      return ReconcileResult::Terminal(InvalidArgument("permanent"));
    }
    if (key == "timer" && n == 1) {
      ReconcileResult again;
      again.requeue_after = 20ms;
      return again;
    }
    ++finished;
    return ReconcileResult{};
  };
  q.Add("flaky");
  q.Add("bad");
  q.Add("timer");
  q.Add("refused");
  std::thread runner([&] { RunWorkers(q, 2, r); });
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (finished.load() < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);  // polling with a deadline
  q.ShutDown();
  runner.join();
  std::lock_guard lock(mu);
  EXPECT_EQ(calls["flaky"], 3);    // retried until it succeeded
  EXPECT_EQ(calls["bad"], 1);      // terminal: not retried
  EXPECT_EQ(calls["refused"], 2);  // an error, whatever its code: retried
  EXPECT_EQ(calls["timer"], 2);    // requeue_after ran it again
  EXPECT_EQ(q.NumRequeues("flaky"), 0);
}

TEST(WorkQueueTest, NamedQueueReportsDepthAddsAndRetries) {
  WorkQueueOptions opts;
  opts.name = "metrics-test";
  WorkQueue q(opts);
  const std::string labels = "name=\"metrics-test\"";
  // The registry is process-wide: compare against what was there before.
  const double adds = DefaultMetrics().Get("kubetrain_workqueue_adds_total", labels);
  const double retries = DefaultMetrics().Get("kubetrain_workqueue_retries_total", labels);
  q.Add("a");
  q.Add("b");
  q.Add("a");  // deduplicated: not an add
  EXPECT_EQ(DefaultMetrics().Get("kubetrain_workqueue_adds_total", labels), adds + 2);
  EXPECT_EQ(DefaultMetrics().Get("kubetrain_workqueue_depth", labels), 2);
  auto k = q.Get();
  EXPECT_EQ(DefaultMetrics().Get("kubetrain_workqueue_depth", labels), 1);
  q.AddRateLimited(*k);
  EXPECT_EQ(DefaultMetrics().Get("kubetrain_workqueue_retries_total", labels), retries + 1);
  q.Done(*k);
}

// On shutdown (or a lost lease) the workers stop taking
// keys at once; keys still queued are not reconciled (they were, one by one,
// before the Lease was released).
TEST(RunControllerTest, StopTakesNoMoreQueuedKeys) {
  WorkQueue q;
  std::atomic<int> reconciled{0};
  std::stop_source stop;
  Reconciler r = [&](const std::string&) -> StatusOr<ReconcileResult> {
    ++reconciled;
    stop.request_stop();  // shutdown arrives during the first reconcile
    return ReconcileResult{};
  };
  for (int i = 0; i < 100; ++i) q.Add(std::to_string(i) + "-key");
  RunController(stop.get_token(), q, 1, r);
  EXPECT_EQ(reconciled.load(), 1);
  EXPECT_EQ(q.Len(), 0u);
}

TEST(RunControllerTest, StopFinishesInFlightReconcileThenReturns) {
  WorkQueue q;
  std::atomic<bool> in_flight{false}, finished{false};
  std::stop_source stop;
  Reconciler r = [&](const std::string&) -> StatusOr<ReconcileResult> {
    in_flight = true;
    stop.request_stop();                // shutdown arrives mid-reconcile
    std::this_thread::sleep_for(50ms);  // the reconcile's own work
    finished = true;
    return ReconcileResult{};
  };
  q.Add("a");
  RunController(stop.get_token(), q, 2, r);  // returns only after "a" completed
  EXPECT_TRUE(in_flight.load());
  EXPECT_TRUE(finished.load());
  EXPECT_TRUE(q.ShuttingDown());
  q.Add("b");  // no new work after shutdown
  EXPECT_EQ(q.Len(), 0u);
}

}  // namespace
}  // namespace kubetrain::runtime
