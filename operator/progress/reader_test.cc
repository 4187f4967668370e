#include "operator/progress/reader.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/clock.h"
#include "operator/progress/fake_metrics_servers.h"

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

bool Eventually(const std::function<bool()>& f, std::chrono::steady_clock::duration within = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + within;
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
  o.total_timeout = 1s;
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

// The schedule runs on the injected clock: a job read once is read again
// only when that clock has moved past its interval (an hour here).
TEST(ProgressReaderTest, TheScheduleFollowsTheInjectedClock) {
  FakeTrainer trainer;
  trainer.Serve(Metrics(40, 100));
  FakeClock clock;
  ReaderOptions options = FastOptions();
  options.schedule.interval = 1h;
  options.clock = &clock;
  runtime::Metrics registry;
  ProgressReader reader(
      options, [](const std::string&) {}, &registry);
  reader.Start();
  reader.SetTarget("ns/job", ScrapeTarget{trainer.Url(), "uid-1", "worker-0"});
  ASSERT_TRUE(Eventually([&] {
    auto p = reader.Latest("ns/job");
    return p && p->step == 40;
  }));
  EXPECT_EQ(trainer.requests(), 1);
  trainer.Serve(Metrics(90, 100));
  clock.Advance(1h);
  ASSERT_TRUE(Eventually([&] {
    auto p = reader.Latest("ns/job");
    return p && p->step == 90;
  }));
  EXPECT_EQ(trainer.requests(), 2);
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
  // A port nothing listens on: connection refused. (httplib::Server's
  // destructor leaves a bound port listening: connected, then no answer.)
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port = ntohs(addr.sin_port);
    ::close(fd);
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

TEST(ProgressReaderTest, OversizedBodyIsTooLarge) {
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
      [&] { return registry.Get("kubetrain_progress_reads_total", "result=\"too_large\"") >= 1; }));
  EXPECT_FALSE(reader.Latest("ns/j"));
}

// Hostile metrics endpoints. Each test bounds its own wait
// (a watchdog stops the hostile servers) so that it fails instead of hanging
// when the reader does not bound a read itself.

using Mode = FakeMetricsServers::Mode;

// The deadline of one read with ReaderOptions' defaults, and the slack a busy
// 2-core machine gets on top of it.
constexpr auto kDeadline = 3s;
constexpr auto kSlack = 1500ms;

// The process's peak resident set (VmHWM), bytes.
int64_t PeakRss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

struct TimedResult {
  StatusOr<std::string> body = Status(StatusCode::kInternal, "not run");
  std::chrono::steady_clock::duration took{};
  bool watchdog = false;  // the read did not end by itself
};

// One read of `url` with the default fetcher, stopping `servers` if the read
// has not ended after `watchdog`.
TimedResult ReadOnce(FakeMetricsServers& servers, const std::string& url,
                     std::chrono::steady_clock::duration watchdog) {
  TimedResult r;
  const auto start = std::chrono::steady_clock::now();
  auto done = std::async(std::launch::async, [&] {
    auto body = HttpFetcher(ReaderOptions{})(url);
    r.took = std::chrono::steady_clock::now() - start;
    return body;
  });
  if (done.wait_for(watchdog) != std::future_status::ready) {
    r.watchdog = true;
    servers.Stop();
  }
  r.body = done.get();
  return r;
}

// A target that sends headers without end (`mode`): the read fails as too
// large within the deadline, and the process buffers far less than the
// ~80 MB/s an unbounded reader grows by (the cap is 16 KiB of headers).
void ExpectHeaderFloodCutWithBoundedMemory(Mode mode) {
  FakeMetricsServers servers;
  auto url = servers.Add(mode);
  ASSERT_TRUE(url.ok());
  const int64_t peak_before = PeakRss();
  TimedResult r = ReadOnce(servers, *url, kDeadline + kSlack);
  const int64_t grew = PeakRss() - peak_before;
  EXPECT_FALSE(r.watchdog);
  ASSERT_FALSE(r.body.ok());
  EXPECT_EQ(r.body.status().code(), StatusCode::kResourceExhausted) << r.body.status().ToString();
  EXPECT_LT(r.took, kDeadline);
  EXPECT_LT(grew, 4 << 20) << "peak RSS grew by " << grew << " bytes; server sent "
                           << servers.bytes_sent();
}

TEST(HttpFetcherTest, EndlessHeadersFailWithinTheDeadlineWithBoundedMemory) {
  ExpectHeaderFloodCutWithBoundedMemory(Mode::kEndlessHeaders);
}

TEST(HttpFetcherTest, AHeaderLineWithoutEndFailsWithBoundedMemory) {
  ExpectHeaderFloodCutWithBoundedMemory(Mode::kEndlessHeaderLine);
}

