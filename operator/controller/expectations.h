// Expectations: what JobController wrote that its caches have not shown yet,
// per job key ("ns/name"), so that a lagging cache never makes it plan twice.
//
// Flow: the executor records each create, delete and status write as it
// issues it; the next reconcile of that job reads the caches, then Adjust()
// corrects what it observed (a created pod not yet seen is Pending, a deleted
// one is being deleted) and LastStatus() replaces a status older than the one
// written. Guarantees: no duplicate pod for a replica while a create is
// unseen; a counted failure is never counted again from a stale status.
// Assumptions: an entry not seen within `timeout` was lost (the write failed
// after all, or the object went away) and is dropped, so the job is planned
// from the caches again.
//
// Also kept per job: an apiserver rejection of a child (422), an auth Secret
// replaced under live pods and a PodGroup that cannot be created, until the
// planner has recorded them in the status; the ConfigMap content and PodGroup
// spec this process knows are written; and when it last saw a child it does
// not watch (the NetworkPolicy) exist.
//
// Thread-safe: every method takes the object's own lock.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "common/mutex.h"
#include "operator/api/types.h"
#include "operator/planner/planner.h"

namespace kubetrain::controller {

class Expectations {
 public:
  using Clock = std::chrono::system_clock;

  // `clock` is read for when an entry was recorded and whether it expired.
  explicit Expectations(std::chrono::seconds timeout,
                        std::function<Clock::time_point()> clock = &Clock::now)
      : timeout_(timeout), clock_(std::move(clock)) {}

  // Forgets everything about a job (it was deleted).
  void Forget(const std::string& key);

  void ExpectCreate(const std::string& key, const planner::ChildRef& ref);
  // The same, and a pod not yet seen is observed with the object's spec hash
  // and CLUSTER_CONFIG source (what ClusterConfigInSecret reads).
  void ExpectChildCreate(const std::string& key, const planner::ChildCreate& create);
  // The create failed: nothing to wait for.
  void ForgetCreate(const std::string& key, const planner::ChildRef& ref);
  // The cache saw pod `name` deleted: a create of it is no longer awaited
  // (it went before a reconcile saw it; without this, its replacement would
  // wait for the timeout). At worst the pod is created again and the create
  // answers AlreadyExists.
  void PodGone(const std::string& key, const std::string& name);
  void ExpectDelete(const std::string& key, const planner::ChildRef& ref);
  // Corrects `observed` (from the caches) for the creates and deletes not yet
  // seen: a pod or service created is added (a pod as Pending, created `now`),
  // one deleted gets deletionTimestamp `now`. Drops the entries the caches
  // show and the expired ones.
  void Adjust(const std::string& key, planner::ObservedChildren& observed, api::Time now);

  // A status written: resourceVersion `from_rv` (what the cache showed) became `to_rv`,
  // through `via_rv` when the write took two requests (a TFJob's status, then
  // its annotation: the cache may show the first; "": one request). When
  // `from_rv` is a version of the previous write's chain (the cache lagged
  // and the write went over that write's to_rv), the chain grows: LastStatus
  // keeps answering while the cache shows any version of it.
  void StatusWritten(const std::string& key, std::string from_rv, std::string to_rv,
                     api::TrainingJobStatus status, std::string via_rv = "");
  // A status planned over resourceVersion `rv` and not written yet (the
  // job's first status, waiting to go in one write with the next): the next
  // plans start from it, so its times (startTime, the Created condition's)
  // stay those of the first plan.
  void StatusDeferred(const std::string& key, std::string rv, api::TrainingJobStatus status);
  // Whether the cache shows `cached_rv`, the first half of a two-request
  // status write (StatusWritten's via_rv) whose second half succeeded: its
  // watch event is on the way and wakes the job again.
  bool HalfWritten(const std::string& key, const std::string& cached_rv);
  // A status write failed (conflict): plan from the cache again.
  void ForgetStatus(const std::string& key);
  struct WrittenStatus {
    api::TrainingJobStatus status;
    std::string resource_version;
    bool unwritten = false;  // StatusDeferred: still to be written
  };
  // The status this controller wrote (or deferred) last, while the cache still
  // shows `cached_rv` (the version it was written over); once the cache has
  // moved on, nothing (and the entry is dropped).
  std::optional<WrittenStatus> LastStatus(const std::string& key, const std::string& cached_rv);

