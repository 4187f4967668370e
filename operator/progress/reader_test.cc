#include "operator/progress/reader.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

namespace kubetrain::progress {
namespace {

using namespace std::chrono_literals;

// A real HTTP server on 127.0.0.1 standing in for a trainer.
class FakeTrainer {
 public:
  explicit FakeTrainer(std::string path = "/metrics") {
    server_.Get(path, [this](const httplib::Request&, httplib::Response& res) {
      ++requests_;
      std::lock_guard lock(mu_);
      res.set_content(body_, "text/plain; version=0.0.4");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeTrainer() {
    server_.stop();
    thread_.join();
  }
  void Serve(std::string body) {
    std::lock_guard lock(mu_);
    body_ = std::move(body);
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/metrics"; }
  int requests() const { return requests_; }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::string body_;
};

std::string Metrics(int64_t step, int64_t total) {
  return "kubetrain_trainer_step " + std::to_string(step) + "\nkubetrain_trainer_total_steps " +
         std::to_string(total) + "\nkubetrain_trainer_samples_per_second 1000\n";
}

bool Eventually(const std::function<bool()>& f) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (f()) return true;
    std::this_thread::sleep_for(5ms);  // poll interval, not synchronisation
  }
  return f();
}

ReaderOptions FastOptions() {
  ReaderOptions o;
  o.schedule = {.qps = 1000, .burst = 100, .interval = 10ms, .backoff_base = 1h};
  o.tracker.min_publish_interval = 0s;
  o.connect_timeout = 500ms;
  o.read_timeout = 500ms;
  return o;
}

class Changes {
 public:
  void Add(const std::string& key) {
    std::lock_guard lock(mu_);
    keys_.insert(key);
  }
  bool Has(const std::string& key) {
    std::lock_guard lock(mu_);
    return keys_.count(key) > 0;
  }

 private:
  std::mutex mu_;
  std::set<std::string> keys_;
};

TEST(ProgressReaderTest, ReadsATrainerAndPublishesItsProgress) {
  FakeTrainer trainer;
  trainer.Serve(Metrics(40, 100));
  runtime::Metrics registry;
  Changes changes;
  ProgressReader reader(
      FastOptions(), [&](const std::string& k) { changes.Add(k); }, &registry);
  reader.Start();
  reader.SetTarget("ns/job", ScrapeTarget{trainer.Url(), "uid-1", "worker-0"});
  ASSERT_TRUE(Eventually([&] { return changes.Has("ns/job"); }));
  auto p = reader.Latest("ns/job");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 40);
  EXPECT_EQ(p->percent, 40);
  EXPECT_EQ(p->samples_per_second, 1000);
  EXPECT_EQ(p->replica, "worker-0");
  trainer.Serve(Metrics(90, 100));
  ASSERT_TRUE(Eventually([&] {
    auto q = reader.Latest("ns/job");
    return q && q->step == 90;
  }));
  EXPECT_GE(registry.Get("kubetrain_progress_reads_total", "result=\"ok\""), 2);
  reader.Forget("ns/job");
  EXPECT_FALSE(reader.Latest("ns/job"));
}

TEST(ProgressReaderTest, ServerWithoutTrainerMetricsIsReadOnceAndBacksOff) {
  FakeTrainer other;
  other.Serve("go_goroutines 12\n");
  runtime::Metrics registry;
  Changes changes;
  ProgressReader reader(
      FastOptions(), [&](const std::string& k) { changes.Add(k); }, &registry);
  reader.Start();
  reader.SetTarget("ns/other", ScrapeTarget{other.Url(), "uid-1", "worker-0"});
  ASSERT_TRUE(Eventually([&] {
    return registry.Get("kubetrain_progress_reads_total", "result=\"no_metrics\"") >= 1;
  }));
  // A healthy job read meanwhile shows the reader keeps going; the failing
  // target waits out its backoff (1 h) instead of being read every 10 ms.
  FakeTrainer trainer;
  trainer.Serve(Metrics(1, 10));
  reader.SetTarget("ns/good", ScrapeTarget{trainer.Url(), "uid-2", "worker-0"});
  ASSERT_TRUE(Eventually([&] { return trainer.requests() >= 20; }));
  EXPECT_EQ(other.requests(), 1);
  EXPECT_FALSE(reader.Latest("ns/other"));
  EXPECT_FALSE(changes.Has("ns/other"));
}

TEST(ProgressReaderTest, UnreachableTargetCountsAFailureWithoutProgress) {
  // A port nothing listens on: connection refused.
  int port = 0;
  {
    httplib::Server s;
    port = s.bind_to_any_port("127.0.0.1");
  }
  runtime::Metrics registry;
  ProgressReader reader(
      FastOptions(), [](const std::string&) {}, &registry);
  reader.Start();
  reader.SetTarget("ns/j",
                   ScrapeTarget{"http://127.0.0.1:" + std::to_string(port) + "/metrics", "u", "w"});
  ASSERT_TRUE(Eventually([&] {
    return registry.Get("kubetrain_progress_reads_total", "result=\"unreachable\"") >= 1;
  }));
  EXPECT_FALSE(reader.Latest("ns/j"));
}

TEST(ProgressReaderTest, OversizedBodyIsAnError) {
  FakeTrainer big;
  big.Serve(std::string(1 << 20, '#'));
  runtime::Metrics registry;
  ReaderOptions o = FastOptions();
  o.max_body_bytes = 4096;
  ProgressReader reader(
      o, [](const std::string&) {}, &registry);
  reader.Start();
  reader.SetTarget("ns/j", ScrapeTarget{big.Url(), "u", "w"});
  ASSERT_TRUE(Eventually(
      [&] { return registry.Get("kubetrain_progress_reads_total", "result=\"error\"") >= 1; }));
  EXPECT_FALSE(reader.Latest("ns/j"));
}

}  // namespace
}  // namespace kubetrain::progress
