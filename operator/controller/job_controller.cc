#include "operator/controller/job_controller.h"

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "common/mutex.h"
#include "common/workload_contract.h"
#include "operator/api/json.h"
#include "operator/controller/expectations.h"
#include "operator/controller/kueue_integration.h"
#include "operator/controller/observe_pod.h"
#include "operator/planner/planner.h"
#include "operator/progress/endpoint.h"
#include "operator/runtime/controller.h"
#include "operator/runtime/informer.h"
#include "operator/runtime/object.h"
#include "operator/runtime/store.h"
#include "operator/runtime/workqueue.h"

namespace kubetrain::controller {

using planner::ChildCreate;
using planner::ChildRef;
using planner::Event;
using planner::EventType;
using planner::kClusterConfigKey;
using planner::kJobNameLabel;
using planner::kMaxPodCreatesPerPlan;
using planner::ObservedChildren;
using planner::ObservedPod;
using planner::ObservedService;
using planner::OnlyLiveCountsDiffer;
using planner::OnlyPendingCountsDiffer;
using planner::Plan;
using planner::PlanInput;
using planner::PlanJob;
using planner::PodNameEnv;
using planner::PodPhase;
using planner::SetFinished;
using planner::UpdateState;
namespace {

using json = nlohmann::json;

// A lost pod is never force-deleted before this long (or the lost-pod grace, if shorter)
// past its deletionTimestamp: a live kubelet SIGKILLs at that moment and confirms within
// seconds.
constexpr std::chrono::seconds kLostPodSlack{15};

// Compact cache entries (Services): metadata plus what the planner reads.
struct CachedChild {
  runtime::ObjectMeta meta;
  std::optional<api::Time> deletion_timestamp;
};

StatusOr<CachedChild> ToCachedChild(const json& obj) {
  KT_ASSIGN_OR_RETURN(runtime::ObjectMeta meta, runtime::ParseObjectMeta(obj));
  meta.labels = {};  // never read (the store indexes by owner)
  CachedChild out{std::move(meta), std::nullopt};
  const json& m = obj.at("metadata");
  if (m.contains("deletionTimestamp") && m["deletionTimestamp"].is_string()) {
    auto t = api::ParseTime(m["deletionTimestamp"].get<std::string>());
    if (t.ok()) out.deletion_timestamp = *t;
  }
  return out;
}

// ToCachedChild reads a Service's metadata only, and not its labels or
// annotations (a TFJob's Services carry eight labels).
const std::shared_ptr<const kube::FieldFilter>& CachedChildFields() {
  using F = kube::KeptField;
  static const auto* const fields = new std::shared_ptr<const kube::FieldFilter>(
      std::make_shared<const kube::FieldFilter>(kube::FieldFilter{
          F{"metadata",
            {F{"name", {}}, F{"namespace", {}}, F{"uid", {}}, F{"resourceVersion", {}},
             F{"generation", {}}, F{"deletionTimestamp", {}}, F{"ownerReferences", {}}}}}));
  return *fields;
}

// What differs per child kind, in one table.
struct ChildKindInfo {
  ChildRef::Kind kind;
  std::string_view name;   // in messages
  std::string_view title;  // in condition reasons: PodCreateForbidden
  const kube::ResourceRef* resource;
};
constexpr std::array<ChildKindInfo, 6> kChildKinds = {{
    {ChildRef::Kind::kPod, "pod", "Pod", &kube::kPods},
    {ChildRef::Kind::kService, "service", "Service", &kube::kServices},
    {ChildRef::Kind::kSecret, "secret", "Secret", &kube::kSecrets},
    {ChildRef::Kind::kConfigMap, "configmap", "ConfigMap", &kube::kConfigMaps},
    {ChildRef::Kind::kNetworkPolicy, "networkpolicy", "NetworkPolicy", &kube::kNetworkPolicies},
    {ChildRef::Kind::kPodGroup, "podgroup", "PodGroup", &kube::kPodGroups},
}};

// How long a Secret this process saw exist is trusted while the job is
// refused: a probe then sends only the refused child, not the Secret again.
constexpr std::chrono::seconds kRefusedSecretTrust{60};

// Whose an object is, for a ChildNameConflict message: its controller, or none.
std::string Holder(const std::optional<runtime::OwnerRef>& controller, bool deleting) {
  std::string holder = controller ? "controlled by " + controller->kind + " " + controller->name +
                                        " uid " + controller->uid
                                  : "no controller owns it";
  if (deleting) holder += "; it is being deleted";
  return holder;
}

// Sets of child kinds and of status codes, one bit each (the create-result table).
template <typename... Kinds>
constexpr uint32_t KindBits(Kinds... kinds) {
  return ((uint32_t{1} << static_cast<unsigned>(kinds)) | ...);
}
template <typename... Codes>
constexpr uint32_t CodeBits(Codes... codes) {
  return ((uint32_t{1} << static_cast<unsigned>(codes)) | ...);
}

// Kinds whose refused create (403) makes the job refused (refusal.h). A
// NetworkPolicy's is not (the job runs without it and says so), nor a
// PodGroup's (GangSchedulingUnavailable fails the job).
constexpr uint32_t kRefusableKinds =
    ~KindBits(ChildRef::Kind::kNetworkPolicy, ChildRef::Kind::kPodGroup);

const ChildKindInfo& Info(ChildRef::Kind kind) {
  for (const auto& info : kChildKinds) {
    if (info.kind == kind) return info;
  }
  return kChildKinds[0];
}

// A job's status that says nothing but that it was created: Created True
// and no other condition (pod counts aside) but kstatus's Ready, Reconciling
// and Stalled, which only restate the others (api::SetSummaryConditions).
bool OnlyCreated(const api::TrainingJobStatus& status) {
  if (!status.IsTrue(api::ConditionType::kCreated)) return false;
  for (const api::Condition& c : status.conditions) {
    switch (c.type) {
      case api::ConditionType::kCreated:
      case api::ConditionType::kReady:
      case api::ConditionType::kReconciling:
      case api::ConditionType::kStalled:
        continue;
      default:
        return false;
    }
  }
  return true;
}

}  // namespace

class JobController::Impl {
 public:
  Impl(std::unique_ptr<JobClient> owned, JobClient* client, runtime::EventRecorder* recorder,
       Metrics* metrics, JobControllerOptions options)
      : recorder_(recorder),
        metrics_(metrics),
        options_(std::move(options)),
        scaffold_(std::move(owned), client,
                  runtime::WorkQueueOptions{.name = "trainingjobs", .clock = options_.clock}) {
    scaffold_.BuildCaches(options_.namespaces, [this](const std::string& ns) {
      auto caches = std::make_unique<Caches>();
      const std::string selector(kJobNameLabel);
      caches->jobs = caches->Add<runtime::CompactObject>(
          "trainingjobs", client_->ListWatch(kTrainingJobs, ns, "", nullptr),
          runtime::ToCompactObject);
      caches->pods = caches->Add<CachedPod>(
          "pods", client_->ListWatch(kube::kPods, ns, selector, CachedPodFields()), ToCachedPod);
      caches->services = caches->Add<CachedChild>(
          "services", client_->ListWatch(kube::kServices, ns, selector, CachedChildFields()),
          ToCachedChild);
      caches->jobs->AddHandlers(scaffold_.KeyHandlers<runtime::CompactObject>(
          [this](const std::string& key) { ForgetJob(key); }));
      if (options_.tfjob != TFJobMode::kOff) {
        // Every TFJob in the namespace; which ones are ours is decided per
        // reconcile from the object (TakesTFJob), never by the event.
        caches->tfjobs = caches->Add<runtime::CompactObject>(
            "tfjobs", client_->ListWatch(kTFJobs, ns, "", nullptr), ToCachedTFJob);
        caches->tfjobs->AddHandlers({
            .on_add = [this](const auto& j) { queue_.Add(TFJobKey(j->meta.ns, j->meta.name)); },
            .on_update = [this](const auto&,
                                const auto& j) { queue_.Add(TFJobKey(j->meta.ns, j->meta.name)); },
            .on_delete = [this](const auto& j,
                                bool) { ForgetJob(TFJobKey(j->meta.ns, j->meta.name)); },
        });
      }
      caches->pods->AddHandlers(RestartLatencyHandlers());  // before the owner is queued
      caches->pods->AddHandlers(ChildHandlers<CachedPod>());
      caches->services->AddHandlers(ChildHandlers<CachedChild>());
      if (options_.kueue) {
        // Only this operator's Workloads (kueue::kJobNameLabel), indexed by
        // job name: the other job kinds' are never listed.
        caches->workloads = caches->Add<runtime::GenericObject>(
            "workloads",
            client_->ListWatch(kWorkloads, ns, std::string(kueue::kOwnWorkloadsSelector), nullptr),
            runtime::ToGenericObject);
        caches->workloads->AddLabelIndex(std::string(kueue::kJobNameLabel));
        caches->workloads->AddHandlers(ChildHandlers<runtime::GenericObject>());
      }
      return caches;
    });
    if (options_.kueue) kueue_ = std::make_unique<KueueIntegration>(client_, recorder_);
    if (options_.read_progress) {
      progress::ReaderOptions reader = options_.progress;
      reader.clock = options_.clock;  // one clock for the controller and its reader
      progress_ = std::make_unique<progress::ProgressReader>(
          reader, [this](const std::string& key) { queue_.Add(key); }, &runtime::DefaultMetrics());
    }
  }

