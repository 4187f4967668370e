// A loopback TCP proxy for tests: forwards bytes to an upstream port and can
// cut every open connection at once, the way a load balancer or a restarting
// apiserver drops watches. TLS passes through untouched.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace kubetrain::testing {

class TcpProxy {
 public:
  explicit TcpProxy(int upstream_port) : upstream_port_(upstream_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listen_fd_, 64);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~TcpProxy() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    accept_thread_.join();
    DropAll();
    std::vector<std::thread> pumps;
    {
      std::lock_guard lock(mu_);
      pumps.swap(pumps_);
    }
    for (auto& t : pumps) t.join();
  }

  int port() const { return port_; }

  // Closes every connection currently open through the proxy.
  void DropAll() {
    std::lock_guard lock(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }

  int connections_accepted() const { return accepted_.load(); }

  // While stalled, connections stay open but no byte is forwarded either way:
  // a hung connection, as a dead NAT entry or a wedged load balancer makes it.
  void SetStalled(bool stalled) { stalled_ = stalled; }

  // While refusing, new connections are closed at once.
  void SetRefusing(bool refusing) { refusing_ = refusing; }

 private:
  void AcceptLoop() {
    while (!stopping_) {
      int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client < 0) {
        if (stopping_) return;
        continue;
      }
      if (refusing_) {  // as if the apiserver were unreachable
        ::close(client);
        continue;
      }
      int up = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(upstream_port_));
      if (::connect(up, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ::close(client);
        ::close(up);
        continue;
      }
      ++accepted_;
      std::lock_guard lock(mu_);
      fds_.push_back(client);
      fds_.push_back(up);
      pumps_.emplace_back([this, client, up] { Pump(client, up); });
    }
  }

  void Pump(int a, int b) {
    char buf[16384];
    pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    for (;;) {
      if (stalled_) {
        if (stopping_) break;
        ::poll(nullptr, 0, 20);
        continue;
      }
      if (::poll(p, 2, 200) < 0) break;
      bool closed = false;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(p[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          closed = true;
          break;
        }
        int out = p[1 - i].fd;
        for (ssize_t off = 0; off < n;) {
          ssize_t w = ::write(out, buf + off, n - off);
          if (w <= 0) {
            closed = true;
            break;
          }
          off += w;
        }
      }
      if (closed || stopping_) break;
    }
    std::lock_guard lock(mu_);
    std::erase(fds_, a);
    std::erase(fds_, b);
    ::close(a);
    ::close(b);
  }

  const int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> refusing_{false};
  std::atomic<bool> stalled_{false};
  std::atomic<int> accepted_{0};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
};

}  // namespace kubetrain::testing
