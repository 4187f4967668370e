// kube::Client transport behaviour against a local plain-HTTP server:
// retries, Retry-After, rate limit, connection reuse, User-Agent, token
// rotation, incremental watch decoding.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "operator/kube/client.h"

namespace kubetrain::kube {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.set_keep_alive_max_count(1000);  // httplib closes after 5 requests by default
    server_.new_task_queue = [] { return new httplib::ThreadPool(32); };  // 8 by default
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);  // httplib 0.11 has no wait
  }
  void TearDown() override {
    server_.stop();
    thread_.join();
  }
  std::unique_ptr<Client> NewClient(Config cfg = {}) {
    cfg.server = "http://127.0.0.1:" + std::to_string(port_);
    if (cfg.qps == 50) cfg.qps = 0;  // unlimited unless a test says otherwise
    auto c = Client::Create(cfg);
    EXPECT_TRUE(c.ok());
    return std::move(*c);
  }
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

const char* kCm = R"({"kind":"ConfigMap","metadata":{"name":"x"}})";

// Writes `script` as an executable exec credential plugin in a fresh `dir`.
std::string WritePlugin(const std::filesystem::path& dir, const std::string& script) {
  std::filesystem::create_directories(dir);
  const std::string plugin = (dir / "plugin.sh").string();
  std::ofstream(plugin) << script;
  std::filesystem::permissions(plugin, std::filesystem::perms::owner_all);
  return plugin;
}

// An exec plugin's token is fetched again when the
// apiserver answers 401 (revoked or expired early), and the request retried once.
TEST_F(TransportTest, ExecPluginTokenIsRefreshedAfter401) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kt-exec-" + std::to_string(::getpid()));
  const std::string plugin =
      WritePlugin(dir,
                  "#!/bin/sh\n"
                  "n=$(cat \"$(dirname \"$0\")/n\" 2>/dev/null || echo 0); n=$((n+1))\n"
                  "echo $n > \"$(dirname \"$0\")/n\"\n"
                  "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                  "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t'$n'\"}}'\n");
  std::vector<std::string> seen;
  std::mutex mu;
  server_.Get("/api/v1/namespaces/ns/configmaps/x", [&](const httplib::Request& req, auto& res) {
    std::lock_guard lock(mu);
    seen.push_back(req.get_header_value("Authorization"));
    if (req.get_header_value("Authorization") != "Bearer t2") {
      res.status = 401;
      res.set_content(R"({"kind":"Status","reason":"Unauthorized"})", "application/json");
      return;
    }
    res.set_content(kCm, "application/json");
  });
  Config cfg;
  cfg.exec = ExecPlugin{"client.authentication.k8s.io/v1", plugin, {}, {}, "", false};
  cfg.token = "t0";  // as if loaded earlier; revoked since
  auto r = NewClient(cfg)->Get(kConfigMaps, "ns", "x");
  EXPECT_FALSE(r.ok());  // t0 -> 401 -> plugin gives t1 -> 401: one re-authentication only
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], "Bearer t0");
  EXPECT_EQ(seen[1], "Bearer t1");
  auto again = NewClient(cfg)->Get(kConfigMaps, "ns", "x");  // a new client: t0, then t2
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  std::filesystem::remove_all(dir);
}

