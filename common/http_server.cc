#include "common/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <unordered_map>

#include "common/mutex.h"

namespace kubetrain {
namespace {

using Clock = std::chrono::steady_clock;
using PeerKey = std::array<uint8_t, 16>;  // IPv6 address; IPv4 as ::ffff:a.b.c.d

constexpr size_t kReadChunk = 16 * 1024;
// What a client answered before its request was read may still send and have
// dropped: the body it declared, up to kMaxDrainBody, plus kDrainSlack (a
// header cut short, bytes in flight). Dropping costs no memory; the request's
// deadline bounds the time.
constexpr size_t kDrainSlack = 64 * 1024;
constexpr size_t kMaxDrainBody = 16 * 1024 * 1024;
// How long accepting pauses when the process is out of file descriptors
// (level-triggered epoll would otherwise spin on the pending connection).
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

std::string_view Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 422:
      return "Unprocessable Content";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "";
  }
}

std::string Serialize(const HttpResponse& r, bool head, bool allow_post = false,
                      bool keep_alive = false) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " ";
  out.append(Reason(r.status));
  out += "\r\nContent-Type: " + r.content_type;
  out += "\r\nContent-Length: " + std::to_string(r.body.size());
  for (const auto& [name, value] : r.headers)
    out.append("\r\n").append(name).append(": ").append(value);
  if (r.status == 405) out += allow_post ? "\r\nAllow: GET, HEAD, POST" : "\r\nAllow: GET, HEAD";
  out += keep_alive ? "\r\nConnection: keep-alive\r\n\r\n" : "\r\nConnection: close\r\n\r\n";
  if (!head) out += r.body;
  return out;
}

