// The kubetrain CRDs as API resources: group, version and plural (as in the
// CRDs' spec.names, crds/), for the job and sweep controllers, the CLI and the
// tests' fake apiservers. Strings only, so the API types stay independent of
// the client: a controller makes its kube::ResourceRef from these.
#pragma once

#include <string_view>

#include "operator/api/types.h"

namespace kubetrain::api {

inline constexpr std::string_view kTrainingJobsPlural = "trainingjobs";
inline constexpr std::string_view kTrainingSweepsPlural = "trainingsweeps";

}  // namespace kubetrain::api
