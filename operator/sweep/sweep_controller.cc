#include "operator/sweep/sweep_controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "common/mutex.h"
#include "operator/api/json.h"
#include "operator/api/sweep.h"
#include "operator/runtime/controller.h"
#include "operator/runtime/informer.h"
#include "operator/runtime/object.h"
#include "operator/runtime/store.h"
#include "operator/runtime/workqueue.h"
#include "operator/sweep/planner.h"

namespace kubetrain::sweep {
namespace {

using json = nlohmann::json;

// Compact cache entry of a trial TrainingJob: what the planner reads.
struct CachedTrial {
  runtime::ObjectMeta meta;
  ObservedTrial trial;
};

StatusOr<CachedTrial> ToCachedTrial(const json& obj) {
  auto meta = runtime::ParseObjectMeta(obj);
  if (!meta.ok()) return meta.status();
  CachedTrial out{std::move(*meta), {}};
  out.trial.name = out.meta.name;
  const std::string* index = out.meta.Label(kTrialIndexLabel);
  out.trial.index = -1;
  if (index != nullptr) {
    try {
      out.trial.index = std::stoi(*index);
    } catch (const std::exception&) {
      return InvalidArgument("trial " + out.meta.name + ": bad label " +
                             std::string(kTrialIndexLabel) + "=" + *index);
    }
  }
  out.trial.deleting = !out.meta.deletion_timestamp.empty();
  const json spec = obj.value("spec", json::object());
  out.trial.suspended = spec.value("runPolicy", json::object()).value("suspend", false) == true;
  auto status = api::ParseTrainingJobStatus(obj.value("status", json::object()));
  if (status.ok()) out.trial.status = std::move(*status);
  return out;
}

}  // namespace

class SweepController::Impl {
 public:
  Impl(std::unique_ptr<runtime::ApiClient> owned, runtime::ApiClient* client,
       runtime::EventRecorder* recorder, controller::Metrics* metrics,
       SweepControllerOptions options)
      : recorder_(recorder),
        metrics_(metrics),
        options_(std::move(options)),
        scaffold_(std::move(owned), client,
                  runtime::WorkQueueOptions{.name = "trainingsweeps", .clock = options_.clock}) {
    scaffold_.BuildCaches(options_.namespaces, [this](const std::string& ns) {
      auto c = std::make_unique<Caches>();
      c->sweeps = c->Add<runtime::GenericObject>(
          "trainingsweeps", client_->ListWatch(kTrainingSweeps, ns, "", nullptr),
          runtime::ToGenericObject);
      c->trials = c->Add<CachedTrial>(
          "trials", client_->ListWatch(kTrainingJobs, ns, std::string(kSweepNameLabel), nullptr),
          ToCachedTrial);
      c->sweeps->AddHandlers(scaffold_.KeyHandlers<runtime::GenericObject>(
          [this](const std::string& key) { Forget(key); }));
      auto enqueue_owner = [this](const std::shared_ptr<const CachedTrial>& t) {
        const auto& owner = t->meta.controller;
        if (owner && owner->kind == api::kSweepKind) queue_.Add(t->meta.ns + "/" + owner->name);
      };
      c->trials->AddHandlers({
          .on_add = enqueue_owner,
          .on_update = [enqueue_owner](const auto&, const auto& t) { enqueue_owner(t); },
          .on_delete = [enqueue_owner](const auto& t, bool) { enqueue_owner(t); },
      });
      return c;
    });
  }

  ~Impl() { scaffold_.Stop(); }

  void Start() { scaffold_.Start(); }

  void Run(std::stop_token stop) {
    // Workers start once every cache has synced: a sweep reconciled before its
    // trials' cache is only requeued a second later on the controller's clock
    // (a test's fake clock may never get there), and its keys wait queued.
    constexpr std::chrono::minutes kSyncWarning{1};
    while (!stop.stop_requested()) {
      const Status synced = scaffold_.WaitForSync(std::chrono::steady_clock::now() + kSyncWarning,
                                                  kSyncWarning, stop);
      if (synced.ok()) break;
      if (!stop.stop_requested()) spdlog::warn("sweep controller: {}", synced.ToString());
    }
    scaffold_.Run(stop, options_.workers, [this](const std::string& key) {
      auto result = Reconcile(key);
      if (!result.ok()) {
        metrics_->ReconcileError();
        spdlog::warn("reconcile sweep {}: {}", key, result.status().ToString());
      }
      return result;
    });
  }

  bool Synced() const { return scaffold_.Synced(); }

  bool Idle() const { return scaffold_.Idle(); }

 private:
  // One namespace's informers.
  struct Caches : runtime::InformerSet {
    runtime::Informer<runtime::GenericObject>* sweeps = nullptr;
    runtime::Informer<CachedTrial>* trials = nullptr;
  };
  // The last status written: while the cache still shows `from_rv` or one of
  // `earlier_rvs` (this controller's earlier writes of the same chain, which
  // a lagging cache may still show), the sweep's status is `status` at
  // resourceVersion `to_rv`.
  struct StatusWrite {
    std::string from_rv;
    std::string to_rv;
    api::TrainingSweepStatus status;
    std::vector<std::string> earlier_rvs;
  };