  ~Impl() {
    if (progress_) progress_->Stop();
    scaffold_.Stop();
  }

  Status Start(std::chrono::milliseconds sync_timeout, std::stop_token stop) {
    const auto deadline = std::chrono::steady_clock::now() + sync_timeout;
    if (kueue_) {
      KT_RETURN_IF_ERROR(kueue_->LabelOlderWorkloads(scaffold_.Namespaces(), deadline, stop));
    }
    scaffold_.Start();
    return scaffold_.WaitForSync(deadline, sync_timeout, stop);
  }

  void Run(std::stop_token stop) {
    if (progress_) progress_->Start();
    // Stops taking keys at once (shutdown or lost lease): queued keys are
    // dropped, only reconciles in flight finish; then the Lease is released.
    scaffold_.Run(stop, options_.workers,
                  [this](const std::string& key) { return TimedReconcile(key); });
  }

  bool Idle() const { return scaffold_.Idle(); }

  bool Ready() const { return scaffold_.Synced(); }

 private:
  // One namespace's informers.
  struct Caches : runtime::InformerSet {
    runtime::Informer<runtime::CompactObject>* jobs = nullptr;  // as text: see object.h
    runtime::Informer<CachedPod>* pods = nullptr;
    runtime::Informer<CachedChild>* services = nullptr;
    runtime::Informer<runtime::GenericObject>* workloads = nullptr;  // with --kueue only
    runtime::Informer<runtime::CompactObject>* tfjobs = nullptr;     // with --tfjob only
    // No Secret informer: the operator may not read Secrets (least privilege).
    // It creates the job's Secret before any pod, and AlreadyExists says it is there.
  };

  // The cached job of work-queue key `key` (a TrainingJob's, or a TFJob's:
  // tfjob_exec.h), or null.
  static std::shared_ptr<const runtime::CompactObject> CachedJob(Caches& c,
                                                                 const std::string& key) {
    if (!IsTFJobKey(key)) return c.jobs->store().Get(key);
    return c.tfjobs ? c.tfjobs->store().Get(std::string(StripTFJobKey(key))) : nullptr;
  }

  // The work-queue key of the job controlling a child, if a job does.
  static std::optional<std::string> OwnerKey(const runtime::ObjectMeta& child) {
    const auto& owner = child.controller;
    if (!owner) return std::nullopt;
    if (owner->kind == api::kKind) return child.ns + "/" + owner->name;
    if (owner->kind == api::kTFJobKind) return TFJobKey(child.ns, owner->name);
    return std::nullopt;
  }

  template <typename T>
  runtime::EventHandlers<T> ChildHandlers() {
    auto enqueue_owner = [this](const std::shared_ptr<const T>& obj) {
      if (auto key = OwnerKey(obj->meta)) queue_.Add(*key);
    };
    return {
        .on_add = enqueue_owner,
        .on_update =
            [enqueue_owner](const std::shared_ptr<const T>& old,
                            const std::shared_ptr<const T>& obj) {
              // A pod event that changes nothing the controller reads (most
              // of a pod's status updates) reconciles nothing.
              if constexpr (std::is_same_v<T, CachedPod>) {
                if (old && SameForTheController(*old, *obj)) return;
              }
              enqueue_owner(obj);
            },
        .on_delete = [enqueue_owner](const auto& obj, bool) { enqueue_owner(obj); },
    };
  }

  // The start of kubetrain_pod_restart_latency_seconds: a pod seen Failed or
  // gone. Also, a pod gone is no longer an awaited create (PodGone).
  runtime::EventHandlers<CachedPod> RestartLatencyHandlers() {
    runtime::EventHandlers<CachedPod> h;
    h.on_update = [this](const auto& old, const auto& pod) {
      if (pod->pod.phase == PodPhase::kFailed && old->pod.phase != PodPhase::kFailed)
        metrics_->PodLost(pod->meta.Key());
    };
    h.on_delete = [this](const auto& pod, bool) {
      metrics_->PodLost(pod->meta.Key());
      // A pod this process created may go before a reconcile saw it in the
      // cache: its create is not awaited any more, or its replacement would
      // wait for expectation_timeout.
      if (auto job_key = OwnerKey(pod->meta)) {
        expectations_.PodGone(*job_key, pod->meta.name);
        RecordGone(*job_key, pod->meta.controller->uid, *pod);
      }
    };
    return h;
  }

  // A pod of job `job_key` left the cache: unless this process deleted it, a
  // pod gone while not terminal (or failed with a disruption) is reported to the planner
  // (vanished_) until a plan has seen it. Only for a job the cache still holds (the garbage
  // collector deletes a deleted job's pods), at most kMaxVanished per job.
  void RecordGone(const std::string& job_key, const std::string& job_uid, const CachedPod& gone) {
    static constexpr size_t kMaxVanished = 10000;
    MutexLock lock(lost_mu_);
    auto ours = deleted_uids_.find(job_key);
    if (ours != deleted_uids_.end() && ours->second.erase(gone.pod.uid) > 0) {
      if (ours->second.empty()) deleted_uids_.erase(ours);
      return;
    }
    // Pod GC marks an orphaned pod Failed with DisruptionTarget before it
    // deletes it: a terminal pod the cluster ended counts too.
    if (gone.pod.phase == PodPhase::kSucceeded ||
        (gone.pod.phase == PodPhase::kFailed && gone.pod.disruption.empty())) {
      return;
    }
    Caches* c = scaffold_.CachesFor(gone.meta.ns);
    if (c == nullptr) return;
    auto job = CachedJob(*c, job_key);
    if (!job || job->meta.uid != job_uid) return;
    std::vector<ObservedPod>& list = vanished_[job_key];
    if (list.size() < kMaxVanished) list.push_back(gone.pod);
  }

  // This process is deleting `uid` of job `key`: its end is no disruption.
  void DeletingPod(const std::string& key, const std::string& uid) {
    MutexLock lock(lost_mu_);
    deleted_uids_[key].insert(uid);
  }

  // Vanished pods `seen` by a plan whose status is written (or needs no write):
  // not reported again.
  void VanishedSeen(const std::string& key, const std::vector<ObservedPod>& seen) {
    if (seen.empty()) return;
    MutexLock lock(lost_mu_);
    auto it = vanished_.find(key);
    if (it == vanished_.end()) return;
    std::erase_if(it->second, [&](const ObservedPod& p) {
      return std::any_of(seen.begin(), seen.end(),
                         [&](const ObservedPod& s) { return s.uid == p.uid; });
    });
    if (it->second.empty()) vanished_.erase(it);
  }

  // Force-deletes the job's pods still present options_.lost_pod_grace after
  // their deletion was requested (and at least kLostPodSlack past their
  // deletionTimestamp, the end of their own grace period): their node is gone or
  // cut off, no kubelet will confirm their end, and their replicas cannot get a
  // pod of the same name (kubeflow/trainer #2072). Each with a Warning event
  // ForceDeletedLostPod naming the pod and its node. Returns how long until the
  // next one is due.
  //
  // Flow: due = max(deletion requested + lost_pod_grace, deletionTimestamp +
  // min(kLostPodSlack, lost_pod_grace)), where deletion requested = deletionTimestamp -
  // deletionGracePeriodSeconds -> DELETE gracePeriodSeconds=0 with a precondition
  // on the pod's UID (a replacement of the same name is never touched) -> the
  // apiserver removes the object -> the planner recreates the replica.
  // Guarantees: only pods this job controls, only ones already being deleted
  // (by anyone); the operator never starts a deletion here.
  // Assumptions: a partitioned node's process may still run after this; see
  // docs/architecture.md ("Lost nodes") for what keeps it from the job.
  std::optional<std::chrono::milliseconds> ForceDeleteLostPods(
      Caches& c, const std::string& ns, const api::TrainingJob& job,
      const runtime::ObjectReference& regarding, api::Time now) {
    if (options_.lost_pod_grace <= std::chrono::seconds(0)) return std::nullopt;
    std::optional<std::chrono::milliseconds> next;
    const std::string owner = runtime::OwnerIndexValue(ns, job.metadata.uid);
    for (const auto& p : c.pods->store().ByIndex(runtime::kOwnerUidIndex, owner)) {
      if (!p->pod.deletion_timestamp) continue;
      const api::Time ends = *p->pod.deletion_timestamp;
      const api::Time requested =
          ends - std::chrono::seconds(p->pod.deletion_grace_seconds.value_or(0));
      const api::Time due = std::max(requested + options_.lost_pod_grace,
                                     ends + std::min(kLostPodSlack, options_.lost_pod_grace));
      if (now < due) {
        const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(due - now);
        if (!next || wait < *next) next = wait;
        continue;
      }
      kube::DeleteOptions opts;
      opts.grace_period_seconds = 0;
      opts.precondition_uid = p->pod.uid;
      const Status s = client_->Delete(kube::kPods, ns, p->meta.name, opts);
      metrics_->CountRequest("delete", StatusCodeName(s.code()));
      if (!s.ok()) {
        // NotFound or a UID conflict: gone already, or replaced. Else retry soon.
        if (s.code() != StatusCode::kNotFound && s.code() != StatusCode::kConflict) {
          spdlog::warn("force-delete of lost pod {}/{}: {}", ns, p->meta.name, s.ToString());
          next = std::chrono::milliseconds(1000);
        }
        continue;
      }
      const auto late = std::chrono::duration_cast<std::chrono::seconds>(now - requested);
      const std::string node = p->node_name.empty() ? "no node" : "node " + p->node_name;
      const std::string message =
          "pod " + p->meta.name + " on " + node + " was still terminating " +
          std::to_string(late.count()) + "s after its deletion was requested (lost-pod grace " +
          std::to_string(options_.lost_pod_grace.count()) +
          "s): no kubelet confirmed its end, so it was force-deleted and its replica is "
          "recreated; its old process may still run if the node is only cut off";
      spdlog::warn("{}/{}: {}", ns, job.metadata.name, message);
      recorder_->Record(regarding, "Warning", "ForceDeletedLostPod", "Reconcile", message);
    }
    return next;
  }

