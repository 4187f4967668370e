#include "trainer/serve/batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

namespace kubetrain::trainer::serve {
namespace {

using namespace std::chrono_literals;

// A batch of n one-feature examples with values first, first + 1, ...
Batch Examples(int n, float first) {
  Batch b;
  b.size = n;
  b.num_dense = 1;
  for (int i = 0; i < n; ++i) b.dense.push_back(first + static_cast<float>(i));
  b.label.assign(n, 0.f);
  return b;
}

// A stand-in model: multiplies its input by `factor`.
struct Scale {
  float factor = 2;
};
using ScaleBatcher = Batcher<Scale>;
std::shared_ptr<Scale> Doubler() {
  static const auto doubler = std::make_shared<Scale>(Scale{2});
  return doubler;
}

// Runs the model and records the batch sizes it saw.
struct Recorder {
  std::mutex mu;
  std::vector<int> sizes;
  ScaleBatcher::RunFn Fn() {
    return [this](Scale& m, const Batch& b, std::vector<float>* out) {
      {
        std::lock_guard lock(mu);
        sizes.push_back(b.size);
      }
      out->clear();
      for (float v : b.dense) out->push_back(m.factor * v);
      return Status::Ok();
    };
  }
  std::vector<int> Sizes() {
    std::lock_guard lock(mu);
    return sizes;
  }
};

using Result = std::promise<StatusOr<std::vector<float>>>;

TEST(Batcher, ConcurrentRequestsRunAsOneBatchAsSoonAsItIsFull) {
  Recorder rec;
  BatcherOptions o;
  o.max_batch = 4;
  o.max_wait = 60s;  // a full batch must not wait for this
  ScaleBatcher batcher(o, rec.Fn());
  std::vector<Result> results(4);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(batcher
                    .Submit(Doubler(), Examples(1, static_cast<float>(10 * i)),
                            [&results, i](StatusOr<std::vector<float>> r) {
                              results[i].set_value(std::move(r));
                            })
                    .ok());
  }
  for (int i = 0; i < 4; ++i) {
    auto f = results[i].get_future();
    ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
    auto r = f.get();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, std::vector<float>({20.f * i}));  // each gets its own row back
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  EXPECT_EQ(rec.Sizes(), std::vector<int>({4}));
  EXPECT_EQ(batcher.stats().batches, 1u);
}

TEST(Batcher, ALoneRequestRunsAfterMaxWait) {
  Recorder rec;
  BatcherOptions o;
  o.max_batch = 8;
  o.max_wait = 50ms;
  ScaleBatcher batcher(o, rec.Fn());
  Result result;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      batcher.Submit(Doubler(), Examples(3, 1), [&](auto r) { result.set_value(std::move(r)); })
          .ok());
  auto f = result.get_future();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  EXPECT_EQ(*f.get(), std::vector<float>({2, 4, 6}));
  EXPECT_EQ(rec.Sizes(), std::vector<int>({3}));
}

TEST(Batcher, ARequestLargerThanABatchRunsInChunksInOrder) {
  Recorder rec;
  BatcherOptions o;
  o.max_batch = 4;
  o.max_wait = 0ms;
  o.max_queue = 100;
  ScaleBatcher batcher(o, rec.Fn());
  Result result;
  ASSERT_TRUE(
      batcher.Submit(Doubler(), Examples(10, 0), [&](auto r) { result.set_value(std::move(r)); })
          .ok());
  auto f = result.get_future();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  auto r = f.get();
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ((*r)[i], 2.f * i);
  EXPECT_EQ(rec.Sizes(), std::vector<int>({4, 4, 2}));
}

TEST(Batcher, StopAnswersEveryQueuedRequestAndThenRefuses) {
  Recorder rec;
  BatcherOptions o;
  o.max_batch = 2;
  o.max_wait = 60s;  // only Stop can make these run before the test times out
  std::atomic<int> answered = 0;
  {
    ScaleBatcher batcher(o, rec.Fn());
    ASSERT_TRUE(
        batcher.Submit(Doubler(), Examples(1, 1), [&](auto r) { answered += r.ok(); }).ok());
    const auto start = std::chrono::steady_clock::now();
    batcher.Stop();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
    EXPECT_EQ(answered.load(), 1);
    EXPECT_EQ(batcher.Submit(Doubler(), Examples(1, 1), [&](auto) { answered += 100; }).code(),
              StatusCode::kUnavailable);
  }
  EXPECT_EQ(answered.load(), 1);
}

