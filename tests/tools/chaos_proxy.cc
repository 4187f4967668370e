// chaos_proxy: a TCP proxy between trainer workers and parameter servers that cuts
// connections at seeded random moments, for the exactly-once push test.
//
// Usage: chaos_proxy SEED|script:CUTS MAX_FRAMES PORTS_FILE HOST:PORT [HOST:PORT ...]
//   One route per HOST:PORT: a listener on a free 127.0.0.1 port forwarding to it. The
//   listening ports, one per line in route order, are written to PORTS_FILE (atomically)
//   once every listener is up. Runs until killed.
//
// Each connection is cut once, at a moment drawn from the route's own random stream
// (seeded with SEED and the route's index): a direction (worker -> PS or PS -> worker), a
// frame number in that direction (1..MAX_FRAMES, counting the handshake frames), and how:
// before the frame (the frame is lost), inside it (a torn frame), or right after it (the
// frame is delivered, the connection dies before the answer). Frames are found with the
// trainer's framing (trainer/net/transport.h: u32 length | type | payload, then a 16-byte
// tag once the handshake is over: after the worker's first frame and the PS's second), so
// the cuts land on requests and replies, not on byte counts that the timing would move.
// A worker reconnects only after its connection died, so each route sees its connections
// one after another and the cuts do not depend on timing. Every cut is logged to stderr as
// "cut route R connection C: <direction> frame N <how>".
//
// script:CUTS instead of a seed names the cuts: CUTS is a comma-separated list of
// DIRECTION/FRAME/HOW (direction 0 = worker -> PS, 1 = PS -> worker; how = lost, torn or
// after), the first for every route's first connection, and so on; later connections are
// not cut. For tests that need one particular cut.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

enum class How { kBefore, kInside, kAfter };
const char* HowName(How h) {
  return h == How::kBefore ? "lost" : h == How::kInside ? "torn" : "delivered, then cut";
}

struct Cut {
  int direction = 0;  // 0: worker -> PS, 1: PS -> worker
  uint64_t frame = 1;
  How how = How::kBefore;
  double inside = 0.5;  // where inside the frame, for kInside
};

std::mutex log_mu;

// One direction of one connection: forwards bytes and finds frame boundaries.
class Pump {
 public:
  Pump(int from, int to, int untagged_frames, const Cut* cut)
      : from_(from), to_(to), untagged_(untagged_frames), cut_(cut) {}

  // Forwards until EOF, an error or the cut. Returns true if it made the cut.
  bool Run() {
    std::vector<char> buf(1 << 16);
    while (true) {
      const ssize_t n = ::recv(from_, buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      const uint64_t end = offset_ + static_cast<uint64_t>(n);
      Parse(buf.data(), static_cast<size_t>(n));
      uint64_t limit = end;
      bool cutting = false;
      if (cut_at_ != UINT64_MAX && cut_at_ <= end) {
        limit = std::max(cut_at_, offset_);
        cutting = true;
      }
      if (!SendAll(buf.data(), static_cast<size_t>(limit - offset_))) return false;
      offset_ = end;
      if (cutting) return true;
    }
  }

 private:
  // Advances the frame parser over `n` bytes starting at offset_, setting cut_at_ when the
  // header of the frame to cut is complete.
  void Parse(const char* p, size_t n) {
    for (size_t i = 0; i < n;) {
      if (frame_left_ > 0) {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(frame_left_, n - i));
        frame_left_ -= take;
        i += take;
        continue;
      }
      header_[header_got_++] = static_cast<unsigned char>(p[i]);
      ++i;
      if (header_got_ < 4) continue;
      uint32_t len = 0;
      std::memcpy(&len, header_, 4);
      header_got_ = 0;
      ++frames_;
      const uint64_t start = offset_ + i - 4;
      const uint64_t total = 4ull + len + (frames_ > static_cast<uint64_t>(untagged_) ? 16 : 0);
      frame_left_ = total - 4;
      if (cut_ != nullptr && frames_ == cut_->frame) {
        switch (cut_->how) {
          case How::kBefore:
            cut_at_ = start;
            break;
          case How::kInside:
            cut_at_ =
                start + 1 + static_cast<uint64_t>(cut_->inside * static_cast<double>(total - 2));
            break;
          case How::kAfter:
            cut_at_ = start + total;
            break;
        }
      }
    }
  }

