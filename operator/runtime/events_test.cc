// EventRecorder behaviour that needs no apiserver. Aggregation and the
// per-object limit against a real apiserver are in tests/kube.
#include "operator/runtime/events.h"

#include <gtest/gtest.h>

namespace kubetrain::runtime {
namespace {

TEST(EventRecorderTest, RecordNeverBlocksAndShutdownIsBoundedWhenApiserverIsDown) {
  kube::Config cfg;
  cfg.server = "http://127.0.0.1:1";  // nothing listens: every send fails
  cfg.max_retries = 1;
  auto client = kube::Client::Create(cfg);
  ASSERT_TRUE(client.ok());
  EventRecorderOptions opts;
  opts.shutdown_grace = std::chrono::milliseconds(200);
  auto start = std::chrono::steady_clock::now();
  {
    EventRecorder rec(client->get(), opts);
    ObjectReference ref{"v1", "Pod", "ns", "p", "uid-1"};
    for (int i = 0; i < 40; ++i) rec.Record(ref, "Warning", "R", "A", std::to_string(i));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  }  // destructor: sends for 200 ms, then drops the rest (sending all would take ~4 s)
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
}

TEST(EventRecorderTest, PerObjectBurstIsEnforcedAtRecordTime) {
  kube::Config cfg;
  cfg.server = "http://127.0.0.1:1";
  cfg.max_retries = 0;
  auto client = kube::Client::Create(cfg);
  ASSERT_TRUE(client.ok());
  EventRecorderOptions opts;
  opts.per_object_burst = 3;
  opts.shutdown_grace = std::chrono::milliseconds(0);
  EventRecorder rec(client->get(), opts);
  ObjectReference a{"v1", "Pod", "ns", "a", "uid-a"}, b{"v1", "Pod", "ns", "b", "uid-b"};
  for (int i = 0; i < 5; ++i) rec.Record(a, "Normal", "R", "A", "x");
  for (int i = 0; i < 2; ++i) rec.Record(b, "Normal", "R", "A", "x");
  EXPECT_EQ(rec.dropped(), 2u);  // a: 5 - 3; b is under its own limit
}

}  // namespace
}  // namespace kubetrain::runtime
