#include "operator/api/validation.h"

#include <string>

namespace kubetrain::api {

namespace {

bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// The CRD's clusterDomain pattern: dot-separated DNS-1123 labels.
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty()) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string_view label = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (label.empty() || !IsLowerAlnum(label.front()) || !IsLowerAlnum(label.back())) return false;
    for (char c : label) {
      if (!IsLowerAlnum(c) && c != '-') return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// Mirrors an OpenAPI `maxLength: 253` on an optional string.
void CheckMaxLength(const std::optional<std::string>& value, const std::string& path,
                    std::vector<FieldError>& errors) {
  if (value && value->size() > 253) {
    errors.push_back({path, "may not be longer than 253 characters"});
  }
}

const char* kSuspendFirst =
    " cannot change while the job is running; suspend it first "
    "(spec.runPolicy.suspend: true)";

}  // namespace

// The pattern of a DNS-1035 label, without its length limit (the CRD's regex
// rule on metadata.name has none: the name-budget rule covers length).
static bool MatchesLabelPattern(std::string_view name) {
  if (name.empty()) return false;
  if (name.front() < 'a' || name.front() > 'z' || !IsLowerAlnum(name.back())) return false;
  for (char c : name) {
    if (!IsLowerAlnum(c) && c != '-') return false;
  }
  return true;
}

bool IsDns1035Label(std::string_view name) {
  return name.size() <= kMaxChildNameLength && MatchesLabelPattern(name);
}

std::string ChildName(std::string_view job_name, ReplicaType type, int32_t index) {
  return std::string(job_name) + "-" + std::string(Role(type).lower) + "-" + std::to_string(index);
}

std::vector<FieldError> Validate(const TrainingJob& job) {
  std::vector<FieldError> errors;
  const std::string& name = job.metadata.name;
  const TrainingJobSpec& spec = job.spec;

  // Root CEL rules: the job name and the child-name budget.
  if (name.empty()) {
    errors.push_back({"metadata.name", "required field is missing"});
  } else if (!MatchesLabelPattern(name)) {
    errors.push_back({"metadata.name",
                      "must be a DNS-1035 label (lower-case letters, digits and '-', starting "
                      "with a letter), because child Pods and Services are named "
                      "<job>-<role>-<index>"});
  }
  for (const auto& [type, r] : spec.replica_specs) {
    if (r.replicas <= 0 || name.empty()) continue;
    if (ChildName(name, type, r.replicas - 1).size() > kMaxChildNameLength) {
      errors.push_back({"metadata.name",
                        "the longest child name <job>-<role>-<index> would exceed 63 characters; "
                        "shorten metadata.name"});
      break;  // the CEL rule is one rule over all roles: one message
    }
  }

  // spec.replicaSpecs: value constraints, then the map-level CEL rules.
  const std::string rpath = "spec.replicaSpecs";
  if (spec.replica_specs.empty()) {
    errors.push_back({rpath, "should have at least 1 properties"});
  }
  for (const auto& [type, r] : spec.replica_specs) {
    std::string path = rpath + "." + std::string(Role(type).key) + ".replicas";
    if (r.replicas < 0) errors.push_back({path, "should be greater than or equal to 0"});
    if (r.replicas > 10000) errors.push_back({path, "should be less than or equal to 10000"});
  }
  if (spec.Replicas(ReplicaType::kChief) > 1) {
    errors.push_back({rpath, "spec.replicaSpecs.Chief.replicas must be 0 or 1"});
  }
  const bool has_chief_or_worker =
      spec.Replicas(ReplicaType::kChief) > 0 || spec.Replicas(ReplicaType::kWorker) > 0;
  if (spec.Replicas(ReplicaType::kPS) != 0 && !has_chief_or_worker) {
    errors.push_back({rpath, "spec.replicaSpecs.PS needs at least one Worker or Chief replica"});
  }
  if (!has_chief_or_worker) {
    errors.push_back({rpath,
                      "spec.replicaSpecs needs at least one Worker or Chief replica: the "
                      "success policy is decided by them"});
  }

  const RunPolicy& rp = spec.run_policy;
  if (rp.ttl_seconds_after_finished && *rp.ttl_seconds_after_finished < 0) {
    errors.push_back(
        {"spec.runPolicy.ttlSecondsAfterFinished", "should be greater than or equal to 0"});
  }
  if (rp.active_deadline_seconds && *rp.active_deadline_seconds < 1) {
    errors.push_back(
        {"spec.runPolicy.activeDeadlineSeconds", "should be greater than or equal to 1"});
  }
  if (rp.active_deadline_seconds && *rp.active_deadline_seconds > kMaxActiveDeadlineSeconds) {
    errors.push_back(
        {"spec.runPolicy.activeDeadlineSeconds",
         "should be less than or equal to " + std::to_string(kMaxActiveDeadlineSeconds)});
  }
  if (rp.start_deadline_seconds && *rp.start_deadline_seconds < 1) {
    errors.push_back(
        {"spec.runPolicy.startDeadlineSeconds", "should be greater than or equal to 1"});
  }
  if (rp.start_deadline_seconds && *rp.start_deadline_seconds > kMaxActiveDeadlineSeconds) {
    errors.push_back(
        {"spec.runPolicy.startDeadlineSeconds",
         "should be less than or equal to " + std::to_string(kMaxActiveDeadlineSeconds)});
  }
  if (rp.backoff_limit && *rp.backoff_limit < 0) {
    errors.push_back({"spec.runPolicy.backoffLimit", "should be greater than or equal to 0"});
  }
  if (rp.scheduling_policy) {
    const SchedulingPolicy& sp = *rp.scheduling_policy;
    const std::string spath = "spec.runPolicy.schedulingPolicy.";
    if (sp.min_available && *sp.min_available < 0) {
      errors.push_back({spath + "minAvailable", "should be greater than or equal to 0"});
    }
    CheckMaxLength(sp.queue, spath + "queue", errors);
    CheckMaxLength(sp.priority_class_name, spath + "priorityClassName", errors);
    CheckMaxLength(sp.scheduler_name, spath + "schedulerName", errors);
    if (sp.schedule_timeout_seconds && *sp.schedule_timeout_seconds < 1) {
      errors.push_back({spath + "scheduleTimeoutSeconds", "should be greater than or equal to 1"});
    }
  }
  if (spec.port < 1) errors.push_back({"spec.port", "should be greater than or equal to 1"});
  if (spec.port > 65535) errors.push_back({"spec.port", "should be less than or equal to 65535"});
  if (spec.cluster_domain) {
    const std::string& d = *spec.cluster_domain;
    if (d.empty()) {
      errors.push_back({"spec.clusterDomain", "should be at least 1 chars long"});
    } else if (d.size() > 253) {
      errors.push_back({"spec.clusterDomain", "may not be longer than 253 characters"});
    } else if (!IsDnsSubdomain(d)) {
      errors.push_back(
          {"spec.clusterDomain", "must be a DNS subdomain (dot-separated lower-case labels)"});
    }
  }
  return errors;
}

std::vector<FieldError> ValidateUpdate(const TrainingJob& old_job, const TrainingJob& updated) {
  std::vector<FieldError> errors;
  const TrainingJobSpec& o = old_job.spec;
  const TrainingJobSpec& n = updated.spec;
  // Mirrors the spec-level transition rules: allowed while suspended or when the
  // same update suspends the job, because resume recreates every pod.
  const bool suspended = o.run_policy.suspend || n.run_policy.suspend;
  if (!suspended && o.replica_specs != n.replica_specs) {
    errors.push_back({"spec", std::string("spec.replicaSpecs") + kSuspendFirst});
  }
  if (!suspended && o.port != n.port) {
    errors.push_back({"spec", std::string("spec.port") + kSuspendFirst});
  }
  if (!suspended && o.cluster_domain != n.cluster_domain) {
    errors.push_back({"spec", std::string("spec.clusterDomain") + kSuspendFirst});
  }
  if (!suspended && o.service_mode != n.service_mode) {
    errors.push_back({"spec", std::string("spec.serviceMode") + kSuspendFirst});
  }
  if (o.success_policy != n.success_policy) {
    errors.push_back({"spec", "spec.successPolicy is immutable"});
  }
  return errors;
}

std::vector<FieldError> TrainerWarnings(const TrainingJobSpec& spec, std::string_view spec_path) {
  const int32_t chiefs = spec.Replicas(ReplicaType::kChief);
  const int32_t workers = spec.Replicas(ReplicaType::kWorker);
  if (spec.Replicas(ReplicaType::kPS) > 0 || chiefs + workers <= 1) return {};
  const std::string path =
      std::string(spec_path) + (workers > 1 ? ".replicaSpecs.Worker.replicas" : ".replicaSpecs");
  return {{path, std::to_string(chiefs + workers) +
                     " training replicas (Chief + Worker) and no PS: kubetrain-trainer runs "
                     "several workers only with parameter servers (it exits 1); one Worker or "
                     "one Chief alone trains in-process. Other images may run this shape"}};
}

Status ToStatus(const std::vector<FieldError>& errors) {
  if (errors.empty()) return Status::Ok();
  std::string message;
  for (const FieldError& e : errors) {
    if (!message.empty()) message += "; ";
    message += e.path + ": " + e.message;
  }
  return InvalidArgument(message);
}

}  // namespace kubetrain::api