  bool SendAll(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::send(to_, p, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  const int from_, to_, untagged_;
  const Cut* const cut_;  // null: this direction is not the one cut
  uint64_t offset_ = 0;   // bytes received so far
  uint64_t frames_ = 0;
  unsigned char header_[4] = {};
  int header_got_ = 0;
  uint64_t frame_left_ = 0;
  uint64_t cut_at_ = UINT64_MAX;
};

int Connect(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return -1;
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  return fd;
}

void NoDelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void Serve(int route, int listen_fd, std::string host, std::string port, uint64_t seed,
           uint64_t max_frames, std::vector<Cut> script, bool scripted) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(route));
  // Numbered (and drawn for) only once the PS side answered: a connection refused because
  // the PS is not up yet changes nothing, so the cuts do not depend on start-up order.
  for (int conn_no = 1;;) {
    const int client = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      std::perror("accept");
      return;
    }
    const int upstream = Connect(host, port);
    if (upstream < 0) {
      ::close(client);
      continue;
    }
    Cut cut;
    cut.direction = static_cast<int>(rng() % 2);
    cut.frame = 1 + rng() % max_frames;
    cut.how = static_cast<How>(rng() % 3);
    cut.inside = std::uniform_real_distribution<double>(0, 1)(rng);
    if (scripted) {
      const bool planned = static_cast<size_t>(conn_no) <= script.size();
      if (planned) cut = script[conn_no - 1];
      cut.frame = planned ? cut.frame : UINT64_MAX;  // never
    }
    NoDelay(client);
    NoDelay(upstream);
    // The connection's two directions in their own threads; the route waits for them, so
    // its connections (and random draws) stay in order.
    std::atomic<bool> cut_made{false};
    auto pump = [&](int from, int to, int untagged, int direction) {
      Pump p(from, to, untagged, cut.direction == direction ? &cut : nullptr);
      if (p.Run()) cut_made = true;
      // Either side ending (EOF, error or the cut) ends the connection both ways.
      ::shutdown(client, SHUT_RDWR);
      ::shutdown(upstream, SHUT_RDWR);
    };
    std::thread to_ps(pump, client, upstream, /*untagged=*/1, 0);
    std::thread to_worker(pump, upstream, client, /*untagged=*/2, 1);
    to_ps.join();
    to_worker.join();
    ::close(client);
    ::close(upstream);
    if (cut_made) {
      std::lock_guard<std::mutex> lock(log_mu);
      std::fprintf(stderr, "cut route %d connection %d: %s frame %llu %s\n", route, conn_no,
                   cut.direction == 0 ? "worker->ps" : "ps->worker",
                   static_cast<unsigned long long>(cut.frame), HowName(cut.how));
    }
    ++conn_no;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: chaos_proxy SEED MAX_FRAMES PORTS_FILE HOST:PORT...\n");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  const std::string first = argv[1];
  const bool scripted = first.rfind("script:", 0) == 0;
  std::vector<Cut> script;
  if (scripted) {
    std::string rest = first.substr(7) + ",";
    for (size_t at = 0, comma; (comma = rest.find(',', at)) != std::string::npos; at = comma + 1) {
      const std::string item = rest.substr(at, comma - at);
      if (item.empty()) continue;
      Cut c;
      char how[16] = {};
      unsigned long long frame = 0;
      if (std::sscanf(item.c_str(), "%d/%llu/%15s", &c.direction, &frame, how) != 3 ||
          (c.direction != 0 && c.direction != 1) || frame == 0) {
        std::fprintf(stderr, "bad cut %s (want DIRECTION/FRAME/lost|torn|after)\n", item.c_str());
        return 2;
      }
      c.frame = frame;
      const std::string h = how;
      if (h == "lost") {
        c.how = How::kBefore;
      } else if (h == "torn") {
        c.how = How::kInside;
      } else if (h == "after") {
        c.how = How::kAfter;
      } else {
        std::fprintf(stderr, "bad cut %s (want DIRECTION/FRAME/lost|torn|after)\n", item.c_str());
        return 2;
      }
      script.push_back(c);
    }
  }
  const uint64_t seed = scripted ? 0 : std::strtoull(argv[1], nullptr, 10);
  const uint64_t max_frames = std::max<uint64_t>(1, std::strtoull(argv[2], nullptr, 10));
  const std::string ports_file = argv[3];
  std::vector<std::thread> routes;
  std::string ports;
  for (int i = 4; i < argc; ++i) {
    const std::string target = argv[i];
    const size_t colon = target.rfind(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "bad target %s\n", argv[i]);
      return 2;
    }
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(fd, 64) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      std::perror("listen");
      return 1;
    }
    ports += std::to_string(ntohs(a.sin_port)) + "\n";
    routes.emplace_back(Serve, i - 4, fd, target.substr(0, colon), target.substr(colon + 1), seed,
                        max_frames, script, scripted);
  }
  {
    std::ofstream out(ports_file + ".tmp", std::ios::trunc);
    out << ports;
  }
  if (std::rename((ports_file + ".tmp").c_str(), ports_file.c_str()) != 0) {
    std::perror("rename");
    return 1;
  }
  for (auto& t : routes) t.join();
  return 1;
}
