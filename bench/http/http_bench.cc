// The operator's endpoints under a hostile neighbour: starts
// kubetrain-operator (its API server unreachable, so it only serves /metrics,
// /healthz and /readyz while its caches retry), measures /healthz latency
// (a new connection per probe, like the kubelet) and the process's RSS while
// quiet and while other "pods" (other 127/8 source addresses) attack both
// ports: endless header lines, one-byte drips, idle connections up to every
// cap, and a flood of /metrics scrapes. Each phase lasts --seconds and every
// attacker stops by itself. Prints the medians over --rounds, and the ratios.
//
// Run: http_bench [--operator PATH] [--rounds 3] [--seconds 5] [--max-rss-mib 1024]
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/http_test_client.h"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using kubetrain::http_test::Clock;
namespace ht = kubetrain::http_test;

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// VmRSS of `pid` in KiB.
long RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

double Median(std::vector<double> v) {
  return Percentile(std::move(v), 0.5);
}

struct Phase {
  double p50_ms = 0, p99_ms = 0, peak_rss_mib = 0;
  int probes = 0, failed = 0;
};

// The RSS at which the bench kills the operator (a server without header
// limits grows by tens of MB/s under the attack; the machine is shared).
long g_max_rss_kib = 1024 * 1024;

// Probes /healthz back to back for `seconds`, sampling the RSS meanwhile.
Phase Probe(int health_port, pid_t pid, std::chrono::seconds seconds) {
  Phase out;
  std::vector<double> ms;
  long peak = 0;
  const auto end = Clock::now() + seconds;
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    auto r = ht::Get(health_port, "/healthz", 1s);
    const double took = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ++out.probes;
    if (!r.has_value() || r->status != 200) {
      ++out.failed;
      ms.push_back(1000);  // a failed probe counts as the kubelet's 1 s timeout
    } else {
      ms.push_back(took);
    }
    peak = std::max(peak, RssKiB(pid));
    if (peak > g_max_rss_kib) {
      std::printf("operator RSS over %ld MiB: killed\n", g_max_rss_kib / 1024);
      ::kill(pid, SIGKILL);
      break;
    }
    std::this_thread::sleep_for(10ms);  // probe pacing, not synchronisation
  }
  out.p50_ms = Percentile(ms, 0.5);
  out.p99_ms = Percentile(ms, 0.99);
  out.peak_rss_mib = static_cast<double>(peak) / 1024;
  return out;
}

// The attackers; each thread loops until `stop`.
class Attack {
 public:
  Attack(int health_port, int metrics_port) {
    int ip = 2;
    for (int port : {health_port, metrics_port}) {
      for (int i = 0; i < 2; ++i) Spawn([this, port, ip] { Endless(port, Addr(ip)); }), ++ip;
      for (int i = 0; i < 2; ++i) Spawn([this, port, ip] { Drips(port, Addr(ip)); }), ++ip;
      for (int i = 0; i < 8; ++i) Spawn([this, port, ip] { Idle(port, Addr(ip)); }), ++ip;
    }
    for (int i = 0; i < 2; ++i) Spawn([this, metrics_port] { Scrapes(metrics_port); });
  }
  ~Attack() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  static std::string Addr(int i) { return "127.0.0." + std::to_string(i); }
  template <typename F>
  void Spawn(F f) {
    threads_.emplace_back(f);
  }
  // Header lines that never end, reconnecting whenever the server hangs up.
  void Endless(int port, const std::string& from) {
    while (!stop_) {
      const int fd = ht::Connect(port, 16384, from.c_str());
      if (fd < 0) continue;
      (void)ht::SendEndlessHeader(fd, size_t{1} << 30, Clock::now() + 500ms);
      ::close(fd);
    }
  }
  // Eight connections from `from`, reopened when closed; every `pace`, `gone`
  // says whether a connection is finished (it is then closed and replaced).
  template <typename Gone>
  void KeepEight(int port, const std::string& from, std::chrono::milliseconds pace, Gone gone) {
    std::vector<int> fds;
    while (!stop_) {
      while (fds.size() < 8) {
        const int fd = ht::Connect(port, 0, from.c_str());
        if (fd < 0) break;
        fds.push_back(fd);
      }
      for (auto it = fds.begin(); it != fds.end();) {
        if (gone(*it)) {
          ::close(*it);
          it = fds.erase(it);
        } else {
          ++it;
        }
      }
      std::this_thread::sleep_for(pace);
    }
    for (int fd : fds) ::close(fd);
  }
  // Eight connections, one byte each every 100 ms (the drip rate).
  void Drips(int port, const std::string& from) {
    KeepEight(port, from, 100ms,
              [](int fd) { return ::send(fd, "X", 1, MSG_NOSIGNAL) < 0 && errno != EAGAIN; });
  }
  // Eight connections that send nothing, reopened when closed (20 ms pacing).
  void Idle(int port, const std::string& from) {
    KeepEight(port, from, 20ms, [](int fd) { return ht::WaitClosed(fd, Clock::now()); });
  }
  void Scrapes(int port) {
    while (!stop_) (void)ht::Get(port, "/metrics", 1s);
  }