  void ForgetJob(const std::string& key) {
    {
      MutexLock lock(status_mu_);
      last_status_write_.erase(key);
      first_deferred_.erase(key);
    }
    if (progress_) progress_->Forget(key);
    {
      MutexLock lock(lost_mu_);
      vanished_.erase(key);
      deleted_uids_.erase(key);
    }
    expectations_.Forget(key);
    refusals_.Forget(key);
    MutexLock lock(tfjob_views_mu_);
    std::erase_if(tfjob_views_, [&](const TFJobViewMemo& m) { return m.key == key; });
  }

  // The view ReadTFJobSpec read of the TFJob `key` at resourceVersion `rv`,
  // if it is still remembered; else null.
  std::shared_ptr<const TFJobView> MemoizedTFJobView(const std::string& key,
                                                     const std::string& rv) {
    MutexLock lock(tfjob_views_mu_);
    auto it = std::find_if(tfjob_views_.begin(), tfjob_views_.end(),
                           [&](const TFJobViewMemo& m) { return m.rv == rv && m.key == key; });
    if (it == tfjob_views_.end()) return nullptr;
    std::rotate(it, it + 1, tfjob_views_.end());  // the most recent last
    return tfjob_views_.back().view;
  }

  void RememberTFJobView(const std::string& key, const std::string& rv,
                         std::shared_ptr<const TFJobView> view) {
    MutexLock lock(tfjob_views_mu_);
    std::erase_if(tfjob_views_, [&](const TFJobViewMemo& m) { return m.key == key; });
    if (tfjob_views_.size() >= kTFJobViewMemo) tfjob_views_.erase(tfjob_views_.begin());
    tfjob_views_.push_back(TFJobViewMemo{key, rv, std::move(view)});
  }

  // Reads the metrics of the replica that decides success (chief-0, else
  // worker-0) while the job runs and that pod is Running with an IP and a
  // "metrics" port; otherwise reads nothing for the job. A TFJob's pod has
  // v1's name (a Master's chief is <job>-master-0).
  void UpdateProgressTarget(const std::string& key, Caches& c, const api::TrainingJob& job,
                            const api::TrainingJobStatus& status, const TFJobView* tfjob) {
    if (!progress_) return;
    std::optional<progress::ScrapeTarget> target;
    if (!status.Finished() && !job.spec.run_policy.suspend) {
      const std::string replica =
          PodNameEnv(api::CoordinatorRole(job.spec), contract::kCoordinatorIndex);
      std::string name = job.metadata.name + "-" + replica;
      if (tfjob != nullptr) name = V1Name(*tfjob, std::move(name));
      auto pod = c.pods->store().Get(job.metadata.namespace_ + "/" + name);
      if (pod && pod->pod.phase == PodPhase::kRunning && !pod->pod.deletion_timestamp &&
          !pod->metrics_url.empty() && pod->meta.controller &&
          pod->meta.controller->uid == job.metadata.uid) {
        target = progress::ScrapeTarget{pod->metrics_url, pod->pod.uid, replica};
      }
    }
    progress_->SetTarget(key, target);
  }

  StatusOr<runtime::ReconcileResult> TimedReconcile(const std::string& key) {
    const auto start = std::chrono::steady_clock::now();
    auto result = Reconcile(key);
    metrics_->ObserveReconcile(std::chrono::steady_clock::now() - start);
    if (!result.ok()) {
      metrics_->ReconcileError();
      spdlog::warn("reconcile {}: {}", key, result.status().ToString());
    }
    return result;
  }

  // Builds the observed children from the caches, corrected by expectations.
  ObservedChildren Observe(Caches& c, const std::string& ns, const std::string& job_uid,
                           const std::string& key, api::Time now) {
    ObservedChildren observed;
    // Owner references name no namespace: a child is the job's only when it is
    // in the job's namespace too.
    const std::string owner = runtime::OwnerIndexValue(ns, job_uid);
    const auto pods = c.pods->store().ByIndex(runtime::kOwnerUidIndex, owner);
    observed.pods.reserve(pods.size());
    {
      MutexLock lock(lost_mu_);
      auto ours = deleted_uids_.find(key);
      for (const auto& p : pods) {
        observed.pods.push_back(p->pod);
        observed.pods.back().deleted_by_operator =
            ours != deleted_uids_.end() && ours->second.count(p->pod.uid) > 0;
      }
      if (auto gone = vanished_.find(key); gone != vanished_.end())
        observed.vanished = gone->second;
    }
    for (const auto& s : c.services->store().ByIndex(runtime::kOwnerUidIndex, owner)) {
      observed.services.push_back(ObservedService{s->meta.name, s->deletion_timestamp});
    }
    // Not observable (see Caches): the Secret is sent before or with every pod
    // create (a 409 says it is there; a success while pods live, that it was
    // deleted: AuthSecretReplaced); the NetworkPolicy unless this process saw
    // it recently.
    observed.secret_exists = false;
    observed.network_policy_exists =
        options_.network_policy &&
        expectations_.KnowsChild(key, job_uid, ChildRef::Kind::kNetworkPolicy,
                                 options_.network_policy_recheck);

    expectations_.Adjust(key, observed, now);
    return observed;
  }

  // A reconcile's end, decided by a step: nullopt goes on to the next step.
  using Ending = std::optional<StatusOr<runtime::ReconcileResult>>;

  // One reconcile's state, handed from step to step (Reconcile); each step
  // reads what the earlier ones filled in.
  struct Pass {
    // ReadJob.
    std::string key, ns, name;
    // A TFJob's (tfjob_exec.h): read through ReadTFJobSpec, written as v1's.
    std::shared_ptr<const TFJobView> tfjob;
    Caches* c = nullptr;
    std::shared_ptr<const runtime::CompactObject> cached;
    api::Time now;
    api::TrainingJob job;
    std::string cached_rv;         // the cache's resourceVersion of the job
    std::string rv;                // the one a status write sends
    bool state_defaulted = false;  // no status, but the CRD defaults its state
    bool unwritten = false;        // the status is one this process deferred
    bool first_status = false;     // no status was ever written for the job
    bool was_created = false, was_finished = false;
    runtime::ObjectReference regarding;
    // BuildPlanInput.
    ObservedChildren observed;
    PlanInput input;
    std::optional<Refusals::State> refusal;
    std::shared_ptr<const runtime::GenericObject> workload;
    KueueIntegration::SyncResult kueue_sync;
    // PlanAndAdmit.
    Plan plan;
    // WriteStatusIfDue: > 0, the status write waits this long.
    std::chrono::milliseconds status_wait{0};
    // IssueCreates.
    const std::vector<ChildCreate>* creates = nullptr;
    bool live_pods = false;
    size_t parallel_from = 0;  // creates from here on go concurrently
    std::vector<Status> results;
    std::vector<char> issued;
    // stop: issue nothing more (every call already issued is still handled);
    // plan_again: then plan the job again at once instead of going on.
    bool stop = false, plan_again = false;
    // A create was refused in this reconcile; the refusal the job had was cleared.
    bool refused_here = false, refusal_cleared = false;
    // IssueCreates and IssueDeletes: the first transient failure.
    Status first_error;
    std::optional<std::chrono::milliseconds> lost_wait;  // ForceDeleteLostPods
  };

  // Read the job, build the planner's input, plan, write the status if due,
  // issue creates (each result handled from one table, HandleCreateResult),
  // issue deletes, merge the requeues.
  StatusOr<runtime::ReconcileResult> Reconcile(const std::string& key) {
    Pass p;
    if (Ending end = ReadJob(key, p)) return std::move(*end);
    if (Ending end = BuildPlanInput(p)) return std::move(*end);
    if (Ending end = PlanAndAdmit(p)) return std::move(*end);
    if (Ending end = WriteStatusIfDue(p)) return std::move(*end);
    VanishedSeen(key, p.observed.vanished);  // counted in the status written (or kept) above
    RecordPlanEvents(p);
    if (Ending end = IssueCreates(p)) return std::move(*end);
    IssueDeletes(p);
    return MergeRequeues(p);
  }

