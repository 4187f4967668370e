// libFuzzer target: a container's termination message (written by the workload,
// so untrusted), as the operator meets it: cleaned and cut as ObservePod does
// (operator/controller/observe_pod.cc), then read by the planner into
// status.metrics (worker 0 succeeding; an evaluator's metrics merged in; a
// failed pod's message in a condition), the sweep's objective read from those
// metrics, and the status serialized for the apiserver.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/utf8.h"
#include "operator/api/json.h"
#include "operator/planner/planner.h"
#include "operator/sweep/planner.h"

namespace kubetrain::planner {
namespace {

using api::ReplicaType;

// The kubelet's cap, which ObservePod applies too.
constexpr size_t kMaxMessageBytes = 4096;
const api::Time kNow{std::chrono::seconds(1'800'000'000)};

api::TrainingJob Job(int32_t evaluators) {
  api::TrainingJob job;
  job.metadata.name = "tj";
  job.metadata.namespace_ = "ml";
  job.metadata.uid = "job-uid";
  const nlohmann::json pod_template = {
      {"spec", {{"containers", nlohmann::json::array({{{"name", "trainer"}, {"image", "t"}}})}}}};
  for (ReplicaType t : {ReplicaType::kPS, ReplicaType::kWorker, ReplicaType::kEvaluator}) {
    const int32_t replicas = t == ReplicaType::kEvaluator ? evaluators : 1;
    if (replicas == 0) continue;
    api::ReplicaSpec& r = job.spec.replica_specs[t];
    r.replicas = replicas;
    r.restart_policy = api::RestartPolicy::kNever;
    r.pod_template = pod_template;
  }
  return job;
}

ObservedPod Pod(ReplicaType role, PodPhase phase, int32_t exit_code, const std::string& message) {
  ObservedPod p;
  p.name = api::ChildName("tj", role, 0);
  p.uid = p.name + "-uid";
  p.role = role;
  p.phase = phase;
  p.exit_code = exit_code;
  p.reason = exit_code == 0 ? "Completed" : "Error";
  p.message = message;
  return p;
}

ObservedChildren Children(PodPhase worker, int32_t worker_exit, bool evaluator,
                          const std::string& message) {
  ObservedChildren o;
  o.secret_exists = true;
  o.pods.push_back(Pod(ReplicaType::kPS, PodPhase::kRunning, 0, ""));
  o.pods.back().exit_code.reset();
  o.pods.push_back(Pod(ReplicaType::kWorker, worker, worker_exit, message));
  if (evaluator) o.pods.push_back(Pod(ReplicaType::kEvaluator, PodPhase::kSucceeded, 0, message));
  for (const ObservedPod& p : o.pods) o.services.push_back({p.name, std::nullopt});
  return o;
}

void Check(const Plan& plan) {
  // The default (strict) error handler, as the status write uses: throws on
  // invalid UTF-8, which must never reach here.
  (void)api::StatusToJson(plan.status).dump();
  for (const api::Condition& c : plan.status.conditions) (void)nlohmann::json(c.message).dump();
  for (const Event& e : plan.events) (void)nlohmann::json(e.message).dump();
  (void)sweep::MetricValue(plan.status.metrics, "eval.auc");
  (void)sweep::MetricValue(plan.status.metrics, "evaluator.eval.auc");
}

}  // namespace
}  // namespace kubetrain::planner

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubetrain;
  using namespace kubetrain::planner;
  const std::string message =
      CleanText(std::string_view(reinterpret_cast<const char*>(data), size), kMaxMessageBytes);
  PlanInput input;
  input.now = kNow;
  // Worker 0 succeeds: its message becomes status.metrics.
  Check(PlanJob(Job(0), Children(PodPhase::kSucceeded, 0, false, message), input));
  // ... and an evaluator's joins it.
  const api::TrainingJob with_evaluator = Job(1);
  Plan waiting = PlanJob(with_evaluator, Children(PodPhase::kSucceeded, 0, false, message), input);
  Check(waiting);
  api::TrainingJob after = with_evaluator;
  after.status = waiting.status;
  Check(PlanJob(after, Children(PodPhase::kSucceeded, 0, true, message), input));
  // Worker 0 fails: its message is in the Failed condition.
  Check(PlanJob(Job(0), Children(PodPhase::kFailed, 1, false, message), input));
  return 0;
}
