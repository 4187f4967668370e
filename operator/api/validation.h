// The CRD's admission rules (OpenAPI value constraints and CEL), in C++.
//
// crds/trainingjobs.kubetrain.io.yaml is the source of truth for the apiserver;
// these functions implement the same rules, rule for rule, so that a job checked
// without an apiserver (`kubetrain validate`, `kubetrain run`) is accepted or
// rejected exactly as `kubectl apply` would. Each rule has a test in
// validation_test.cc and a matching bad object in crds/crd_test.sh.
//
// Structural checks (types, unknown fields and roles, enum values) happen earlier,
// in ParseTrainingJob. Checks that the CRD cannot express (a template without
// containers, ...) are not here: the planner reports them as InvalidSpec.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/types.h"

namespace kubetrain::api {

struct FieldError {
  std::string path;  // "spec.replicaSpecs.Chief.replicas"
  std::string message;

  friend bool operator==(const FieldError&, const FieldError&) = default;
};

// Rules that apply to every create and update. Empty when the job is valid.
std::vector<FieldError> Validate(const TrainingJob& job);

// Rules that apply to an update only (CEL transition rules): what cannot change
// while the job runs. Does not repeat Validate(updated).
std::vector<FieldError> ValidateUpdate(const TrainingJob& old_job, const TrainingJob& updated);

// Valid shapes that kubetrain-trainer cannot run, as warnings (the templates' image may
// be another that can): several training replicas (Chief + Worker) with no PS, which the
// trainer refuses with exit code 1, since only a PS shares parameters between processes
// (one Worker or one Chief alone trains in-process). `spec_path` is where `spec` is in
// its document ("spec", or "spec.trialTemplate" for a sweep's template).
std::vector<FieldError> TrainerWarnings(const TrainingJobSpec& spec,
                                        std::string_view spec_path = "spec");

// OK if `errors` is empty, else InvalidArgument "<path>: <message>; ...".
Status ToStatus(const std::vector<FieldError>& errors);

// Whether `name` is a DNS-1035 label: [a-z]([-a-z0-9]*[a-z0-9])?, at most 63 chars.
bool IsDns1035Label(std::string_view name);

// "<job>-<role>-<index>", role in lower case: the name of a replica's Pod and
// Service.
std::string ChildName(std::string_view job_name, ReplicaType type, int32_t index);

}  // namespace kubetrain::api
