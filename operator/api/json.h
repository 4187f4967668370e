// TrainingJob <-> JSON, strict in what it reads.
//
// ParseTrainingJob accepts the JSON of a TrainingJob as the apiserver serves it
// or as a user writes it (YAML converted to JSON). It rejects unknown fields and
// roles in `spec`, wrong types and unknown enum values, with the field path in
// the message ("spec.replicaSpecs.Worker.replicas: must be an integer"). Absent
// fields take the CRD's defaults. It does not check the CRD's value rules
// (minimums, CEL); call Validate (validation.h) for those. Error messages are
// always "<field path>: <what>", so a caller can split off the path and map it to
// a line with YamlDocument::LineOf (yaml.h).
//
// `metadata` is read leniently (only the fields in ObjectMeta) and `status` too,
// since both are written by servers and controllers that may add fields.
// No exceptions escape; nlohmann errors become InvalidArgument.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "operator/api/types.h"

namespace kubetrain::api {

StatusOr<TrainingJob> ParseTrainingJob(const nlohmann::json& object);
// The same, taking the pod templates out of `object` instead of copying them
// (a controller parses a fresh copy of the cached job on every reconcile).
StatusOr<TrainingJob> ParseTrainingJob(nlohmann::json&& object);
StatusOr<TrainingJobStatus> ParseTrainingJobStatus(const nlohmann::json& status);

// The full object, defaults included, as the apiserver would store it. Status
// is omitted when it is empty (a new job).
nlohmann::json ToJson(const TrainingJob& job);
nlohmann::json SpecToJson(const TrainingJobSpec& spec);
// The `status` stanza for a PUT to the status subresource.
nlohmann::json StatusToJson(const TrainingJobStatus& status);

// The string at `key` of a JSON object, else "" (absent, not a string, or not
// an object): for reading Kubernetes objects leniently. Never throws.
std::string StringField(const nlohmann::json& object, std::string_view key);
// object[key] when `object` is an object holding it, else `fallback`: a
// reference, where json::value() would copy the whole subtree (a pod's spec and
// status, on every watch event). Never throws.
const nlohmann::json& Member(const nlohmann::json& object, const char* key,
                             const nlohmann::json& fallback);

}  // namespace kubetrain::api
