// JobClient: the job controller's name for the generic client
// (runtime/api_client.h), through which it makes every API call.
#pragma once

#include <memory>

#include "operator/runtime/api_client.h"

namespace kubetrain::controller {

using JobClient = runtime::ApiClient;

inline std::unique_ptr<JobClient> NewKubeJobClient(kube::Client* client) {
  return runtime::NewKubeApiClient(client);
}

}  // namespace kubetrain::controller