  // The job from the cache, and the status to plan from: the one this
  // controller wrote last while the cache lags behind it, or the job's first
  // status it deferred (not written yet).
  Ending ReadJob(const std::string& key, Pass& p) {
    p.key = key;
    const bool is_tfjob = IsTFJobKey(key);
    std::tie(p.ns, p.name) = runtime::SplitKey(std::string(StripTFJobKey(key)));
    p.c = scaffold_.CachesFor(p.ns);
    if (p.c == nullptr) return runtime::ReconcileResult{};
    p.cached = CachedJob(*p.c, key);
    if (kueue_ && !is_tfjob) {
      KT_RETURN_IF_ERROR(
          ReleaseOrphanWorkloads(*p.c, p.ns, p.name, p.cached ? p.cached->meta.uid : ""));
    }
    if (!p.cached) {
      ForgetJob(key);
      return runtime::ReconcileResult{};  // deleted; the garbage collector takes the children
    }
    p.now = api::Now(*options_.clock);
    p.cached_rv = p.cached->meta.resource_version;
    // The TFJob's status is written, its state annotation's event follows and
    // wakes it again: planning now would only repeat that plan.
    if (is_tfjob && expectations_.HalfWritten(key, p.cached_rv)) return runtime::ReconcileResult{};
    if (is_tfjob) {
      if (Ending end = ReadTFJobSpec(p)) return end;
    } else {
      auto parsed = api::ParseTrainingJob(p.cached->Object());
      if (!parsed.ok()) return FailUnparseable(key, *p.cached, parsed.status(), p.now);
      p.job = std::move(*parsed);
    }
    if (p.job.metadata.deletion_timestamp) return runtime::ReconcileResult{};

    // A job with no status reads as state Created when the CRD defaults it
    // (crds/): its STATE column says so before any write.
    p.state_defaulted = p.job.status.conditions.empty() && !p.job.status.state.empty();
    p.rv = p.cached_rv;
    if (auto written = expectations_.LastStatus(key, p.cached_rv)) {
      p.job.status = std::move(written->status);
      p.rv = std::move(written->resource_version);
      p.unwritten = written->unwritten;
    }
    p.first_status = p.unwritten || p.job.status.conditions.empty();
    p.was_created = p.job.status.IsTrue(api::ConditionType::kCreated);
    p.was_finished = p.job.status.Finished();
    p.regarding = JobReference(p.ns, p.name, p.job.metadata.uid, is_tfjob);
    return std::nullopt;
  }

  // ReadJob for a TFJob: only one this operator takes (--tfjob, managedBy),
  // as the TrainingJob it converts to, its planner state from the annotation;
  // one that does not convert fails once (FailUnconvertibleTFJob).
  Ending ReadTFJobSpec(Pass& p) {
    if (auto view = MemoizedTFJobView(p.key, p.cached_rv)) {
      // The version taken last time: the same view (the checks below passed).
      p.tfjob = std::move(view);
      p.job = p.tfjob->job;
      return std::nullopt;
    }
    const json object = p.cached->Object();
    // Another controller's (or not --tfjob=managed's), or one that finished
    // before this operator took it (training-operator's, before a takeover):
    // never touched, never run again.
    if (!TakesTFJob(options_.tfjob, TFJobManagedBy(object)) || FinishedElsewhere(object)) {
      ForgetJob(p.key);
      return runtime::ReconcileResult{};
    }
    auto view = ReadTFJob(object);
    if (!view.ok()) return FailUnconvertibleTFJob(p.key, *p.cached, view.status(), p.now);
    p.tfjob = std::make_shared<const TFJobView>(std::move(*view));
    RememberTFJobView(p.key, p.cached_rv, p.tfjob);
    p.job = p.tfjob->job;
    return std::nullopt;
  }

  // What the planner reads besides the job: the observed children, the
  // refusal, the options, and Kueue's hold.
  Ending BuildPlanInput(Pass& p) {
    const std::string& key = p.key;
    api::TrainingJob& job = p.job;
    PlanInput& input = p.input;
    p.observed = Observe(*p.c, p.ns, job.metadata.uid, key, p.now);
    if (p.tfjob) ToPlannerNames(*p.tfjob, p.observed);
    input.now = p.now;
    // Refused creates (refusal.h): the status says so after a restart too.
    if (const api::Condition* r = job.status.Find(api::ConditionType::kCreateRefused);
        r != nullptr && r->status) {
      refusals_.Seed(key, {r->reason, r->message});
    }
    p.refusal = refusals_.Get(key);
    if (p.refusal) {
      input.create_refused =
          PlanInput::Refusal{p.refusal->refusal.reason, p.refusal->refusal.message};
      // A probe sends the refused child alone, not the Secret seen a moment ago.
      p.observed.secret_exists = expectations_.KnowsChild(
          key, job.metadata.uid, ChildRef::Kind::kSecret, kRefusedSecretTrust);
    }
    // The key is used only if the Secret does not exist yet.
    randombytes_buf(input.auth_key.data(), input.auth_key.size());
    input.default_cluster_domain = options_.cluster_domain;
    input.max_pod_creates = kMaxPodCreatesPerPlan;  // a huge job is created in batches
    // Endpoints and EndpointSlices written once per Service (PlanInput).
    input.services_when_running = true;
    if (progress_) input.progress = progress_->Latest(key);
    input.network_policy = options_.network_policy;
    input.metrics_ingress = options_.metrics_ingress;
    input.gang_scheduler_name = options_.gang_scheduler_name;
    expectations_.FillPlanInput(key, input);
    if (auto queue = kueue::QueueName(job); p.tfjob) {
      // Kueue's TFJob integration is Kueue's own: a TFJob is never queued here.
    } else if (kueue_) {
      // A job that has a Workload stays Kueue's whatever its labels say.
      p.workload = p.c->workloads->store().Get(p.ns + "/" + kueue::WorkloadName(job));
      if (!queue && !p.workload) {
        KT_ASSIGN_OR_RETURN(p.workload, kueue_->UncachedWorkload(job));
      }
      if (queue || p.workload) {
        KT_ASSIGN_OR_RETURN(p.kueue_sync, kueue_->Sync(job, queue.value_or(""), p.workload.get(),
                                                       PodsActive(p.observed), p.now));
        input.hold = p.kueue_sync.hold;
      }
    } else if (queue) {
      if (!p.was_created) {
        recorder_->Record(p.regarding, "Warning", "KueueIntegrationDisabled", "Reconcile",
                          "the job asks for Kueue queue " + *queue +
                              " but the operator runs without --kueue (or Kueue's Workload CRD "
                              "is not installed): it runs without being queued");
      }
    }
    return std::nullopt;
  }

  // The plan, with Kueue's admission applied to its pods.
  Ending PlanAndAdmit(Pass& p) {
    p.plan = PlanJob(p.job, p.observed, p.input);
    if (p.tfjob) ToV1Children(*p.tfjob, p.plan, options_.tfjob_custom_cluster_domain);
    if (p.workload && !p.input.hold) {
      const Status merged = kueue_->DecoratePods(p.workload->object, p.plan.creates);
      if (merged.code() == StatusCode::kFailedPrecondition) {
        // The admission cannot be applied to the pods (a template's node
        // selector says otherwise): retrying cannot help; the job fails.
        expectations_.ChildRejected(p.key, "Kueue's admission: " + merged.message());
        return PlanAgain();
      }
      KT_RETURN_IF_ERROR(merged);
    }
    UpdateProgressTarget(p.key, *p.c, p.job, p.plan.status, p.tfjob.get());
    return std::nullopt;
  }

  static runtime::ReconcileResult PlanAgain() {
    runtime::ReconcileResult again;
    again.requeue_after = std::chrono::milliseconds(1);
    return again;
  }

  // Status first: it records which failures were counted before their pods go.
  // A live-count-only change waits (StatusWriteWait), and so does a job's
  // first status while it says only Created (FirstStatusWait): p.status_wait.
  Ending WriteStatusIfDue(Pass& p) {
    const std::string& key = p.key;
    const Plan& plan = p.plan;
    const bool status_due = plan.status_changed || p.unwritten;
    if (status_due && p.first_status && OnlyCreated(plan.status)) {
      // A new job whose pods are being created: Created waits for the next
      // change (its pods Running, or why they are not: those conditions are
      // written at once) to go in one write, up to 4 windows when the job
      // already reads Created (the CRD's default), else one. Kept here so the
      // next plans start from it (its start time stays).
      p.status_wait = FirstStatusWait(key, p.state_defaulted);
      if (p.status_wait > std::chrono::milliseconds(0)) {
        expectations_.StatusDeferred(key, p.cached_rv, plan.status);
      }
    } else if (plan.status_changed && OnlyLiveCountsDiffer(p.job.status, plan.status)) {
      // Only how many pods are Pending moved (pods created, not yet running):
      // not in any kubectl column, and the next change (Running, Unschedulable,
      // a failure) carries it; it waits 4 windows, so it is never lost.
      p.status_wait = StatusWriteWait(key, OnlyPendingCountsDiffer(p.job.status, plan.status));
    }
    if (status_due && p.status_wait <= std::chrono::milliseconds(0)) {
      KT_RETURN_IF_ERROR(WriteStatus(key, *p.cached, p.rv, plan.status, p.tfjob.get()));
      if ((p.input.rejected_child || p.input.auth_secret_replaced || p.input.gang_unavailable) &&
          plan.status.Finished()) {
        expectations_.FailureRecorded(key);  // recorded in the status now
      }
      if ((!p.was_created || p.unwritten) && plan.status.IsTrue(api::ConditionType::kCreated)) {
        metrics_->JobCreated();
      }
      if (!p.was_finished && plan.status.Finished()) {
        if (plan.status.IsTrue(api::ConditionType::kSucceeded)) metrics_->JobSucceeded();
        if (plan.status.IsTrue(api::ConditionType::kFailed)) metrics_->JobFailed();
      }
    }
    return std::nullopt;
  }