HttpResponse Error(int status) {
  HttpResponse r;
  r.status = status;
  r.body = std::string(Reason(status)) + "\n";
  return r;
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// The end of the header block (one past its blank line) in `in`, searching
// from `from`; npos while incomplete. Bare LF line ends are accepted too.
size_t HeaderEnd(std::string_view in, size_t from) {
  for (size_t i = from; i < in.size(); ++i) {
    if (in[i] != '\n') continue;
    if (i + 1 < in.size() && in[i + 1] == '\n') return i + 2;
    if (i + 2 < in.size() && in[i + 1] == '\r' && in[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

PeerKey KeyOf(const sockaddr_storage& a) {
  PeerKey k{};
  if (a.ss_family == AF_INET6) {
    std::memcpy(k.data(), &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, 16);
  } else if (a.ss_family == AF_INET) {
    k[10] = k[11] = 0xff;
    std::memcpy(k.data() + 12, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, 4);
  }
  return k;
}

// A listening socket on `addr`, or -1 with errno set.
int ListenOn(const sockaddr* addr, socklen_t len, bool dual_stack) {
  const int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int yes = 1, no = 0;
  // SO_REUSEADDR only: SO_REUSEPORT would let a second process share the
  // port and answer half of the reads.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  if (dual_stack) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
  if (::bind(fd, addr, len) != 0 || ::listen(fd, 128) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

StatusOr<int> Bind(std::string_view host_in, int port) {
  std::string host(host_in);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (port < 0 || port > 65535) return InvalidArgument("port " + std::to_string(port));
  const std::string where = (host.empty() ? "*" : host) + ":" + std::to_string(port);
  int fd = -1;
  if (host.empty() || host == "::" || host == "*") {
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(static_cast<uint16_t>(port));
    fd = ListenOn(reinterpret_cast<sockaddr*>(&a6), sizeof a6, /*dual_stack=*/true);
    if (fd < 0) {  // no IPv6 on this host
      sockaddr_in a4{};
      a4.sin_family = AF_INET;
      a4.sin_addr.s_addr = htonl(INADDR_ANY);
      a4.sin_port = htons(static_cast<uint16_t>(port));
      fd = ListenOn(reinterpret_cast<sockaddr*>(&a4), sizeof a4, false);
    }
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
      return InvalidArgument("cannot resolve " + where + ": " + ::gai_strerror(rc));
    for (const addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next)
      fd = ListenOn(ai->ai_addr, ai->ai_addrlen, false);
    ::freeaddrinfo(res);
  }
  if (fd < 0) return Unavailable("cannot listen on " + where + ": " + std::strerror(errno));
  return fd;
}

int LocalPort(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(a).sin6_port)
                                 : ntohs(reinterpret_cast<sockaddr_in&>(a).sin_port);
}

}  // namespace

// Where responders leave answers for the loop: shared with every responder, so one
// that outlives the loop finds it closed instead of a dangling loop.
struct HttpMailbox {
  Mutex mu;
  bool closed GUARDED_BY(mu) = false;
  std::vector<std::pair<uint64_t, HttpResponse>> done GUARDED_BY(mu);
  int wake_fd = -1;             // constant while open
  std::thread::id loop_thread;  // constant while open
};

// The event loop: owns the listening socket, the epoll and wake-up fds and
// every connection. All members but stop_ and wake_fd_ are touched by the
// loop thread only (and by the destructor, after the thread ended).
class HttpServer::Loop {
 public:
  Loop(const HttpLimits& limits,
       const std::map<std::string, AsyncHttpHandler, std::less<>>& handlers, Counters& counters,
       int listen_fd)
      : limits_(limits), handlers_(handlers), counters_(counters), listen_fd_(listen_fd) {}

  ~Loop() {
    {
      MutexLock lock(mailbox_->mu);
      mailbox_->closed = true;
    }
    for (Conn& c : conns_) ::close(c.fd);
    for (Conn& c : idle_) ::close(c.fd);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    ::close(listen_fd_);
  }

  Status Init() {
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0)
      return Internal(std::string("epoll: ") + std::strerror(errno));
    mailbox_->wake_fd = wake_fd_;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &wake_tag_;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0)
      return Internal(std::string("epoll_ctl: ") + std::strerror(errno));
    ev.data.ptr = &listen_tag_;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev) != 0)
      return Internal(std::string("epoll_ctl: ") + std::strerror(errno));
    return Status();
  }

  // Any thread, any time: the flag is checked before every wait and the
  // eventfd stays readable, so a stop before Run() starts is not lost.
  void RequestStop() {
    stop_.store(true);
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }

  void Run() {
    {
      MutexLock lock(mailbox_->mu);
      mailbox_->loop_thread = std::this_thread::get_id();
    }
    std::array<epoll_event, 64> events;
    while (!stop_.load()) {
      const int n = ::epoll_wait(epoll_fd_, events.data(), events.size(), WaitMs());
      if (n < 0 && errno != EINTR) break;
      for (int i = 0; i < n && !stop_.load(); ++i) {
        void* tag = events[i].data.ptr;
        if (tag == &wake_tag_) {
          if (stop_.load()) break;
          uint64_t count = 0;
          [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &count, sizeof count);
          DeliverAnswers();
        } else if (tag == &listen_tag_) {
          AcceptAll();
        } else {
          more_ready_ = i + 1 < n;
          OnEvent(*static_cast<std::list<Conn>::iterator*>(tag), events[i].events);
        }
      }
      graveyard_.clear();
      Expire();
    }
    // Answers given before the stop still go out (best effort: what fits the socket
    // buffer now), so a drained server's last responses are not lost.
    DeliverAnswers();
  }

 private:
  struct Conn {
    int fd = -1;
    PeerKey peer{};
    Clock::time_point deadline;
    std::string in;  // the request so far, at most max_header_bytes (+ its body)
    std::string out;
    size_t written = 0;
    bool responding = false;
    uint64_t id = 0;        // names it to responders
    bool pending = false;   // an asynchronous handler has the request
    size_t header_len = 0;  // > 0 once the header block parsed, waiting for the body
    size_t body_len = 0;    // its Content-Length
    HttpRequest request;    // parsed while the body arrives
    bool head_only = false;
    bool read_all = false;  // the whole request was read (it was dispatched)
    // Answered before the whole request was read (a 413 from the header, a 431):
    // after the answer the write side is shut and what the client still sends is
    // read and dropped, up to drain_left bytes or the deadline, so that a client
    // busy sending its body gets to read the answer instead of a reset (a
    // "lingering close", as nginx and Apache do it).
    bool draining = false;
    size_t drain_left = 0;
    // Keep-alive: the request asked for it (HTTP/1.1 without "Connection: close", HTTP/1.0
    // with "Connection: keep-alive"); the answer keeps it when the limits allow (keep).
    bool wants_keep_alive = false;
    bool keep = false;
    int requests = 0;                // answered on this connection
    bool idle = false;               // in idle_, waiting for its next request
    std::list<Conn>::iterator self;  // what epoll's data.ptr points at
  };
  using ConnIt = std::list<Conn>::iterator;

  int WaitMs() const {
    Clock::time_point next = Clock::time_point::max();
    if (!conns_.empty()) next = conns_.front().deadline;  // accept order is deadline order
    if (!idle_.empty()) next = std::min(next, idle_.front().deadline);
    if (accept_paused_) next = std::min(next, accept_resume_);
    if (next == Clock::time_point::max()) return -1;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
  }

  void AcceptAll() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
          PauseAccept();
        return;
      }
      const PeerKey peer = KeyOf(addr);
      const auto known = per_client_.find(peer);
      bool client_full =
          known != per_client_.end() && known->second >= limits_.max_connections_per_client;
      if (client_full) {  // its own idle keep-alive connection makes room first
        for (auto it = idle_.begin(); it != idle_.end(); ++it) {
          if (it->peer != peer) continue;
          counters_.evicted.fetch_add(1, std::memory_order_relaxed);
          Evict(it);
          client_full = false;
          break;
        }
      }
      if (client_full || !MakeRoom()) {
        counters_.rejected_over_limit.fetch_add(1, std::memory_order_relaxed);
        const std::string busy = Serialize(Error(503), false);
        [[maybe_unused]] const ssize_t n = ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
        ::close(fd);
        continue;
      }
      ++per_client_[peer];
      counters_.accepted.fetch_add(1, std::memory_order_relaxed);
      conns_.push_back(Conn{});
      Conn& c = conns_.back();
      c.fd = fd;
      c.peer = peer;
      c.id = ++next_id_;
      c.deadline = Clock::now() + limits_.request_deadline;
      c.self = std::prev(conns_.end());
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.ptr = &c.self;
      if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) Close(c.self);
    }
  }

  // At max_connections, closes the oldest connection that has not sent its
  // whole request yet (the likeliest to be slow on purpose) of the peer that
  // holds the most connections (per_client_), so that a full server still lets
  // a prober in and a storming client evicts its own connections before a lone
  // prober's. False when every connection is being answered already: the new
  // one is refused. One pass, no allocation, only when full.
  // Idle keep-alive connections go first, the oldest idle one: keeping a connection open
  // for a client's next request is a courtesy that never costs another client its turn.
  bool MakeRoom() {
    if (static_cast<int>(conns_.size() + idle_.size()) < limits_.max_connections) return true;
    if (!idle_.empty()) {
      counters_.evicted.fetch_add(1, std::memory_order_relaxed);
      Evict(idle_.begin());
      return true;
    }
    ConnIt victim = conns_.end();
    int victim_count = 0;
    for (auto it = conns_.begin(); it != conns_.end(); ++it) {
      if ((it->responding && !it->draining) || it->pending) continue;
      const auto p = per_client_.find(it->peer);
      const int count = p == per_client_.end() ? 0 : p->second;
      if (victim == conns_.end() || count > victim_count) {  // oldest first: ties keep it
        victim = it;
        victim_count = count;
      }
    }
    if (victim == conns_.end()) return false;
    counters_.evicted.fetch_add(1, std::memory_order_relaxed);
    Evict(victim);
    return true;
  }

  // Closes a connection while the current batch of epoll events may still
  // name it: its node moves to graveyard_ (list iterators survive a splice),
  // OnEvent skips it (fd -1), and Run frees it after the batch.
  void Evict(ConnIt it) {
    if (it->pending) pending_.erase(it->id);
    ::close(it->fd);
    it->fd = -1;
    if (auto p = per_client_.find(it->peer); p != per_client_.end() && --p->second <= 0)
      per_client_.erase(p);
    graveyard_.splice(graveyard_.end(), it->idle ? idle_ : conns_, it);
  }

  void PauseAccept() {
    accept_paused_ = true;
    accept_resume_ = Clock::now() + kAcceptPause;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
  }

  void OnEvent(ConnIt it, uint32_t events) {
    if (it->fd < 0) return;  // evicted earlier in this batch
    if (it->idle) {          // its next request begins: the request deadline from now
      it->idle = false;
      it->deadline = Clock::now() + limits_.request_deadline;
      conns_.splice(conns_.end(), idle_, it);
    }
    if (it->pending) {  // only hang-ups and errors are reported now
      if (events & (EPOLLHUP | EPOLLERR)) Close(it);
      return;
    }
    if (it->draining) {
      Drain(it, events);
      return;
    }
    if (it->responding) {
      Write(it);
      return;
    }
    Read(it);
  }

  // Reads and drops what a client answered early still sends; closes at its
  // end, at an error, or once drain_left bytes were dropped.
  void Drain(ConnIt it, uint32_t events) {
    Conn& c = *it;
    char buf[kReadChunk];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, std::min(sizeof buf, c.drain_left), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN && !(events & (EPOLLHUP | EPOLLERR))) return;
      if (n <= 0 || static_cast<size_t>(n) >= c.drain_left) break;
      c.drain_left -= static_cast<size_t>(n);
    }
    Close(it);
  }

  void Read(ConnIt it) {
    Conn& c = *it;
    char buf[kReadChunk];
    for (;;) {
      if (c.header_len > 0 && c.in.size() >= c.header_len + c.body_len) return Dispatch(it);
      const size_t limit = c.header_len > 0 ? c.header_len + c.body_len : limits_.max_header_bytes;
      const size_t room = limit - c.in.size();
      if (room == 0) {
        counters_.header_too_large.fetch_add(1, std::memory_order_relaxed);
        Respond(it, Error(431), false);
        return;
      }
      const ssize_t n = ::recv(c.fd, buf, std::min(room, sizeof buf), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        Close(it);  // the client gave up
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        return;  // EAGAIN: wait for more
      }
      const size_t from = c.in.size() >= 2 ? c.in.size() - 2 : 0;
      c.in.append(buf, static_cast<size_t>(n));
      if (c.in.size() > counters_.max_buffered_bytes.load(std::memory_order_relaxed))
        counters_.max_buffered_bytes.store(c.in.size(), std::memory_order_relaxed);
      if (c.header_len > 0) continue;  // reading the body
      if (const size_t end = HeaderEnd(c.in, from); end != std::string::npos) {
        if (!Parse(it, std::string_view(c.in).substr(0, end))) return;  // answered
        c.header_len = end;
        if (c.in.size() >= end + c.body_len) return Dispatch(it);
        if (expect_continue_) {
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          [[maybe_unused]] const ssize_t w =
              ::send(c.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL);
        }
      }
    }
  }

  // Parses the header block `head` (request line, header lines, blank line)
  // into it->request, body_len and head_only; false when it answered already.
  bool Parse(ConnIt it, std::string_view head) {
    auto bad = [&](int status) {
      counters_.bad_request.fetch_add(1, std::memory_order_relaxed);
      Respond(it, Error(status), false);
      return false;
    };
    expect_continue_ = false;
    const size_t eol = head.find('\n');
    const std::string_view line = Trim(head.substr(0, eol));
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
      return bad(400);
    HttpRequest& req = it->request;
    req.headers.clear();
    req.method = line.substr(0, sp1);
    const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view version = line.substr(sp2 + 1);
    if (version != "HTTP/1.1" && version != "HTTP/1.0")
      return bad(version.substr(0, 5) == "HTTP/" ? 505 : 400);
    if (target.empty() || target.front() != '/') return bad(400);
    const bool head_only = req.method == "HEAD";
    const bool post = req.method == "POST" && limits_.max_body_bytes > 0;
    if (req.method != "GET" && !head_only && !post) return bad(405);
    it->head_only = head_only;
    bool close_token = false, keep_alive_token = false;
    for (std::string_view rest = head.substr(eol + 1); !rest.empty();) {
      const size_t e = rest.find('\n');
      const std::string_view h = rest.substr(0, e);
      rest = e == std::string_view::npos ? std::string_view() : rest.substr(e + 1);
      const size_t colon = h.find(':');
      if (colon == std::string_view::npos) continue;  // the blank line
      const std::string_view name = h.substr(0, colon), value = Trim(h.substr(colon + 1));
      req.headers.emplace_back(name, value);
      if (IEquals(name, "transfer-encoding")) return bad(501);
      if (IEquals(name, "content-length")) {
        if (value.empty() || value.find_first_not_of("0123456789") != std::string_view::npos)
          return bad(400);
        const size_t digits = value.find_first_not_of('0');
        if (digits == std::string_view::npos) continue;
        const std::string_view significant = value.substr(digits);
        const std::string max = std::to_string(limits_.max_body_bytes);
        if (significant.size() > max.size() ||
            (significant.size() == max.size() && significant > max)) {
          // Too large: answered now, and what follows is dropped (up to a cap).
          it->body_len =
              significant.size() > 9
                  ? kMaxDrainBody
                  : std::min<size_t>(std::stoull(std::string(significant)), kMaxDrainBody);
          return bad(413);
        }
        it->body_len = std::stoull(std::string(significant));
      }
      if (IEquals(name, "expect")) expect_continue_ = IEquals(value, "100-continue");
      if (IEquals(name, "connection")) {
        for (std::string_view v = value; !v.empty();) {
          const size_t comma = v.find(',');
          const std::string_view token = Trim(v.substr(0, comma));
          v = comma == std::string_view::npos ? std::string_view() : v.substr(comma + 1);
          close_token = close_token || IEquals(token, "close");
          keep_alive_token = keep_alive_token || IEquals(token, "keep-alive");
        }
      }
    }
    it->wants_keep_alive = !close_token && (version == "HTTP/1.1" || keep_alive_token);
    const size_t q = target.find('?');
    req.path = target.substr(0, q);
    if (q != std::string_view::npos) req.query = target.substr(q + 1);
    return true;
  }

  // Hands the complete request of `it` to its handler.
  void Dispatch(ConnIt it) {
    Conn& c = *it;
    c.read_all = true;
    // Bytes after the request (a pipelining client): answered, then closed.
    if (c.in.size() > c.header_len + c.body_len) c.wants_keep_alive = false;
    c.request.more_ready = more_ready_;
    auto h = handlers_.find(c.request.path);
    if (h == handlers_.end() || h->first.ends_with('*')) {
      h = handlers_.end();
      size_t longest = 0;  // the longest prefix handler (key "prefix*") the path begins with
      for (auto p = handlers_.begin(); p != handlers_.end(); ++p) {
        const std::string_view prefix = std::string_view(p->first).substr(0, p->first.size() - 1);
        if (p->first.ends_with('*') && c.request.path.starts_with(prefix) &&
            prefix.size() >= longest) {
          h = p;
          longest = prefix.size();
        }
      }
    }
    if (h == handlers_.end()) return Respond(it, Error(404), c.head_only);
    c.request.body = c.in.substr(c.header_len, c.body_len);
    c.in = std::string();
    c.pending = true;
    pending_.emplace(c.id, it);
    epoll_event ev{};  // no more reads: hang-ups and errors only
    ev.data.ptr = &c.self;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    HttpResponder respond = [box = mailbox_, id = c.id](HttpResponse r) {
      MutexLock lock(box->mu);
      if (box->closed) return;
      box->done.emplace_back(id, std::move(r));
      if (std::this_thread::get_id() == box->loop_thread) return;  // delivered after the handler
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = ::write(box->wake_fd, &one, sizeof one);
    };
    try {
      h->second(std::move(c.request), respond);
    } catch (...) {
      respond(Error(500));
    }
    DeliverAnswers();
  }

  // Writes every answer responders left in the mailbox to its connection, if
  // that is still open.
  void DeliverAnswers() {
    std::vector<std::pair<uint64_t, HttpResponse>> done;
    {
      MutexLock lock(mailbox_->mu);
      done.swap(mailbox_->done);
    }
    for (auto& [id, res] : done) {
      const auto p = pending_.find(id);
      if (p == pending_.end()) continue;  // closed meanwhile, or answered twice
      const ConnIt it = p->second;
      pending_.erase(p);
      it->pending = false;
      Respond(it, res, it->head_only);
    }
  }

  void Respond(ConnIt it, const HttpResponse& res, bool head_only) {
    Conn& c = *it;
    c.responding = true;
    c.keep = c.read_all && c.wants_keep_alive && !stop_.load() &&
             c.requests + 1 < limits_.max_requests_per_connection;
    c.out = Serialize(res, head_only, limits_.max_body_bytes > 0, c.keep);
    c.in = std::string();
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.ptr = &c.self;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    Write(it);
  }

  void Write(ConnIt it) {
    Conn& c = *it;
    while (c.written < c.out.size()) {
      const ssize_t n =
          ::send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN) Close(it);
        return;  // EAGAIN: EPOLLOUT brings us back
      }
      c.written += static_cast<size_t>(n);
    }
    counters_.served.fetch_add(1, std::memory_order_relaxed);
    if (c.keep) return KeepAlive(it);
    ::shutdown(c.fd, SHUT_WR);
    if (c.read_all) {
      Close(it);
      return;
    }
    c.draining = true;
    c.drain_left = kDrainSlack + c.body_len;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = &c.self;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  // After a kept-alive answer: the connection waits in idle_ for its next request, at
  // most keep_alive_idle; the next request's deadline starts with its first byte.
  void KeepAlive(ConnIt it) {
    Conn& c = *it;
    ++c.requests;
    c.in.clear();
    c.out = std::string();
    c.written = 0;
    c.responding = c.keep = c.read_all = c.head_only = c.wants_keep_alive = false;
    c.header_len = c.body_len = 0;
    c.request = HttpRequest();
    c.idle = true;
    c.deadline = Clock::now() + limits_.keep_alive_idle;
    idle_.splice(idle_.end(), conns_, it);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = &c.self;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  // Closes every connection whose deadline passed: those still sending their
  // request get a best-effort 408; idle keep-alive ones just close.
  void Expire() {
    const auto now = Clock::now();
    while (!idle_.empty() && idle_.front().deadline <= now) Close(idle_.begin());
    while (!conns_.empty() && conns_.front().deadline <= now) {
      Conn& c = conns_.front();
      counters_.timed_out.fetch_add(1, std::memory_order_relaxed);
      if (!c.responding) {
        // Still sending its request: 408; still being computed: 503.
        const std::string late = Serialize(Error(c.pending ? 503 : 408), false);
        [[maybe_unused]] const ssize_t n = ::send(c.fd, late.data(), late.size(), MSG_NOSIGNAL);
      }
      Close(conns_.begin());
    }
    if (accept_paused_ && now >= accept_resume_) {
      accept_paused_ = false;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = &listen_tag_;
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
    }
  }

  void Close(ConnIt it) {
    if (it->pending) pending_.erase(it->id);
    ::close(it->fd);  // also leaves the epoll set
    if (auto p = per_client_.find(it->peer); p != per_client_.end() && --p->second <= 0)
      per_client_.erase(p);
    (it->idle ? idle_ : conns_).erase(it);
    if (accept_paused_) {  // a descriptor is free again
      accept_paused_ = false;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = &listen_tag_;
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
    }
  }

  const HttpLimits& limits_;
  const std::map<std::string, AsyncHttpHandler, std::less<>>& handlers_;
  Counters& counters_;
  const std::shared_ptr<HttpMailbox> mailbox_ = std::make_shared<HttpMailbox>();
  std::unordered_map<uint64_t, ConnIt> pending_;  // connections awaiting their responder
  uint64_t next_id_ = 0;
  bool expect_continue_ = false;  // of the header block Parse read last
  const int listen_fd_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  char wake_tag_ = 0, listen_tag_ = 0;
  std::atomic<bool> stop_{false};
  bool more_ready_ = false;    // other events were ready with the current one
  std::list<Conn> conns_;      // by deadline: accepted or reactivated with request_deadline
  std::list<Conn> idle_;       // kept alive, waiting: by deadline (keep_alive_idle)
  std::list<Conn> graveyard_;  // evicted during the current batch of events
  std::map<PeerKey, int> per_client_;
  bool accept_paused_ = false;
  Clock::time_point accept_resume_;
};

