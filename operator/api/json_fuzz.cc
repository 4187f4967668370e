// libFuzzer target: a TrainingJob or TrainingSweep as JSON (what the apiserver
// serves the operator, and `kubectl apply` sends), through ParseTrainingJob /
// ParseTrainingSweep, their status parsers, validation, the planner and back to
// JSON.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "operator/api/api_fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubetrain;
  using namespace kubetrain::api;
  const nlohmann::json value = nlohmann::json::parse(data, data + size, nullptr,
                                                     /*allow_exceptions=*/false);
  if (value.is_discarded()) return 0;
  fuzz::ExerciseDocument(value);
  static const nlohmann::json kNone;  // Member's fallback must outlive its result
  const nlohmann::json& status = Member(value, "status", kNone);
  if (KindOf(value) == kSweepKind) {
    if (auto s = ParseTrainingSweepStatus(status); s.ok()) {
      (void)SweepStatusToJson(*s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  } else if (auto s = ParseTrainingJobStatus(status); s.ok()) {
    (void)StatusToJson(*s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 0;
}