  void RecordPlanEvents(const Pass& p) {
    for (const Event& e : p.plan.events) {
      if (e.reason == "RestartingReplica") metrics_->PodRestarted();
      recorder_->Record(p.regarding, e.type == EventType::kWarning ? "Warning" : "Normal", e.reason,
                        "Reconcile", e.message);
    }
  }

  // Creates: Secret, NetworkPolicy, ConfigMap, PodGroup, then Services and
  // Pods, in the plan's order. The first four one by one (no pod without
  // them); the Services and Pods, which depend on nothing but those, with up
  // to options_.create_parallelism calls in flight. Every result is then
  // handled in the plan's order, as if the calls had been made one by one
  // (HandleCreateResult: AlreadyExists is created, a failure is retried and
  // reported).
  // While pods of the job live, its Secret and NetworkPolicy are there but
  // for a deletion behind its back: a replacement pod's plan sends them
  // alongside the pods, so the pod does not wait for their 409s (a Secret
  // found missing still fails the job, AuthSecretReplaced; a policy found
  // missing is created, the new pod perhaps running a moment before it, as
  // the live ones already did).
  // Slow start (as the Job and ReplicaSet controllers do it): a job with no
  // live pod sends its first Service or Pod alone, and no more once a create
  // is refused, so a namespace that refuses pods (quota, Pod Security) costs
  // one create, not one per pod.
  // While the job is refused (refusal.h), creates wait for its probe time,
  // then go one by one until one is refused again; once one of the refused
  // kind goes through, the refusal is cleared and the rest go concurrently.
  Ending IssueCreates(Pass& p) {
    const std::string& key = p.key;
    const std::optional<std::chrono::milliseconds> until_probe = refusals_.UntilProbe(key);
    const bool hold_creates = p.refusal && until_probe && until_probe->count() > 0;
    static const std::vector<ChildCreate> kNone;
    p.creates = hold_creates ? &kNone : &p.plan.creates;
    const std::vector<ChildCreate>& creates = *p.creates;
    p.live_pods = HasLivePods(p.observed);
    p.parallel_from = creates.size();
    for (size_t i = 0; i < creates.size(); ++i) {
      const ChildRef::Kind k = creates[i].ref.kind;
      if (k == ChildRef::Kind::kService || k == ChildRef::Kind::kPod) {
        p.parallel_from = i;
        break;
      }
    }
    if (p.live_pods && std::all_of(creates.begin(), creates.begin() + p.parallel_from,
                                   [](const ChildCreate& first) {
                                     return first.ref.kind == ChildRef::Kind::kSecret ||
                                            first.ref.kind == ChildRef::Kind::kNetworkPolicy;
                                   })) {
      p.parallel_from = 0;
    }
    if (p.refusal) {
      p.parallel_from = creates.size();  // a probe: one by one
    } else if (!p.live_pods && p.parallel_from < creates.size()) {
      ++p.parallel_from;  // slow start: the first Service or Pod alone
    }
    p.results.assign(creates.size(), Status());
    p.issued.assign(creates.size(), 0);
    std::atomic<bool> refused_in_flight{false};
    auto issue = [&](size_t i) {
      if (refused_in_flight.load()) return;  // issue no more after a refusal
      const ChildCreate& create = creates[i];
      p.issued[i] = 1;
      expectations_.ExpectChildCreate(key, create);
      p.results[i] = client_->Create(*Info(create.ref.kind).resource, p.ns, create.object);
      metrics_->CountRequest("create", StatusCodeName(p.results[i].code()));
      if (p.results[i].ok() && create.ref.kind == ChildRef::Kind::kPod) {
        metrics_->PodCreated(p.ns + "/" + create.ref.name);
      }
      if (p.results[i].code() == StatusCode::kPermissionDenied && Refusable(create.ref.kind)) {
        refused_in_flight = true;
      }
    };
    for (size_t i = 0; i < creates.size(); ++i) {
      if (i < p.parallel_from) {
        if (p.stop) break;
        issue(i);
      } else if (i == p.parallel_from) {
        if (p.stop) break;
        IssueConcurrently(p.parallel_from, creates.size(), issue);
      }
      if (!p.issued[i]) continue;  // not sent: planned again next time
      HandleCreateResult(p, i);
    }

    if (p.refusal && !p.refused_here && !p.refusal_cleared &&
        (p.plan.creates.empty() || !p.plan.status.IsTrue(api::ConditionType::kCreateRefused))) {
      // Nothing left to create, or the job stopped (finished, suspended):
      // nothing is refused any more; the next plan drops the condition.
      refusals_.Clear(key);
      p.refusal_cleared = p.plan.status.IsTrue(api::ConditionType::kCreateRefused);
    }
    if (p.plan_again) return PlanAgain();
    return std::nullopt;
  }

  // What to do with a create's result, by the child's kind and the result's
  // code: the first row of the table that matches both handles it.
  struct CreateResultRule {
    uint32_t kinds;  // KindBits
    uint32_t codes;  // CodeBits; kOk is a create that went through
    void (Impl::*handle)(Pass&, size_t);
  };

  // The result of creates[i] (issued): a name held by someone else refuses
  // the job; a create that went through may clear the job's refusal; a failed
  // one is no longer expected; then the table's row.
  void HandleCreateResult(Pass& p, size_t i) {
    using K = ChildRef::Kind;
    using C = StatusCode;
    static constexpr uint32_t kPresent = CodeBits(C::kOk, C::kAlreadyExists);
    static constexpr uint32_t kAnyKind = ~0u, kAnyCode = ~0u;
    static constexpr std::array<CreateResultRule, 10> kRules = {{
        {KindBits(K::kSecret), kPresent, &Impl::SecretPresent},
        {KindBits(K::kConfigMap), kPresent, &Impl::ConfigMapPresent},
        {KindBits(K::kPodGroup), kPresent, &Impl::PodGroupPresent},
        {KindBits(K::kNetworkPolicy), kPresent, &Impl::NetworkPolicyPresent},
        {kAnyKind, kPresent, &Impl::Present},
        {KindBits(K::kPodGroup), CodeBits(C::kNotFound, C::kPermissionDenied),
         &Impl::GangUnavailable},
        {KindBits(K::kNetworkPolicy),
         CodeBits(C::kPermissionDenied, C::kInvalidArgument, C::kNotFound),
         &Impl::NetworkPolicyNotCreated},
        {kRefusableKinds, CodeBits(C::kPermissionDenied), &Impl::CreateRefused},
        {kAnyKind, CodeBits(C::kInvalidArgument), &Impl::CreateRejected},
        {kAnyKind, kAnyCode, &Impl::CreateFailed},
    }};
    const ChildCreate& create = (*p.creates)[i];
    const ChildKindInfo& kind = Info(create.ref.kind);
    const std::string& child = create.ref.name;
    const Status& s = p.results[i];
    const bool present = (kPresent & CodeBits(s.code())) != 0;
    if ((kind.kind == K::kPod || kind.kind == K::kService) && s.code() == C::kAlreadyExists) {
      if (auto holder = ForeignHolder(*p.c, p.ns, kind, child, p.job.metadata.uid)) {
        // Someone else's object holds the name: creating again cannot help.
        expectations_.ForgetCreate(p.key, create.ref);
        Refuse(p, kind.kind, ChildNameConflict(kind.title, child, *holder));
        return;
      }
    }
    if (present && p.refusal && !p.refused_here && refusals_.Accepted(p.key, kind.kind)) {
      // The cause went away: the rest go out now (concurrently), the
      // condition goes with the next plan.
      spdlog::info("{}: {} {} created; the job is no longer refused", p.key, kind.name, child);
      p.refusal_cleared = true;
      p.parallel_from = std::min(p.parallel_from, i + 1);
    }
    if (!present) expectations_.ForgetCreate(p.key, create.ref);
    for (const CreateResultRule& rule : kRules) {
      if ((rule.kinds & KindBits(kind.kind)) != 0 && (rule.codes & CodeBits(s.code())) != 0) {
        (this->*rule.handle)(p, i);
        return;
      }
    }
  }

  // Refuses the job for its create of a `k` (refusal.h).
  void Refuse(Pass& p, ChildRef::Kind k, CreateRefusal r) {
    p.refused_here = p.stop = true;
    spdlog::info("{}: {} ({})", p.key, r.message, r.reason);
    const std::string message = r.message;
    const Refusals::Change change = refusals_.Refused(p.key, k, std::move(r));
    if (change == Refusals::Change::kNew || change == Refusals::Change::kReasonChanged) {
      // Like the Job controller's FailedCreate, once per refusal and cause
      // (a repeat every probe would spend the job's event budget).
      recorder_->Record(p.regarding, "Warning", "FailedCreate", "Create", message);
    }
    // The condition goes into the status at once, or follows its message.
    if (change != Refusals::Change::kSame) p.plan_again = true;
  }

