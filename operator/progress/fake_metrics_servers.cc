#include "operator/progress/fake_metrics_servers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kubetrain::progress {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kStatusLine = "HTTP/1.1 200 OK\r\n";
constexpr size_t kChunk = 64 * 1024;

// Header lines, kChunk bytes of them.
const std::string& HeaderLines() {
  static const std::string lines = [] {
    std::string s;
    for (int i = 0; s.size() < kChunk; ++i) {
      s += "X-Pad-" + std::to_string(i) + ": " + std::string(100, 'a') + "\r\n";
    }
    return s;
  }();
  return lines;
}

const std::string& DripAnswer() {
  static const std::string head =
      std::string(kStatusLine) +
      "Content-Type: text/plain; version=0.0.4\r\nContent-Length: 100000000\r\n\r\n";
  return head;
}

}  // namespace

struct FakeMetricsServers::Connection {
  int fd = -1;
  Server* server = nullptr;
  std::string request;
  bool answered = false;
  std::string out;  // to write
  size_t out_pos = 0;
  int64_t dripped = 0;
  Clock::time_point next_drip{};
};

FakeMetricsServers::FakeMetricsServers(std::chrono::milliseconds drip_interval)
    : drip_interval_(drip_interval), wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  thread_ = std::thread([this] { Loop(); });
}

FakeMetricsServers::~FakeMetricsServers() {
  Stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  for (auto& [url, s] : servers_) ::close(s->listen_fd);
}

void FakeMetricsServers::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void FakeMetricsServers::Stop() {
  stopping_ = true;
  Wake();
  if (thread_.joinable()) thread_.join();
}

StatusOr<std::string> FakeMetricsServers::Add(Mode mode, std::string body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Internal(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return Internal(std::string("listen: ") + std::strerror(err));
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/metrics";
  auto server = std::make_unique<Server>();
  server->listen_fd = fd;
  server->mode = mode;
  server->body = std::move(body);
  {
    MutexLock lock(mu_);
    servers_[url] = std::move(server);
  }
  Wake();
  return url;
}

void FakeMetricsServers::SetBody(const std::string& url, std::string body) {
  MutexLock lock(mu_);
  auto it = servers_.find(url);
  if (it != servers_.end()) it->second->body = std::move(body);
}

int64_t FakeMetricsServers::requests(const std::string& url) const {
  MutexLock lock(mu_);
  auto it = servers_.find(url);
  return it == servers_.end() ? 0 : it->second->requests.load();
}

void FakeMetricsServers::Loop() {
  std::vector<Connection> conns;
  std::vector<Server*> listeners;
  std::vector<pollfd> fds;
  auto close_conn = [](Connection& c) {
    ::close(c.fd);
    c.fd = -1;
  };
  while (!stopping_) {
    {
      MutexLock lock(mu_);
      listeners.clear();
      for (auto& [url, s] : servers_) listeners.push_back(s.get());
    }
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    for (Server* s : listeners) fds.push_back({s->listen_fd, POLLIN, 0});
    const auto now = Clock::now();
    auto timeout = std::chrono::milliseconds(1000);
    for (auto& c : conns) {
      short events = POLLIN;
      if (c.out_pos < c.out.size()) events |= POLLOUT;
      if (c.answered &&
          (c.server->mode == Mode::kEndlessHeaders || c.server->mode == Mode::kEndlessHeaderLine)) {
        events |= POLLOUT;
      }
      if (c.answered && c.server->mode == Mode::kDrip) {
        timeout = std::min(
            timeout, std::max(std::chrono::milliseconds(0),
                              std::chrono::ceil<std::chrono::milliseconds>(c.next_drip - now)));
      }
      fds.push_back({c.fd, events, 0});
    }
    if (::poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) < 0 && errno != EINTR) {
      break;
    }
    if (fds[0].revents & POLLIN) {
      uint64_t n;
      [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &n, sizeof n);
    }
    for (size_t i = 0; i < listeners.size(); ++i) {
      if (!(fds[1 + i].revents & POLLIN)) continue;
      while (true) {
        const int fd =
            ::accept4(listeners[i]->listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        Connection c;
        c.fd = fd;
        c.server = listeners[i];
        conns.push_back(std::move(c));
      }
    }
    const size_t first_conn = 1 + listeners.size();
    const auto after = Clock::now();
    for (size_t i = 0; i + first_conn < fds.size(); ++i) {
      Connection& c = conns[i];
      const short rev = fds[first_conn + i].revents;
      if (rev & (POLLIN | POLLHUP | POLLERR)) {
        char buf[4096];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          close_conn(c);
          continue;
        }
        if (n > 0 && !c.answered) {
          c.request.append(buf, static_cast<size_t>(n));
          if (c.request.find("\r\n\r\n") != std::string::npos) {
            c.answered = true;
            const int64_t request = ++c.server->requests;
            switch (c.server->mode) {
              case Mode::kMetrics:
              case Mode::kCounting: {
                std::string body;
                if (c.server->mode == Mode::kCounting) {
                  body = "kubetrain_trainer_step " + std::to_string(request % 100) +
                         "\nkubetrain_trainer_total_steps 100\n";
                } else {
                  MutexLock lock(mu_);
                  body = c.server->body;
                }
                c.out = std::string(kStatusLine) +
                        "Content-Type: text/plain; version=0.0.4\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
                break;
              }
              case Mode::kEndlessHeaders:
                c.out = std::string(kStatusLine);
                break;
              case Mode::kEndlessHeaderLine:
                c.out = std::string(kStatusLine) + "X-Pad: ";
                break;
              case Mode::kDrip:
                c.next_drip = after;
                break;
              case Mode::kSilent:
                break;
            }
          }
        }
      }
      if (c.fd < 0 || !c.answered) continue;
      if (c.server->mode == Mode::kDrip) {
        if (after < c.next_drip) continue;
        const std::string& head = DripAnswer();
        const char byte = c.dripped < static_cast<int64_t>(head.size()) ? head[c.dripped] : '#';
        const ssize_t n = ::send(c.fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN) {
          close_conn(c);
          continue;
        }
        if (n == 1) {
          ++c.dripped;
          ++bytes_sent_;
        }
        c.next_drip = after + drip_interval_;
        continue;
      }
      if (c.out_pos == c.out.size()) {
        if (c.server->mode == Mode::kEndlessHeaders) {
          c.out = HeaderLines();
        } else if (c.server->mode == Mode::kEndlessHeaderLine) {
          c.out.assign(kChunk, 'a');
        } else {
          if (c.server->mode == Mode::kMetrics || c.server->mode == Mode::kCounting) {
            close_conn(c);  // answered whole
          }
          continue;
        }
        c.out_pos = 0;
      }
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno != EAGAIN && errno != EINTR) close_conn(c);
        continue;
      }
      c.out_pos += static_cast<size_t>(n);
      bytes_sent_ += n;
      if ((c.server->mode == Mode::kMetrics || c.server->mode == Mode::kCounting) &&
          c.out_pos == c.out.size()) {
        close_conn(c);
      }
    }
    std::erase_if(conns, [](const Connection& c) { return c.fd < 0; });
  }
  for (auto& c : conns) ::close(c.fd);
}

}  // namespace kubetrain::progress
