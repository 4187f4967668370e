#include "operator/runtime/leader_election.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>

namespace kubetrain::runtime {
namespace {

using json = nlohmann::json;

}  // namespace

std::string MicroTimeNow(const Clock& clock) {
  const auto now = clock.WallNow();
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

kube::Config LeaderElectionClientConfig(kube::Config base, const LeaderElectionConfig& le) {
  base.qps = 0;  // a GET and a PUT per retry period: never queued behind reconciles
  base.max_retries = 0;
  base.request_timeout =
      std::max(std::chrono::milliseconds(100), std::chrono::milliseconds(le.renew_deadline / 3));
  base.connect_timeout = std::min(base.connect_timeout, base.request_timeout);
  base.may_write = nullptr;  // the elector is never fenced by its own loss
  return base;
}

LeaderElector::LeaderElector(kube::Client* client, LeaderElectionConfig config)
    : client_(client), config_(WithIdentity(std::move(config))) {}

bool LeaderElector::IsLeader() const {
  MutexLock lock(mu_);
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
  const auto now = config_.clock->Now();
  const long duration_s = std::max<long>(
      1, std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count());
  auto current = client_->Get(kube::kLeases, config_.lease_namespace, config_.lease_name);
  if (!current.ok() && current.status().code() == StatusCode::kNotFound) {
    std::string t = MicroTimeNow(*config_.clock);
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
    MutexLock lock(mu_);
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
    MutexLock lock(mu_);
    if (record != observed_record_) {
      observed_record_ = record;
      observed_time_ = now;
    }
    bool held_by_other = !holder.empty() && holder != config_.identity;
    if (held_by_other && now < observed_time_ + std::chrono::seconds(lease_s))
      return Attempt::kHeldByOther;
  }
  std::string t = MicroTimeNow(*config_.clock);
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
  MutexLock lock(mu_);
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
  lease["spec"]["renewTime"] = MicroTimeNow(*config_.clock);
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
    (void)config_.clock->SleepFor(config_.retry_period, stop);
  }
  {
    MutexLock lock(mu_);
    leader_ = true;
  }
  spdlog::info("leader election: {} acquired lease {}/{}", config_.identity,
               config_.lease_namespace, config_.lease_name);
  std::stop_source leading;
  // Wakes the renew loop on shutdown and on loss.
  std::stop_source wake;
  std::stop_callback on_stop(stop, [&] { wake.request_stop(); });
  std::condition_variable_any watchdog_cv;
  // Leadership is lost; stop the leader at once. Called with mu_ held.
  auto lose = [&]() REQUIRES(mu_) {
    if (lost_) return;
    lost_ = true;
    leader_ = false;
    if (config_.on_lost) config_.on_lost();
    leading.request_stop();
    wake.request_stop();
  };
  {
    MutexLock lock(mu_);
    lost_ = false;
    last_renew_ = config_.clock->Now();
  }
  std::jthread worker([&] { on_started_leading(leading.get_token()); });
  // The renew deadline is enforced here, not after a renew call returns: a
  // hung connection must not keep this process acting as leader.
  std::jthread watchdog([&](std::stop_token done) {
    MutexLock lock(mu_);
    while (!done.stop_requested() && !lost_) {
      const auto deadline = last_renew_ + config_.renew_deadline;
      if (config_.clock->Now() >= deadline) {
        spdlog::error("leader election: renew deadline passed; stopping every worker");
        lose();
        break;
      }
      (void)config_.clock->WaitUntil(lock.native(), watchdog_cv, done, deadline,
                                     [] { return false; });
    }
  });

  // Renew until stopped or leadership is lost.
  Status result;
  Status last_err;
  for (;;) {
    (void)config_.clock->SleepFor(config_.retry_period, wake.get_token());
    if (stop.stop_requested() || wake.stop_requested()) break;
    Status err;
    Attempt a = TryAcquireOrRenew(&err);
    MutexLock lock(mu_);
    if (lost_) break;
    if (a == Attempt::kAcquired) {
      last_renew_ = config_.clock->Now();
      continue;
    }
    if (a == Attempt::kHeldByOther) {
      lose();
      result = Unavailable("leader election: lease taken over by another holder");
      break;
    }
    last_err = err;
    spdlog::warn("leader election: renew failed: {}", err.ToString());
  }
  watchdog.request_stop();
  watchdog.join();
  {
    MutexLock lock(mu_);
    if (lost_ && result.ok())
      result = Unavailable("leader election: could not renew the lease within the renew deadline" +
                           (last_err.ok() ? std::string() : " (" + last_err.ToString() + ")"));
  }
  // Graceful stop: the workers stop taking keys and finish what is in
  // flight while this replica still holds the lease; then it is released.
  leading.request_stop();
  worker.join();
  {
    MutexLock lock(mu_);
    leader_ = false;
  }
  if (result.ok() && config_.release_on_cancel) Release();
  if (on_stopped_leading) on_stopped_leading();
  return result;
}

}  // namespace kubetrain::runtime
