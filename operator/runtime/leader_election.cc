#include "operator/runtime/leader_election.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <random>
#include <thread>

#include "operator/runtime/shutdown.h"

namespace kubetrain::runtime {
namespace {

using json = nlohmann::json;

}  // namespace

std::string MicroTimeNow() {
  auto now = std::chrono::system_clock::now();
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof(buf) - n, ".%06lldZ", static_cast<long long>(us % 1'000'000));
  return buf;
}

namespace {

// An empty identity would make every contender see the lease as free (split
// brain), so a missing one becomes "<hostname>_<random>".
LeaderElectionConfig WithIdentity(LeaderElectionConfig c) {
  if (!c.identity.empty()) return c;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "kubetrain");
  std::mt19937_64 rng(std::random_device{}());
  char suffix[17];
  std::snprintf(suffix, sizeof(suffix), "%016llx", static_cast<unsigned long long>(rng()));
  c.identity = std::string(host) + "_" + suffix;
  return c;
}

}  // namespace

LeaderElector::LeaderElector(kube::Client* client, LeaderElectionConfig config)
    : client_(client), config_(WithIdentity(std::move(config))) {}

bool LeaderElector::IsLeader() const {
  std::lock_guard lock(mu_);
  return leader_;
}

LeaderElector::Attempt LeaderElector::TryAcquireOrRenew(Status* error) {
  // A malformed Lease from the server must not take the process down.
  try {
    return TryAcquireOrRenewUnsafe(error);
  } catch (const json::exception& e) {
    *error = Internal(std::string("leader election: malformed Lease: ") + e.what());
    return Attempt::kError;
  }
}

LeaderElector::Attempt LeaderElector::TryAcquireOrRenewUnsafe(Status* error) {
  const auto now = std::chrono::steady_clock::now();
  const long duration_s = std::max<long>(
      1, std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count());
  auto current = client_->Get(kube::kLeases, config_.lease_namespace, config_.lease_name);
  if (!current.ok() && current.status().code() == StatusCode::kNotFound) {
    std::string t = MicroTimeNow();
    json lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec",
         {{"holderIdentity", config_.identity},
          {"leaseDurationSeconds", duration_s},
          {"acquireTime", t},
          {"renewTime", t},
          {"leaseTransitions", 0}}}};
    auto created = client_->Create(kube::kLeases, config_.lease_namespace, lease);
    if (!created.ok()) {
      *error = created.status();
      return Attempt::kError;
    }
    std::lock_guard lock(mu_);
    observed_time_ = now;
    return Attempt::kAcquired;
  }
  if (!current.ok()) {
    *error = current.status();
    return Attempt::kError;
  }
  json lease = std::move(*current);
  json& spec = lease["spec"];
  if (!spec.is_object()) spec = json::object();
  std::string holder = spec.value("holderIdentity", "");
  std::string record = holder + "|" + spec.value("renewTime", "") + "|" +
                       lease["metadata"].value("resourceVersion", "");
  long lease_s = spec.value("leaseDurationSeconds", duration_s);
  {
    std::lock_guard lock(mu_);
    if (record != observed_record_) {
      observed_record_ = record;
      observed_time_ = now;
    }
    bool held_by_other = !holder.empty() && holder != config_.identity;
    if (held_by_other && now < observed_time_ + std::chrono::seconds(lease_s))
      return Attempt::kHeldByOther;
  }
  std::string t = MicroTimeNow();
  if (holder != config_.identity) {
    spec["acquireTime"] = t;
    spec["leaseTransitions"] = spec.value("leaseTransitions", 0) + (holder.empty() ? 0 : 1);
  }
  spec["holderIdentity"] = config_.identity;
  spec["leaseDurationSeconds"] = duration_s;
  spec["renewTime"] = t;
  // metadata.resourceVersion stays: the PUT fails with 409 if anyone wrote since our GET.
  auto updated = client_->Update(kube::kLeases, config_.lease_namespace, lease);
  if (!updated.ok()) {
    *error = updated.status();
    return Attempt::kError;
  }
  std::lock_guard lock(mu_);
  observed_record_ =
      config_.identity + "|" + t + "|" + (*updated)["metadata"].value("resourceVersion", "");
  observed_time_ = now;
  return Attempt::kAcquired;
}

void LeaderElector::Release() {
  try {
    ReleaseUnsafe();
  } catch (const json::exception& e) {
    spdlog::warn("leader election: releasing the lease failed: malformed Lease: {}", e.what());
  }
}

void LeaderElector::ReleaseUnsafe() {
  auto current = client_->Get(kube::kLeases, config_.lease_namespace, config_.lease_name);
  if (!current.ok()) return;
  json lease = std::move(*current);
  if (lease["spec"].value("holderIdentity", "") != config_.identity) return;
  // Clearing the holder (and a 1 s duration, as client-go does) lets a
  // standby acquire on its next retry instead of waiting for expiry.
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = MicroTimeNow();
  auto s = client_->Update(kube::kLeases, config_.lease_namespace, lease);
  if (!s.ok())
    spdlog::warn("leader election: releasing the lease failed: {}", s.status().ToString());
  else
    spdlog::info("leader election: released lease {}/{}", config_.lease_namespace,
                 config_.lease_name);
}

Status LeaderElector::Run(std::stop_token stop,
                          std::function<void(std::stop_token)> on_started_leading,
                          std::function<void()> on_stopped_leading) {
  // Acquire.
  for (;;) {
    if (stop.stop_requested()) return Status::Ok();
    Status err;
    Attempt a = TryAcquireOrRenew(&err);
    if (a == Attempt::kAcquired) break;
    if (a == Attempt::kError && err.code() != StatusCode::kConflict &&
        err.code() != StatusCode::kAlreadyExists)
      spdlog::warn("leader election: {}", err.ToString());
    SleepFor(stop, config_.retry_period);
  }
  {
    std::lock_guard lock(mu_);
    leader_ = true;
  }
  spdlog::info("leader election: {} acquired lease {}/{}", config_.identity,
               config_.lease_namespace, config_.lease_name);
  std::stop_source leading;
  std::jthread worker([&] { on_started_leading(leading.get_token()); });

  // Renew until stopped or the renew deadline passes without success.
  Status result;
  auto last_renew = std::chrono::steady_clock::now();
  for (;;) {
    SleepFor(stop, config_.retry_period);
    if (stop.stop_requested()) break;
    Status err;
    Attempt a = TryAcquireOrRenew(&err);
    auto now = std::chrono::steady_clock::now();
    if (a == Attempt::kAcquired) {
      last_renew = now;
      continue;
    }
    if (a == Attempt::kHeldByOther) {
      result = Unavailable("leader election: lease taken over by another holder");
      break;
    }
    spdlog::warn("leader election: renew failed: {}", err.ToString());
    if (now - last_renew >= config_.renew_deadline) {
      result =
          Unavailable("leader election: could not renew the lease within the renew deadline (" +
                      err.ToString() + ")");
      break;
    }
  }
  {
    std::lock_guard lock(mu_);
    leader_ = false;
  }
  leading.request_stop();
  worker.join();
  if (result.ok() && config_.release_on_cancel) Release();
  if (on_stopped_leading) on_stopped_leading();
  return result;
}

}  // namespace kubetrain::runtime