  // The Secret was created or already existed.
  void SecretPresent(Pass& p, size_t i) {
    const std::string& key = p.key;
    const std::string& child = (*p.creates)[i].ref.name;
    const Status& s = p.results[i];
    const std::string& uid = p.job.metadata.uid;
    expectations_.ChildExists(key, uid, ChildRef::Kind::kSecret);
    if (s.ok()) expectations_.SecretCreated(key, uid);
    if (s.code() == StatusCode::kAlreadyExists && !p.input.secret_not_ours && !p.live_pods &&
        !expectations_.CreatedSecret(key, uid)) {
      // Not known to be this job's: a same-named earlier job's Secret may
      // still be there, with another shape's host list. Plan again at once;
      // the pods read CLUSTER_CONFIG from the ConfigMap.
      spdlog::info("{}: auth Secret {} already existed; the cluster goes in the ConfigMap", key,
                   child);
      expectations_.SecretNotOurs(key);
      p.plan_again = p.stop = true;
      return;
    }
    if (s.ok() && p.live_pods) {
      // The Secret was gone although pods built with it live: they hold a key
      // the new Secret does not. Plan again at once; the planner fails the job.
      spdlog::warn("{}: auth Secret {} was missing while the job's pods ran", key, child);
      expectations_.AuthSecretReplaced(key);
      p.plan_again = p.stop = true;
    }
  }

  // An existing ConfigMap may hold the cluster of an earlier spec (reshaped
  // while suspended): replace it, once per content, before any pod reads it.
  void ConfigMapPresent(Pass& p, size_t i) {
    const ChildCreate& create = (*p.creates)[i];
    const Status ensured = EnsureConfigMap(p.key, p.ns, create.object, p.results[i].ok());
    if (ensured.ok()) return;
    if (p.first_error.ok()) p.first_error = ensured.WithContext("update " + create.ref.name);
    p.stop = true;
  }

  // An existing PodGroup may hold an earlier spec's gang: bring it up to
  // date before any pod of the new spec is scheduled against it.
  void PodGroupPresent(Pass& p, size_t i) {
    const ChildCreate& create = (*p.creates)[i];
    const Status ensured = EnsurePodGroup(p.key, p.ns, create.object, p.results[i].ok());
    if (ensured.ok()) return;
    if (p.first_error.ok()) p.first_error = ensured.WithContext("update " + create.ref.name);
    p.stop = true;
  }

  void NetworkPolicyPresent(Pass& p, size_t i) {
    expectations_.ChildExists(p.key, p.job.metadata.uid, ChildRef::Kind::kNetworkPolicy);
    if (p.results[i].ok() && p.live_pods) {
      recorder_->Record(p.regarding, "Warning", "NetworkPolicyRecreated", "Create",
                        "NetworkPolicy " + (*p.creates)[i].ref.name +
                            " was missing while the job's pods ran (deleted, or the operator "
                            "ran without --network-policy): created again");
    }
    EnsureNetworkPolicy(p, (*p.creates)[i], p.results[i].ok());
  }

  // The NetworkPolicy `create` was created (`created`) or already existed: once per
  // process, an existing one is read and, if its spec is not the plan's, the spec is
  // replaced (a JSON patch of /spec), so a job started under an older operator, whose
  // policy admitted more (every port, or every pod), gets this one's. Never holds the job
  // up: a refused read or patch leaves the policy as it is, says so in a Warning event, and
  // is tried again at the next recheck (network_policy_recheck).
  void EnsureNetworkPolicy(Pass& p, const ChildCreate& create, bool created) {
    const json& spec = create.object["spec"];
    const uint64_t hash = std::hash<std::string>{}(spec.dump()) | 1;  // never 0 (unknown)
    if (expectations_.NetworkPolicyHolds(p.key, hash, created)) return;
    auto served = client_->GetObject(kube::kNetworkPolicies, p.ns, create.ref.name);
    metrics_->CountRequest("get", StatusCodeName(served.status().code()));
    if (served.ok() && served->value("spec", json()) == spec) {
      expectations_.NetworkPolicyWritten(p.key, hash);
      return;
    }
    Status s = served.status();
    if (served.ok()) {
      const json patch = json::array({{{"op", "replace"}, {"path", "/spec"}, {"value", spec}}});
      auto patched = client_->Patch(kube::kNetworkPolicies, p.ns, create.ref.name,
                                    kube::PatchType::kJson, patch);
      metrics_->CountRequest("patch", StatusCodeName(patched.status().code()));
      s = patched.status();
    }
    if (IsNotFound(s)) return;  // deleted meanwhile: the next create makes it
    if (!s.ok()) {
      recorder_->Record(p.regarding, "Warning", "NetworkPolicyNotUpdated", "Update",
                        "cannot bring NetworkPolicy " + create.ref.name +
                            " to this operator's spec (it may admit more than the job needs): " +
                            SanitizeApiMessage(s.message()));
      return;
    }
    expectations_.NetworkPolicyWritten(p.key, hash);
    recorder_->Record(p.regarding, "Normal", "NetworkPolicyUpdated", "Update",
                      "NetworkPolicy " + create.ref.name +
                          " held another spec (written by an older operator, or edited): "
                          "replaced with this operator's");
  }

  // A Pod or Service created, or already this job's.
  void Present(Pass&, size_t) {}

  // No PodGroup API or no right to use it: gang members created without
  // their group would be scheduled one by one (or never, by a scheduler
  // that is not there). Plan again at once; the planner fails the job.
  void GangUnavailable(Pass& p, size_t i) {
    const std::string& child = (*p.creates)[i].ref.name;
    const Status& s = p.results[i];
    expectations_.GangUnavailable(
        p.key, s.code() == StatusCode::kNotFound
                   ? "cannot create PodGroup " + child +
                         ": the PodGroup API (scheduling.x-k8s.io/v1alpha1 podgroups) is not "
                         "installed; install scheduler-plugins' PodGroup CRD and its "
                         "Coscheduling scheduler, or run the job without gang scheduling"
                   : "cannot create PodGroup " + child + ": " + s.message() +
                         " (grant create and patch on scheduling.x-k8s.io podgroups: the Helm "
                         "value gangScheduling.enabled or the kustomize component "
                         "gang-scheduling)");
    p.plan_again = p.stop = true;
  }

  // No RBAC for networkpolicies, or an apiserver that does not take this policy:
  // the job runs without it (its traffic is still authenticated) and says so,
  // rather than never starting. Transient errors retry (CreateFailed), before any pod.
  void NetworkPolicyNotCreated(Pass& p, size_t i) {
    recorder_->Record(p.regarding, "Warning", "NetworkPolicyNotCreated", "Create",
                      "cannot create NetworkPolicy " + (*p.creates)[i].ref.name + ": " +
                          p.results[i].message() +
                          " (grant create on networking.k8s.io networkpolicies, or run the "
                          "operator with --network-policy=false)");
  }

  // Quota, Pod Security, a forbidden priority class, RBAC: say so, and
  // probe instead of retrying (refusal.h).
  void CreateRefused(Pass& p, size_t i) {
    const ChildRef& ref = (*p.creates)[i].ref;
    const ChildKindInfo& kind = Info(ref.kind);
    if (auto r = ClassifyRefusedCreate(kind.title, ref.name, p.results[i])) {
      Refuse(p, kind.kind, std::move(*r));
    }
  }

  // The apiserver rejects what the spec asks for: retrying cannot help.
  // Plan again at once with the rejection; the planner fails the job
  // (InvalidSpec) and cleans up like after any other failure.
  void CreateRejected(Pass& p, size_t i) {
    const ChildRef& ref = (*p.creates)[i].ref;
    const std::string kind(Info(ref.kind).name);
    const Status& s = p.results[i];
    recorder_->Record(
        p.regarding, "Warning", "FailedCreate", "Create",
        "cannot create " + kind + " " + ref.name + ": " + SanitizeApiMessage(s.message()));
    expectations_.ChildRejected(
        p.key, "the apiserver rejected " + kind + " " + ref.name + ": " + s.message());
    p.plan_again = p.stop = true;
  }

  // Transient: retried with backoff (MergeRequeues).
  void CreateFailed(Pass& p, size_t i) {
    const ChildRef& ref = (*p.creates)[i].ref;
    if (p.first_error.ok()) p.first_error = p.results[i].WithContext("create " + ref.name);
    // No pod without its Secret: a pod created first would look, once the
    // Secret is created, like one holding a key from a deleted Secret. Nor
    // without its ConfigMap.
    // Nor before its NetworkPolicy, nor a gang member before its PodGroup.
    if (ref.kind == ChildRef::Kind::kSecret || ref.kind == ChildRef::Kind::kConfigMap ||
        ref.kind == ChildRef::Kind::kNetworkPolicy || ref.kind == ChildRef::Kind::kPodGroup) {
      p.stop = true;
    }
  }

