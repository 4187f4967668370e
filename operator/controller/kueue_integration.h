// KueueIntegration: the API side of Kueue's Workload protocol for the
// JobController (--kueue). The decisions are operator/kueue's (pure, unit
// tested); this class carries them out with the controller's JobClient:
// creates the job's Workload (with the priority of its WorkloadPriorityClass),
// deletes a stale one, moves a pending one to the job's new queue, clears an
// evicted Workload's admission, marks it Finished, labels the Workloads of an
// older operator for the cache (LabelOlderWorkloads), drops its resource-in-use finalizer, and
// merges the admission's pod-set info (from the assigned ResourceFlavors) into the pods a plan
// creates.
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
#include <stop_token>
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
    std::optional<planner::PlanInput::Hold> hold;  // unset: the job may run
    // Set when the Workload could not be made for a reason a retry may
    // outlive (a WorkloadPriorityClass not yet created, RBAC): plan again then.
    std::optional<std::chrono::seconds> retry_after;
  };
  // Decides (kueue::Decide) and carries out the decision's Workload action for
  // `job`, which asks for `queue` (its queue-name label; empty: none, or
  // removed). `workload`: the job's Workload from the cache (null: none). Call
  // it for every job that has a queue label or a Workload: a job that has a
  // Workload stays held until it is admitted, whatever its labels say. A Workload that cannot be
  // created for a lasting reason holds the job with reason WorkloadNotCreated and the error (a
  // Warning event too).
  [[nodiscard]] StatusOr<SyncResult> Sync(const api::TrainingJob& job, const std::string& queue,
                                          const runtime::GenericObject* workload, bool pods_active,
                                          api::Time now);

  // The job's Workload read from the apiserver when the cache has none but the
  // job's status says Kueue held it (Suspended True for a Kueue reason): a
  // Workload just created and not yet in the cache must not let a job whose
  // queue label was removed meanwhile run. Null: no such Workload, or the job
  // was not held by Kueue (no read then). Errors are the client's.
  [[nodiscard]] StatusOr<std::shared_ptr<const runtime::GenericObject>> UncachedWorkload(
      const api::TrainingJob& job);

  // Merges the admission of `workload` into every Pod in `creates`.
  [[nodiscard]] Status DecoratePods(const nlohmann::json& workload,
                                    std::vector<planner::ChildCreate>& creates);

  // Migration for the Workload cache's label selector: gives the
  // kueue::kJobNameLabel to the Workloads of TrainingJobs in `ns` ("": all)
  // that an operator before that label created, so the cache (which lists
  // only labelled ones) finds them. Lists only unlabelled Workloads, building
  // their metadata alone; idempotent; returns how many it labelled. Call it
  // before the Workload cache starts: a job whose Workload the cache misses
  // would be held (its pods deleted) as if it had none.
  [[nodiscard]] StatusOr<int> LabelOlderWorkloads(const std::string& ns);
  // The same for each of `namespaces`, retried with backoff until `deadline`
  // or `stop` (the apiserver or Kueue may be starting too): Unavailable then.
  [[nodiscard]] Status LabelOlderWorkloads(const std::vector<std::string>& namespaces,
                                           std::chrono::steady_clock::time_point deadline,
                                           std::stop_token stop);

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
