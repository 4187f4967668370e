#include "operator/controller/expectations.h"

#include <algorithm>

namespace kubetrain::controller {

using planner::ChildCreate;
using planner::ChildRef;
using planner::ClusterConfigInSecret;
using planner::kSpecHashAnnotation;
using planner::LegacyAuthSecret;
using planner::ObservedChildren;
using planner::ObservedPod;
using planner::PlanInput;
using planner::PodPhase;

void Expectations::Forget(const std::string& key) {
  MutexLock lock(mu_);
  jobs_.erase(key);
}

void Expectations::ExpectCreate(const std::string& key, const ChildRef& ref) {
  const Create e{ref.kind, ref.role.value_or(api::ReplicaType::kWorker), ref.index, clock_(), "",
                 false};
  MutexLock lock(mu_);
  jobs_[key].creates[{ref.kind, ref.name}] = e;
}

void Expectations::ExpectChildCreate(const std::string& key, const ChildCreate& create) {
  const ChildRef& ref = create.ref;
  Create e{ref.kind, ref.role.value_or(api::ReplicaType::kWorker), ref.index, clock_(), "", false};
  if (ref.kind == ChildRef::Kind::kPod) {
    const nlohmann::json& meta = create.object.value("metadata", nlohmann::json::object());
    const nlohmann::json& annotations = meta.value("annotations", nlohmann::json::object());
    e.spec_hash = annotations.value(std::string(kSpecHashAnnotation), std::string());
    e.cluster_config_in_secret = ClusterConfigInSecret(create.object);
    e.legacy_auth_secret = LegacyAuthSecret(create.object);
  }
  MutexLock lock(mu_);
  jobs_[key].creates[{ref.kind, ref.name}] = std::move(e);
}

void Expectations::ForgetCreate(const std::string& key, const ChildRef& ref) {
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it != jobs_.end()) it->second.creates.erase({ref.kind, ref.name});
}

void Expectations::PodGone(const std::string& key, const std::string& name) {
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it != jobs_.end()) it->second.creates.erase({ChildRef::Kind::kPod, name});
}

void Expectations::ExpectDelete(const std::string& key, const ChildRef& ref) {
  const Clock::time_point at = clock_();
  MutexLock lock(mu_);
  jobs_[key].deletes[{ref.kind, ref.name}] = at;
}

void Expectations::Adjust(const std::string& key, ObservedChildren& observed, api::Time now) {
  const Clock::time_point wall = clock_();
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  const auto expired = [&](Clock::time_point at) { return wall - at > timeout_; };
  for (auto e = job.creates.begin(); e != job.creates.end();) {
    const std::string& name = e->first.second;
    const Create& create = e->second;
    bool seen = false;
    switch (create.kind) {
      case ChildRef::Kind::kPod:
        for (const auto& p : observed.pods) seen = seen || p.name == name;
        if (!seen && !expired(create.at)) {
          ObservedPod pending;
          pending.name = name;
          pending.role = create.role;
          pending.index = create.index;
          pending.phase = PodPhase::kPending;
          pending.creation_timestamp = now;
          pending.spec_hash = create.spec_hash;
          pending.cluster_config_in_secret = create.cluster_config_in_secret;
          pending.legacy_auth_secret = create.legacy_auth_secret;
          observed.pods.push_back(std::move(pending));
        }
        break;
      case ChildRef::Kind::kService:
        for (const auto& s : observed.services) seen = seen || s.name == name;
        if (!seen && !expired(create.at)) observed.services.push_back({name, std::nullopt});
        break;
      case ChildRef::Kind::kSecret:
      case ChildRef::Kind::kConfigMap:
      case ChildRef::Kind::kNetworkPolicy:
      case ChildRef::Kind::kPodGroup:
        seen = true;  // created or AlreadyExists: nothing to wait for
        break;
    }
    e = (seen || expired(create.at)) ? job.creates.erase(e) : std::next(e);
  }
  for (auto d = job.deletes.begin(); d != job.deletes.end();) {
    const auto& [ref, at] = *d;
    bool pending = false;
    if (ref.first == ChildRef::Kind::kPod) {
      for (auto& p : observed.pods) {
        if (p.name == ref.second && !p.deletion_timestamp) {
          p.deletion_timestamp = now;  // deleted, the cache just does not know yet
          pending = true;
        }
      }
    } else if (ref.first == ChildRef::Kind::kService) {
      for (auto& s : observed.services) {
        if (s.name == ref.second && !s.deletion_timestamp) {
          s.deletion_timestamp = now;
          pending = true;
        }
      }
    }
    d = (!pending || expired(at)) ? job.deletes.erase(d) : std::next(d);
  }
}

void Expectations::StatusWritten(const std::string& key, std::string from_rv, std::string to_rv,
                                 api::TrainingJobStatus status, std::string via_rv) {
  MutexLock lock(mu_);
  std::optional<StatusWrite>& slot = jobs_[key].status;
  std::vector<std::string> earlier;
  if (slot && !slot->unwritten) {
    std::vector<std::string> chain = std::move(slot->earlier_rvs);
    for (std::string* rv : {&slot->from_rv, &slot->via_rv, &slot->to_rv}) {
      if (!rv->empty()) chain.push_back(std::move(*rv));
    }
    // Over a version of the previous chain (the cache lags behind this
    // controller's own writes): the cache may still show any of it.
    if (std::find(chain.begin(), chain.end(), from_rv) != chain.end()) earlier = std::move(chain);
    constexpr size_t kMaxChain = 16;  // bounded: older versions are long gone from the cache
    if (earlier.size() > kMaxChain) earlier.erase(earlier.begin(), earlier.end() - kMaxChain);
  }
  slot = StatusWrite{std::move(from_rv), std::move(to_rv),  std::move(status), false,
                     std::move(via_rv),  std::move(earlier)};
}

