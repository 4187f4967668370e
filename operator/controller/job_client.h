// JobClient: the job controller's name for the generic client
// (runtime/api_client.h), through which it makes every API call; and
// JobReference, what the events about a job point at.
#pragma once

#include <memory>
#include <string>

#include "operator/api/tfjob.h"
#include "operator/api/types.h"
#include "operator/runtime/api_client.h"
#include "operator/runtime/events.h"

namespace kubetrain::controller {

using JobClient = runtime::ApiClient;

inline std::unique_ptr<JobClient> NewKubeJobClient(kube::Client* client) {
  return runtime::NewKubeApiClient(client);
}

// The object events about a job point at: a TrainingJob, or with `tfjob` a
// Kubeflow TFJob.
inline runtime::ObjectReference JobReference(std::string ns, std::string name, std::string uid,
                                             bool tfjob = false) {
  return {std::string(tfjob ? api::kTFJobApiVersion : api::kApiVersion),
          std::string(tfjob ? api::kTFJobKind : api::kKind), std::move(ns), std::move(name),
          std::move(uid)};
}

}  // namespace kubetrain::controller
