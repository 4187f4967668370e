// The kubetrain CRDs as kube::ResourceRefs, for the code that calls the API
// (the job and sweep controllers, the CLI, the tests' fake apiservers): one
// definition of each. Header-only: resources.h keeps the strings, and the API
// types' library stays free of the client.
#pragma once

#include <string>

#include "operator/api/resources.h"
#include "operator/kube/client.h"

namespace kubetrain::api {

inline const kube::ResourceRef kTrainingJobsResource{std::string(kGroup), std::string(kVersion),
                                                     std::string(kTrainingJobsPlural), true};
inline const kube::ResourceRef kTrainingSweepsResource{std::string(kGroup), std::string(kVersion),
                                                       std::string(kTrainingSweepsPlural), true};

}  // namespace kubetrain::api