std::optional<std::string_view> HttpRequest::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (IEquals(n, name)) return std::string_view(v);
  }
  return std::nullopt;
}

void AppendHttpStats(std::string_view metric,
                     const std::vector<std::pair<std::string_view, HttpServerStats>>& servers,
                     std::string* out) {
  out->append("# HELP ").append(metric).append(
      " Connections to this process's HTTP endpoints by how they ended.\n");
  out->append("# TYPE ").append(metric).append(" counter\n");
  for (const auto& [server, s] : servers) {
    for (const auto& [outcome, n] : {std::pair<std::string_view, uint64_t>{"served", s.served},
                                     {"rejected_over_limit", s.rejected_over_limit},
                                     {"evicted", s.evicted},
                                     {"header_too_large", s.header_too_large},
                                     {"timed_out", s.timed_out},
                                     {"bad_request", s.bad_request}}) {
      out->append(metric).append("{server=\"").append(server).append("\",outcome=\"");
      out->append(outcome).append("\"} ").append(std::to_string(n)).append("\n");
    }
  }
}

HttpServer::HttpServer(HttpLimits limits) : limits_(limits) {}

HttpServer::~HttpServer() {
  Stop();
}

void HttpServer::Handle(std::string path, HttpHandler handler) {
  handlers_[std::move(path)] = [handler = std::move(handler)](HttpRequest req,
                                                              HttpResponder respond) {
    respond(handler(req));
  };
}

