// libFuzzer target: a trainer's /metrics body (the operator's progress reader
// reads it from any pod on the job's metrics port), through the Prometheus
// text parser, TrainerSampleFromText and two readings of ProgressTracker into
// status.progress JSON.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "operator/api/json.h"
#include "operator/progress/progress.h"
#include "operator/progress/prometheus_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubetrain;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto samples = progress::ParsePrometheusText(text); samples.ok()) {
    (void)progress::FindValue(*samples, "kubetrain_trainer_step");
  }
  StatusOr<progress::TrainerSample> sample = progress::TrainerSampleFromText(text);
  if (!sample.ok()) return 0;
  progress::ProgressTracker tracker;
  const api::Time wall(std::chrono::seconds(1'800'000'000));
  const progress::ProgressTracker::SteadyTime start{};
  (void)tracker.Observe(*sample, "worker-0", start, wall);
  // The same reading 10 s later and then a second one: rates, ETA and the
  // restart rule all run on workload values.
  (void)tracker.Observe(*sample, "worker-0", start + std::chrono::seconds(10),
                        wall + std::chrono::seconds(10));
  progress::TrainerSample next = *sample;
  if (next.step < INT64_MAX) next.step += 1;
  if (auto p = tracker.Observe(next, "worker-0", start + std::chrono::seconds(20),
                               wall + std::chrono::seconds(20))) {
    api::TrainingJobStatus status;
    status.progress = *p;
    (void)api::StatusToJson(status).dump();
  }
  return 0;
}
