#include "trainer/net/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>

namespace kubetrain::trainer {
namespace {

AuthKey Key(unsigned char fill) {
  AuthKey k;
  k.fill(fill);
  return k;
}

struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    client = std::make_unique<Connection>(fds[0], "client");
    server = std::make_unique<Connection>(fds[1], "server");
  }
  std::unique_ptr<Connection> client, server;
};

// Runs both handshake sides concurrently; returns {client status, server status}.
std::pair<Status, Status> Handshake(Pair& p, const AuthKey& client_key, const AuthKey& server_key) {
  Status server_status;
  std::thread t([&] {
    server_status = p.server->AuthenticateAsServer(server_key);
    if (!server_status.ok()) p.server->Shutdown();  // the server hangs up on failure
  });
  Status client_status = p.client->AuthenticateAsClient(client_key);
  t.join();
  return {client_status, server_status};
}

TEST(AuthKeyTest, AcceptsHexAndBase64Of32Bytes) {
  const std::string hex(64, 'a');
  auto k = ParseAuthKey(hex + "\n");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ((*k)[0], 0xaa);
  auto b64 = ParseAuthKey("qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqo=");
  ASSERT_TRUE(b64.ok()) << b64.status().ToString();
  EXPECT_EQ(*b64, *k);
  EXPECT_TRUE(ParseAuthKey("qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqo").ok());
  EXPECT_FALSE(ParseAuthKey("").ok());
  EXPECT_FALSE(ParseAuthKey(std::string(62, 'a')).ok());
  EXPECT_FALSE(ParseAuthKey("c2hvcnQ=").ok());  // base64 of 5 bytes
}

TEST(TransportTest, SameKeyAuthenticatesAndFramesFlowBothWays) {
  Pair p;
  auto [c, s] = Handshake(p, Key(1), Key(1));
  ASSERT_TRUE(c.ok()) << c.ToString();
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string big(1 << 20, 'x');
  std::thread t([&] { EXPECT_TRUE(p.client->Send(kPull, "head", big).ok()); });
  uint8_t type;
  std::string payload;
  ASSERT_TRUE(p.server->Receive(&type, &payload).ok());
  t.join();
  EXPECT_EQ(type, kPull);
  EXPECT_EQ(payload, "head" + big);
  ASSERT_TRUE(p.server->Send(kOk, "").ok());
  ASSERT_TRUE(p.client->Receive(&type, &payload).ok());
  EXPECT_EQ(type, kOk);
}

