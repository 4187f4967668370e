// SweepController: carries out the sweep planner's plans against a Kubernetes
// apiserver.
//
// Pipeline (the JobController's, smaller):
//   informers (TrainingSweeps; trial TrainingJobs labelled kubetrain.io/sweep-name,
//   cached as compact ObservedTrials) --handlers compute "ns/name" of the sweep-->
//   WorkQueue --> Reconcile(key): re-read the sweep and its trials from the
//   caches, PlanSweep(), then execute: status first, then events, creates
//   (AlreadyExists = done), suspend patches, deletes (NotFound = done).
//
// Guarantees:
//  - Never more than spec.parallelism trials at once, under any cache lag: a
//    trial is created only after the status row that counts it was written,
//    and until the sweep cache shows that write, the status this controller
//    wrote last is planned from (the JobController's rule).
//  - A trial this process created is not created again while the trial cache
//    has not shown it yet (60 s at most; then the create is repeated, which is
//    idempotent by name).
//  - Trials carry a controller ownerReference to their sweep: the garbage
//    collector deletes them (and their pods) with the sweep.
//  - No sweep is planned before the trial cache has synced (a Running row whose
//    trial is not yet listed would look deleted).
//  - A status write the apiserver refuses (422, 403) is reported on the sweep
//    (a StatusWriteFailed event) and retried with backoff like any error.
// Contract: Start() starts the informers and returns at once (the CRD may be
// installed after the operator); Run() blocks until `stop`, starting the
// workers once every cache has synced (it logs a warning each minute until then).
// Every API call goes through a runtime::ApiClient (a kube::Client in the
// operator, a fake apiserver in sweep_controller_test.cc). The client,
// recorder, metrics and clock must outlive the controller.
#pragma once

#include <chrono>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "operator/api/kube_resources.h"
#include "operator/controller/metrics.h"
#include "operator/kube/client.h"
#include "operator/runtime/api_client.h"
#include "operator/runtime/events.h"

namespace kubetrain::sweep {

inline const kube::ResourceRef& kTrainingSweeps = api::kTrainingSweepsResource;
// The sweeps' trials.
inline const kube::ResourceRef& kTrainingJobs = api::kTrainingJobsResource;

struct SweepControllerOptions {
  // Namespaces to watch; empty or {""} = all namespaces.
  std::vector<std::string> namespaces;
  int workers = 2;
  // Time for the status rows, the retries and requeues, and how long a
  // create is remembered; must outlive the controller (tests: a FakeClock).
  Clock* clock = &RealClock();
};

class SweepController {
 public:
  SweepController(kube::Client* client, runtime::EventRecorder* recorder,
                  controller::Metrics* metrics, SweepControllerOptions options);
  // Every API call through `client` (a fake apiserver in tests).
  SweepController(runtime::ApiClient* client, runtime::EventRecorder* recorder,
                  controller::Metrics* metrics, SweepControllerOptions options);
  ~SweepController();
  SweepController(const SweepController&) = delete;
  SweepController& operator=(const SweepController&) = delete;

  void Start();
  void Run(std::stop_token stop);
  // True once every cache has synced.
  bool Synced() const;
  // Nothing queued, in flight or due (WorkQueue::Idle): for tests on a FakeClock.
  bool Idle() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kubetrain::sweep
