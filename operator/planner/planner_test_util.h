// Shared by the planner's tests (planner_*_test.cc): a job, the planner's
// input, observed children, and lookups in a plan. Test code only.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator/api/json.h"
#include "operator/planner/children.h"
#include "operator/planner/planner.h"

namespace kubetrain::planner::planner_testing {

using api::ConditionType;
using api::ReplicaType;
using api::RestartPolicy;
using nlohmann::json;
using std::chrono::seconds;

inline const api::Time kNow{seconds(1'800'000'000)};

inline json Template(std::string image = "kubetrain-trainer") {
  return {{"spec", {{"containers", json::array({{{"name", "trainer"}, {"image", image}}})}}}};
}

// tj in namespace ml: 2 PS + 2 workers, restartPolicy as given.
inline api::TrainingJob Job(RestartPolicy policy = RestartPolicy::kOnFailure) {
  api::TrainingJob job;
  job.metadata.name = "tj";
  job.metadata.namespace_ = "ml";
  job.metadata.uid = "job-uid";
  job.metadata.generation = 3;
  // Most tests here predate spec.serviceMode; JobWide has its own tests below.
  job.spec.service_mode = api::ServiceMode::kPerReplica;
  for (ReplicaType t : {ReplicaType::kPS, ReplicaType::kWorker}) {
    api::ReplicaSpec& r = job.spec.replica_specs[t];
    r.replicas = 2;
    r.restart_policy = policy;
    r.pod_template = Template();
  }
  return job;
}

inline PlanInput Input(api::Time now = kNow) {
  PlanInput in;
  in.now = now;
  in.auth_key.fill(0xab);
  return in;
}

inline ObservedPod Pod(ReplicaType role, int32_t index, PodPhase phase,
                       std::optional<int32_t> exit_code = std::nullopt) {
  ObservedPod p;
  p.name = api::ChildName("tj", role, index);
  p.uid = p.name + "-uid";
  p.role = role;
  p.index = index;
  p.phase = phase;
  p.exit_code = exit_code;
  if (exit_code) p.reason = *exit_code == 0 ? "Completed" : "Error";
  return p;
}

// Everything of tj exists: secret, services, and one pod per replica in `phase`.
inline ObservedChildren All(PodPhase phase) {
  ObservedChildren o;
  o.secret_exists = true;
  for (ReplicaType t : {ReplicaType::kPS, ReplicaType::kWorker}) {
    for (int i = 0; i < 2; ++i) {
      o.pods.push_back(Pod(t, i, phase));
      o.services.push_back({api::ChildName("tj", t, i), std::nullopt});
    }
  }
  return o;
}

inline ObservedPod& Find(ObservedChildren& o, const std::string& name) {
  for (ObservedPod& p : o.pods) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no pod " << name;
  return o.pods[0];
}

inline const json* Created(const Plan& plan, const std::string& kind, const std::string& name) {
  for (const ChildCreate& created : plan.creates) {
    const json& c = created.object;
    if (c["kind"] == kind && c["metadata"]["name"] == name) return &c;
  }
  return nullptr;
}

// Every create but the Secret (and the ConfigMap of a job that has one), which
// come with every batch of pods (checked by NewJobGetsSecretThenServicesThenPods
// and the PlannerClusterConfigTest cases).
inline std::vector<std::string> CreatedNames(const Plan& plan) {
  std::vector<std::string> out;
  for (const ChildCreate& created : plan.creates) {
    const json& c = created.object;
    if (c["kind"] == "ConfigMap" || c["kind"] == "Secret") continue;
    out.push_back(c["kind"].get<std::string>() + "/" + c["metadata"]["name"].get<std::string>());
  }
  return out;
}

inline std::vector<std::string> DeletedPods(const Plan& plan) {
  std::vector<std::string> out;
  for (const ChildRef& d : plan.deletes) {
    if (d.kind == ChildRef::Kind::kPod) out.push_back(d.name);
  }
  return out;
}

inline std::string EnvValue(const json& pod, const std::string& name, size_t container = 0) {
  for (const json& e : pod["spec"]["containers"][container]["env"]) {
    if (e["name"] == name) return e.contains("value") ? e["value"].get<std::string>() : e.dump();
  }
  return "<unset>";
}

// The variable `name` as the container's process sees it, resolved like the
// kubelet does: configMapKeyRef from the plan's ConfigMap, secretKeyRef to key
// "cluster" from the plan's Secret, then $(VAR) of the variables defined before it.
inline std::string ProcessEnv(const Plan& plan, const json& pod, const std::string& name,
                              size_t container = 0) {
  std::map<std::string, std::string> env;
  for (const json& e : pod["spec"]["containers"][container]["env"]) {
    std::string value;
    if (e.contains("value")) {
      const std::string text = e["value"];
      for (size_t i = 0; i < text.size(); ++i) {
        size_t close = text.find(')', i);
        if (text.compare(i, 2, "$(") == 0 && close != std::string::npos &&
            env.count(text.substr(i + 2, close - i - 2))) {
          value += env[text.substr(i + 2, close - i - 2)];
          i = close;
        } else {
          value += text[i];
        }
      }
    } else if (e.contains("valueFrom") && e["valueFrom"].contains("configMapKeyRef")) {
      const json& ref = e["valueFrom"]["configMapKeyRef"];
      const json* cm = Created(plan, "ConfigMap", ref["name"]);
      if (cm == nullptr) return "<no ConfigMap " + ref["name"].get<std::string>() + ">";
      value = (*cm)["data"][ref["key"].get<std::string>()];
    } else if (e.contains("valueFrom") && e["valueFrom"].contains("secretKeyRef") &&
               e["valueFrom"]["secretKeyRef"]["key"] == "cluster") {
      const json& ref = e["valueFrom"]["secretKeyRef"];
      const json* secret = Created(plan, "Secret", ref["name"]);
      if (secret == nullptr) return "<no Secret " + ref["name"].get<std::string>() + ">";
      value = (*secret)["stringData"]["cluster"];
    } else {
      value = e.dump();
    }
    env[e["name"]] = value;
  }
  return env.count(name) ? env[name] : "<unset>";
}

inline const api::Condition* Cond(const Plan& plan, ConditionType t) {
  return plan.status.Find(t);
}

// Feeds a plan's status back, as the executor would after writing it.
inline api::TrainingJob After(api::TrainingJob job, const Plan& plan) {
  job.status = plan.status;
  return job;
}

// A pod the kubelet evicted for node pressure, as the apiserver serves it.
inline ObservedPod Evicted(ReplicaType role, int32_t index) {
  ObservedPod p = Pod(role, index, PodPhase::kFailed);
  p.reason = "Evicted";
  p.message = "The node was low on resource: memory.";
  p.disruption = "Evicted";
  return p;
}

inline const api::ReplicaStatus& Worker(const Plan& plan) {
  return plan.status.replica_statuses.at(ReplicaType::kWorker);
}

inline const Event* EventWith(const Plan& plan, const std::string& reason) {
  for (const Event& e : plan.events) {
    if (e.reason == reason) return &e;
  }
  return nullptr;
}

// What the trainer's coordinator writes to its termination message.
inline constexpr char kTrainerMetrics[] =
    R"({"task":"worker-0","steps":400,"train_loss":0.45,"samples_per_second":5120.5,)"
    R"("eval":{"examples":2000,"log_loss":0.51,"accuracy":0.77,"auc":0.757},"target_reached":true})"
    "\n";

}  // namespace kubetrain::planner::planner_testing
