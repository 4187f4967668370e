// KueueIntegration: the API side of Kueue's Workload protocol for the
// JobController (--kueue). The decisions are operator/kueue's (pure, unit
// tested); this class carries them out with the controller's JobClient:
// creates the job's Workload (with the priority of its WorkloadPriorityClass),
// deletes a stale one, clears an evicted Workload's admission, marks it
// Finished, drops its resource-in-use finalizer, and merges the admission's
// pod-set info (from the assigned ResourceFlavors) into the pods a plan creates.
//
// Contract: stateless apart from its pointers (client and recorder must
// outlive it); thread-safe as they are. Errors are the client's (transient:
// the reconcile retries with backoff), except that a pod the admission cannot
// be merged into is FailedPrecondition (permanent).
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/types.h"
#include "operator/controller/job_client.h"
#include "operator/kube/client.h"
#include "operator/kueue/workload.h"
#include "operator/planner/planner.h"
#include "operator/runtime/events.h"
#include "operator/runtime/object.h"

namespace kubetrain::controller {

inline const kube::ResourceRef kWorkloads{"kueue.x-k8s.io", "v1beta1", "workloads", true};
inline const kube::ResourceRef kResourceFlavors{"kueue.x-k8s.io", "v1beta1", "resourceflavors",
                                                false};
inline const kube::ResourceRef kWorkloadPriorityClasses{"kueue.x-k8s.io", "v1beta1",
                                                        "workloadpriorityclasses", false};
inline const kube::ResourceRef kPriorityClasses{"scheduling.k8s.io", "v1", "priorityclasses",
                                                false};

class KueueIntegration {
 public:
  KueueIntegration(JobClient* client, runtime::EventRecorder* recorder);

  struct SyncResult {
    std::optional<PlanInput::Hold> hold;  // unset: the job may run
    // Set when the Workload could not be made for a reason a retry may
    // outlive (a WorkloadPriorityClass not yet created, RBAC): plan again then.
    std::optional<std::chrono::seconds> retry_after;
  };
  // Decides (kueue::Decide) and carries out the decision's Workload action for
  // `job`, which asks for `queue`. `workload`: the job's Workload from the cache
  // (null: none). A Workload that cannot be created for a lasting reason holds
  // the job with reason WorkloadNotCreated and the error (a Warning event too).
  [[nodiscard]] StatusOr<SyncResult> Sync(const api::TrainingJob& job, const std::string& queue,
                                          const runtime::GenericObject* workload, bool pods_active,
                                          api::Time now);

  // Merges the admission of `workload` into every Pod in `creates`.
  [[nodiscard]] Status DecoratePods(const nlohmann::json& workload,
                                    std::vector<ChildCreate>& creates);

  // Drops the finalizer of a Workload whose job is gone (deleted, or replaced
  // by a new job of the same name) once the garbage collector deletes it.
  [[nodiscard]] Status ReleaseOrphan(const runtime::GenericObject& workload);

 private:
  StatusOr<std::optional<kueue::Priority>> PriorityOf(const api::TrainingJob& job);
  Status RemoveFinalizer(const runtime::GenericObject& workload);
  Status WriteStatus(const runtime::GenericObject& workload, nlohmann::json status);
  void Event(const api::TrainingJob& job, const std::string& type, const std::string& reason,
             const std::string& message);

  JobClient* const client_;
  runtime::EventRecorder* const recorder_;
};

}  // namespace kubetrain::controller
