// The progress reader under hostile neighbours, on loopback: GOOD well-behaved
// trainers (each read shows new progress) with and without hostile ones
// (endless headers, a header line without end, one byte every 200 ms, no
// answer). The servers run in a child process, so the figures are the
// reader's own. Per scenario and run, over WINDOW seconds after a 2 s warm-up:
// reads per second (every result), the good targets' progress age (time
// since each last published a new reading, sampled every 50 ms) p50/p99, and
// the reader process's peak RSS. Prints each run, then the medians, the
// hostile scenario's good-target p99 age last.
// Usage: progress_reader_bench [GOOD=200] [HOSTILE_EACH=3] [RUNS=3] [WINDOW=10]
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "operator/progress/fake_metrics_servers.h"
#include "operator/progress/reader.h"

namespace kp = kubetrain::progress;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

int64_t PeakRssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

void ResetPeakRss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

double Median(std::vector<double> v) {
  return Percentile(std::move(v), 0.5);
}

struct Servers {
  pid_t pid = -1;
  int control = -1;  // closing it ends the child
  std::vector<std::string> good, hostile;
};

// Starts the servers in a child: it writes "g <url>" / "h <url>" lines, then
// "." and serves until `control` closes.
Servers StartServers(int good, int hostile_each) {
  int urls[2], control[2];
  if (::pipe(urls) != 0 || ::pipe(control) != 0) std::abort();
  const pid_t pid = ::fork();
  if (pid < 0) std::abort();
  if (pid == 0) {
    ::close(urls[0]);
    ::close(control[1]);
    kp::FakeMetricsServers servers;
    std::string out;
    auto add = [&](kp::FakeMetricsServers::Mode mode, char kind) {
      auto url = servers.Add(mode);
      if (!url.ok()) std::_Exit(2);
      out += std::string(1, kind) + " " + *url + "\n";
    };
    for (int i = 0; i < good; ++i) add(kp::FakeMetricsServers::Mode::kCounting, 'g');
    for (int i = 0; i < hostile_each; ++i) {
      add(kp::FakeMetricsServers::Mode::kEndlessHeaders, 'h');
      add(kp::FakeMetricsServers::Mode::kEndlessHeaderLine, 'h');
      add(kp::FakeMetricsServers::Mode::kDrip, 'h');
      add(kp::FakeMetricsServers::Mode::kSilent, 'h');
    }
    out += ".\n";
    if (::write(urls[1], out.data(), out.size()) != static_cast<ssize_t>(out.size())) {
      std::_Exit(3);
    }
    ::close(urls[1]);
    char c;
    while (::read(control[0], &c, 1) > 0) {
    }
    servers.Stop();
    std::_Exit(0);
  }
  ::close(urls[1]);
  ::close(control[0]);
  Servers s;
  s.pid = pid;
  s.control = control[1];
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(urls[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(urls[0]);
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.size() > 2 && line[0] == 'g') s.good.push_back(line.substr(2));
    if (line.size() > 2 && line[0] == 'h') s.hostile.push_back(line.substr(2));
  }
  return s;
}

void StopServers(Servers& s) {
  ::close(s.control);
  int status = 0;
  ::waitpid(s.pid, &status, 0);
}

struct Figures {
  double reads_per_second = 0;
  double age_p50_ms = 0, age_p99_ms = 0;
  double peak_rss_mib = 0;
};

double TotalReads(const kubetrain::runtime::Metrics& m) {
  double n = 0;
  for (const char* r : {"ok", "no_metrics", "unreachable", "error", "timeout", "too_large"}) {
    n += m.Get("kubetrain_progress_reads_total", std::string("result=\"") + r + "\"");
  }
  return n;
}

