// ApiClient: the Kubernetes API calls a controller makes, behind a narrow
// interface, so that a controller's reconcile logic gets a unit test with a
// fake apiserver (job_controller_test.cc, sweep_controller_test.cc) beside the
// control-plane tests. NewKubeApiClient forwards every call to a kube::Client.
//
// Contract: errors as kube::Client maps them (AlreadyExists, NotFound,
// Conflict, InvalidArgument for a 422, ...). Implementations are thread-safe:
// a controller's workers and informers call them concurrently.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "operator/kube/client.h"
#include "operator/runtime/reflector.h"

namespace kubetrain::runtime {

class ApiClient {
 public:
  virtual ~ApiClient() = default;

  // The created object is not returned: a controller reads what it created
  // from its caches (kube::Client::CreateUnread).
  [[nodiscard]] virtual Status Create(const kube::ResourceRef& r, const std::string& ns,
                                      const nlohmann::json& object) = 0;
  // One object (Kueue's ResourceFlavors and WorkloadPriorityClasses).
  [[nodiscard]] virtual StatusOr<nlohmann::json> GetObject(const kube::ResourceRef& r,
                                                           const std::string& ns,
                                                           const std::string& name) = 0;
  // A full replace (the job's ConfigMap).
  [[nodiscard]] virtual StatusOr<nlohmann::json> Update(const kube::ResourceRef& r,
                                                        const std::string& ns,
                                                        const nlohmann::json& object) = 0;
  // The status subresource, conditional on object.metadata.resourceVersion.
  [[nodiscard]] virtual StatusOr<nlohmann::json> UpdateStatus(const kube::ResourceRef& r,
                                                              const std::string& ns,
                                                              const nlohmann::json& object) = 0;
  // A patch of `type` (the job's PodGroup: a JSON patch replacing its spec; a
  // sweep's trial: a merge patch of its suspend flag).
  [[nodiscard]] virtual StatusOr<nlohmann::json> Patch(const kube::ResourceRef& r,
                                                       const std::string& ns,
                                                       const std::string& name,
                                                       kube::PatchType type,
                                                       const nlohmann::json& patch) = 0;
  [[nodiscard]] virtual Status Delete(const kube::ResourceRef& r, const std::string& ns,
                                      const std::string& name,
                                      const kube::DeleteOptions& options) = 0;
  // Lists and watches `r` in `ns` ("" = all namespaces) with a label selector;
  // the objects with only `fields` (kube::ListOptions::fields; null: all).
  virtual std::unique_ptr<ListerWatcher> ListWatch(
      const kube::ResourceRef& r, const std::string& ns, const std::string& selector,
      std::shared_ptr<const kube::FieldFilter> fields) = 0;
};

// Forwards to `client`, which must outlive it.
std::unique_ptr<ApiClient> NewKubeApiClient(kube::Client* client);

}  // namespace kubetrain::runtime