// A refresh that fails keeps the old credential and is handed to
// Config::on_credential_error (the kube library logs nothing itself).
TEST_F(TransportTest, ExecPluginRefreshFailureGoesToTheCredentialErrorHook) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kt-exec-fail-" + std::to_string(::getpid()));
  const std::string plugin = WritePlugin(dir, "#!/bin/sh\necho broken >&2\nexit 3\n");
  std::atomic<int> requests{0}, with_old_token{0};
  server_.Get("/api/v1/namespaces/ns/configmaps/x", [&](const httplib::Request& req, auto& res) {
    ++requests;
    if (req.get_header_value("Authorization") == "Bearer t0") ++with_old_token;
    res.status = 401;
    res.set_content(R"({"kind":"Status","reason":"Unauthorized"})", "application/json");
  });
  std::mutex mu;
  std::vector<Status> reported;
  Config cfg;
  cfg.exec = ExecPlugin{"client.authentication.k8s.io/v1", plugin, {}, {}, "", false};
  cfg.token = "t0";
  cfg.on_credential_error = [&](const Status& error) {
    std::lock_guard lock(mu);
    reported.push_back(error);
  };
  auto r = NewClient(cfg)->Get(kConfigMaps, "ns", "x");
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << r.status().ToString();
  EXPECT_EQ(requests.load(), 2);        // the 401, then once more after the refresh failed
  EXPECT_EQ(with_old_token.load(), 2);  // the old credential kept
  std::lock_guard lock(mu);
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_FALSE(reported[0].ok());
  std::filesystem::remove_all(dir);
}

// A plugin that returns only a client certificate used to run on
// every request (the cache was keyed on the token it never returned).
TEST_F(TransportTest, ExecPluginCertificateWithoutExpiryIsNotFetchedPerRequest) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kt-exec-cert-" + std::to_string(::getpid()));
  const std::string plugin =
      WritePlugin(dir,
                  "#!/bin/sh\n"
                  "echo run >> \"$(dirname \"$0\")/runs\"\n"
                  "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                  "\"kind\":\"ExecCredential\",\"status\":{"
                  "\"clientCertificateData\":\"C\",\"clientKeyData\":\"K\"}}'\n");
  server_.Get("/api/v1/namespaces/ns/configmaps/x",
              [&](const auto&, auto& res) { res.set_content(kCm, "application/json"); });
  Config cfg;
  cfg.exec = ExecPlugin{"client.authentication.k8s.io/v1", plugin, {}, {}, "", false};
  cfg.client_cert_pem = "C";  // as the kubeconfig's load left it
  cfg.client_key_pem = "K";
  auto client = NewClient(cfg);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(client->Get(kConfigMaps, "ns", "x").ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "runs"))
      << "the loaded certificate has no expiry and no request was refused";
  std::filesystem::remove_all(dir);
}

// Strings from workloads are untrusted: an object holding invalid UTF-8 is
// sent with U+FFFD in its place instead of dump() throwing in the caller.
TEST_F(TransportTest, InvalidUtf8InARequestBodyIsReplacedNotThrown) {
  std::string received;
  server_.Post("/api/v1/namespaces/ns/configmaps", [&](const httplib::Request& req, auto& res) {
    received = req.body;
    res.status = 201;
    res.set_content(kCm, "application/json");
  });
  json cm = {{"kind", "ConfigMap"},
             {"metadata", {{"name", "x"}}},
             {"data", {{"msg", std::string("cut \xE2\x82")}}}};
  StatusOr<json> r = InvalidArgument("not run");
  ASSERT_NO_THROW(r = NewClient()->Create(kConfigMaps, "ns", cm));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(json::parse(received)["data"]["msg"], "cut \xEF\xBF\xBD");
}