  void Forget(const std::string& key) {
    MutexLock lock(mu_);
    written_.erase(key);
    created_.erase(key);
  }

  // Whether this process created `trial` less than kCreateExpiry ago. The
  // planner asks again for a Pending trial until the trial cache shows it;
  // within that window the create is known done. Entries older than the
  // window are dropped (and the create is repeated: idempotent by name).
  bool RecentlyCreated(const std::string& key, const std::string& trial) {
    static constexpr std::chrono::seconds kCreateExpiry{60};
    MutexLock lock(mu_);
    auto it = created_.find(key);
    if (it == created_.end()) return false;
    const auto now = options_.clock->Now();
    std::erase_if(it->second, [&](const auto& kv) { return now - kv.second > kCreateExpiry; });
    return it->second.contains(trial);
  }

  StatusOr<runtime::ReconcileResult> Reconcile(const std::string& key) {
    auto [ns, name] = runtime::SplitKey(key);
    Caches* c = scaffold_.CachesFor(ns);
    if (c == nullptr) return runtime::ReconcileResult{};
    if (!c->trials->HasSynced()) {
      runtime::ReconcileResult later;
      later.requeue_after = std::chrono::seconds(1);
      return later;
    }
    auto cached = c->sweeps->store().Get(key);
    if (!cached) {
      Forget(key);
      return runtime::ReconcileResult{};  // the garbage collector takes the trials
    }
    auto parsed = api::ParseTrainingSweep(cached->object);
    api::TrainingSweep sweep;
    std::string parse_error;
    if (parsed.ok()) {
      sweep = std::move(*parsed);
    } else {
      // The CRD should have stopped it: fail the sweep once, with the reason.
      parse_error = parsed.status().message();
      auto status = api::ParseTrainingSweepStatus(cached->object.value("status", json::object()));
      if (status.ok()) sweep.status = std::move(*status);
      if (sweep.status.Finished()) return runtime::ReconcileResult{};
    }
    if (!cached->meta.deletion_timestamp.empty()) return runtime::ReconcileResult{};
    std::string rv = cached->meta.resource_version;
    {
      MutexLock lock(mu_);
      auto it = written_.find(key);
      if (it != written_.end()) {
        const auto& earlier = it->second.earlier_rvs;
        if (it->second.from_rv == rv ||
            std::find(earlier.begin(), earlier.end(), rv) != earlier.end()) {
          sweep.status = it->second.status;
          rv = it->second.to_rv;
        } else {
          written_.erase(it);
        }
      }
    }
    const api::Time now = api::Now(*options_.clock);
    SweepPlan plan;
    if (!parse_error.empty()) {
      plan.status = sweep.status;
      plan.status.state = "Failed";
      plan.status.conditions.push_back(
          {api::ConditionType::kFailed, true, "InvalidSpec", parse_error, now});
      api::SetSummaryConditions(plan.status.conditions, now);
      plan.status_changed = true;
      plan.events.push_back({true, "InvalidSpec", parse_error});
    } else {
      std::vector<ObservedTrial> trials;
      const std::string owner = runtime::OwnerIndexValue(ns, sweep.metadata.uid);
      for (const auto& t : c->trials->store().ByIndex(runtime::kOwnerUidIndex, owner)) {
        trials.push_back(t->trial);
      }
      plan = PlanSweep(sweep, trials, now);
    }

    // 1. Status first: the rows count the trials about to be created.
    const runtime::ObjectReference regarding{
        std::string(api::kApiVersion), std::string(api::kSweepKind), ns, name, cached->meta.uid};
    if (plan.status_changed) {
      Status written = WriteStatus(key, *cached, rv, plan.status);
      // A refused write (a 422: too large, invalid; a 403) stops the sweep until it is taken:
      // say why where the user looks, not only in the operator's log. Every error is retried
      // with backoff (a newer plan, a fixed CRD or role may be taken).
      if (IsInvalidArgument(written) || IsPermissionDenied(written)) {
        recorder_->Record(regarding, "Warning", "StatusWriteFailed", "Reconcile",
                          api::BoundText(written.message(), 1024));
      }
      KT_RETURN_IF_ERROR(written);
    }
    for (const SweepEvent& e : plan.events) {
      recorder_->Record(regarding, e.warning ? "Warning" : "Normal", e.reason, "Reconcile",
                        e.message);
    }

    // 2. Creates, owned by the sweep.
    Status first_error;
    for (const api::TrainingJob& trial : plan.creates) {
      if (RecentlyCreated(key, trial.metadata.name)) continue;  // the cache lags; no repeat
      json obj = api::ToJson(trial);
      obj["metadata"]["ownerReferences"] = json::array({{{"apiVersion", api::kApiVersion},
                                                         {"kind", api::kSweepKind},
                                                         {"name", name},
                                                         {"uid", cached->meta.uid},
                                                         {"controller", true},
                                                         {"blockOwnerDeletion", true}}});
      const Status created = client_->Create(kTrainingJobs, ns, obj);
      metrics_->CountRequest("create", StatusCodeName(created.code()));
      if (created.ok() || IsAlreadyExists(created)) {
        MutexLock lock(mu_);
        created_[key][trial.metadata.name] = options_.clock->Now();
        continue;
      }
      if (first_error.ok()) first_error = created.WithContext("create " + trial.metadata.name);
    }
    // 3. Suspend or resume running trials with the sweep.
    for (const auto& [trial, suspend] : plan.set_suspend) {
      const json patch = {{"spec", {{"runPolicy", {{"suspend", suspend}}}}}};
      auto patched = client_->Patch(kTrainingJobs, ns, trial, kube::PatchType::kMerge, patch);
      metrics_->CountRequest("patch", StatusCodeName(patched.status().code()));
      if (patched.ok() || IsNotFound(patched.status())) continue;
      if (first_error.ok()) first_error = patched.status().WithContext("suspend " + trial);
    }
    // 4. Stop trials (goal reached, too many failures, sweep finished).
    for (const std::string& trial : plan.deletes) {
      kube::DeleteOptions opts;
      opts.propagation_policy = "Background";
      const Status s = client_->Delete(kTrainingJobs, ns, trial, opts);
      metrics_->CountRequest("delete", StatusCodeName(s.code()));
      if (s.ok() || IsNotFound(s)) continue;
      if (first_error.ok()) first_error = s.WithContext("delete " + trial);
    }
    if (!first_error.ok()) return Status(StatusCode::kUnavailable, first_error.message());
    runtime::ReconcileResult result;
    if (plan.requeue_after) result.requeue_after = *plan.requeue_after;
    return result;
  }