void HttpServer::HandleAsync(std::string path, AsyncHttpHandler handler) {
  handlers_[std::move(path)] = std::move(handler);
}

void HttpServer::HandlePrefixAsync(std::string prefix, AsyncHttpHandler handler) {
  handlers_[std::move(prefix) + "*"] = std::move(handler);
}

StatusOr<int> HttpServer::Start(std::string_view host, int port) {
  std::lock_guard lock(mu_);
  if (started_) return FailedPrecondition("HTTP server started twice");
  auto fd = Bind(host, port);
  if (!fd.ok()) return fd.status();
  const int bound = LocalPort(*fd);
  auto loop = std::make_unique<Loop>(limits_, handlers_, counters_, *fd);
  if (Status s = loop->Init(); !s.ok()) return s;
  started_ = true;
  loop_ = std::move(loop);
  thread_ = std::thread([loop = loop_.get()] { loop->Run(); });
  return bound;
}

void HttpServer::Stop() {
  std::lock_guard lock(mu_);
  if (!loop_) return;
  loop_->RequestStop();
  if (thread_.joinable()) thread_.join();
  loop_.reset();
}

HttpServerStats HttpServer::stats() const {
  HttpServerStats s;
  s.accepted = counters_.accepted.load();
  s.served = counters_.served.load();
  s.rejected_over_limit = counters_.rejected_over_limit.load();
  s.evicted = counters_.evicted.load();
  s.header_too_large = counters_.header_too_large.load();
  s.timed_out = counters_.timed_out.load();
  s.bad_request = counters_.bad_request.load();
  s.max_buffered_bytes = counters_.max_buffered_bytes.load();
  return s;
}

}  // namespace kubetrain
