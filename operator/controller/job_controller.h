// JobController: carries out the planner's plans against a Kubernetes apiserver.
//
// Pipeline (sample-controller style):
//   informers (TrainingJobs; Pods, Services, Secrets labelled kubetrain.io/job-name,
//   cached as compact structs) --handlers compute "ns/name"--> WorkQueue
//   --> Reconcile(key): re-read the job and its children from the caches, adjust
//       for writes the caches have not shown yet (expectations.h), PlanJob(), then
//       execute: status first, then creates (AlreadyExists = done), then deletes
//       (NotFound = done), then events, then the job's own deletion after its TTL.
//
// Guarantees:
//  - No duplicate pods: names are deterministic, a create of an existing name is
//    treated as success, and a created pod the cache has not shown yet is treated
//    as present (Pending) until it shows up or 60 s pass.
//  - A failure is counted once: the status with its pod UID is written before the
//    failed pod is deleted, and until the job cache shows that write, the status
//    this controller wrote last is used instead of the stale cached one.
//  - Timers (deadline, TTL) are requeues decided by the planner, never dropped.
// Every API call goes through a JobClient (job_client.h): a kube::Client in the
// operator, a fake apiserver in job_controller_test.cc.
// Contract: Start() lists and watches (returns once caches synced or the
// timeout passed); Run() blocks running the workers until `stop`; Ready() is
// thread-safe. The client, recorder and metrics must outlive the controller.
#pragma once

#include <chrono>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "operator/api/kube_resources.h"
#include "operator/api/resources.h"
#include "operator/controller/job_client.h"
#include "operator/controller/metrics.h"
#include "operator/controller/refusal.h"
#include "operator/controller/tfjob_exec.h"
#include "operator/kube/client.h"
#include "operator/planner/metrics_ingress.h"
#include "operator/progress/reader.h"
#include "operator/runtime/events.h"

namespace kubetrain::controller {

inline const kube::ResourceRef& kTrainingJobs = api::kTrainingJobsResource;

struct JobControllerOptions {
  // Namespaces to watch; empty or {""} = all namespaces.
  std::vector<std::string> namespaces;
  std::string cluster_domain = "cluster.local";
  // Create a NetworkPolicy per job (PlanInput::network_policy).
  bool network_policy = true;
  // Who that policy admits to the trainers' metrics port (PlanInput::metrics_ingress).
  planner::MetricsIngress metrics_ingress;
  // The gang scheduler for every job (PlanInput::gang_scheduler_name); empty:
  // only jobs that name one themselves are gang-scheduled.
  std::string gang_scheduler_name;
  int workers = 4;
  // A reconcile creates a job's Services and Pods with up to this many API
  // calls in flight (its Secret, NetworkPolicy, ConfigMap and PodGroup first,
  // one by one; while pods of the job live, a replacement's Secret and
  // NetworkPolicy go alongside it). 1: one by one.
  int create_parallelism = 4;
  // How long a NetworkPolicy this process created, or whose create answered
  // AlreadyExists, is trusted to be there: within it, replacement pods are
  // created without sending the policy again; after it (and after a restart)
  // the next pod the job gets sends it once more, recreating it (with a
  // Warning event NetworkPolicyRecreated) when it was deleted.
  std::chrono::seconds network_policy_recheck{600};
  // How long a create or delete may stay unseen in the cache before it is
  // assumed lost and planned again.
  std::chrono::seconds expectation_timeout{60};
  // A status change in live pod counts only (replicaStatuses.*.active,
  // status.running, the Unschedulable message: OnlyLiveCountsDiffer) within
  // this long of the job's last status write waits for the rest of it, then
  // goes in one write with whatever changed since. Conditions, state, failures
  // and restarts are written at once and carry the counts (measured: 3.8
  // writes per job with 2 s, 2.7 with 10 s, at 150 jobs starting at once). A
  // change in replicaStatuses.*.active alone (pods Pending:
  // OnlyPendingCountsDiffer) waits 4 windows. A new job's first status, while
  // it says only Created, waits for the next change from its first plan, 4
  // windows when the job already reads state Created (the CRD defaults it),
  // else one: a job whose pods come up meanwhile writes its status once
  // (Created and Running); one whose pods cannot be scheduled or started says
  // so at once. 0: off.
  std::chrono::milliseconds status_coalesce{30000};
  // status.progress: read the coordinator's metrics at a bounded rate
  // (operator/progress/reader.h). Off: status.progress is left as it is.
  bool read_progress = true;
  // The reader's options but its clock: the reader reads `clock` below.
  progress::ReaderOptions progress;
  // A job whose creates the apiserver refuses (403: quota, Pod Security,
  // RBAC; or a same-named object it does not own: refusal.h) sends one create
  // per probe, the first `refused_probe.first` after the refusal, doubling up
  // to `refused_probe.max`: at most 6 creates a minute with the defaults (10 s,
  // 20 s), and it proceeds within 20 s of the cause going away.
  RefusalSchedule refused_probe;
  // A pod of a job still present this long after its deletion was requested
  // (deletionTimestamp less deletionGracePeriodSeconds), and at least min(15 s,
  // this) past its deletionTimestamp, is taken as lost with its node: no kubelet will confirm its
  // end, and its replica cannot get a new pod of the same name. It is force-deleted (grace 0, on
  // its UID) with a Warning event ForceDeletedLostPod. 0: never.
  std::chrono::seconds lost_pod_grace{60};
  // Kueue (--kueue; operator/kueue, kueue_integration.h): a job labelled
  // kueue.x-k8s.io/queue-name runs only while its Workload is admitted. Needs
  // the Workload CRD. Off: such a job runs at once, with a Warning event.
  bool kueue = false;
  // Kubeflow TFJobs (--tfjob; tfjob_exec.h): which ones this controller
  // reconciles, through the same planner, with v1's children and status.
  // Needs the TFJob CRD. Off: no TFJob is listed.
  TFJobMode tfjob = TFJobMode::kOff;
  // v1's CUSTOM_CLUSTER_DOMAIN for TFJobs' TF_CONFIG hosts ("": <pod>.<ns>.svc).
  std::string tfjob_custom_cluster_domain;
  // What the controller's timers (requeues, retries, the status coalescing
  // window, expectations, refusal probes, the progress reader's schedule) and
  // timestamps read; must outlive the controller (tests: a FakeClock).
  Clock* clock = &RealClock();
};

class JobController {
 public:
  JobController(kube::Client* client, runtime::EventRecorder* recorder, Metrics* metrics,
                JobControllerOptions options);
  // Through `client` (a fake in unit tests), which must outlive the controller.
  JobController(JobClient* client, runtime::EventRecorder* recorder, Metrics* metrics,
                JobControllerOptions options);
  ~JobController();
  JobController(const JobController&) = delete;
  JobController& operator=(const JobController&) = delete;

  // Starts the informers and waits up to `sync_timeout` for their first list,
  // returning early (kUnavailable) once `stop` is requested. A timeout's error
  // names the cause the caches saw (TLS, 401, 403, CRD missing).
  [[nodiscard]] Status Start(std::chrono::milliseconds sync_timeout, std::stop_token stop = {});
  // Runs the reconcile workers until `stop` is requested; in-flight reconciles
  // finish before it returns.
  void Run(std::stop_token stop);
  // True once every cache has synced.
  bool Ready() const;
  // No reconcile queued, running, or due at the clock's time (tests on a
  // FakeClock: with the caches caught up, nothing happens until the clock
  // moves or the apiserver changes).
  bool Idle() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kubetrain::controller