  Status WriteStatus(const std::string& key, const runtime::GenericObject& cached,
                     const std::string& rv, const api::TrainingSweepStatus& status) {
    json obj = cached.object;
    obj["metadata"]["resourceVersion"] = rv;
    obj["status"] = api::SweepStatusToJson(status);
    auto written = client_->UpdateStatus(kTrainingSweeps, cached.meta.ns, obj);
    metrics_->CountRequest("update_status", StatusCodeName(written.status().code()));
    if (!written.ok()) {
      MutexLock lock(mu_);
      written_.erase(key);
      if (IsNotFound(written.status())) return written.status();
      return written.status().WithContext("update status of sweep " + key);
    }
    const std::string to_rv =
        written->value("metadata", json::object()).value("resourceVersion", std::string());
    MutexLock lock(mu_);
    std::vector<std::string> earlier;
    if (auto it = written_.find(key); it != written_.end()) {
      std::vector<std::string> chain = std::move(it->second.earlier_rvs);
      chain.push_back(std::move(it->second.from_rv));
      chain.push_back(std::move(it->second.to_rv));
      // Written over a version of the previous chain (the cache lags behind
      // this controller's own writes): the cache may still show any of it.
      if (std::find(chain.begin(), chain.end(), cached.meta.resource_version) != chain.end()) {
        earlier = std::move(chain);
      }
      constexpr size_t kMaxChain = 16;  // bounded: older versions are long gone from the cache
      if (earlier.size() > kMaxChain) earlier.erase(earlier.begin(), earlier.end() - kMaxChain);
    }
    written_[key] = StatusWrite{cached.meta.resource_version, to_rv, status, std::move(earlier)};
    return Status::Ok();
  }

  // Constant after construction.
  runtime::EventRecorder* const recorder_;
  controller::Metrics* const metrics_;
  const SweepControllerOptions options_;
  // The client, caches and queue; thread-safe once built.
  runtime::ControllerScaffold<Caches> scaffold_;
  runtime::ApiClient* const client_ = scaffold_.client();
  runtime::WorkQueue& queue_ = scaffold_.queue();

  Mutex mu_;
  std::map<std::string, StatusWrite> written_ GUARDED_BY(mu_);
  // Trials created per sweep key, by name.
  std::map<std::string, std::map<std::string, Clock::TimePoint>> created_ GUARDED_BY(mu_);
};

SweepController::SweepController(kube::Client* client, runtime::EventRecorder* recorder,
                                 controller::Metrics* metrics, SweepControllerOptions options)
    : impl_(std::make_unique<Impl>(runtime::NewKubeApiClient(client), nullptr, recorder, metrics,
                                   std::move(options))) {}
SweepController::SweepController(runtime::ApiClient* client, runtime::EventRecorder* recorder,
                                 controller::Metrics* metrics, SweepControllerOptions options)
    : impl_(std::make_unique<Impl>(nullptr, client, recorder, metrics, std::move(options))) {}
SweepController::~SweepController() = default;
void SweepController::Start() {
  impl_->Start();
}
void SweepController::Run(std::stop_token stop) {
  impl_->Run(stop);
}
bool SweepController::Synced() const {
  return impl_->Synced();
}
bool SweepController::Idle() const {
  return impl_->Idle();
}

}  // namespace kubetrain::sweep
