// A load client for kubetrain-serve (bench/serve/serve_bench.sh): POSTs one request body
// over and over from `--concurrency` threads and prints latency percentiles and examples
// per second. Each thread keeps its connection alive as real clients do (tritonclient,
// requests), opening a new one when the server answers "Connection: close" or drops it;
// --keep-alive 0 opens a new connection per request.
//
//   serve_load --port P --path /v2/models/m/infer --body FILE --examples E
//              [--requests N] [--concurrency C] [--warmup W] [--keep-alive 1]
//              [--header "Name: value"] [--content-type T]
// Prints its own CPU time (user + system, all threads) over the measured requests.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/http_test_client.h"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int port = 0, requests = 2000, concurrency = 1, examples = 1, warmup = 100, keep_alive = 1;
  std::string path, body_file, extra_header, content_type = "application/json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--port")
      port = std::atoi(value.c_str());
    else if (flag == "--path")
      path = value;
    else if (flag == "--body")
      body_file = value;
    else if (flag == "--requests")
      requests = std::atoi(value.c_str());
    else if (flag == "--concurrency")
      concurrency = std::atoi(value.c_str());
    else if (flag == "--examples")
      examples = std::atoi(value.c_str());
    else if (flag == "--warmup")
      warmup = std::atoi(value.c_str());
    else if (flag == "--keep-alive")
      keep_alive = std::atoi(value.c_str());
    else if (flag == "--header")
      extra_header = value + "\r\n";
    else if (flag == "--content-type")
      content_type = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::ifstream in(body_file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string body = ss.str();
  if (port == 0 || path.empty() || body.empty()) {
    std::fprintf(stderr, "usage: serve_load --port P --path PATH --body FILE --examples E\n");
    return 2;
  }
  const std::string request =
      "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + content_type + "\r\n" +
      extra_header + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  // One request on the thread's connection `fd` (-1: none open yet); reconnects as needed.
  auto one = [&](int& fd) -> bool {
    if (!keep_alive) {
      auto r = kubetrain::http_test::Get(
          port, path, 30s, "POST", "Content-Type: " + content_type + "\r\n" + extra_header, body);
      return r.has_value() && r->status == 200;
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (fd < 0) fd = kubetrain::http_test::Connect(port);
      if (fd < 0) return false;
      auto r = kubetrain::http_test::RoundTrip(fd, request, Clock::now() + 30s);
      if (!r.has_value()) {  // closed while idle (a server without keep-alive): reconnect
        ::close(fd);
        fd = -1;
        continue;
      }
      std::string head = r->head;
      for (char& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (head.find("\r\nconnection: close") != std::string::npos) {  // HTTP/1.1: else kept
        ::close(fd);
        fd = -1;
      }
      return r->status == 200;
    }
    return false;
  };
  int warm_fd = -1;
  for (int i = 0; i < warmup; ++i) {
    if (!one(warm_fd)) {
      std::fprintf(stderr, "a warm-up request failed\n");
      return 1;
    }
  }
  if (warm_fd >= 0) ::close(warm_fd);
  const auto cpu_seconds = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  const double cpu_start = cpu_seconds();
  std::vector<std::vector<double>> lat(concurrency);
  std::atomic<int> next{0}, failed{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      int fd = -1;
      while (next.fetch_add(1) < requests) {
        const auto t0 = Clock::now();
        if (!one(fd)) ++failed;
        lat[t].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      if (fd >= 0) ::close(fd);
    });
  }
  for (auto& th : threads) th.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double client_cpu = cpu_seconds() - cpu_start;
  std::vector<double> all;
  for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))];
  };
  std::printf(
      "requests %d failed %d concurrency %d examples/request %d keep-alive %d: latency p50 %.3f ms "
      "p99 %.3f ms; client CPU %.3f s; %.0f requests/s, %.0f examples/s\n",
      requests, failed.load(), concurrency, examples, keep_alive, pct(0.5), pct(0.99), client_cpu,
      requests / seconds, requests * static_cast<double>(examples) / seconds);
  return failed.load() == 0 ? 0 : 1;
}