  // Deletes (foreground not needed: children have no children of their own),
  // pods stuck terminating on a lost node (options_.lost_pod_grace), and the
  // job itself once its TTL after finishing has passed (its children with it).
  void IssueDeletes(Pass& p) {
    const std::string& ns = p.ns;
    const api::TrainingJob& job = p.job;
    for (const ChildRef& ref : p.plan.deletes) {
      if (ref.kind == ChildRef::Kind::kPod) {
        auto pod = p.c->pods->store().Get(ns + "/" + ref.name);
        if (pod && pod->meta.controller && pod->meta.controller->uid == job.metadata.uid) {
          DeletingPod(p.key, pod->pod.uid);
        }
      }
      expectations_.ExpectDelete(p.key, ref);
      kube::DeleteOptions opts;
      opts.propagation_policy = "Background";
      const Status s = client_->Delete(*Info(ref.kind).resource, ns, ref.name, opts);
      metrics_->CountRequest("delete", StatusCodeName(s.code()));
      if (s.ok() || s.code() == StatusCode::kNotFound) continue;
      if (p.first_error.ok()) p.first_error = s.WithContext("delete " + ref.name);
    }

    p.lost_wait = ForceDeleteLostPods(*p.c, ns, job, p.regarding, p.now);

    if (p.plan.delete_job) {
      kube::DeleteOptions opts;
      opts.propagation_policy = "Background";
      opts.precondition_uid = job.metadata.uid;
      const Status s = client_->Delete(p.tfjob ? kTFJobs : kTrainingJobs, ns, p.name, opts);
      metrics_->CountRequest("delete", StatusCodeName(s.code()));
      if (!s.ok() && s.code() != StatusCode::kNotFound && p.first_error.ok()) p.first_error = s;
      if (s.ok()) {
        spdlog::info("deleted {} {} after ttlSecondsAfterFinished", p.regarding.kind, p.key);
      }
    }
  }

  // A transient failure retries with backoff; else the soonest of the plan's
  // requeue, Kueue's retry, a lost pod's grace, a deferred status write and a
  // refused job's probe.
  StatusOr<runtime::ReconcileResult> MergeRequeues(const Pass& p) {
    if (!p.first_error.ok()) {
      // Transient (the permanent ones were handled above): retry with backoff.
      return Status(StatusCode::kUnavailable, p.first_error.message());
    }
    runtime::ReconcileResult result;
    if (p.plan.requeue_after) result.requeue_after = *p.plan.requeue_after;
    if (p.kueue_sync.retry_after &&
        (result.requeue_after.count() == 0 || *p.kueue_sync.retry_after < result.requeue_after)) {
      result.requeue_after = *p.kueue_sync.retry_after;
    }
    if (p.lost_wait && (result.requeue_after <= std::chrono::nanoseconds(0) ||
                        *p.lost_wait < result.requeue_after)) {
      result.requeue_after = std::max(*p.lost_wait, std::chrono::milliseconds(1));
    }
    if (p.status_wait > std::chrono::milliseconds(0) &&
        (result.requeue_after <= std::chrono::nanoseconds(0) ||
         p.status_wait < result.requeue_after)) {
      result.requeue_after = p.status_wait;
    }
    // The condition leaves with the next plan; a refused job probes on time.
    std::optional<std::chrono::milliseconds> probe;
    if (p.refusal_cleared) {
      probe = std::chrono::milliseconds(1);
    } else if (auto wait = refusals_.UntilProbe(p.key)) {
      probe = std::max(*wait, std::chrono::milliseconds(1));
    }
    if (probe &&
        (result.requeue_after <= std::chrono::nanoseconds(0) || *probe < result.requeue_after)) {
      result.requeue_after = *probe;
    }
    return result;
  }

  // Calls issue(i) for every i in [begin, end), with up to
  // options_.create_parallelism calls in flight (this thread is one of them);
  // returns once all have returned. `issue` must be thread-safe across indexes.
  template <typename F>
  void IssueConcurrently(size_t begin, size_t end, F& issue) {
    const size_t n = end - begin;
    const size_t threads = std::min<size_t>(std::max(options_.create_parallelism, 1), n);
    std::atomic<size_t> next{begin};
    auto drain = [&] {
      for (size_t i = next++; i < end; i = next++) issue(i);
    };
    std::vector<std::jthread> helpers;
    helpers.reserve(threads > 0 ? threads - 1 : 0);
    for (size_t t = 1; t < threads; ++t) helpers.emplace_back(drain);
    drain();
  }  // the helpers join here

  // How long a live-count-only status change of `key` must still wait; <= 0:
  // write now. A change in Pending counts alone waits 4 windows
  // (options_.status_coalesce) after the job's last write; any other
  // (status.running, the Unschedulable message) one window after it was first
  // deferred, so the RUNNING column trails by at most one window.
  // How long a new job's first status, saying only Created, may still wait:
  // from when it was first deferred, 4 options_.status_coalesce windows if
  // `state_defaulted` (the job reads Created meanwhile, like a change of
  // Pending counts alone), else one; <= 0: write now.
  std::chrono::milliseconds FirstStatusWait(const std::string& key, bool state_defaulted) {
    if (options_.status_coalesce <= std::chrono::milliseconds(0)) return {};
    const auto now = options_.clock->Now();
    MutexLock lock(status_mu_);
    const auto since = first_deferred_.try_emplace(key, now).first->second;
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        since + (state_defaulted ? 4 : 1) * options_.status_coalesce - now);
  }

