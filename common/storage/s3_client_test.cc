// Unit tests of the S3 client's configuration, retry logic and response bounds. The retry
// tests use a tiny local HTTP server that answers 503 SlowDown / 500 on purpose, the bounds
// tests a raw socket server that misbehaves on purpose (a real S3 server cannot be made to);
// everything else is tested against a real S3 server in tests/s3.
#include "common/storage/s3_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>

namespace kubetrain::storage {
namespace {

StatusOr<S3Config> FromMap(const std::map<std::string, std::string>& env) {
  return S3ConfigFromEnv([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(S3Config, ReadsTheStandardVariables) {
  auto c = FromMap({{"AWS_ACCESS_KEY_ID", "ak"},
                    {"AWS_SECRET_ACCESS_KEY", "sk"},
                    {"AWS_SESSION_TOKEN", "tok"},
                    {"AWS_REGION", "eu-west-1"},
                    {"AWS_ENDPOINT_URL", "http://general:1"},
                    {"AWS_ENDPOINT_URL_S3", "http://s3only:2"},
                    {"AWS_MAX_ATTEMPTS", "7"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->credentials.access_key_id, "ak");
  EXPECT_EQ(c->credentials.secret_access_key, "sk");
  EXPECT_EQ(c->credentials.session_token, "tok");
  EXPECT_EQ(c->region, "eu-west-1");
  EXPECT_EQ(c->endpoint, "http://s3only:2");  // the S3-specific variable wins
  EXPECT_TRUE(c->path_style);                 // custom endpoint: path-style
  EXPECT_EQ(c->max_attempts, 7);
}

TEST(S3Config, DefaultsToAwsVirtualHostedAndUsEast1) {
  auto c = FromMap({{"AWS_ACCESS_KEY_ID", "ak"},
                    {"AWS_SECRET_ACCESS_KEY", "sk"},
                    {"AWS_DEFAULT_REGION", "ap-south-1"}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->endpoint, "");
  EXPECT_FALSE(c->path_style);
  EXPECT_EQ(c->region, "ap-south-1");
  auto d = FromMap({{"AWS_ACCESS_KEY_ID", "ak"},
                    {"AWS_SECRET_ACCESS_KEY", "sk"},
                    {"AWS_ENDPOINT_URL", "http://x:1"},
                    {"KUBETRAIN_S3_ADDRESSING_STYLE", "virtual"}});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->region, "us-east-1");
  EXPECT_EQ(d->endpoint, "http://x:1");
  EXPECT_FALSE(d->path_style);
}

TEST(S3Config, MissingCredentialsAndWebIdentityAreClearErrors) {
  auto none = FromMap({});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
  auto web = FromMap({{"AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"},
                      {"AWS_ROLE_ARN", "arn:aws:iam::1:role/r"}});
  ASSERT_FALSE(web.ok());
  EXPECT_NE(web.status().message().find("not supported"), std::string::npos);
  auto bad = FromMap(
      {{"AWS_ACCESS_KEY_ID", "a"}, {"AWS_SECRET_ACCESS_KEY", "s"}, {"AWS_MAX_ATTEMPTS", "0"}});
  EXPECT_FALSE(bad.ok());
  auto style = FromMap({{"AWS_ACCESS_KEY_ID", "a"},
                        {"AWS_SECRET_ACCESS_KEY", "s"},
                        {"KUBETRAIN_S3_ADDRESSING_STYLE", "sideways"}});
  EXPECT_FALSE(style.ok());
}

// A client's configuration for a test server on 127.0.0.1:`port`: path-style, fast retries.
S3Config LocalConfig(int port, int max_attempts) {
  S3Config c;
  c.endpoint = "http://127.0.0.1:" + std::to_string(port);
  c.path_style = true;
  c.credentials = {"ak", "sk", ""};
  c.retry_base = std::chrono::milliseconds(1);
  c.max_attempts = max_attempts;
  return c;
}

// A local HTTP server that fails the first `failures` requests.
class FlakyServer {
 public:
  FlakyServer(int failures, int status, std::string code) {
    server_.Get(
        ".*", [this, failures, status, code](const httplib::Request& req, httplib::Response& res) {
          last_path_ = req.path;
          last_auth_ = req.get_header_value("Authorization");
          if (calls_++ < failures) {
            res.status = status;
            res.set_content("<Error><Code>" + code + "</Code><Message>try later</Message></Error>",
                            "application/xml");
            return;
          }
          res.status = 206;
          res.set_header("Content-Range", "bytes 0-4/5");
          res.set_content("hello", "application/octet-stream");
        });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_.is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // poll: no ready hook here
    }
  }
  ~FlakyServer() {
    server_.stop();
    thread_.join();
  }
  S3Config Config() const { return LocalConfig(port_, 4); }
  int calls() const { return calls_; }
  std::string last_path_, last_auth_;

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> calls_{0};
};

// Bytes [0, length) of `key` into *out.
Status ReadRange(S3Client& c, std::string_view key, int64_t length, std::string* out) {
  return c.GetRange("bkt", key, 0, length, [out](std::string_view d) {
    out->append(d);
    return Status::Ok();
  });
}

std::string ReadAll(S3Client& c, Status* s) {
  std::string out;
  *s = ReadRange(c, "dir/a b", 5, &out);
  return out;
}

TEST(S3ClientRetry, SlowDownAndServerErrorsAreRetriedThenSucceed) {
  FlakyServer server(3, 503, "SlowDown");
  S3Client client(server.Config());
  Status s;
  EXPECT_EQ(ReadAll(client, &s), "hello");
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(server.calls(), 4);
  EXPECT_EQ(server.last_path_, "/bkt/dir/a b");  // path-style (httplib decodes the path)
  EXPECT_NE(server.last_auth_.find("Credential=ak/"), std::string::npos);
}

// (The error cases list a bucket: httplib would cut an error body to a GET's Range.)
TEST(S3ClientRetry, GivesUpAfterMaxAttemptsAsUnavailableNamingTheBucket) {
  FlakyServer server(100, 500, "InternalError");
  S3Client client(server.Config());
  Status s = client.List("bkt", "dir/a b", "").status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("s3://bkt"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("InternalError"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("after 4 attempts"), std::string::npos) << s.message();
  EXPECT_EQ(server.calls(), 4);
}

TEST(S3ClientRetry, ClientErrorsAreNotRetried) {
  FlakyServer server(100, 403, "SignatureDoesNotMatch");
  S3Client client(server.Config());
  Status s = client.List("bkt", "", "").status();
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("SignatureDoesNotMatch"), std::string::npos) << s.message();
  EXPECT_EQ(server.calls(), 1);
}

TEST(S3ClientRetry, UnreachableEndpointIsUnavailableNamingTheObject) {
  // A port that was free a moment ago: nothing listens there.
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port = ntohs(addr.sin_port);
    ::close(fd);  // bound, never listened: connections are refused
  }
  S3Config c;
  c.endpoint = "http://127.0.0.1:" + std::to_string(port);
  c.path_style = true;
  c.credentials = {"ak", "sk", ""};
  c.retry_base = std::chrono::milliseconds(1);
  c.max_attempts = 2;
  S3Client client(c);
  auto got = client.Get("bkt", "k");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("s3://bkt/k"), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find("after 2 attempts"), std::string::npos);
}

// A server that reads each request's head and answers with `respond(fd)`, whatever bytes it
// writes, then closes the connection: for responses no S3 server sends.
class RawServer {
 public:
  explicit RawServer(std::function<void(int)> respond) : respond_(std::move(respond)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // the listening socket was shut down
        std::string head;
        char buf[4096];
        while (head.find("\r\n\r\n") == std::string::npos) {
          const ssize_t n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0) break;
          head.append(buf, static_cast<size_t>(n));
        }
        ++requests_;
        respond_(c);
        ::close(c);
      }
    });
  }
  ~RawServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  S3Config Config() const { return LocalConfig(port_, 2); }
  int requests() const { return requests_; }