TEST(TransportTest, WrongKeyIsRefusedOnBothSides) {
  Pair p;
  auto [c, s] = Handshake(p, Key(1), Key(2));
  EXPECT_EQ(s.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(s.message().find("does not hold KUBETRAIN_AUTH_KEY"), std::string::npos);
  EXPECT_EQ(c.code(), StatusCode::kUnauthenticated);
}

TEST(TransportTest, PeerWithoutHandshakeIsRefused) {
  Pair p;
  Status server_status;
  std::thread t([&] { server_status = p.server->AuthenticateAsServer(Key(1)); });
  uint8_t type;
  std::string payload;
  ASSERT_TRUE(p.client->Receive(&type, &payload).ok());  // the challenge
  // Skips the handshake and sends a request straight away.
  ASSERT_TRUE(p.client->Send(kShutdown, std::string(64, '\0')).ok());
  t.join();
  EXPECT_EQ(server_status.code(), StatusCode::kUnauthenticated);
}

// client <-> [socketpair] <-> this test, in the middle <-> [socketpair] <-> server, so a
// test can capture, replay and alter the bytes on the wire.
class ManInTheMiddle {
 public:
  ManInTheMiddle() {
    int a[2], b[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
    client = std::make_unique<Connection>(a[0], "client");
    server = std::make_unique<Connection>(b[1], "server");
    to_client_ = a[1];
    to_server_ = b[0];
    Status sstat;
    std::thread t([&] { sstat = server->AuthenticateAsServer(Key(3)); });
    std::thread relay([&] {
      Relay(to_server_, to_client_, 5 + 32);  // challenge
      Relay(to_client_, to_server_, 5 + 64);  // response
      Relay(to_server_, to_client_, 5 + 32);  // accept
    });
    EXPECT_TRUE(client->AuthenticateAsClient(Key(3)).ok());
    t.join();
    relay.join();
    EXPECT_TRUE(sstat.ok());
  }
  ~ManInTheMiddle() {
    ::close(to_client_);
    ::close(to_server_);
  }
  // Reads n bytes the client sent.
  std::string CaptureFromClient(size_t n) { return ReadN(to_client_, n); }
  void DeliverToServer(const std::string& bytes) {
    EXPECT_EQ(::write(to_server_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }

  std::unique_ptr<Connection> client, server;

 private:
  static std::string ReadN(int fd, size_t n) {
    std::string buf(n, '\0');
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(fd, buf.data() + got, n - got);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    return buf;
  }
  static void Relay(int from, int to, size_t n) {
    const std::string buf = ReadN(from, n);
    EXPECT_EQ(::write(to, buf.data(), n), static_cast<ssize_t>(n));
  }
  int to_client_, to_server_;
};

constexpr size_t kFrameBytes = 5 + 4 + 16;  // header, 4-byte payload, tag

TEST(TransportTest, ReplayedFrameIsRejected) {
  ManInTheMiddle m;
  ASSERT_TRUE(m.client->Send(kDone, "abcd").ok());
  const std::string frame = m.CaptureFromClient(kFrameBytes);
  m.DeliverToServer(frame);
  uint8_t type;
  std::string payload;
  ASSERT_TRUE(m.server->Receive(&type, &payload).ok());
  EXPECT_EQ(payload, "abcd");
  m.DeliverToServer(frame);
  EXPECT_EQ(m.server->Receive(&type, &payload).code(), StatusCode::kUnauthenticated);
}

TEST(TransportTest, AlteredFrameIsRejected) {
  ManInTheMiddle m;
  ASSERT_TRUE(m.client->Send(kDone, "abcd").ok());
  std::string frame = m.CaptureFromClient(kFrameBytes);
  frame[6] ^= 1;  // one payload bit
  m.DeliverToServer(frame);
  uint8_t type;
  std::string payload;
  EXPECT_EQ(m.server->Receive(&type, &payload).code(), StatusCode::kUnauthenticated);
}

TEST(TransportTest, DialAndAcceptOverLoopback) {
  auto listener = Listener::Listen(0);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  const int port = (*listener)->port();
  ASSERT_GT(port, 0);
  std::unique_ptr<Connection> accepted;
  std::thread t([&] {
    auto c = (*listener)->Accept();
    ASSERT_TRUE(c.ok());
    accepted = std::move(*c);
    EXPECT_TRUE(accepted->AuthenticateAsServer(Key(4)).ok());
  });
  auto conn = Dial("127.0.0.1", port, std::chrono::seconds(5));
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_TRUE((*conn)->AuthenticateAsClient(Key(4)).ok());
  t.join();
  // Closing the listener wakes a blocked Accept.
  std::thread t2([&] { EXPECT_FALSE((*listener)->Accept().ok()); });
  (*listener)->Close();
  t2.join();
  EXPECT_EQ(Dial("no-such-host.invalid", 1, std::chrono::seconds(1)).status().code(),
            StatusCode::kUnavailable);
}

// A peer whose node dies sends nothing more; without keepalive and TCP_USER_TIMEOUT the
// other side's Receive blocked for ever (the lost-node hang: workers waited
// on a PS that was gone). Both ends of a connection carry the bound.
TEST(TransportTest, BothEndsDetectADeadPeerWithinTheBound) {
  auto listener = Listener::Listen(0);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  std::unique_ptr<Connection> accepted;
  std::thread t([&] {
    auto c = (*listener)->Accept();
    ASSERT_TRUE(c.ok());
    accepted = std::move(*c);
  });
  auto dialled = Dial("127.0.0.1", (*listener)->port(), std::chrono::seconds(5));
  ASSERT_TRUE(dialled.ok()) << dialled.status().ToString();
  t.join();
  ASSERT_NE(accepted, nullptr);
  for (const Connection* c : {dialled->get(), accepted.get()}) {
    int keepalive = 0;
    unsigned int user_timeout = 0;
    int idle = 0, interval = 0, count = 0;
    socklen_t len = sizeof(keepalive);
    ASSERT_EQ(::getsockopt(c->native_handle(), SOL_SOCKET, SO_KEEPALIVE, &keepalive, &len), 0);
    len = sizeof(user_timeout);
    ASSERT_EQ(::getsockopt(c->native_handle(), IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, &len),
              0);
    len = sizeof(idle);
    ::getsockopt(c->native_handle(), IPPROTO_TCP, TCP_KEEPIDLE, &idle, &len);
    len = sizeof(interval);
    ::getsockopt(c->native_handle(), IPPROTO_TCP, TCP_KEEPINTVL, &interval, &len);
    len = sizeof(count);
    ::getsockopt(c->native_handle(), IPPROTO_TCP, TCP_KEEPCNT, &count, &len);
    EXPECT_EQ(keepalive, 1) << c->peer();
    EXPECT_EQ(user_timeout, static_cast<unsigned int>(kDeadPeerTimeout.count())) << c->peer();
    // An idle connection starts probing well inside the bound.
    EXPECT_GT(idle, 0);
    EXPECT_LE(std::chrono::seconds(idle + interval * count),
              kDeadPeerTimeout + std::chrono::seconds(1))
        << "idle " << idle << " s, interval " << interval << " s, count " << count;
  }
}

// A socket connected to 127.0.0.1:port, or -1.
int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// At the descriptor limit accept() fails with EMFILE. That is transient: the pending
// connection is shed (closed, so its peer learns at once), the listener keeps working, and
// once descriptors are free again connections are accepted as before.
TEST(TransportTest, AcceptAtTheDescriptorLimitShedsTheConnectionAndRecovers) {
  auto listener = Listener::Listen(0);
  ASSERT_TRUE(listener.ok());
  const int port = (*listener)->port();
  const int client = ConnectLoopback(port);
  ASSERT_GE(client, 0);
  // Use up every descriptor under a low limit (this test runs in its own process).
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  const rlimit low{64, saved.rlim_max};
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> hog;
  for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) hog.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  auto c = (*listener)->AcceptFor(std::chrono::seconds(10));
  const Status first = c.ok() ? Status::Ok() : c.status();
  // The queue is empty now: a second call times out instead of failing again (no spin).
  auto again = (*listener)->AcceptFor(std::chrono::milliseconds(50));
  for (int fd : hog) ::close(fd);
  ::setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_EQ(first.code(), StatusCode::kResourceExhausted) << first.ToString();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, nullptr);
  // The shed connection was closed by the server.
  char byte;
  EXPECT_LE(::recv(client, &byte, 1, 0), 0);
  ::close(client);
  // And the listener works again.
  const int next = ConnectLoopback(port);
  ASSERT_GE(next, 0);
  auto ok = (*listener)->AcceptFor(std::chrono::seconds(10));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_NE(*ok, nullptr);
  ::close(next);
}

}  // namespace
}  // namespace kubetrain::trainer