TEST_F(TransportTest, GetIsRetriedOn503UntilItSucceeds) {
  std::atomic<int> calls{0};
  server_.Get("/api/v1/namespaces/ns/configmaps/x", [&](const auto&, auto& res) {
    if (++calls < 3) {
      res.status = 503;
      res.set_content(R"({"kind":"Status","reason":"ServiceUnavailable"})", "application/json");
      return;
    }
    res.set_content(kCm, "application/json");
  });
  auto r = NewClient()->Get(kConfigMaps, "ns", "x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(calls.load(), 3);
}

TEST_F(TransportTest, PostIsNotRetriedOn503) {
  std::atomic<int> calls{0};
  server_.Post("/api/v1/namespaces/ns/configmaps", [&](const auto&, auto& res) {
    ++calls;
    res.status = 503;
  });
  auto r = NewClient()->Create(kConfigMaps, "ns", json::parse(kCm));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(calls.load(), 1);
}

// CreateUnread sends what Create sends and maps the answer's
// status as Create does; the body of a success is never parsed (not JSON here).
TEST_F(TransportTest, CreateUnreadSendsTheObjectAndMapsErrorsAsCreate) {
  std::atomic<int> calls{0};
  std::string got;
  server_.Post("/api/v1/namespaces/ns/configmaps", [&](const auto& req, auto& res) {
    got = req.body;
    if (++calls == 1) {
      res.status = 201;
      res.set_content("not json", "text/plain");
      return;
    }
    res.status = 409;
    res.set_content(R"({"kind":"Status","reason":"AlreadyExists","message":"exists"})",
                    "application/json");
  });
  auto client = NewClient();
  EXPECT_TRUE(client->CreateUnread(kConfigMaps, "ns", json::parse(kCm)).ok());
  EXPECT_EQ(json::parse(got), json::parse(kCm));
  EXPECT_EQ(client->CreateUnread(kConfigMaps, "ns", json::parse(kCm)).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(client->Create(kConfigMaps, "ns", json::parse(kCm)).status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(calls.load(), 3);
}

TEST_F(TransportTest, TooManyRequestsHonoursRetryAfterForEveryVerb) {
  std::atomic<int> calls{0};
  server_.Post("/api/v1/namespaces/ns/configmaps", [&](const auto&, auto& res) {
    if (++calls == 1) {
      res.status = 429;
      res.set_header("Retry-After", "1");
      return;
    }
    res.status = 201;
    res.set_content(kCm, "application/json");
  });
  auto start = std::chrono::steady_clock::now();
  auto r = NewClient()->Create(kConfigMaps, "ns", json::parse(kCm));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(calls.load(), 2);
  // Full jitter over [Retry-After/2, Retry-After].
  EXPECT_GE(std::chrono::steady_clock::now() - start, 500ms);
}

TEST_F(TransportTest, RetriesStopAtMaxRetries) {
  std::atomic<int> calls{0};
  server_.Get("/api/v1/namespaces/ns/configmaps/x", [&](const auto&, auto& res) {
    ++calls;
    res.status = 500;
  });
  Config cfg;
  cfg.max_retries = 2;
  auto r = NewClient(cfg)->Get(kConfigMaps, "ns", "x");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(calls.load(), 3);
}

TEST_F(TransportTest, ConnectionsAreReusedAndUserAgentCarriesVersion) {
  std::mutex mu;
  std::set<int> ports;
  std::string ua;
  server_.Get("/api/v1/namespaces/ns/configmaps/x", [&](const httplib::Request& req, auto& res) {
    std::lock_guard lock(mu);
    ports.insert(req.remote_port);
    ua = req.get_header_value("User-Agent");
    res.set_content(kCm, "application/json");
  });
  auto c = NewClient();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(c->Get(kConfigMaps, "ns", "x").ok());
  std::lock_guard lock(mu);
  EXPECT_EQ(ports.size(), 1u) << "each request opened a new connection";
  EXPECT_EQ(ua.rfind("kubetrain/", 0), 0u) << ua;
}

// Bursts of concurrent requests (workers x create parallelism)
// reuse the connections of the last burst instead of opening new ones.
TEST_F(TransportTest, ConcurrentBurstsReuseTheirConnections) {
  constexpr int kInFlight = 24;
  constexpr int kBursts = 3;
  std::mutex mu;
  std::condition_variable cv;
  std::set<int> ports;
  int arrived = 0;
  server_.Get("/api/v1/namespaces/ns/configmaps/x", [&](const httplib::Request& req, auto& res) {
    std::unique_lock lock(mu);
    ports.insert(req.remote_port);
    // Every request of a burst is in flight at once (each on its own handle).
    const int burst = arrived++ / kInFlight;
    cv.notify_all();
    cv.wait_for(lock, 10s, [&] { return arrived >= (burst + 1) * kInFlight; });
    res.set_content(kCm, "application/json");
  });
  auto c = NewClient();
  for (int b = 0; b < kBursts; ++b) {
    std::vector<std::thread> threads;
    for (int i = 0; i < kInFlight; ++i)
      threads.emplace_back([&] { EXPECT_TRUE(c->Get(kConfigMaps, "ns", "x").ok()); });
    for (auto& t : threads) t.join();
  }
  std::lock_guard lock(mu);
  EXPECT_EQ(arrived, kInFlight * kBursts);
  EXPECT_EQ(ports.size(), static_cast<size_t>(kInFlight)) << "bursts opened new connections";
}

TEST_F(TransportTest, ClientSideRateLimitPacesRequests) {
  server_.Get("/api/v1/namespaces/ns/configmaps/x",
              [&](const auto&, auto& res) { res.set_content(kCm, "application/json"); });
  Config cfg;
  cfg.qps = 20;
  cfg.burst = 1;
  auto c = NewClient(cfg);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c->Get(kConfigMaps, "ns", "x").ok());
  // 1 free + 4 paced at 50 ms.
  EXPECT_GE(std::chrono::steady_clock::now() - start, 190ms);
}

TEST_F(TransportTest, TokenFileIsReReadWhenItChanges) {
  auto path = std::filesystem::temp_directory_path() / ("kt-token-" + std::to_string(::getpid()));
  std::ofstream(path) << "first\n";
  std::mutex mu;
  std::vector<std::string> auths;
  server_.Get("/api/v1/namespaces/ns/configmaps/x", [&](const httplib::Request& req, auto& res) {
    std::lock_guard lock(mu);
    auths.push_back(req.get_header_value("Authorization"));
    res.set_content(kCm, "application/json");
  });
  Config cfg;
  cfg.token_file = path.string();
  auto c = NewClient(cfg);
  ASSERT_TRUE(c->Get(kConfigMaps, "ns", "x").ok());
  std::ofstream(path) << "second-token\n";
  ASSERT_TRUE(c->Get(kConfigMaps, "ns", "x").ok());
  std::filesystem::remove(path);
  std::lock_guard lock(mu);
  EXPECT_EQ(auths, (std::vector<std::string>{"Bearer first", "Bearer second-token"}));
}

TEST_F(TransportTest, WatchDecodesLinesSplitAcrossChunksInOrder) {
  server_.Get("/api/v1/namespaces/ns/configmaps", [&](const httplib::Request& req, auto& res) {
    EXPECT_EQ(req.get_param_value("watch"), "true");
    EXPECT_EQ(req.get_param_value("resourceVersion"), "7");
    EXPECT_EQ(req.get_param_value("allowWatchBookmarks"), "true");
    res.set_chunked_content_provider("application/json", [](size_t, httplib::DataSink& sink) {
      std::string a =
          R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"8"}}})";
      std::string b =
          R"({"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"9"}}})";
      std::string bm = R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"10"}}})";
      std::string all = a + "\n" + b + "\n" + bm + "\n";
      // Deliberately awkward chunking: mid-token splits and several lines per chunk.
      for (size_t off = 0; off < all.size(); off += 17) {
        std::string piece = all.substr(off, 17);
        sink.write(piece.data(), piece.size());
      }
      sink.done();
      return true;
    });
  });
  std::vector<std::string> seen;
  ListOptions opts;
  opts.resource_version = "7";
  Status s = NewClient()->Watch(kConfigMaps, "ns", opts, [&](WatchEvent&& ev) {
    seen.push_back(std::to_string(static_cast<int>(ev.type)) + ":" +
                   ev.object["metadata"].value("resourceVersion", ""));
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(seen, (std::vector<std::string>{"0:8", "1:9", "3:10"}));
}

TEST_F(TransportTest, WatchErrorEventWith410IsGone) {
  server_.Get("/api/v1/namespaces/ns/configmaps", [&](const auto&, auto& res) {
    res.set_content(
        R"({"type":"ERROR","object":{"kind":"Status","reason":"Expired","code":410,"message":"too old resource version"}})"
        "\n",
        "application/json");
  });
  Status s = NewClient()->Watch(kConfigMaps, "ns", {}, [](WatchEvent&&) { return Status::Ok(); });
  EXPECT_EQ(s.code(), StatusCode::kGone) << s.ToString();
  // A watch whose objects are built with a few fields only (a pod cache's)
  // still reads the whole Status of an ERROR event: its 410 means relist.
  ListOptions filtered;
  filtered.drop_managed_fields = true;
  filtered.fields = std::make_shared<const FieldFilter>(FieldFilter{{"metadata", {}}});
  s = NewClient()->Watch(kConfigMaps, "ns", filtered, [](WatchEvent&&) { return Status::Ok(); });
  EXPECT_EQ(s.code(), StatusCode::kGone) << s.ToString();
  EXPECT_NE(s.message().find("too old resource version"), std::string::npos) << s.ToString();
}

TEST_F(TransportTest, WatchStopsPromptlyWhenStopIsRequested) {
  server_.Get("/api/v1/namespaces/ns/configmaps", [&](const auto&, auto& res) {
    res.set_chunked_content_provider("application/json", [](size_t, httplib::DataSink& sink) {
      std::this_thread::sleep_for(20ms);  // an idle watch: nothing to send
      return sink.is_writable();
    });
  });
  std::stop_source stop;
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    stop.request_stop();
  });
  auto start = std::chrono::steady_clock::now();
  Status s = NewClient()->Watch(
      kConfigMaps, "ns", {}, [](WatchEvent&&) { return Status::Ok(); }, stop.get_token());
  stopper.join();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

}  // namespace
}  // namespace kubetrain::kube

