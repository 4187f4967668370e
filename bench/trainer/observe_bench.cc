// What TensorBoard events and the log tail cost a training step (goal: under 1% of
// a step). Times, with a real event file in a local directory and the real spdlog sink:
//   - TrainingSummaries::Step per step, at --summary-every 1 and 10 (the default), flushes
//     (one write per 10 s) and the final flush included;
//   - one progress line through the log-tail sink (the trainer logs one per --log-every
//     steps, default 100);
//   - writing the 1 MiB tail at exit (once per process, not per step).
// Prints medians over the repetitions; the last line is the per-step cost at the defaults
// as a share of a --step-ms step (default 50 ms, about the default Wide & Deep step of
// batch 512 on 2 cores; pass the step time you see).
// Run: observe_bench [dir] [steps] [reps] [step-ms]
#include <spdlog/logger.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/storage/files.h"
#include "trainer/observe/log_tail.h"
#include "trainer/observe/summaries.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace observe = kubetrain::trainer::observe;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Nanoseconds per Step() at `every`.
double SummaryNsPerStep(const std::string& dir, int64_t steps, int every) {
  std::filesystem::remove_all(dir);
  observe::EventWriter::Options w;
  w.dir = dir;
  auto writer = observe::EventWriter::Open(w);
  if (!writer.ok()) {
    std::fprintf(stderr, "%s\n", writer.status().ToString().c_str());
    std::exit(1);
  }
  observe::TrainingSummaries::Options o;
  o.every = every;
  o.learning_rate = 0.05f;
  o.ps_bytes = [] { return std::pair<uint64_t, uint64_t>{123456789, 987654321}; };
  const auto start = Clock::now();
  {
    observe::TrainingSummaries s(std::move(*writer), o);
    for (int64_t step = 1; step <= steps; ++step) {
      s.Step(step, 0.5f + static_cast<float>(step % 7) * 0.01f, 512);
    }
  }  // the final flush
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
         static_cast<double>(steps);
}

// Nanoseconds per progress line through the log-tail sink (the trainer's pattern).
double TailNsPerLine(int64_t lines, std::shared_ptr<observe::LogTail>* tail) {
  *tail = std::make_shared<observe::LogTail>();
  spdlog::logger logger("bench", observe::MakeLogTailSink(*tail));
  logger.set_pattern("[%Y-%m-%dT%H:%M:%S.%e] [%l] [worker-0] %v");
  const auto start = Clock::now();
  for (int64_t i = 1; i <= lines; ++i) {
    logger.info("step {} loss {:.5f} (mean of last {}: {:.5f}) {:.0f} samples/s", i, 0.61234, 100,
                0.60987, 3032.5);
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
         static_cast<double>(lines);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string root = argc > 1 ? argv[1]
                                    : (std::filesystem::temp_directory_path() /
                                       ("kt_observe_bench_" + std::to_string(::getpid())))
                                          .string();
  const int64_t steps = argc > 2 ? std::stoll(argv[2]) : 200000;
  const int reps = argc > 3 ? std::stoi(argv[3]) : 5;
  const double step_ms = argc > 4 ? std::stod(argv[4]) : 50;
  std::vector<double> every1, every10, line, save_ms;
  for (int r = 0; r < reps; ++r) {
    every1.push_back(SummaryNsPerStep(root + "/every1", steps, 1));
    every10.push_back(SummaryNsPerStep(root + "/every10", steps, 10));
    std::shared_ptr<observe::LogTail> tail;
    line.push_back(TailNsPerLine(steps, &tail));
    const auto start = Clock::now();
    const std::string text = tail->Contents();
    auto s = kubetrain::storage::WriteObject(root + "/logs/worker-0.log", text);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    save_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::filesystem::remove_all(root);
  const double per_step_ns = Median(every10) + Median(line) / 100;
  std::printf("%lld steps, %d reps (medians)\n", static_cast<long long>(steps), reps);
  std::printf("summaries, --summary-every 1:  %.0f ns/step\n", Median(every1));
  std::printf("summaries, --summary-every 10: %.0f ns/step\n", Median(every10));
  std::printf("log tail: %.0f ns/line (%.0f ns/step at --log-every 100)\n", Median(line),
              Median(line) / 100);
  std::printf("log tail saved at exit (1 MiB, local file): %.2f ms once\n", Median(save_ms));
  std::printf(
      "worst case (--summary-every 1, --log-every 1): %.0f ns/step = %.4f%% of a %.1f ms step\n",
      Median(every1) + Median(line), (Median(every1) + Median(line)) / (step_ms * 1e4), step_ms);
  std::printf("events + log tail per step at the defaults: %.0f ns = %.5f%% of a %.1f ms step\n",
              per_step_ns, per_step_ns / (step_ms * 1e4), step_ms);
  return 0;
}