TEST(Batcher, AFullQueueRefusesAndABatchErrorReachesEachRequest) {
  BatcherOptions o;
  o.max_batch = 2;
  o.max_wait = 60s;
  o.max_queue = 1;
  ScaleBatcher batcher(
      o, [](Scale&, const Batch&, std::vector<float>*) { return Internal("oneDNN: boom"); });
  Result first;
  ASSERT_TRUE(
      batcher.Submit(Doubler(), Examples(1, 1), [&](auto r) { first.set_value(std::move(r)); })
          .ok());
  EXPECT_EQ(batcher.Submit(Doubler(), Examples(1, 1), [](auto) {}).code(),
            StatusCode::kUnavailable);
  batcher.Stop();
  auto r = first.get_future().get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "oneDNN: boom");
  EXPECT_EQ(batcher.stats().refused, 1u);
}

// Issue 33: a lone small request runs on the caller's thread (no hand-off), but never
// beside a running batch (the Predictor runs one batch at a time) nor ahead of queued ones.
TEST(Batcher, RunNowIfIdleRunsOnTheCallersThreadOnlyWhenNothingQueuedOrRunning) {
  std::promise<void> entered, release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> block_next{false};
  std::mutex mu;
  std::vector<std::thread::id> threads;
  BatcherOptions o;
  o.max_batch = 4;
  o.max_wait = 0us;
  ScaleBatcher batcher(o, [&](Scale&, const Batch& b, std::vector<float>* out) {
    {
      std::lock_guard lock(mu);
      threads.push_back(std::this_thread::get_id());
    }
    if (block_next.exchange(false)) {
      entered.set_value();
      gate.wait();
    }
    out->assign(b.dense.begin(), b.dense.end());
    return Status::Ok();
  });
  auto now = batcher.RunNowIfIdle(*Doubler(), Examples(2, 3));
  ASSERT_TRUE(now.has_value());
  ASSERT_TRUE(now->ok());
  EXPECT_EQ(**now, std::vector<float>({3, 4}));
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(threads.size(), 1u);
    EXPECT_EQ(threads[0], std::this_thread::get_id());
  }
  // While the worker runs a batch: refused (the caller queues instead).
  block_next = true;
  Result queued;
  ASSERT_TRUE(batcher
                  .Submit(Doubler(), Examples(1, 7),
                          [&](StatusOr<std::vector<float>> r) { queued.set_value(std::move(r)); })
                  .ok());
  entered.get_future().wait();
  EXPECT_FALSE(batcher.RunNowIfIdle(*Doubler(), Examples(1, 1)).has_value());
  EXPECT_FALSE(
      batcher.RunNowIfIdle(*Doubler(), Examples(5, 1)).has_value());  // larger than a batch
  release.set_value();
  EXPECT_EQ(*queued.get_future().get(), std::vector<float>({7}));
  EXPECT_EQ(batcher.stats().inline_requests, 1u);
  batcher.Stop();
  EXPECT_FALSE(batcher.RunNowIfIdle(*Doubler(), Examples(1, 1)).has_value());
}

// A request is computed by the model it was submitted with: a newer model swapped in while
// it waits (a hot reload) computes only the requests submitted for it, and one batch never
// mixes the two (before, the batch ran on whatever model was current when it started, and
// the answer named the version the request had been checked against).
TEST(Batcher, EachRequestIsComputedByTheModelItWasSubmittedWithNeverMixedInABatch) {
  Recorder rec;
  BatcherOptions o;
  o.max_batch = 8;
  o.max_wait = 60s;  // only a full batch or Stop runs them: all four are queued together
  o.max_queue = 100;
  ScaleBatcher batcher(o, rec.Fn());
  auto old_model = std::make_shared<Scale>(Scale{2});
  auto new_model = std::make_shared<Scale>(Scale{10});
  std::vector<Result> results(4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(batcher
                    .Submit(i < 2 ? old_model : new_model, Examples(1, static_cast<float>(i + 1)),
                            [&results, i](StatusOr<std::vector<float>> r) {
                              results[i].set_value(std::move(r));
                            })
                    .ok());
  }
  // The queue holds the old model alive even when the server has dropped it.
  std::weak_ptr<Scale> old_alive = old_model;
  old_model.reset();
  EXPECT_FALSE(old_alive.expired());
  batcher.Stop();  // drains: two batches, one per model
  const std::vector<float> want = {2 * 1, 2 * 2, 10 * 3, 10 * 4};
  for (int i = 0; i < 4; ++i) {
    auto f = results[i].get_future();
    ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
    auto r = f.get();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, std::vector<float>({want[i]})) << "request " << i;
  }
  EXPECT_EQ(rec.Sizes(), std::vector<int>({2, 2}));
  EXPECT_TRUE(old_alive.expired());  // released once its requests were answered
  EXPECT_EQ(batcher.Submit(nullptr, Examples(1, 1), [](auto) {}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubetrain::trainer::serve