  std::chrono::milliseconds StatusWriteWait(const std::string& key, bool pending_only) {
    if (options_.status_coalesce <= std::chrono::milliseconds(0)) return {};
    const auto now = options_.clock->Now();
    MutexLock lock(status_mu_);
    auto it = last_status_write_.find(key);
    if (it == last_status_write_.end()) return {};
    auto since = pending_only ? it->second : first_deferred_.try_emplace(key, now).first->second;
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        since + (pending_only ? 4 : 1) * options_.status_coalesce - now);
  }

  // A TFJob's (`tfjob` set): v1's status, then the planner's own in the
  // annotation kTFJobStateAnnotation (v1's CRD prunes what it does not know).
  // Until both are written nothing is deleted; if the second fails, the retry
  // plans again from the state before, to the same status.
  Status WriteStatus(const std::string& key, const runtime::CompactObject& cached,
                     const std::string& rv, const api::TrainingJobStatus& status,
                     const TFJobView* tfjob = nullptr) {
    json obj = cached.Object();
    obj["metadata"]["resourceVersion"] = rv;
    obj["status"] = tfjob ? V1Status(*tfjob, status, obj.value("status", json::object()))
                          : api::StatusToJson(status);
    auto written = client_->UpdateStatus(tfjob ? kTFJobs : kTrainingJobs, cached.meta.ns, obj);
    metrics_->CountRequest("update_status", StatusCodeName(written.status().code()));
    std::string via_rv;
    if (written.ok() && tfjob) {
      // A merge patch of the annotation alone, conditional on the version the
      // status write made (a Conflict otherwise, as a PUT would get): a few
      // hundred bytes each way instead of the whole TFJob.
      via_rv = written->value("metadata", json::object()).value("resourceVersion", std::string());
      written = client_->Patch(kTFJobs, cached.meta.ns, cached.meta.name, kube::PatchType::kMerge,
                               TFJobStatePatch(via_rv, status));
      metrics_->CountRequest("patch", StatusCodeName(written.status().code()));
    }
    if (!written.ok()) {
      if (IsNotFound(written.status())) return Status::Ok();
      // A conflict means our view is stale: drop the remembered status and let
      // the rate-limited retry plan again from the cache.
      expectations_.ForgetStatus(key);
      if (IsInvalidArgument(written.status()) || IsPermissionDenied(written.status())) {
        // Refused (a 422 from the CRD's schema, a 403 from RBAC): nothing
        // else happens to the job until its status is written (status
        // first), so say so where the user looks; the reconcile error is
        // retried with backoff, as a newer plan or a fixed CRD or role may
        // be taken.
        recorder_->Record(JobReference(cached.meta.ns, cached.meta.name, cached.meta.uid),
                          "Warning", "StatusWriteFailed", "Reconcile",
                          SanitizeApiMessage(written.status().message()));
      }
      return written.status().WithContext("update status of " + key);
    }
    {
      MutexLock lock(status_mu_);
      last_status_write_[key] = options_.clock->Now();
      first_deferred_.erase(key);
    }
    const std::string to_rv =
        written->value("metadata", json::object()).value("resourceVersion", std::string());
    expectations_.StatusWritten(key, cached.meta.resource_version, to_rv, status,
                                std::move(via_rv));
    return Status::Ok();
  }

  // A job the cache holds but the API types cannot read (the CRD should have
  // stopped it): Failed/InvalidSpec, once, without a retry loop.
  StatusOr<runtime::ReconcileResult> FailUnparseable(const std::string& key,
                                                     const runtime::CompactObject& cached,
                                                     const Status& error, api::Time now) {
    auto old = api::ParseTrainingJobStatus(cached.Object().value("status", json::object()));
    api::TrainingJobStatus status = old.ok() ? *old : api::TrainingJobStatus{};
    if (status.IsTrue(api::ConditionType::kFailed)) return runtime::ReconcileResult{};
    SetFinished(status, /*succeeded=*/false, "InvalidSpec", error.message(), now);
    UpdateState(status, now);
    KT_RETURN_IF_ERROR(WriteStatus(key, cached, cached.meta.resource_version, status));
    metrics_->JobFailed();
    recorder_->Record(JobReference(cached.meta.ns, cached.meta.name, cached.meta.uid), "Warning",
                      "InvalidSpec", "Reconcile", error.message());
    return runtime::ReconcileResult{};
  }

  // A TFJob of ours that does not convert (or that kubetrain cannot run as v1
  // does): Failed with the reason, once, and a Warning event InvalidSpec.
  StatusOr<runtime::ReconcileResult> FailUnconvertibleTFJob(const std::string& key,
                                                            const runtime::CompactObject& cached,
                                                            const Status& error, api::Time now) {
    json obj = cached.Object();
    auto status = UnconvertibleStatus(obj, error.message(), now);
    if (!status) return runtime::ReconcileResult{};  // said so already
    obj["status"] = std::move(*status);
    auto written = client_->UpdateStatus(kTFJobs, cached.meta.ns, obj);
    metrics_->CountRequest("update_status", StatusCodeName(written.status().code()));
    if (!written.ok() && written.status().code() != StatusCode::kNotFound) {
      return written.status().WithContext("update status of " + key);
    }
    metrics_->JobFailed();
    spdlog::warn("{}: TFJob not run: {}", key, error.message());
    recorder_->Record(JobReference(cached.meta.ns, cached.meta.name, cached.meta.uid,
                                   /*tfjob=*/true),
                      "Warning", "InvalidSpec", "Reconcile", error.message());
    return runtime::ReconcileResult{};
  }

  // The ConfigMap `obj` was created (`created`) or already existed: make sure it
  // holds obj's data, with an unconditional update when this process has not
  // written that content yet (the operator never reads it back).
  Status EnsureConfigMap(const std::string& key, const std::string& ns, const json& obj,
                         bool created) {
    const std::string data = obj["data"].value(std::string(kClusterConfigKey), std::string());
    if (expectations_.ConfigMapHolds(key, data, created)) return Status::Ok();
    auto updated = client_->Update(kube::kConfigMaps, ns, obj);
    metrics_->CountRequest("update", StatusCodeName(updated.status().code()));
    if (!updated.ok()) return updated.status();
    expectations_.ConfigMapWritten(key, data);
    return Status::Ok();
  }

  // Workloads of job `name` in `ns` not owned by `live_uid` (the job was
  // deleted, or replaced by one of the same name) lose their finalizer once
  // the garbage collector deletes them.
  Status ReleaseOrphanWorkloads(Caches& c, const std::string& ns, const std::string& name,
                                const std::string& live_uid) {
    static const std::string kByJob = runtime::LabelIndexName(kueue::kJobNameLabel);
    for (const auto& wl : c.workloads->store().ByIndex(kByJob, name)) {
      const auto& owner = wl->meta.controller;
      if (wl->meta.ns != ns || !owner || owner->kind != api::kKind || owner->name != name ||
          owner->uid == live_uid) {
        continue;
      }
      KT_RETURN_IF_ERROR(kueue_->ReleaseOrphan(*wl));
    }
    return Status::Ok();
  }

  // Kueue's IsActive: a pod not terminated, also one being deleted (it still
  // holds its node's resources).
  static bool PodsActive(const ObservedChildren& observed) {
    for (const ObservedPod& p : observed.pods) {
      if (p.phase != PodPhase::kSucceeded && p.phase != PodPhase::kFailed) return true;
    }
    return false;
  }

  // The PodGroup `obj` was created (`created`) or already existed: make sure
  // its spec is obj's, replacing it (a JSON patch of /spec) when this process
  // has not written that spec yet.
  Status EnsurePodGroup(const std::string& key, const std::string& ns, const json& obj,
                        bool created) {
    const std::string spec = obj["spec"].dump();
    if (expectations_.PodGroupHolds(key, spec, created)) return Status::Ok();
    const json patch =
        json::array({{{"op", "replace"}, {"path", "/spec"}, {"value", obj["spec"]}}});
    auto patched = client_->Patch(kube::kPodGroups, ns, obj["metadata"].value("name", ""),
                                  kube::PatchType::kJson, patch);
    metrics_->CountRequest("patch", StatusCodeName(patched.status().code()));
    if (!patched.ok()) return patched.status();
    expectations_.PodGroupWritten(key, spec);
    return Status::Ok();
  }

  static bool Refusable(ChildRef::Kind kind) { return (kRefusableKinds & KindBits(kind)) != 0; }

  // Whose the Pod or Service `name` is, whose create answered AlreadyExists,
  // when it is not job `uid`'s; nullopt when it is, or it is gone, or it
  // cannot be read (then the create counts as done, and expectations wait for
  // it). From the caches, else (an object without the job label) one GET. An
  // object the job controls that lacks the job label counts as another's: no
  // cache would ever show it (another controller made it for the job).
  std::optional<std::string> ForeignHolder(Caches& c, const std::string& ns,
                                           const ChildKindInfo& kind, const std::string& name,
                                           const std::string& uid) {
    const std::string object_key = ns + "/" + name;
    std::optional<runtime::OwnerRef> controller;
    bool deleting = false;
    bool cached = false;
    if (kind.kind == ChildRef::Kind::kPod) {
      if (auto pod = c.pods->store().Get(object_key)) {
        cached = true;
        controller = pod->meta.controller;
        deleting = pod->pod.deletion_timestamp.has_value();
      }
    } else if (auto service = c.services->store().Get(object_key)) {
      cached = true;
      controller = service->meta.controller;
      deleting = service->deletion_timestamp.has_value();
    }
    if (!cached) {
      auto obj = client_->GetObject(*kind.resource, ns, name);
      if (!obj.ok()) return std::nullopt;
      auto meta = runtime::ParseObjectMeta(*obj);
      if (!meta.ok()) return std::nullopt;
      controller = meta->controller;
      deleting = !meta->deletion_timestamp.empty();
      if (controller && controller->uid == uid && meta->Label(kJobNameLabel) == nullptr) {
        // The job's own, but not made by kubetrain: the caches (which select on the job
        // label) never show it, so counting the create as done would wait for it for
        // ever. training-operator leaves such pods and Services when a TFJob it ran
        // half-way is taken over (docs/migrating-from-tfjob.md).
        return Holder(controller, deleting) +
               " but made by another controller: it lacks the label " + std::string(kJobNameLabel) +
               ", as training-operator's pods and Services do";
      }
    }
    if (controller && controller->uid == uid) return std::nullopt;
    return Holder(controller, deleting);
  }

  static bool HasLivePods(const ObservedChildren& observed) {
    for (const ObservedPod& p : observed.pods) {
      if (!p.deletion_timestamp && p.phase != PodPhase::kSucceeded &&
          p.phase != PodPhase::kFailed) {
        return true;
      }
    }
    return false;
  }

  // Constant after construction.
  runtime::EventRecorder* const recorder_;
  Metrics* const metrics_;
  const JobControllerOptions options_;

  // Thread-safe, each with its own lock.
  // The client, caches and queue.
  runtime::ControllerScaffold<Caches> scaffold_;
  JobClient* const client_ = scaffold_.client();
  runtime::WorkQueue& queue_ = scaffold_.queue();
  Expectations expectations_{options_.expectation_timeout,
                             [clock = options_.clock] { return clock->WallNow(); }};
  Refusals refusals_{options_.refused_probe, [clock = options_.clock] { return clock->Now(); }};
  std::unique_ptr<progress::ProgressReader> progress_;  // null when not reading progress
  std::unique_ptr<KueueIntegration> kueue_;             // null without options.kueue
  Mutex lost_mu_;
  // Per job key: pods gone while not terminal that this process did not
  // delete, until a plan saw them (RecordGone); and UIDs of pods this process
  // is deleting (DeletingPod).
  std::unordered_map<std::string, std::vector<ObservedPod>> vanished_ GUARDED_BY(lost_mu_);
  std::unordered_map<std::string, std::set<std::string>> deleted_uids_ GUARDED_BY(lost_mu_);
  // The views ReadTFJobSpec read last, of at most kTFJobViewMemo TFJobs, each
  // at the resourceVersion read; the most recent last. A TFJob is reconciled
  // for every event of each of its children, mostly at the same version and
  // close together (its pods are created, scheduled and started together),
  // and reading it afresh (parse the cached text, convert, parse and validate
  // the TrainingJob) took 13% of the operator's CPU with 500 TFJobs. Bounded:
  // one view per TFJob raised the peak RSS from 33 to 37 MiB at 500 TFJobs.
  struct TFJobViewMemo {
    std::string key, rv;
    std::shared_ptr<const TFJobView> view;
  };
  static constexpr size_t kTFJobViewMemo = 64;
  Mutex tfjob_views_mu_;
  std::vector<TFJobViewMemo> tfjob_views_ GUARDED_BY(tfjob_views_mu_);
  Mutex status_mu_;
  // When each job's status was last written (StatusWriteWait).
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> last_status_write_
      GUARDED_BY(status_mu_);
  // When a running-count change of each job was first deferred since its last
  // write (StatusWriteWait).
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> first_deferred_
      GUARDED_BY(status_mu_);
};

JobController::JobController(kube::Client* client, runtime::EventRecorder* recorder,
                             Metrics* metrics, JobControllerOptions options)
    : impl_(std::make_unique<Impl>(NewKubeJobClient(client), nullptr, recorder, metrics,
                                   std::move(options))) {}

JobController::JobController(JobClient* client, runtime::EventRecorder* recorder, Metrics* metrics,
                             JobControllerOptions options)
    : impl_(std::make_unique<Impl>(nullptr, client, recorder, metrics, std::move(options))) {}

JobController::~JobController() = default;

Status JobController::Start(std::chrono::milliseconds sync_timeout, std::stop_token stop) {
  return impl_->Start(sync_timeout, stop);
}

void JobController::Run(std::stop_token stop) {
  impl_->Run(stop);
}

bool JobController::Ready() const {
  return impl_->Ready();
}

bool JobController::Idle() const {
  return impl_->Idle();
}

}  // namespace kubetrain::controller