 private:
  std::function<void(int)> respond_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> requests_{0};
  std::thread thread_;
};

// Writes all of `s`; false once the client has gone.
bool Send(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

TEST(S3ClientBounds, AListingBodyPastTheBoundIsResourceExhaustedAndNotRetried) {
  RawServer server([](int fd) {
    if (!Send(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: " +
                      std::to_string(64 << 20) + "\r\n\r\n<ListBucketResult>"))
      return;
    const std::string chunk(1 << 16, 'x');
    for (size_t sent = 0; sent < (64u << 20) && Send(fd, chunk); sent += chunk.size()) {
    }
  });
  S3Client client(server.Config());
  Status s = client.List("bkt", "p/", "").status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("s3://bkt"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("longer than " + std::to_string(S3Client::kMaxBufferedBody)),
            std::string::npos)
      << s.message();
  EXPECT_EQ(server.requests(), 1);
}

TEST(S3ClientBounds, ResponseHeadersPastTheBoundAreResourceExhausted) {
  RawServer server([](int fd) {
    std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n";
    for (int i = 0; head.size() <= S3Client::kMaxHeaderBytes; ++i)
      head += "x-amz-meta-k" + std::to_string(i) + ": " + std::string(100, 'v') + "\r\n";
    (void)Send(fd, head + "\r\n");
  });
  S3Client client(server.Config());
  auto info = client.Head("bkt", "k");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kResourceExhausted) << info.status().ToString();
  EXPECT_NE(info.status().message().find("s3://bkt/k"), std::string::npos);
  EXPECT_NE(info.status().message().find("headers longer than"), std::string::npos);
}

