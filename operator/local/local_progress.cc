#include "operator/local/local_progress.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kubetrain::local {

namespace {

progress::ReaderOptions LocalReadOptions() {
  progress::ReaderOptions o;
  // Local, but the machine may be busy (every replica and the runner share it).
  o.connect_timeout = std::chrono::milliseconds(500);
  o.total_timeout = std::chrono::milliseconds(1500);
  return o;
}

}  // namespace

LocalProgress::LocalProgress(std::chrono::milliseconds publish_interval, Clock* clock)
    : clock_(clock),
      fetch_(progress::HttpFetcher(LocalReadOptions())),
      // Locally a line per change is cheap; still not one per read (by default).
      tracker_(progress::ProgressTracker::Options{.min_publish_interval = publish_interval}) {}

StatusOr<int> LocalProgress::FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(StatusCode::kInternal, std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  if (port <= 0) return Status(StatusCode::kInternal, "no free port for the metrics endpoint");
  return port;
}

void LocalProgress::Watch(const std::string& replica, int port) {
  replica_ = replica;
  port_ = port;
  next_ = clock_->Now();
}

std::optional<LocalProgress::TimePoint> LocalProgress::NextRead() const {
  if (port_ <= 0) return std::nullopt;
  return next_;
}

bool LocalProgress::Poll(TimePoint now) {
  if (port_ <= 0 || now < next_) return false;
  next_ = now + kReadInterval;
  auto body = fetch_("http://127.0.0.1:" + std::to_string(port_) + "/metrics");
  if (!body.ok()) return false;  // not up yet, or gone: no progress from this read
  auto sample = progress::TrainerSampleFromText(*body);
  if (!sample.ok()) return false;
  const api::Time wall = api::Now(*clock_);
  return tracker_.Observe(*sample, replica_, now, wall).has_value();
}

std::string DescribeProgress(const api::Progress& p) {
  std::string out = std::to_string(p.percent) + "% (step " + std::to_string(p.step) + "/" +
                    std::to_string(p.total_steps) + ")";
  if (p.samples_per_second > 0) out += ", " + std::to_string(p.samples_per_second) + " samples/s";
  if (!p.eta.empty()) out += ", ETA " + p.eta;
  return out;
}

}  // namespace kubetrain::local