TEST(HttpFetcherTest, ADripFeedIsCutAtTheTotalDeadline) {
  FakeMetricsServers servers;  // one byte every 200 ms, forever
  auto url = servers.Add(Mode::kDrip);
  ASSERT_TRUE(url.ok());
  TimedResult r = ReadOnce(servers, *url, kDeadline + kSlack);
  EXPECT_FALSE(r.watchdog);
  ASSERT_FALSE(r.body.ok());
  EXPECT_EQ(r.body.status().code(), StatusCode::kDeadlineExceeded) << r.body.status().ToString();
  EXPECT_GE(r.took, kDeadline - 100ms);
  EXPECT_LT(r.took, kDeadline + kSlack);
}

ReaderOptions DefaultLimitsFastSchedule() {
  ReaderOptions o;  // the default per-read limits
  o.schedule = {.qps = 1000, .burst = 100, .interval = 10ms, .backoff_base = 1h};
  o.tracker.min_publish_interval = 0s;
  return o;
}

TEST(ProgressReaderTest, SlowTargetsDoNotDelayAGoodOne) {
  FakeMetricsServers servers;
  auto slow1 = servers.Add(Mode::kDrip);
  auto slow2 = servers.Add(Mode::kDrip);
  auto good = servers.Add(Mode::kMetrics, Metrics(7, 10));
  ASSERT_TRUE(slow1.ok() && slow2.ok() && good.ok());
  runtime::Metrics registry;
  Changes changes;
  ProgressReader reader(
      DefaultLimitsFastSchedule(), [&](const std::string& k) { changes.Add(k); }, &registry);
  reader.Start();
  reader.SetTarget("ns/slow1", ScrapeTarget{*slow1, "u1", "worker-0"});
  reader.SetTarget("ns/slow2", ScrapeTarget{*slow2, "u2", "worker-0"});
  ASSERT_TRUE(Eventually([&] { return servers.requests(*slow1) + servers.requests(*slow2) >= 2; }));
  // Both slow reads are in flight; the good target is read and published at
  // once, long before they end.
  const auto start = std::chrono::steady_clock::now();
  reader.SetTarget("ns/good", ScrapeTarget{*good, "u3", "worker-0"});
  const bool published = Eventually([&] { return changes.Has("ns/good"); }, 1s);
  const auto took = std::chrono::steady_clock::now() - start;
  servers.Stop();  // lets a reader without a deadline stop too
  EXPECT_TRUE(published) << "good target published after "
                         << std::chrono::duration<double>(took).count() << " s";
  EXPECT_FALSE(changes.Has("ns/slow1"));
}

TEST(ProgressReaderTest, StopReturnsPromptlyWithSlowReadsInFlight) {
  FakeMetricsServers servers;
  std::vector<std::string> urls;
  for (int i = 0; i < 4; ++i) {
    auto url = servers.Add(i % 2 == 0 ? Mode::kDrip : Mode::kSilent);
    ASSERT_TRUE(url.ok());
    urls.push_back(*url);
  }
  runtime::Metrics registry;
  ProgressReader reader(
      DefaultLimitsFastSchedule(), [](const std::string&) {}, &registry);
  reader.Start();
  for (size_t i = 0; i < urls.size(); ++i) {
    reader.SetTarget("ns/j" + std::to_string(i), ScrapeTarget{urls[i], "u", "worker-0"});
  }
  ASSERT_TRUE(Eventually([&] { return servers.requests(urls[0]) >= 1; }));
  const auto start = std::chrono::steady_clock::now();
  auto stopped = std::async(std::launch::async, [&] { reader.Stop(); });
  const bool prompt = stopped.wait_for(1s) == std::future_status::ready;
  const auto took = std::chrono::steady_clock::now() - start;
  if (!prompt) servers.Stop();  // unblocks a reader stuck in a read
  stopped.get();
  EXPECT_TRUE(prompt) << "Stop() took " << std::chrono::duration<double>(took).count() << " s";
}

