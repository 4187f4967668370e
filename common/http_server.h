// A small bounded HTTP/1.1 server for the endpoints any pod can reach: the
// operator's /healthz, /readyz and /metrics and the trainer's /metrics.
//
// Why our own: cpp-httplib 0.11.4 (Debian's) reads a
// header line without limit (one connection grew the operator 8 MB -> 442 MB
// in 5 s), its read timeout is per receive (one byte every few seconds holds
// a thread for minutes) and it serves on blocking threads, so a few slow
// clients starve the rest; its stop() before the listen loop started is lost.
// Newer cpp-httplib caps line length (CPPHTTPLIB_MAX_LINE_
// LENGTH, 2025) but keeps blocking thread-per-connection and per-receive
// timeouts, and is not packaged. libmicrohttpd (Debian) has per-connection
// memory and connection limits but only an inactivity timeout, not a deadline
// per request, and would be a new dependency for ~300 lines of need; civetweb
// is thread-per-connection too. What we serve is tiny (GET a rendered string,
// a few scrapers), so one non-blocking epoll thread does it with every bound
// explicit: a slow client never blocks another because nobody blocks.
//
// Flow: Start() binds and listens on the caller's thread (errors come back
// there), then one loop thread accepts, reads each request into a buffer of at
// most max_header_bytes, calls the handler of its path on the loop thread,
// writes the response and closes (`Connection: close`), or, with keep-alive
// (max_requests_per_connection > 1), waits on the same connection for its next
// request.
//
// Guarantees (HttpLimits, all configurable):
// - A request's header is at most max_header_bytes (8 KiB): more -> 431, close.
//   The server never buffers more than that per connection.
// - Every connection is closed at request_deadline (5 s) after accept (on a
//   kept-alive connection: after its request's first byte), whether it is
//   still sending its request or still being written to (slowloris and slow
//   readers alike): 408 if its request was incomplete.
// - At most max_connections_per_client (8) open per peer address: over it, a
//   new connection gets a best-effort 503 and is closed at once. At most
//   max_connections (64) in total: at the cap a new connection closes the
//   oldest one still sending its request of the peer address holding the most
//   connections (a full server still lets the kubelet's probe in, and a client
//   storming it evicts its own connections, not a lone prober's); when all are
//   being answered, the new one gets 503.
// - Keep-alive (off by default: max_requests_per_connection = 1): an HTTP/1.1
//   request without `Connection: close` (HTTP/1.0 with `Connection:
//   keep-alive`) is answered `Connection: keep-alive` and the connection waits
//   for the next one, at most keep_alive_idle (then it is closed), at most
//   max_requests_per_connection requests (the last is answered with close).
//   Each request has request_deadline from its first byte. Idle connections
//   count towards both connection caps but are the first to go: at
//   max_connections a new connection closes the oldest idle one, and a client at
//   its own cap closes its own oldest idle one; so clients holding idle
//   connections never keep another out. No pipelining: bytes sent after a
//   request get its answer with close.
// - GET and HEAD only (else 405); a request body (Content-Length > 0) -> 413,
//   Transfer-Encoding -> 501: the endpoints take no input. A server with
//   max_body_bytes > 0 (kubetrain-serve's) also takes POST with a
//   Content-Length body of at most that many bytes (more -> 413 before any of
//   it is read); it then buffers at most max_header_bytes + max_body_bytes per
//   connection. `Expect: 100-continue` is answered with 100 Continue.
// - A request answered before it was read whole (a 413 or 431 from the
//   header) gets a lingering close: the write side is shut after the answer
//   and what the client still sends is read and dropped (its declared body up
//   to 16 MiB, plus 64 KiB; never buffered; within the deadline), so a client
//   busy sending its body reads the answer instead of a reset. Such a
//   connection can be evicted at the cap.
// - Asynchronous handlers (HandleAsync) answer later from any thread through
//   their HttpResponder; the connection waits for it under the same deadline
//   (503 if it does not come in time) and is neither read from nor evicted
//   meanwhile. A response for a connection already closed is dropped.
// - Stop() returns promptly at any moment, after writing (as far as the socket
//   buffers take them at once) the answers responders gave before it, also
//   before or while the loop thread starts (an eventfd wakes the loop; the
//   flag is set before the thread exists); the destructor calls Stop().
//   Handlers must be quick: they run on the loop thread and delay every other
//   connection while they run.
//
// Thread safety: Handle() before Start() only. Start() once. Stop() and stats()
// from any thread, any number of times.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kubetrain {

