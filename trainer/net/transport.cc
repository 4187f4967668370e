#include "trainer/net/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

namespace kubetrain::trainer {
namespace {

constexpr uint32_t kMaxFrame = 1u << 30;
constexpr size_t kTagBytes = crypto_onetimeauth_BYTES;
static_assert(crypto_auth_hmacsha256_BYTES == 32 && crypto_onetimeauth_KEYBYTES == 32);

bool InitSodium() {
  static const bool ok = sodium_init() >= 0;
  return ok;
}

std::array<unsigned char, 32> Hmac(const AuthKey& key, std::string_view label,
                                   const unsigned char* a, const unsigned char* b) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key.data(), key.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label.data()),
                                label.size());
  crypto_auth_hmacsha256_update(&st, a, 32);
  crypto_auth_hmacsha256_update(&st, b, 32);
  std::array<unsigned char, 32> out;
  crypto_auth_hmacsha256_final(&st, out.data());
  return out;
}

std::string_view Bytes(const unsigned char* p, size_t n) {
  return {reinterpret_cast<const char*>(p), n};
}

// TCP_NODELAY (requests are small and latency-bound) and dead-peer detection (see
// kDeadPeerTimeout in transport.h): keepalive probes on an idle connection, and
// TCP_USER_TIMEOUT for data the peer never acknowledges. Best effort: a socket that
// refuses an option still works, only without the bound.
void TuneSocket(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  const auto timeout_s = std::chrono::duration_cast<std::chrono::seconds>(kDeadPeerTimeout).count();
  const int idle = static_cast<int>(std::max<int64_t>(1, timeout_s / 4));
  const int interval = static_cast<int>(std::max<int64_t>(1, timeout_s / 8));
  const int count = 6;  // idle + count * interval ~ the timeout (TCP_USER_TIMEOUT rules)
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  const unsigned int user_timeout_ms = static_cast<unsigned int>(kDeadPeerTimeout.count());
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

std::string PeerName(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

}  // namespace

StatusOr<AuthKey> ParseAuthKey(std::string_view text) {
  if (!InitSodium()) return Internal("libsodium failed to initialise");
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  AuthKey key;
  size_t len = 0;
  const char* end = nullptr;
  if (text.size() == 64 &&
      sodium_hex2bin(key.data(), key.size(), text.data(), text.size(), nullptr, &len, &end) == 0 &&
      len == 32 && end == text.data() + text.size()) {
    return key;
  }
  for (int variant : {sodium_base64_VARIANT_ORIGINAL, sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
                      sodium_base64_VARIANT_URLSAFE, sodium_base64_VARIANT_URLSAFE_NO_PADDING}) {
    if (sodium_base642bin(key.data(), key.size(), text.data(), text.size(), nullptr, &len, &end,
                          variant) == 0 &&
        len == 32 && end == text.data() + text.size()) {
      return key;
    }
  }
  return InvalidArgument("KUBETRAIN_AUTH_KEY must be 32 bytes as 64 hex digits or base64 (got " +
                         std::to_string(text.size()) + " characters that are neither)");
}

Connection::Connection(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}

Connection::~Connection() {
  ::close(fd_);
  sodium_memzero(send_key_.data(), send_key_.size());
  sodium_memzero(recv_key_.data(), recv_key_.size());
}

void Connection::Shutdown() {
  ::shutdown(fd_, SHUT_RDWR);
}

Status Connection::SendRaw(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Unavailable("send to " + peer_ + ": " + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status Connection::RecvRaw(void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd_, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Unavailable("connection to " + peer_ + " closed");
    if (r < 0) return Unavailable("receive from " + peer_ + ": " + std::strerror(errno));
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

void Connection::Tag(const std::array<unsigned char, 32>& dir_key, uint64_t seq,
                     const unsigned char* head, std::string_view a, std::string_view b,
                     unsigned char* tag) const {
  // One-time Poly1305 key = ChaCha20(direction key, nonce = sequence number), as in
  // libsodium's secretbox construction; never reused because seq only grows.
  unsigned char otk[crypto_onetimeauth_KEYBYTES];
  unsigned char nonce[crypto_stream_chacha20_NONCEBYTES] = {};
  std::memcpy(nonce, &seq, sizeof(seq));
  crypto_stream_chacha20(otk, sizeof(otk), nonce, dir_key.data());
  crypto_onetimeauth_state st;
  crypto_onetimeauth_init(&st, otk);
  crypto_onetimeauth_update(&st, head, 5);
  crypto_onetimeauth_update(&st, reinterpret_cast<const unsigned char*>(a.data()), a.size());
  crypto_onetimeauth_update(&st, reinterpret_cast<const unsigned char*>(b.data()), b.size());
  crypto_onetimeauth_final(&st, tag);
  sodium_memzero(otk, sizeof(otk));
}

Status Connection::Send(uint8_t type, std::string_view payload, std::string_view payload2) {
  const uint64_t body = 1 + payload.size() + payload2.size();
  if (body > kMaxFrame)
    return InvalidArgument("frame of " + std::to_string(body) + " bytes is too large");
  unsigned char head[5];
  const uint32_t len = static_cast<uint32_t>(body);
  std::memcpy(head, &len, 4);  // little endian on every platform we build for
  head[4] = type;
  KT_RETURN_IF_ERROR(SendRaw(head, sizeof(head)));
  KT_RETURN_IF_ERROR(SendRaw(payload.data(), payload.size()));
  KT_RETURN_IF_ERROR(SendRaw(payload2.data(), payload2.size()));
  if (authenticated_) {
    unsigned char tag[kTagBytes];
    Tag(send_key_, send_seq_++, head, payload, payload2, tag);
    KT_RETURN_IF_ERROR(SendRaw(tag, sizeof(tag)));
  }
  return Status::Ok();
}

Status Connection::Receive(uint8_t* type, std::string* payload) {
  unsigned char head[5];
  KT_RETURN_IF_ERROR(RecvRaw(head, sizeof(head)));
  uint32_t len;
  std::memcpy(&len, head, 4);
  if (len == 0 || len > kMaxFrame) {
    return InvalidArgument("frame length " + std::to_string(len) + " from " + peer_ +
                           " is out of range");
  }
  // Before authentication only the small handshake frames are legal: do not let an
  // unauthenticated peer make us allocate a gigabyte.
  if (!authenticated_ && len > 256) {
    return Status(StatusCode::kUnauthenticated, "unauthenticated peer " + peer_ + " sent a " +
                                                    std::to_string(len) + "-byte frame");
  }
  *type = head[4];
  payload->resize(len - 1);
  KT_RETURN_IF_ERROR(RecvRaw(payload->data(), payload->size()));
  if (authenticated_) {
    unsigned char tag[kTagBytes], expect[kTagBytes];
    KT_RETURN_IF_ERROR(RecvRaw(tag, sizeof(tag)));
    Tag(recv_key_, recv_seq_++, head, *payload, {}, expect);
    if (sodium_memcmp(tag, expect, sizeof(tag)) != 0) {
      return Status(StatusCode::kUnauthenticated,
                    "frame from " + peer_ + " failed authentication (forged, altered or replayed)");
    }
  }
  return Status::Ok();
}

Status Connection::AuthenticateAsServer(const AuthKey& key) {
  if (!InitSodium()) return Internal("libsodium failed to initialise");
  unsigned char ns[32];
  randombytes_buf(ns, sizeof(ns));
  KT_RETURN_IF_ERROR(Send(kChallenge, Bytes(ns, 32)));
  uint8_t type;
  std::string msg;
  KT_RETURN_IF_ERROR(Receive(&type, &msg));
  if (type != kResponse || msg.size() != 64) {
    return Status(StatusCode::kUnauthenticated, "peer " + peer_ + " did not answer the challenge");
  }
  const auto* nc = reinterpret_cast<const unsigned char*>(msg.data());
  const auto expect = Hmac(key, "kt1 client", ns, nc);
  if (crypto_verify_32(expect.data(), nc + 32) != 0) {
    return Status(StatusCode::kUnauthenticated,
                  "peer " + peer_ + " does not hold KUBETRAIN_AUTH_KEY");
  }
  const auto proof = Hmac(key, "kt1 server", nc, ns);
  KT_RETURN_IF_ERROR(Send(kAccept, Bytes(proof.data(), 32)));
  send_key_ = Hmac(key, "kt1 s2c", ns, nc);
  recv_key_ = Hmac(key, "kt1 c2s", ns, nc);
  authenticated_ = true;
  return Status::Ok();
}

Status Connection::AuthenticateAsClient(const AuthKey& key) {
  if (!InitSodium()) return Internal("libsodium failed to initialise");
  uint8_t type;
  std::string msg;
  KT_RETURN_IF_ERROR(Receive(&type, &msg));
  if (type != kChallenge || msg.size() != 32) {
    return Status(StatusCode::kUnauthenticated, "server " + peer_ + " sent no challenge");
  }
  unsigned char ns[32], nc[32];
  std::memcpy(ns, msg.data(), 32);
  randombytes_buf(nc, sizeof(nc));
  const auto proof = Hmac(key, "kt1 client", ns, nc);
  KT_RETURN_IF_ERROR(Send(kResponse, Bytes(nc, 32), Bytes(proof.data(), 32)));
  Status s = Receive(&type, &msg);
  if (!s.ok()) {
    // The server closes without a word on a bad proof (no oracle for guessers).
    return Status(
        StatusCode::kUnauthenticated,
        "server " + peer_ + " refused the handshake (wrong KUBETRAIN_AUTH_KEY?): " + s.message());
  }
  const auto expect = Hmac(key, "kt1 server", nc, ns);
  if (type != kAccept || msg.size() != 32 ||
      crypto_verify_32(expect.data(), reinterpret_cast<const unsigned char*>(msg.data())) != 0) {
    return Status(StatusCode::kUnauthenticated,
                  "server " + peer_ + " could not prove it holds KUBETRAIN_AUTH_KEY");
  }
  send_key_ = Hmac(key, "kt1 c2s", ns, nc);
  recv_key_ = Hmac(key, "kt1 s2c", ns, nc);
  authenticated_ = true;
  return Status::Ok();
}

StatusOr<std::unique_ptr<Connection>> Dial(const std::string& host, int port,
                                           std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    // New Services' DNS records can lag: the caller retries.
    return Unavailable("cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  std::string last_error = "no addresses";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno == EINPROGRESS) {
        pollfd pfd{fd, POLLOUT, 0};
        const int pr = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
        socklen_t len = sizeof(err);
        if (pr <= 0) {
          err = pr == 0 ? ETIMEDOUT : errno;
        } else {
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      } else {
        err = errno;
      }
    }
    if (err != 0) {
      last_error = std::strerror(err);
      ::close(fd);
      continue;
    }
    ::fcntl(fd, F_SETFL, flags);
    TuneSocket(fd);
    std::string peer = host + ":" + std::to_string(port);
    ::freeaddrinfo(res);
    return std::make_unique<Connection>(fd, std::move(peer));
  }
  ::freeaddrinfo(res);
  return Unavailable("cannot connect to " + host + ":" + std::to_string(port) + ": " + last_error);
}

namespace {

// Binds and listens on all addresses of one family; returns the fd or -1 (errno set).
int ListenOn(int family, int port) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1, zero = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc;
  if (family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // dual stack
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  if (rc != 0 || ::listen(fd, 128) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

}  // namespace

StatusOr<std::unique_ptr<Listener>> Listener::Listen(int port) {
  // IPv6 dual-stack when the node has IPv6, else IPv4 (IPv6 disabled in some clusters).
  int fd = ListenOn(AF_INET6, port);
  if (fd < 0 && errno != EADDRINUSE) fd = ListenOn(AF_INET, port);
  if (fd < 0) {
    // A port held by another process may be freed by a restart: retryable.
    return Unavailable("cannot listen on port " + std::to_string(port) + ": " +
                       std::strerror(errno));
  }
  // Non-blocking, so a connection reset between poll() and accept() cannot block us.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const int bound = ss.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                        : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return std::unique_ptr<Listener>(new Listener(fd, bound));
}

Listener::Listener(int fd, int port)
    : fd_(fd), port_(port), spare_fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

Listener::~Listener() {
  Close();
  const int spare = spare_fd_.exchange(-1);
  if (spare >= 0) ::close(spare);
}

void Listener::Close() {
  const int fd = fd_.exchange(-1);
  if (fd >= 0) {
    ::shutdown(fd, SHUT_RDWR);  // wakes a thread blocked in poll()
    ::close(fd);
  }
}

StatusOr<std::unique_ptr<Connection>> Listener::Accept() {
  while (true) {
    auto conn = AcceptFor(std::chrono::hours(1));
    if (!conn.ok() || *conn != nullptr) return conn;
  }
}

StatusOr<std::unique_ptr<Connection>> Listener::AcceptFor(std::chrono::milliseconds timeout) {
  const int listen_fd = fd_.load();
  if (listen_fd < 0) return Unavailable("listener closed");
  pollfd pfd{listen_fd, POLLIN, 0};
  const int pr = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
  if (pr < 0 && errno != EINTR) return Internal(std::string("poll: ") + std::strerror(errno));
  if (pr <= 0) return std::unique_ptr<Connection>();
  if (fd_.load() < 0) return Unavailable("listener closed");
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
  if (fd >= 0) {
    TuneSocket(fd);
    return std::make_unique<Connection>(fd, PeerName(reinterpret_cast<sockaddr*>(&ss)));
  }
  const int err = errno;
  switch (err) {
    case EAGAIN:
    case EINTR:
    // The connection died in the queue, or (Linux) a network error pending on it.
    case ECONNABORTED:
    case EPROTO:
    case EPERM:  // refused by a firewall rule
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case ETIMEDOUT:
      return std::unique_ptr<Connection>();
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM: {
      // Out of descriptors: give up the reserved one to take the pending connection off
      // the queue and close it, so the peer learns at once and poll() does not spin.
      const int spare = spare_fd_.exchange(-1);
      if (spare >= 0) {
        ::close(spare);
        const int shed = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (shed >= 0) ::close(shed);
        spare_fd_.store(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      }
      return Status(StatusCode::kResourceExhausted,
                    std::string("accept: ") + std::strerror(err) + " (connection dropped)");
    }
    default:
      if (fd_.load() < 0) return Unavailable("listener closed");
      return Internal(std::string("accept: ") + std::strerror(err));
  }
}

}  // namespace kubetrain::trainer
