// EventRecorder behaviour that needs no apiserver. Aggregation and the
// per-object limit against a real apiserver are in tests/kube.
#include "operator/runtime/events.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

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

// The per-object bucket refills on the recorder's clock: one event per
// 1 / per_object_qps once the burst is spent.
TEST(EventRecorderTest, PerObjectBucketRefillsOnTheClock) {
  FakeClock clock;
  kube::Config cfg;
  cfg.server = "http://127.0.0.1:1";
  cfg.max_retries = 0;
  auto client = kube::Client::Create(cfg);
  ASSERT_TRUE(client.ok());
  EventRecorderOptions opts;
  opts.per_object_burst = 2;
  opts.per_object_qps = 1.0 / 300;
  opts.shutdown_grace = std::chrono::milliseconds(0);
  opts.clock = &clock;
  EventRecorder rec(client->get(), opts);
  // A dropped event costs a token too, so each object is probed once.
  ObjectReference a{"v1", "Pod", "ns", "a", "uid-a"}, b{"v1", "Pod", "ns", "b", "uid-b"};
  for (int i = 0; i < 2; ++i) rec.Record(a, "Normal", "R", "A", "x");
  for (int i = 0; i < 2; ++i) rec.Record(b, "Normal", "R", "A", "x");
  EXPECT_EQ(rec.dropped(), 0u);  // both bursts spent
  clock.Advance(std::chrono::seconds(299));
  rec.Record(a, "Normal", "R", "A", "x");
  EXPECT_EQ(rec.dropped(), 1u);  // not refilled yet
  clock.Advance(std::chrono::seconds(1));
  rec.Record(b, "Normal", "R", "A", "x");
  EXPECT_EQ(rec.dropped(), 1u);  // 300 s: one token back
  rec.Record(b, "Normal", "R", "A", "x");
  EXPECT_EQ(rec.dropped(), 2u);  // and only one
}

// Accepts every Event POSTed to it and keeps the bodies.
class FakeEventSink {
 public:
  FakeEventSink() {
    server_.Post(R"(/apis/events.k8s.io/v1/namespaces/([^/]+)/events)",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   std::lock_guard lock(mu_);
                   bodies_.push_back(req.body);
                   res.status = 201;
                   res.set_content(req.body, "application/json");
                 });
    server_.Patch(R"(/apis/events.k8s.io/v1/namespaces/([^/]+)/events/([^/]+))",
                  [this](const httplib::Request& req, httplib::Response& res) {
                    std::lock_guard lock(mu_);
                    patches_.push_back(req.body);
                    res.status = 200;
                    res.set_content("{}", "application/json");
                  });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeEventSink() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::vector<std::string> bodies() {
    std::lock_guard lock(mu_);
    return bodies_;
  }
  std::vector<std::string> patches() {
    std::lock_guard lock(mu_);
    return patches_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> bodies_;
  std::vector<std::string> patches_;
};

// A repeat within the aggregation window counts into the Event's series (a
// PATCH); one after it, on the recorder's clock, is a new Event.
TEST(EventRecorderTest, ARepeatAfterTheAggregationWindowIsANewEvent) {
  FakeClock clock;
  FakeEventSink sink;
  kube::Config cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(sink.port());
  cfg.max_retries = 0;
  auto client = kube::Client::Create(cfg);
  ASSERT_TRUE(client.ok());
  EventRecorderOptions opts;
  opts.clock = &clock;
  opts.aggregation_window = std::chrono::seconds(360);
  EventRecorder rec(client->get(), opts);
  ObjectReference ref{"v1", "Pod", "ns", "p", "uid-p"};
  rec.Record(ref, "Warning", "R", "A", "same");
  rec.Flush();
  clock.Advance(std::chrono::seconds(359));
  rec.Record(ref, "Warning", "R", "A", "same");
  rec.Flush();
  EXPECT_EQ(sink.bodies().size(), 1u);
  EXPECT_EQ(sink.patches().size(), 1u);
  clock.Advance(std::chrono::seconds(360));
  rec.Record(ref, "Warning", "R", "A", "same");
  rec.Flush();
  EXPECT_EQ(sink.bodies().size(), 2u);
  EXPECT_EQ(sink.patches().size(), 1u);
}

// Per-object token buckets of objects that are gone must
// not pile up: 10,000 jobs created and deleted leave at most
// max_tracked_objects buckets, and the newest objects are still limited.
TEST(EventRecorderTest, TenThousandJobsKeepPerObjectBucketsBounded) {
  kube::Config cfg;
  cfg.server = "http://127.0.0.1:1";
  cfg.max_retries = 0;
  auto client = kube::Client::Create(cfg);
  ASSERT_TRUE(client.ok());
  EventRecorderOptions opts;
  opts.per_object_burst = 3;
  opts.max_pending = 100'000;  // nothing is dropped for lack of queue room
  opts.max_tracked_objects = 1000;
  opts.shutdown_grace = std::chrono::milliseconds(0);
  EventRecorder rec(client->get(), opts);
  constexpr int kJobs = 10'000;
  for (int j = 0; j < kJobs; ++j) {
    ObjectReference ref{"kubetrain.io/v1alpha1", "TrainingJob", "ns", "job-" + std::to_string(j),
                        "uid-" + std::to_string(j)};
    for (int e = 0; e < 3; ++e) rec.Record(ref, "Normal", "Created", "Create", "x");
  }
  std::printf("event recorder: %d jobs -> %zu per-object buckets (cap %zu)\n", kJobs,
              rec.tracked_objects(), opts.max_tracked_objects);
  EXPECT_LE(rec.tracked_objects(), opts.max_tracked_objects);
  // The most recent object keeps its bucket: a fourth event is over its burst.
  const uint64_t before = rec.dropped();
  rec.Record({"kubetrain.io/v1alpha1", "TrainingJob", "ns", "job-9999", "uid-9999"}, "Normal",
             "Created", "Create", "x");
  EXPECT_EQ(rec.dropped(), before + 1);
  rec.Record({"kubetrain.io/v1alpha1", "TrainingJob", "ns", "new", "uid-new"}, "Normal", "Created",
             "Create", "x");
  EXPECT_EQ(rec.dropped(), before + 1);  // a new object has its own burst
}

// A failed pod's termination message ends up in the note. A cut in the middle
// of a multi-byte character made json::dump throw on the recorder thread,
// which terminated the operator.
TEST(EventRecorderTest, LongMultiByteAndInvalidUtf8NotesAreSentNotFatal) {
  FakeEventSink sink;
  kube::Config cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(sink.port());
  cfg.qps = 0;
  auto client = kube::Client::Create(cfg);
  ASSERT_TRUE(client.ok());
  EventRecorder rec(client->get());
  const std::string euro = "\xE2\x82\xAC";
  std::string straddling = std::string(1023, 'a');
  for (int i = 0; i < 10; ++i) straddling += euro;
  rec.Record({"v1", "Pod", "ns", "p1", "uid-1"}, "Warning", "ReplicaFailed", "Fail", straddling);
  rec.Record({"v1", "Pod", "ns", "p2", "uid-2"}, "Warning", "ReplicaFailed", "Fail",
             "bad \xFF\xFE bytes \xE2\x82");
  rec.Flush();
  auto bodies = sink.bodies();
  ASSERT_EQ(bodies.size(), 2u);
  auto first = nlohmann::json::parse(bodies[0]);
  EXPECT_EQ(first["note"].get<std::string>(), std::string(1023, 'a'));  // cut before the euro
  auto second = nlohmann::json::parse(bodies[1]);
  EXPECT_EQ(second["note"].get<std::string>(),
            "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes \xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace kubetrain::runtime
