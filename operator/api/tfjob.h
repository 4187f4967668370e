// Kubeflow's TFJob (kubeflow.org/v1, as training-operator v1.9.3 defines it) ->
// TrainingJob: the translation behind `kubetrain convert`, and how `validate`,
// `render` and `run` take TFJob files.
//
// ConvertTFJob is pure and strict: it accepts what v1.9.3's CRD and validating
// webhook accept (tfReplicaSpecs required; role keys PS, Worker, Chief, Master,
// Evaluator in any case, as v1's defaulting folds them; every container has an
// image and one is named "tensorflow"; at most one Chief or Master; the name a
// DNS-1035 label), rejects unknown fields (the CRD would prune them; kubectl's
// strict field validation rejects them), and rejects what kubetrain cannot
// express (a different `tfjob-port` per role, an unknown enum value) with
// InvalidArgument "<TFJob field path>: <what>". What converts with a change of
// meaning comes back as Notes, which `convert` prints as comments:
//   - cleanPodPolicy unset: v1 defaults to None, kubetrain to Running;
//   - Master becomes Chief (pods <job>-chief-<i>, TF_CONFIG task type "chief");
//   - runPolicy.managedBy, enableDynamicWorker, schedulingPolicy.minResources
//     have no TrainingJob field;
//   - the "tensorflow" container moves first (kubetrain gives the environment
//     contract to the container named "trainer", else the first).
// docs/migrating-from-tfjob.md lists every difference and why.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kubetrain::api {

inline constexpr std::string_view kTFJobApiVersion = "kubeflow.org/v1";
inline constexpr std::string_view kTFJobKind = "TFJob";
// v1's names: the container that gets TF_CONFIG and the port, its port's name
// and default number.
inline constexpr std::string_view kTFJobContainerName = "tensorflow";
inline constexpr std::string_view kTFJobPortName = "tfjob-port";
inline constexpr int32_t kTFJobDefaultPort = 2222;
// runPolicy.managedBy of the TFJobs kubetrain's operator may take (--tfjob=managed).
inline constexpr std::string_view kTFJobManagedByKubetrain = "kubetrain.io/operator";

// apiVersion kubeflow.org/v1 and kind TFJob. Never throws.
bool IsTFJob(const nlohmann::json& object);

// Something that converts with a change of meaning, or does not convert.
struct TFJobNote {
  std::string path;  // in the TFJob: "spec.runPolicy.cleanPodPolicy"
  std::string message;

  friend bool operator==(const TFJobNote&, const TFJobNote&) = default;
};

struct TFJobConversion {
  // The TrainingJob as a user would write it: apiVersion, kind, metadata (name,
  // generateName, namespace, labels, annotations) and spec; fields left out
  // where the TrainingJob's default is the value. No status.
  nlohmann::json job;
  std::vector<TFJobNote> notes;
  // runPolicy.managedBy, if set.
  std::optional<std::string> managed_by;
  bool enable_dynamic_worker = false;
  // TrainingJob role key -> the TFJob's key as written ("Chief" -> "master").
  std::map<std::string, std::string> role_keys;
  // TrainingJob role key -> v1's type for it, as v1 canonicalises the key
  // ("Chief" -> "Master" for a "master" key).
  std::map<std::string, std::string> v1_types;
};

StatusOr<TFJobConversion> ConvertTFJob(const nlohmann::json& tfjob);

// A message about the converted TrainingJob ("spec.replicaSpecs.Chief.replicas:
// ...") with its field paths rewritten to the TFJob's
// ("spec.tfReplicaSpecs.master.replicas: ..."), so a caller can point at the
// TFJob file's line.
std::string ToTFJobMessage(const TFJobConversion& conversion, std::string_view message);

}  // namespace kubetrain::api
