// Raw-socket HTTP clients for tests and benchmarks of common/http_server.h:
// a well-behaved GET with a deadline, and the hostile clients the server must
// survive (endless header bytes, slow drips, idle connections). Header-only;
// blocking calls all have deadlines, so a test fails instead of hanging.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

namespace kubetrain::http_test {

using Clock = std::chrono::steady_clock;

// A connected non-blocking TCP socket to 127.0.0.1:port, or -1.
// `sndbuf` > 0 shrinks the send buffer (so a client notices a close early).
// `from`, when set, is the source address: any 127/8 address works on Linux
// loopback, so one process can be several clients.
inline int Connect(int port, int sndbuf = 0, const char* from = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (sndbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  if (from != nullptr) {
    sockaddr_in src{};
    src.sin_family = AF_INET;
    ::inet_pton(AF_INET, from, &src.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// True when the peer closed `fd` (EOF or reset) before `deadline`. Reads and
// drops whatever the server sends (a 431, a 408) on the way.
inline bool WaitClosed(int fd, Clock::time_point deadline) {
  char buf[4096];
  for (;;) {  // at least one look, also with a deadline already passed
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count()))) > 0) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
      if (n > 0) continue;  // a 503 or 408 before the close: look again
    }
    if (left.count() <= 0) return false;
  }
}

// Sends bytes without a newline (`fill`) until the peer closes the connection,
// `max_bytes` went out, or `deadline`. Returns the bytes sent when the peer
// closed, nullopt when it never did.
inline std::optional<size_t> SendEndlessHeader(int fd, size_t max_bytes,
                                               Clock::time_point deadline) {
  const std::string prefix = "GET /metrics HTTP/1.1\r\nX-Endless: ";
  std::string chunk(16384, 'a');
  size_t sent = 0;
  bool sent_prefix = false;
  while (sent < max_bytes && Clock::now() < deadline) {
    const std::string& what = sent_prefix ? chunk : prefix;
    pollfd p{fd, POLLOUT | POLLIN, 0};
    ::poll(&p, 1, 50);
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return sent;
    }
    if (!(p.revents & POLLOUT)) continue;
    const ssize_t n = ::send(fd, what.data(), what.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return sent;  // EPIPE, ECONNRESET: the server closed
    }
    sent += static_cast<size_t>(n);
    sent_prefix = true;
  }
  return std::nullopt;
}

// Sends `request` one byte every `interval` until the peer closes or
// `deadline`. Returns when it closed (time since the first byte), nullopt when
// it never did.
inline std::optional<Clock::duration> Drip(int fd, const std::string& request,
                                           std::chrono::milliseconds interval,
                                           Clock::time_point deadline) {
  const auto start = Clock::now();
  size_t i = 0;
  while (Clock::now() < deadline) {
    if (i < request.size()) {
      const ssize_t n = ::send(fd, request.data() + i, 1, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return Clock::now() - start;
      if (n == 1) ++i;
    }
    // The wait between bytes is the attack itself (a drip rate), not a
    // synchronisation: it also notices the close as soon as it happens.
    if (WaitClosed(fd, std::min(deadline, Clock::now() + interval))) return Clock::now() - start;
  }
  return std::nullopt;
}

struct Response {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

// GET (or another method) `target` from 127.0.0.1:port with a total deadline;
// nullopt on a connection error or when no full response came in time. A
// non-empty `body` goes with its Content-Length.
inline std::optional<Response> Get(int port, const std::string& target,
                                   std::chrono::milliseconds timeout,
                                   const std::string& method = "GET",
                                   const std::string& extra_headers = "",
                                   const std::string& body = "") {
  const auto deadline = Clock::now() + timeout;
  const int fd = Connect(port);
  if (fd < 0) return std::nullopt;
  const std::string length =
      body.empty() ? "" : "Content-Length: " + std::to_string(body.size()) + "\r\n";
  const std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + length +
                          extra_headers + "\r\n" + body;
  size_t off = 0;
  std::string in;
  bool eof = false;
  while (!eof && Clock::now() < deadline) {
    pollfd p{fd, static_cast<short>(POLLIN | (off < req.size() ? POLLOUT : 0)), 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
    if ((p.revents & POLLOUT) && off < req.size()) {
      const ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
      if (n > 0) off += static_cast<size_t>(n);
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[8192];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        in.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        eof = true;
      }
    }
    // A server that keeps the connection open: stop at Content-Length.
    const auto end = in.find("\r\n\r\n");
    if (end != std::string::npos) {
      const auto cl = in.find("Content-Length: ");
      if (cl != std::string::npos && cl < end) {
        const size_t len = std::stoul(in.substr(cl + 16));
        if (method == "HEAD" || in.size() >= end + 4 + len) eof = true;
      }
    }
  }
  ::close(fd);
  const auto end = in.find("\r\n\r\n");
  if (!eof || end == std::string::npos || in.compare(0, 9, "HTTP/1.1 ") != 0) return std::nullopt;
  Response r;
  r.status = std::atoi(in.c_str() + 9);
  r.head = in.substr(0, end + 2);
  r.body = in.substr(end + 4);
  return r;
}

// Sends `request` (a whole HTTP request) on the open connection `fd` and reads one
// response, by its Content-Length, so the connection can serve the next one (keep-alive).
// nullopt on an error, a close before the whole response, or `deadline`.
inline std::optional<Response> RoundTrip(int fd, const std::string& request,
                                         Clock::time_point deadline) {
  size_t off = 0;
  std::string in;
  size_t end = std::string::npos, want = 0;
  while (Clock::now() < deadline) {
    pollfd p{fd, static_cast<short>(POLLIN | (off < request.size() ? POLLOUT : 0)), 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
    if ((p.revents & POLLOUT) && off < request.size()) {
      const ssize_t n = ::send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return std::nullopt;
      if (n > 0) off += static_cast<size_t>(n);
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[16384];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return std::nullopt;
      if (n > 0) in.append(buf, static_cast<size_t>(n));
    }
    if (end == std::string::npos && (end = in.find("\r\n\r\n")) != std::string::npos) {
      std::string head = in.substr(0, end + 2);  // header names are case-insensitive
      for (char& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      const auto cl = head.find("\r\ncontent-length:");
      if (cl == std::string::npos) return std::nullopt;
      want = end + 4 + std::stoul(head.substr(cl + 17));
    }
    if (end != std::string::npos && in.size() >= want) {
      if (in.compare(0, 9, "HTTP/1.1 ") != 0) return std::nullopt;
      Response r;
      r.status = std::atoi(in.c_str() + 9);
      r.head = in.substr(0, end + 2);
      r.body = in.substr(end + 4, want - end - 4);
      return r;
    }
  }
  return std::nullopt;
}

}  // namespace kubetrain::http_test