  // The apiserver rejected a child as invalid, with this message.
  void ChildRejected(const std::string& key, std::string message);
  // The auth Secret had to be created while pods built with an earlier one lived.
  void AuthSecretReplaced(const std::string& key);
  // This process created the auth Secret of job `uid`.
  void SecretCreated(const std::string& key, const std::string& uid);
  bool CreatedSecret(const std::string& key, const std::string& uid);
  // The job's Secret was there before it and may hold another job's host list
  // (PlanInput::secret_not_ours, until the job is forgotten).
  void SecretNotOurs(const std::string& key);
  // This process saw the job's child of `kind` exist for job `uid` (it created
  // it, or the create answered AlreadyExists), now.
  void ChildExists(const std::string& key, const std::string& uid, planner::ChildRef::Kind kind);
  // Whether ChildExists was recorded for `uid` and `kind` within `max_age`.
  bool KnowsChild(const std::string& key, const std::string& uid, planner::ChildRef::Kind kind,
                  std::chrono::seconds max_age);
  // The job's PodGroup cannot be created (no PodGroup API, no RBAC), with why.
  void GangUnavailable(const std::string& key, std::string message);
  // Sets input.rejected_child, input.auth_secret_replaced,
  // input.secret_not_ours and input.gang_unavailable from the above.
  void FillPlanInput(const std::string& key, planner::PlanInput& input);
  // The status recording them is written: forget them.
  void FailureRecorded(const std::string& key);

  // Whether this process knows the job's ConfigMap holds `data`; `created`:
  // it just created it with `data`.
  bool ConfigMapHolds(const std::string& key, const std::string& data, bool created);
  void ConfigMapWritten(const std::string& key, std::string data);
  // The same for the job's PodGroup and its spec (compact JSON).
  bool PodGroupHolds(const std::string& key, const std::string& spec, bool created);
  void PodGroupWritten(const std::string& key, std::string spec);
  // The same for the job's NetworkPolicy, by a hash of its spec (compact JSON): a policy
  // an older operator wrote is replaced once per process.
  bool NetworkPolicyHolds(const std::string& key, uint64_t spec_hash, bool created);
  void NetworkPolicyWritten(const std::string& key, uint64_t spec_hash);

 private:
  struct Create {
    planner::ChildRef::Kind kind;
    api::ReplicaType role = api::ReplicaType::kWorker;
    int32_t index = 0;
    Clock::time_point at;
    std::string spec_hash;  // a pod's, when known
    bool cluster_config_in_secret = false;
    bool legacy_auth_secret = false;
  };
  struct StatusWrite {
    std::string from_rv;
    std::string to_rv;
    api::TrainingJobStatus status;
    bool unwritten = false;
    std::string via_rv;  // also stale (StatusWritten)
    // This controller's earlier writes in the same chain (each written over
    // the one before, from_rv first): the cache may still show any of them,
    // and then `status` at to_rv is still the newest.
    std::vector<std::string> earlier_rvs;
  };
  struct Job {
    // By kind and name: a replica's Pod and Service share a name.
    std::map<std::pair<planner::ChildRef::Kind, std::string>, Create> creates;
    std::map<std::pair<planner::ChildRef::Kind, std::string>, Clock::time_point> deletes;
    std::optional<StatusWrite> status;
    std::optional<std::string> rejected;
    bool auth_secret_replaced = false;
    std::string secret_created_uid;  // the job whose Secret this process created
    bool secret_not_ours = false;
    std::optional<std::string> gang_unavailable;
    // The cluster JSON the job's ConfigMap is known to hold (written or
    // created by this process); empty: unknown, replace it when it exists.
    std::string config_map_data;
    std::string pod_group_spec;        // likewise for the PodGroup's spec
    uint64_t network_policy_spec = 0;  // and the NetworkPolicy's, hashed (0: unknown)
    // ChildExists: the job (UID) and when each kind was last seen to exist.
    std::string known_uid;
    std::map<planner::ChildRef::Kind, Clock::time_point> known;
  };

  // Constant after construction.
  const std::chrono::seconds timeout_;
  const std::function<Clock::time_point()> clock_;

  Mutex mu_;
  std::map<std::string, Job> jobs_ GUARDED_BY(mu_);
};

}  // namespace kubetrain::controller
