// The hostile neighbour of bench/node/hostile_bench.sh, run inside a pod of the
// hostile job (from the host's build tree through a hostPath volume).
//
//   hostile_pod serve PORT          answers every connection on PORT (the trainer's
//                                   metrics port, which the operator reads) in turn
//                                   with endless headers as fast as the peer takes
//                                   them, or with one byte of headers every 1.5 s
//   hostile_pod flood HOST PORT N   keeps N connections open to HOST:PORT, each
//                                   sending one byte of an unfinished request line
//                                   every 2 s and reconnecting when closed
//
// Runs until killed. Attack code stays in bench/: nothing here ships in an image.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int Usage() {
  std::fprintf(stderr, "usage: hostile_pod serve PORT | hostile_pod flood HOST PORT N\n");
  return 2;
}

bool SendAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void EndlessHeaders(int fd) {
  std::string chunk = "HTTP/1.1 200 OK\r\n";
  std::string line = "X-Hostile: " + std::string(1000, 'h') + "\r\n";
  for (int i = 0; i < 64; ++i) chunk += line;
  if (!SendAll(fd, chunk.data(), chunk.size())) return;
  chunk.clear();
  for (int i = 0; i < 64; ++i) chunk += line;
  while (SendAll(fd, chunk.data(), chunk.size())) {
  }
}

void SlowDrip(int fd) {
  const std::string head = "HTTP/1.1 200 OK\r\nX-Slow: ";
  for (char c : head) {
    if (!SendAll(fd, &c, 1)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  }
  const char c = 's';
  while (SendAll(fd, &c, 1)) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
}

int Serve(int port) {
  int listener = socket(AF_INET6, SOCK_STREAM, 0);
  if (listener < 0) return std::perror("socket"), 1;
  int on = 1, off = 0;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_any;
  addr.sin6_port = htons(static_cast<uint16_t>(port));
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener, 128) != 0) {
    return std::perror("bind/listen"), 1;
  }
  std::fprintf(stderr, "hostile_pod: serving endless and slow headers on port %d\n", port);
  for (uint64_t n = 0;; ++n) {
    int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) continue;
    std::thread([fd, n] {
      if (n % 2 == 0) {
        EndlessHeaders(fd);
      } else {
        SlowDrip(fd);
      }
      close(fd);
    }).detach();
  }
}

int Connect(const addrinfo* ai) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

int Flood(const char* host, const char* port, int n) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (getaddrinfo(host, port, &hints, &ai) != 0 || ai == nullptr) {
    std::fprintf(stderr, "hostile_pod: cannot resolve %s\n", host);
    return 1;
  }
  std::vector<int> fds(static_cast<size_t>(n), -1);
  const char request[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  std::vector<size_t> sent(fds.size(), 0);
  uint64_t reconnects = 0;
  auto report = Clock::now();
  for (;;) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i] < 0) {
        fds[i] = Connect(ai);
        sent[i] = 0;
        ++reconnects;
        continue;
      }
      const char c = sent[i] < sizeof request - 1 ? request[sent[i]] : 'x';
      if (send(fds[i], &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
        ++sent[i];
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN) {
        close(fds[i]);
        fds[i] = -1;
      }
    }
    if (Clock::now() - report > std::chrono::seconds(10)) {
      int open = 0;
      for (int fd : fds) open += fd >= 0;
      std::fprintf(stderr, "hostile_pod: %d connections open, %llu (re)connects\n", open,
                   static_cast<unsigned long long>(reconnects));
      report = Clock::now();
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  if (argc == 3 && std::strcmp(argv[1], "serve") == 0) return Serve(std::atoi(argv[2]));
  if (argc == 5 && std::strcmp(argv[1], "flood") == 0) {
    return Flood(argv[2], argv[3], std::atoi(argv[4]));
  }
  return Usage();
}