  std::atomic<bool> stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string op = KT_OPERATOR_BIN;
  int rounds = 3, seconds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--operator") op = argv[i + 1];
    if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (a == "--seconds") seconds = std::atoi(argv[i + 1]);
    if (a == "--max-rss-mib") g_max_rss_kib = std::atol(argv[i + 1]) * 1024;
  }
  const std::string kc = "/tmp/http_bench_kubeconfig_" + std::to_string(::getpid());
  std::ofstream(kc) << "apiVersion: v1\nkind: Config\n"
                       "clusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n"
                       "users: [{name: u, user: {token: x}}]\n"
                       "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
                       "current-context: c\n";
  std::vector<double> q50, q99, h50, h99, qrss, hrss;
  int failed = 0, probes = 0;
  for (int round = 0; round < rounds; ++round) {
    const int mport = FreePort(), hport = FreePort();
    std::vector<std::string> args = {op,
                                     "--kubeconfig=" + kc,
                                     "--metrics-addr=127.0.0.1:" + std::to_string(mport),
                                     "--health-addr=127.0.0.1:" + std::to_string(hport),
                                     "--cache-sync-timeout=3600",
                                     "--log-level=error"};
    std::vector<char*> argv_c;
    for (auto& s : args) argv_c.push_back(s.data());
    argv_c.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, op.c_str(), nullptr, nullptr, argv_c.data(), environ) != 0) {
      std::fprintf(stderr, "cannot start %s\n", op.c_str());
      return 1;
    }
    const auto up_by = Clock::now() + 20s;
    while (Clock::now() < up_by && !ht::Get(hport, "/healthz", 1s))
      std::this_thread::sleep_for(50ms);
    const Phase quiet = Probe(hport, pid, std::chrono::seconds(seconds));
    Phase hostile;
    {
      Attack attack(hport, mport);
      std::this_thread::sleep_for(500ms);  // let the attack reach its caps before probing
      hostile = Probe(hport, pid, std::chrono::seconds(seconds));
    }
    // What the servers did with the attack (kubetrain_operator_http_connections_total).
    if (auto m = ht::Get(mport, "/metrics", 2s); m.has_value() && round == 0) {
      for (size_t at = m->body.find("kubetrain_operator_http_connections_total{");
           at != std::string::npos;
           at = m->body.find("kubetrain_operator_http_connections_total{", at + 1)) {
        std::printf("  %s\n", m->body.substr(at + 41, m->body.find('\n', at) - at - 41).c_str());
      }
    }
    int reaped = 0;
    const bool alive = ::waitpid(pid, &reaped, WNOHANG) == 0;
    if (alive) {
      ::kill(pid, SIGTERM);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
    std::printf(
        "round %d: quiet p50 %.2f ms p99 %.2f ms rss %.1f MiB | hostile p50 %.2f ms p99 %.2f ms "
        "peak rss %.1f MiB, %d/%d probes failed%s\n",
        round, quiet.p50_ms, quiet.p99_ms, quiet.peak_rss_mib, hostile.p50_ms, hostile.p99_ms,
        hostile.peak_rss_mib, hostile.failed, hostile.probes, alive ? "" : " (operator DIED)");
    q50.push_back(quiet.p50_ms);
    q99.push_back(quiet.p99_ms);
    h50.push_back(hostile.p50_ms);
    h99.push_back(hostile.p99_ms);
    qrss.push_back(quiet.peak_rss_mib);
    hrss.push_back(hostile.peak_rss_mib);
    failed += hostile.failed + quiet.failed;
    probes += hostile.probes + quiet.probes;
  }
  std::remove(kc.c_str());
  std::printf("failed probes: %d of %d\n", failed, probes);
  std::printf("/healthz p50: quiet %.2f ms, hostile %.2f ms (x%.2f)\n", Median(q50), Median(h50),
              Median(h50) / Median(q50));
  std::printf("/healthz p99: quiet %.2f ms, hostile %.2f ms (x%.2f)\n", Median(q99), Median(h99),
              Median(h99) / Median(q99));
  std::printf("operator RSS: quiet %.1f MiB, hostile peak %.1f MiB (x%.2f)\n", Median(qrss),
              Median(hrss), Median(hrss) / Median(qrss));
  return 0;
}
