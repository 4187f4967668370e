// LeaderElector against a small in-process fake of the Lease endpoint, for
// the timing rules that are hard to provoke on a real apiserver. The real
// hand-over between processes is tested in tests/kube/lease_it_test.cc.
#include "operator/runtime/leader_election.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

namespace kubetrain::runtime {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

class FakeLeaseServer {
 public:
  FakeLeaseServer() {
    const std::string path = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";
    server_.Get(path + "/lock", [this](const auto&, auto& res) {
      std::unique_lock lock(mu_);
      StallWhileStalled(lock);
      if (failing_) return Fail(res);
      if (lease_.is_null()) {
        res.status = 404;
        return;
      }
      res.set_content(lease_.dump(), "application/json");
    });
    server_.Post(path, [this](const httplib::Request& req, auto& res) {
      std::lock_guard lock(mu_);
      if (failing_) return Fail(res);
      if (!lease_.is_null()) {
        res.status = 409;
        res.set_content(R"({"kind":"Status","reason":"AlreadyExists"})", "application/json");
        return;
      }
      lease_ = json::parse(req.body);
      lease_["metadata"]["resourceVersion"] = std::to_string(++rv_);
      res.status = 201;
      res.set_content(lease_.dump(), "application/json");
    });
    server_.Put(path + "/lock", [this](const httplib::Request& req, auto& res) {
      std::unique_lock lock(mu_);
      StallWhileStalled(lock);
      if (failing_) return Fail(res);
      json body = json::parse(req.body);
      if (body["metadata"].value("resourceVersion", "") != std::to_string(rv_)) {
        res.status = 409;
        res.set_content(R"({"kind":"Status","reason":"Conflict"})", "application/json");
        return;
      }
      lease_ = body;
      lease_["metadata"]["resourceVersion"] = std::to_string(++rv_);
      res.set_content(lease_.dump(), "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~FakeLeaseServer() {
    SetStalled(false);
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  // While stalled, GET and PUT hang (up to 30 s) without answering, as a
  // connection does when a load balancer or the network swallows it.
  void SetStalled(bool s) {
    std::lock_guard lock(mu_);
    stalled_ = s;
    stall_cv_.notify_all();
  }
  void SetFailing(bool f) {
    std::lock_guard lock(mu_);
    failing_ = f;
  }
  std::string Holder() {
    std::lock_guard lock(mu_);
    return lease_.is_null() ? "" : lease_["spec"].value("holderIdentity", "");
  }
  void SetHolder(const std::string& id) {
    std::lock_guard lock(mu_);
    lease_ = {{"metadata", {{"name", "lock"}, {"namespace", "ns"}}},
              {"spec", {{"holderIdentity", id}, {"leaseDurationSeconds", 1}}}};
    lease_["metadata"]["resourceVersion"] = std::to_string(++rv_);
  }

 private:
  static void Fail(httplib::Response& res) { res.status = 500; }
  void StallWhileStalled(std::unique_lock<std::mutex>& lock) {
    stall_cv_.wait_for(lock, 30s, [this] { return !stalled_; });
  }
  std::condition_variable stall_cv_;
  bool stalled_ = false;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  json lease_;
  int rv_ = 0;
  bool failing_ = false;
};

class LeaderElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kube::Config cfg;
    cfg.server = "http://127.0.0.1:" + std::to_string(server_.port());
    le_.lease_namespace = "ns";
    le_.lease_name = "lock";
    le_.identity = "me";
    le_.lease_duration = 1000ms;
    le_.renew_deadline = 600ms;
    le_.retry_period = 100ms;
    // The shipped settings: the operator's defaults turned into the elector's
    // own client exactly as kubetrain-operator does it.
    client_ = std::move(kube::Client::Create(LeaderElectionClientConfig(cfg, le_)).value());
  }
  FakeLeaseServer server_;
  std::unique_ptr<kube::Client> client_;
  LeaderElectionConfig le_;
};

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

TEST_F(LeaderElectionTest, AcquiresAbsentLeaseAndReleasesOnStop) {
  LeaderElector elector(client_.get(), le_);
  std::atomic<bool> started{false}, leading_stopped{false};
  std::stop_source stop;
  Status result = Internal("not run");
  std::thread t([&] {
    result = elector.Run(stop.get_token(), [&](std::stop_token leading) {
      started = true;
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      cv.wait(lock, leading, [] { return false; });
      leading_stopped = true;
    });
  });
  ASSERT_TRUE(WaitUntil([&] { return started.load(); }));
  EXPECT_TRUE(elector.IsLeader());
  EXPECT_EQ(server_.Holder(), "me");
  stop.request_stop();
  t.join();
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_TRUE(leading_stopped.load());
  EXPECT_FALSE(elector.IsLeader());
  EXPECT_EQ(server_.Holder(), "");  // released for a standby
}

TEST_F(LeaderElectionTest, StopsLeadingWhenRenewalFailsForRenewDeadline) {
  LeaderElector elector(client_.get(), le_);
  std::atomic<bool> started{false};
  std::chrono::steady_clock::time_point failing_since, leading_ended;
  std::thread t;
  Status result;
  t = std::thread([&] {
    result = elector.Run({}, [&](std::stop_token leading) {
      started = true;
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      cv.wait(lock, leading, [] { return false; });
      leading_ended = std::chrono::steady_clock::now();
    });
  });
  ASSERT_TRUE(WaitUntil([&] { return started.load(); }));
  failing_since = std::chrono::steady_clock::now();
  server_.SetFailing(true);
  t.join();
  EXPECT_EQ(result.code(), StatusCode::kUnavailable) << result.ToString();
  auto took = leading_ended - failing_since;
  // It must give up after the renew deadline and before the lease expires
  // for others (lease_duration), so two leaders never overlap.
  EXPECT_GE(took, le_.renew_deadline - le_.retry_period);
  EXPECT_LT(took, le_.lease_duration);
}

// A renew call that hangs must not keep this process acting
// as leader past the renew deadline (and so past the point a standby may take
// the lease). With the shared client (60 s timeout, 5 retries) and the
// deadline checked only after the call returned, the leader acted on for as
// long as the connection hung.
TEST_F(LeaderElectionTest, HungRenewalStopsLeadingAndFencesAtTheRenewDeadline) {
  std::atomic<bool> fenced{false};
  le_.on_lost = [&] { fenced = true; };
  LeaderElector elector(client_.get(), le_);
  std::atomic<bool> started{false}, ended{false};
  std::chrono::steady_clock::time_point leading_ended;
  Status result;
  std::thread t([&] {
    result = elector.Run({}, [&](std::stop_token leading) {
      started = true;
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      cv.wait(lock, leading, [] { return false; });
      leading_ended = std::chrono::steady_clock::now();
      ended = true;
    });
  });
  ASSERT_TRUE(WaitUntil([&] { return started.load(); }));
  const auto stalled_at = std::chrono::steady_clock::now();
  server_.SetStalled(true);
  ASSERT_TRUE(WaitUntil([&] { return ended.load(); }, 20s));
  const auto took = leading_ended - stalled_at;
  std::printf(
      "leading stopped %lld ms after the apiserver connection stalled (renew deadline "
      "%lld ms, lease %lld ms)\n",
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
      static_cast<long long>(le_.renew_deadline.count()),
      static_cast<long long>(le_.lease_duration.count()));
  // Stopped at the deadline after the last renewal: before another contender,
  // waiting lease_duration from its own observation, could acquire.
  EXPECT_LT(took, le_.lease_duration);
  EXPECT_TRUE(fenced.load());
  EXPECT_FALSE(elector.IsLeader());
  server_.SetStalled(false);
  t.join();
  EXPECT_EQ(result.code(), StatusCode::kUnavailable) << result.ToString();
}

// Another holder's lease (leaseDurationSeconds 1) is taken once it has gone
// unchanged for 1 s on this elector's clock, not a retry earlier.
TEST_F(LeaderElectionTest, WaitsForAnotherHoldersLeaseToExpire) {
  server_.SetHolder("other");
  FakeClock clock;
  le_.clock = &clock;
  // The fake clock stands still while a request is in flight, but the
  // client's request timeout is real time: the shipped third of a 600 ms
  // renew deadline failed a GET under load, the first observation moved and
  // the lease never expired on the clock. A request here may take 5 s.
  LeaderElectionConfig slow_requests = le_;
  slow_requests.renew_deadline = 15s;
  kube::Config cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(server_.port());
  auto client =
      std::move(kube::Client::Create(LeaderElectionClientConfig(cfg, slow_requests)).value());
  LeaderElector elector(client.get(), le_);
  std::atomic<bool> started{false};
  // A jthread: a failed assertion below stops and joins it instead of
  // aborting the binary on a joinable std::thread.
  std::jthread t([&](std::stop_token stop) {
    (void)elector.Run(stop, [&](std::stop_token) { started = true; });
  });
  // Each retry (every 100 ms) reads the lease and waits again; the record
  // never changes, so it expires 1000 ms after the first read.
  for (int retry = 1; retry < 10; ++retry) {
    ASSERT_TRUE(clock.AwaitWaiters(1, 10s)) << retry;
    clock.Advance(100ms);
  }
  ASSERT_TRUE(clock.AwaitWaiters(1, 10s));  // the attempt at 900 ms is done
  EXPECT_FALSE(started.load());
  EXPECT_EQ(server_.Holder(), "other");
  clock.Advance(100ms);
  ASSERT_TRUE(WaitUntil([&] { return started.load(); }));
  EXPECT_EQ(server_.Holder(), "me");
  t.request_stop();
  t.join();
}

TEST_F(LeaderElectionTest, EmptyIdentityGetsAUniqueGeneratedOne) {
  le_.identity.clear();
  LeaderElector a(client_.get(), le_), b(client_.get(), le_);
  EXPECT_FALSE(a.identity().empty());
  EXPECT_NE(a.identity(), b.identity());
}

// The Lease's and the events' MicroTimes come from the injected clock's calendar.
TEST(MicroTimeNowTest, WritesTheClocksWallTimeWithMicroseconds) {
  FakeClock clock;  // 2026-01-01T00:00:00Z
  clock.Advance(std::chrono::seconds(61) + std::chrono::microseconds(42));
  EXPECT_EQ(MicroTimeNow(clock), "2026-01-01T00:01:01.000042Z");
}

}  // namespace
}  // namespace kubetrain::runtime