TEST(S3ClientBounds, ARangedGetNeverPassesOnMoreThanItsRange) {
  RawServer server([](int fd) {
    (void)Send(fd,
               "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/5\r\n"
               "Content-Length: 1048576\r\n\r\n" +
                   std::string(1 << 20, 'y'));
  });
  S3Client client(server.Config());
  size_t passed = 0;
  Status s = client.GetRange("bkt", "k", 0, 5, [&](std::string_view d) {
    passed += d.size();
    return Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("more than the 5 bytes asked for"), std::string::npos) << s.message();
  EXPECT_LE(passed, 5u);
  EXPECT_EQ(server.requests(), 1);
}

// A server that trickles a body at 50 bytes/s (under the 1 KiB/s stall rate, but the stall
// bound is a minute) is cut at the request's total time and the request retried.
TEST(S3ClientBounds, ATricklingServerIsCutAtTheRequestsTotalTime) {
  std::atomic<bool> done{false};
  RawServer server([&](int fd) {
    if (!Send(fd,
              "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-99/100\r\n"
              "Content-Length: 100\r\n\r\n"))
      return;
    for (int i = 0; i < 100 && !done && Send(fd, "z"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the trickle itself
  });
  S3Config c = server.Config();
  c.request_timeout = std::chrono::milliseconds(300);
  S3Client client(c);
  std::string got;
  Status s = ReadRange(client, "k", 100, &got);
  done = true;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("after 2 attempts"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("timed out"), std::string::npos) << s.message();
  EXPECT_LT(got.size(), 100u);
  EXPECT_EQ(server.requests(), 2);
}

TEST(S3ClientBounds, TheTotalTimeGrowsWithTheBytesAskedFor) {
  // 20 bytes, one per 20 ms: past the 300 ms base, well within it plus 20 bytes at 1 byte/s.
  RawServer server([](int fd) {
    if (!Send(fd,
              "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-19/20\r\n"
              "Content-Length: 20\r\n\r\n"))
      return;
    for (int i = 0; i < 20 && Send(fd, "z"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  S3Config c = server.Config();
  c.request_timeout = std::chrono::milliseconds(300);
  c.min_transfer_rate = 1;
  S3Client client(c);
  std::string got;
  Status s = ReadRange(client, "k", 20, &got);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, std::string(20, 'z'));
  EXPECT_EQ(server.requests(), 1);
}

}  // namespace
}  // namespace kubetrain::storage
