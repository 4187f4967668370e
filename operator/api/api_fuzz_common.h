// What the operator and `kubetrain validate/run` do with a parsed TrainingJob or
// TrainingSweep document, as one function the API fuzz targets share: parse,
// validate, plan (a job) or build its first trial (a sweep), and serialize the
// result back. Invariants checked with abort(): what ParseTrainingJob /
// ParseTrainingSweep accepted serializes to JSON that parses again to the same
// value; what ConvertTFJob accepted parses as a TrainingJob.
#pragma once

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "operator/api/json.h"
#include "operator/api/sweep.h"
#include "operator/api/tfjob.h"
#include "operator/api/validation.h"
#include "operator/planner/planner.h"
#include "operator/planner/tfjob_v1.h"
#include "operator/sweep/planner.h"

namespace kubetrain::api::fuzz {

inline void CheckOrDie(bool ok) {
  if (!ok) std::abort();
}

// Mirrors operator/cli/main.cc LoadJobs for one document.
inline void ExerciseDocument(const nlohmann::json& value) {
  if (IsTFJob(value)) {
    StatusOr<TFJobConversion> c = ConvertTFJob(value);
    if (!c.ok()) return;
    StatusOr<TrainingJob> job = ParseTrainingJob(c->job);
    CheckOrDie(job.ok());
    (void)ToTFJobMessage(*c, "spec.replicaSpecs.Chief.replicas: x");
    if (!Validate(*job).empty()) return;  // bounds the replicas TfConfig lists
    const planner::tfjob_v1::Shape shape = planner::tfjob_v1::ShapeOf(*c, *job);
    for (const auto& r : shape.replicas) {
      (void)planner::tfjob_v1::TfConfig(shape, r.type, 0, "example.org");
      (void)planner::tfjob_v1::Labels(shape, r.type, 0, true);
    }
    ExerciseDocument(c->job);
    return;
  }
  if (KindOf(value) == kSweepKind) {
    StatusOr<TrainingSweep> sweep = ParseTrainingSweep(value);
    if (!sweep.ok()) return;
    const nlohmann::json back = ToJson(*sweep);
    StatusOr<TrainingSweep> again = ParseTrainingSweep(back);
    CheckOrDie(again.ok() && *again == *sweep);
    (void)back.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (!ValidateSweep(*sweep).empty()) return;
    (void)ValidateSweepUpdate(*sweep, *sweep);
    (void)sweep::BuildTrial(*sweep, 0);
    return;
  }
  StatusOr<TrainingJob> job = ParseTrainingJob(value);
  if (!job.ok()) return;
  const nlohmann::json back = ToJson(*job);
  StatusOr<TrainingJob> again = ParseTrainingJob(back);
  CheckOrDie(again.ok() && *again == *job);
  (void)back.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (!Validate(*job).empty()) return;
  CheckOrDie(ValidateUpdate(*job, *job).empty());
  planner::PlanInput input;
  input.now = Time(std::chrono::seconds(1'800'000'000));
  const planner::Plan plan = planner::PlanJob(*job, {}, input);
  for (const planner::ChildCreate& create : plan.creates) {
    (void)create.object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  (void)StatusToJson(plan.status).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kubetrain::api::fuzz