namespace kubetrain::kube {
namespace {

// Client::Stream (pod logs): the body is handed over as it arrives; a false
// from the callback ends the stream (no further calls); an error is mapped.
TEST_F(TransportTest, StreamDeliversTheBodyAndStopsWhenAsked) {
  server_.Get("/api/v1/namespaces/ns/pods/p/log", [&](const httplib::Request&, auto& res) {
    res.set_chunked_content_provider("text/plain", [&](size_t, httplib::DataSink& sink) {
      for (int i = 1; i <= 200; ++i) {
        const std::string line = "line " + std::to_string(i) + std::string(1000, '.') + "\n";
        if (!sink.write(line.data(), line.size())) return false;
      }
      sink.done();
      return true;
    });
  });
  std::string got;
  int calls = 0;
  Status s = NewClient()->Stream("/api/v1/namespaces/ns/pods/p/log?follow=true",
                                 [&](std::string_view chunk) {
                                   got.append(chunk);
                                   ++calls;
                                   return true;
                                 });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got.size(), 200u * 1000u + 9u * 7u + 90u * 8u + 101u * 9u);
  EXPECT_GT(calls, 1) << "handed over in pieces, not as one body";

  calls = 0;
  got.clear();
  s = NewClient()->Stream("/api/v1/namespaces/ns/pods/p/log", [&](std::string_view chunk) {
    got.append(chunk);
    ++calls;
    return false;  // enough
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got.rfind("line 1.", 0), 0u);
  EXPECT_LT(got.size(), 200u * 1000u);
}

TEST_F(TransportTest, StreamMapsAnApiError) {
  server_.Get("/api/v1/namespaces/ns/pods/p/log", [&](const httplib::Request&, auto& res) {
    res.status = 400;
    res.set_content(
        R"({"kind":"Status","reason":"BadRequest","message":"container \"t\" is waiting to start"})",
        "application/json");
  });
  bool called = false;
  Status s = NewClient()->Stream("/api/v1/namespaces/ns/pods/p/log", [&](std::string_view) {
    called = true;
    return true;
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("waiting to start"), std::string::npos) << s.message();
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace kubetrain::kube
