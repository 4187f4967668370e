// A load client for kubetrain-serve (bench/serve/serve_bench.sh): POSTs one request body
// over and over from `--concurrency` threads (a new loopback connection per request, as
// the server closes each) and prints latency percentiles and examples per second.
//
//   serve_load --port P --path /v2/models/m/infer --body FILE --examples E
//              [--requests N] [--concurrency C] [--warmup W]
#include <algorithm>
#include <atomic>
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
  int port = 0, requests = 2000, concurrency = 1, examples = 1, warmup = 100;
  std::string path, body_file;
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
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::ifstream in(body_file);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string body = ss.str();
  if (port == 0 || path.empty() || body.empty()) {
    std::fprintf(stderr, "usage: serve_load --port P --path PATH --body FILE --examples E\n");
    return 2;
  }
  auto one = [&]() -> bool {
    auto r = kubetrain::http_test::Get(port, path, 30s, "POST",
                                       "Content-Type: application/json\r\n", body);
    return r.has_value() && r->status == 200;
  };
  for (int i = 0; i < warmup; ++i) {
    if (!one()) {
      std::fprintf(stderr, "a warm-up request failed\n");
      return 1;
    }
  }
  std::vector<std::vector<double>> lat(concurrency);
  std::atomic<int> next{0}, failed{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      while (next.fetch_add(1) < requests) {
        const auto t0 = Clock::now();
        if (!one()) ++failed;
        lat[t].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    });
  }
  for (auto& th : threads) th.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))];
  };
  std::printf(
      "requests %d failed %d concurrency %d examples/request %d: latency p50 %.3f ms "
      "p99 %.3f ms; %.0f requests/s, %.0f examples/s\n",
      requests, failed.load(), concurrency, examples, pct(0.5), pct(0.99), requests / seconds,
      requests * static_cast<double>(examples) / seconds);
  return failed.load() == 0 ? 0 : 1;
}