struct HttpLimits {
  size_t max_header_bytes = 8 * 1024;
  std::chrono::milliseconds request_deadline{5000};
  int max_connections = 64;
  int max_connections_per_client = 8;
  // 0: no request bodies (POST -> 405). Else the largest POST body taken.
  size_t max_body_bytes = 0;
  // Requests served on one connection; 1: no keep-alive (every answer closes).
  int max_requests_per_connection = 1;
  // How long a kept-alive connection may wait for its next request.
  std::chrono::milliseconds keep_alive_idle{5000};
};

struct HttpRequest {
  std::string method;  // GET, HEAD or (max_body_bytes > 0) POST
  std::string path;    // the target up to '?'
  std::string query;   // after '?', without it
  std::string body;    // POST only
  // The header lines as received (name as sent, value trimmed); bounded by max_header_bytes.
  std::vector<std::pair<std::string, std::string>> headers;
  // Other connections had events ready when this request was dispatched: a hint that
  // requests are arriving concurrently (kubetrain-serve batches then, rather than answer
  // on the loop thread).
  bool more_ready = false;

  // The value of the first header named `name` (case-insensitive), if any.
  std::optional<std::string_view> Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // More header lines (names and values without CR or LF), written after Content-Length.
  std::vector<std::pair<std::string, std::string>> headers;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;
// Answers one request, once, from any thread (also after the server stopped:
// then nothing happens). Cheap to copy.
using HttpResponder = std::function<void(HttpResponse)>;
// Runs on the loop thread like HttpHandler, but may return before answering:
// it hands `respond` to whatever computes the response.
using AsyncHttpHandler = std::function<void(HttpRequest, HttpResponder respond)>;

// Counters since Start(), for callers to export as metrics.
struct HttpServerStats {
  uint64_t accepted = 0;             // connections taken in (not over a cap)
  uint64_t served = 0;               // responses written in full (any status)
  uint64_t rejected_over_limit = 0;  // 503: per client, or max_connections all answering
  uint64_t evicted = 0;              // closed to make room at max_connections
  uint64_t header_too_large = 0;     // 431
  uint64_t timed_out = 0;            // closed at request_deadline
  uint64_t bad_request = 0;          // 400, 405, 413, 501, 505
  uint64_t max_buffered_bytes = 0;   // the most request bytes one connection held
};

// Appends `stats` of each named server as one Prometheus counter family
// `metric`{server="<name>",outcome="..."} (outcome: served, rejected_over_limit,
// evicted, header_too_large, timed_out, bad_request), with HELP and TYPE lines.
void AppendHttpStats(std::string_view metric,
                     const std::vector<std::pair<std::string_view, HttpServerStats>>& servers,
                     std::string* out);

class HttpServer {
 public:
  explicit HttpServer(HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves `path` (exact match; other paths 404). Before Start() only.
  void Handle(std::string path, HttpHandler handler);
  // Serves `path` with a handler that may answer later. Before Start() only.
  void HandleAsync(std::string path, AsyncHttpHandler handler);
  // Serves every path that begins with `prefix` and has no exact handler (the longest
  // such prefix wins). Before Start() only.
  void HandlePrefixAsync(std::string prefix, AsyncHttpHandler handler);

  // Binds `host`:`port` and starts the loop thread. An empty host, "::" or "*"
  // binds every address: IPv6 dual-stack, else IPv4 0.0.0.0. Port 0 binds any
  // free port. SO_REUSEADDR, never SO_REUSEPORT (a second process must not
  // share the port). Returns the bound port; Unavailable when it cannot bind,
  // InvalidArgument for a host that does not resolve, FailedPrecondition when
  // started twice.
  [[nodiscard]] StatusOr<int> Start(std::string_view host, int port);
  // Stops serving and joins the loop thread; open connections are closed.
  void Stop();

  HttpServerStats stats() const;

 private:
  struct Counters {
    std::atomic<uint64_t> accepted{0}, served{0}, rejected_over_limit{0}, header_too_large{0},
        timed_out{0}, bad_request{0}, max_buffered_bytes{0}, evicted{0};
  };
  class Loop;

  // Constant after construction / Start().
  const HttpLimits limits_;
  // Exact paths; a key ending in '*' is a prefix (HandlePrefixAsync).
  std::map<std::string, AsyncHttpHandler, std::less<>> handlers_;
  Counters counters_;

  std::mutex mu_;  // Start and Stop
  bool started_ = false;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace kubetrain