TEST(ProgressReaderTest, ReadsInFlightAreCappedAndTheRestWaitForASlot) {
  FakeMetricsServers servers;
  std::vector<std::string> silent;
  for (int i = 0; i < 3; ++i) {
    auto url = servers.Add(Mode::kSilent);
    ASSERT_TRUE(url.ok());
    silent.push_back(*url);
  }
  auto good = servers.Add(Mode::kMetrics, Metrics(5, 10));
  ASSERT_TRUE(good.ok());
  ReaderOptions o = DefaultLimitsFastSchedule();
  o.max_in_flight = 2;
  o.total_timeout = 500ms;
  runtime::Metrics registry;
  Changes changes;
  ProgressReader reader(
      o, [&](const std::string& k) { changes.Add(k); }, &registry);
  reader.Start();
  for (size_t i = 0; i < silent.size(); ++i) {
    reader.SetTarget("ns/silent" + std::to_string(i), ScrapeTarget{silent[i], "u", "worker-0"});
  }
  auto answered = [&] {
    int64_t n = 0;
    for (const auto& url : silent) n += servers.requests(url);
    return n;
  };
  ASSERT_TRUE(Eventually([&] { return answered() >= 2; }));
  const auto slots_taken = std::chrono::steady_clock::now();
  reader.SetTarget("ns/good", ScrapeTarget{*good, "u", "worker-0"});
  // Two silent reads hold both slots until their 500 ms deadline: the good
  // target (read in milliseconds otherwise) waits for one of them.
  ASSERT_TRUE(Eventually([&] { return changes.Has("ns/good"); }));
  EXPECT_GE(std::chrono::steady_clock::now() - slots_taken, 400ms);
  EXPECT_GE(registry.Get("kubetrain_progress_reads_total", "result=\"timeout\""), 2);
}

// An AsyncFetcher answering at once from a table: the reader's bookkeeping
// without sockets.
class TableFetcher : public AsyncFetcher {
 public:
  explicit TableFetcher(std::map<std::string, StatusOr<std::string>> answers)
      : answers_(std::move(answers)) {}
  void Start(uint64_t id, const std::string& url) override {
    auto it = answers_.find(url);
    done_.push_back({id, it == answers_.end() ? Unavailable("no such url") : it->second});
  }
  std::vector<Done> Wait(std::chrono::milliseconds timeout) override {
    if (done_.empty()) std::this_thread::sleep_for(std::min(timeout, 5ms));  // idle
    return std::exchange(done_, {});
  }
  void Wakeup() override {}
  void CancelAll() override { done_.clear(); }

 private:
  const std::map<std::string, StatusOr<std::string>> answers_;
  std::vector<Done> done_;
};

TEST(ProgressReaderTest, CountsEachKindOfFailureByResult) {
  auto fetcher = std::make_unique<TableFetcher>(std::map<std::string, StatusOr<std::string>>{
      {"http://ok", Metrics(1, 2)},
      {"http://slow", Status(StatusCode::kDeadlineExceeded, "")},
      {"http://big", Status(StatusCode::kResourceExhausted, "")},
      {"http://down", Unavailable("")},
      {"http://other", std::string("go_goroutines 3\n")},
      {"http://404", FailedPrecondition("HTTP 404")},
  });
  runtime::Metrics registry;
  ProgressReader reader(
      DefaultLimitsFastSchedule(), [](const std::string&) {}, &registry, std::move(fetcher));
  reader.Start();
  for (const char* host : {"ok", "slow", "big", "down", "other", "404"}) {
    reader.SetTarget(std::string("ns/") + host,
                     ScrapeTarget{std::string("http://") + host, "u", "worker-0"});
  }
  for (const char* result : {"ok", "timeout", "too_large", "unreachable", "no_metrics", "error"}) {
    EXPECT_TRUE(Eventually([&] {
      return registry.Get("kubetrain_progress_reads_total",
                          std::string("result=\"") + result + "\"") >= 1;
    })) << result;
  }
  EXPECT_TRUE(reader.Latest("ns/ok"));
  EXPECT_FALSE(reader.Latest("ns/slow"));
}

TEST(HttpFetcherTest, HeadersUnderTheCapAreReadAndOverItAreTooLarge) {
  FakeMetricsServers servers;
  auto url = servers.Add(Mode::kMetrics, Metrics(3, 4));
  ASSERT_TRUE(url.ok());
  ReaderOptions o;
  auto body = HttpFetcher(o)(*url);
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  EXPECT_EQ(*body, Metrics(3, 4));
  o.max_header_bytes = 40;  // less than this answer's headers
  EXPECT_EQ(HttpFetcher(o)(*url).status().code(), StatusCode::kResourceExhausted);
}

TEST(HttpFetcherTest, OnlyPlainHttpUrlsAreRead) {
  EXPECT_EQ(HttpFetcher(ReaderOptions{})("https://127.0.0.1:1/metrics").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpFetcher(ReaderOptions{})("file:///etc/passwd").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(HttpFetcherTest, TheEnvironmentsProxyIsNotUsed) {
  FakeMetricsServers servers;
  auto url = servers.Add(Mode::kMetrics, Metrics(3, 4));
  ASSERT_TRUE(url.ok());
  ::setenv("http_proxy", "http://127.0.0.1:1", 1);  // nothing listens there
  auto body = HttpFetcher(ReaderOptions{})(*url);
  ::unsetenv("http_proxy");
  EXPECT_TRUE(body.ok()) << body.status().ToString();
}

}  // namespace
}  // namespace kubetrain::progress