void Expectations::StatusDeferred(const std::string& key, std::string rv,
                                  api::TrainingJobStatus status) {
  MutexLock lock(mu_);
  std::string to_rv = rv;
  jobs_[key].status = StatusWrite{std::move(rv), std::move(to_rv), std::move(status), true, {}, {}};
}

bool Expectations::HalfWritten(const std::string& key, const std::string& cached_rv) {
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  return it != jobs_.end() && it->second.status && !it->second.status->via_rv.empty() &&
         it->second.status->via_rv == cached_rv;
}

void Expectations::ForgetStatus(const std::string& key) {
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it != jobs_.end()) it->second.status.reset();
}

std::optional<Expectations::WrittenStatus> Expectations::LastStatus(const std::string& key,
                                                                    const std::string& cached_rv) {
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end() || !it->second.status) return std::nullopt;
  const StatusWrite& w = *it->second.status;
  const bool stale =
      w.from_rv == cached_rv || (!w.via_rv.empty() && w.via_rv == cached_rv) ||
      std::find(w.earlier_rvs.begin(), w.earlier_rvs.end(), cached_rv) != w.earlier_rvs.end();
  if (!stale) {
    it->second.status.reset();
    return std::nullopt;
  }
  return WrittenStatus{it->second.status->status, it->second.status->to_rv,
                       it->second.status->unwritten};
}

void Expectations::ChildRejected(const std::string& key, std::string message) {
  MutexLock lock(mu_);
  jobs_[key].rejected = std::move(message);
}

void Expectations::AuthSecretReplaced(const std::string& key) {
  MutexLock lock(mu_);
  jobs_[key].auth_secret_replaced = true;
}

void Expectations::SecretCreated(const std::string& key, const std::string& uid) {
  MutexLock lock(mu_);
  jobs_[key].secret_created_uid = uid;
}

bool Expectations::CreatedSecret(const std::string& key, const std::string& uid) {
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  return it != jobs_.end() && !uid.empty() && it->second.secret_created_uid == uid;
}

void Expectations::SecretNotOurs(const std::string& key) {
  MutexLock lock(mu_);
  jobs_[key].secret_not_ours = true;
}

void Expectations::ChildExists(const std::string& key, const std::string& uid,
                               ChildRef::Kind kind) {
  const Clock::time_point at = clock_();
  MutexLock lock(mu_);
  Job& job = jobs_[key];
  if (job.known_uid != uid) job.known.clear();
  job.known_uid = uid;
  job.known[kind] = at;
}

bool Expectations::KnowsChild(const std::string& key, const std::string& uid, ChildRef::Kind kind,
                              std::chrono::seconds max_age) {
  const Clock::time_point now = clock_();
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end() || uid.empty() || it->second.known_uid != uid) return false;
  auto seen = it->second.known.find(kind);
  return seen != it->second.known.end() && now - seen->second < max_age;
}

void Expectations::GangUnavailable(const std::string& key, std::string message) {
  MutexLock lock(mu_);
  jobs_[key].gang_unavailable = std::move(message);
}

void Expectations::FillPlanInput(const std::string& key, PlanInput& input) {
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return;
  input.rejected_child = it->second.rejected;
  input.auth_secret_replaced = it->second.auth_secret_replaced;
  input.secret_not_ours = it->second.secret_not_ours;
  input.gang_unavailable = it->second.gang_unavailable;
}

void Expectations::FailureRecorded(const std::string& key) {
  MutexLock lock(mu_);
  Job& job = jobs_[key];
  job.rejected.reset();
  job.auth_secret_replaced = false;
  job.gang_unavailable.reset();
}

bool Expectations::ConfigMapHolds(const std::string& key, const std::string& data, bool created) {
  MutexLock lock(mu_);
  std::string& known = jobs_[key].config_map_data;
  if (created) known = data;
  return known == data;
}

void Expectations::ConfigMapWritten(const std::string& key, std::string data) {
  MutexLock lock(mu_);
  jobs_[key].config_map_data = std::move(data);
}

}  // namespace kubetrain::controller

namespace kubetrain::controller {

bool Expectations::PodGroupHolds(const std::string& key, const std::string& spec, bool created) {
  MutexLock lock(mu_);
  std::string& known = jobs_[key].pod_group_spec;
  if (created) known = spec;
  return known == spec;
}

void Expectations::PodGroupWritten(const std::string& key, std::string spec) {
  MutexLock lock(mu_);
  jobs_[key].pod_group_spec = std::move(spec);
}

bool Expectations::NetworkPolicyHolds(const std::string& key, uint64_t spec_hash, bool created) {
  MutexLock lock(mu_);
  uint64_t& known = jobs_[key].network_policy_spec;
  if (created) known = spec_hash;
  return known == spec_hash;
}

void Expectations::NetworkPolicyWritten(const std::string& key, uint64_t spec_hash) {
  MutexLock lock(mu_);
  jobs_[key].network_policy_spec = spec_hash;
}

}  // namespace kubetrain::controller