Figures Run(int good, int hostile_each, std::chrono::seconds window) {
  Servers servers = StartServers(good, hostile_each);
  ResetPeakRss();
  kp::ReaderOptions o;
  // Every good target due each second; hostile ones retried every second too.
  o.schedule = {
      .qps = 10'000, .burst = 1000, .interval = 1s, .backoff_base = 1s, .backoff_max = 1s};
  o.tracker.min_publish_interval = 0s;
  std::mutex mu;
  std::map<std::string, Clock::time_point> changed;  // guarded by mu (a local: not annotatable)
  kubetrain::runtime::Metrics registry;
  kp::ProgressReader reader(
      o,
      [&](const std::string& key) {
        std::lock_guard lock(mu);
        changed[key] = Clock::now();
      },
      &registry);
  reader.Start();
  for (size_t i = 0; i < servers.hostile.size(); ++i) {
    reader.SetTarget("bad/" + std::to_string(i), kp::ScrapeTarget{servers.hostile[i], "u", "w"});
  }
  for (size_t i = 0; i < servers.good.size(); ++i) {
    reader.SetTarget("good/" + std::to_string(i), kp::ScrapeTarget{servers.good[i], "u", "w"});
  }
  std::this_thread::sleep_for(2s);  // warm-up: a benchmark's window, not synchronisation
  const double reads0 = TotalReads(registry);
  const auto start = Clock::now();
  std::vector<double> ages;
  while (Clock::now() - start < window) {
    std::this_thread::sleep_for(50ms);
    const auto now = Clock::now();
    std::lock_guard lock(mu);
    for (size_t i = 0; i < servers.good.size(); ++i) {
      auto it = changed.find("good/" + std::to_string(i));
      // Never published: as old as the scenario.
      const auto since = it == changed.end() ? start - 2s : it->second;
      ages.push_back(std::chrono::duration<double, std::milli>(now - since).count());
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  Figures f;
  f.reads_per_second = (TotalReads(registry) - reads0) / secs;
  f.age_p50_ms = Percentile(ages, 0.5);
  f.age_p99_ms = Percentile(ages, 0.99);
  f.peak_rss_mib = static_cast<double>(PeakRssKb()) / 1024;
  // The servers first: a reader whose reads have no deadline (the old one)
  // could not stop otherwise.
  StopServers(servers);
  reader.Stop();
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const int good = argc > 1 ? std::atoi(argv[1]) : 200;
  const int hostile_each = argc > 2 ? std::atoi(argv[2]) : 3;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 3;
  const auto window = std::chrono::seconds(argc > 4 ? std::atoi(argv[4]) : 10);
  ::signal(SIGPIPE, SIG_IGN);
  std::map<std::string, std::vector<Figures>> all;
  for (int r = 1; r <= runs; ++r) {
    for (const bool hostile : {false, true}) {
      const std::string name = hostile ? "hostile" : "quiet";
      Figures f = Run(good, hostile ? hostile_each : 0, window);
      std::printf(
          "run %d %-7s: %.0f reads/s, good age p50 %.0f ms p99 %.0f ms, peak RSS %.1f MiB\n", r,
          name.c_str(), f.reads_per_second, f.age_p50_ms, f.age_p99_ms, f.peak_rss_mib);
      std::fflush(stdout);
      all[name].push_back(f);
    }
  }
  for (const std::string name : {"quiet", "hostile"}) {
    auto med = [&](double Figures::*field) {
      std::vector<double> v;
      for (const Figures& f : all[name]) v.push_back(f.*field);
      return Median(v);
    };
    std::printf(
        "median %-7s (%d good, %d hostile): %.0f reads/s, good age p50 %.0f ms "
        "p99 %.0f ms, peak RSS %.1f MiB\n",
        name.c_str(), good, name == "hostile" ? 4 * hostile_each : 0,
        med(&Figures::reads_per_second), med(&Figures::age_p50_ms), med(&Figures::age_p99_ms),
        med(&Figures::peak_rss_mib));
  }
  std::vector<double> p99;
  for (const Figures& f : all["hostile"]) p99.push_back(f.age_p99_ms);
  std::printf("good targets' progress age p99 beside %d hostile targets: %.0f ms\n",
              4 * hostile_each, Median(p99));
  return 0;
}
