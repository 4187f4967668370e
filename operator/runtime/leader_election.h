// Leader election on a coordination.k8s.io/v1 Lease.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "operator/kube/client.h"

namespace kubetrain::runtime {

struct LeaderElectionConfig {
  std::string lease_namespace;
  std::string lease_name;
  std::string identity;  // unique per process; empty: "<hostname>_<random>" is generated
  std::chrono::milliseconds lease_duration{15'000};
  std::chrono::milliseconds renew_deadline{10'000};
  std::chrono::milliseconds retry_period{2'000};
  bool release_on_cancel = true;
  // Called once, on the watchdog thread, the moment leadership is lost (renew
  // deadline passed, or another holder seen), before the leader's token is
  // stopped: fence writes here (kube::Config::may_write). Must not block or
  // call back into the elector.
  std::function<void()> on_lost;
  // What the retry period, the renew deadline and the lease's expiry are
  // measured on; must outlive the elector (tests: a FakeClock).
  Clock* clock = &RealClock();
};

// The client configuration leader election must use: its own client (own
// connections, no shared rate limiter), no transport retries (the elector
// retries every retry_period itself) and a per-request timeout of a third of
// the renew deadline, so one attempt (GET + PUT) always ends before it.
kube::Config LeaderElectionClientConfig(kube::Config base, const LeaderElectionConfig& le);

// Contract: Run() blocks. It tries to acquire the Lease every retry_period;
// once it holds it, it calls on_started_leading(token) on a new thread and
// renews every retry_period. It returns when (a) `stop` is requested: the
// leader's token is stopped, on_started_leading is joined, the Lease is
// released (holder cleared) so a standby takes over at once, and Run returns
// OK; or (b) renewal did not succeed within renew_deadline: leadership is
// lost, the token is stopped, and Run returns kUnavailable — the caller must
// stop acting as leader (the operator exits). IsLeader() is thread-safe.
// (b) is enforced by a watchdog at the deadline itself, even while a renew
// call still hangs: on_lost runs and the token is stopped on time.
//
// Flow: GET lease -> (absent: CREATE) -> if held by another identity and that
// record was last seen changing less than lease_duration ago (measured on OUR
// monotonic clock from when we observed it, so clock skew between nodes does
// not matter) -> wait; else PUT with our identity and the observed
// resourceVersion (optimistic concurrency: of two contenders only one PUT
// succeeds, the other gets a 409 and retries).
// Guarantees: at most one holder per lease duration, given renew_deadline <
// lease_duration and bounded clock drift (not skew) between contenders: the
// old leader stops (and fences) at renew_deadline after its last successful
// renewal, a standby acquires no earlier than lease_duration after it saw it.
// Assumptions: every contender uses the same lease_duration.
class LeaderElector {
 public:
  LeaderElector(kube::Client* client, LeaderElectionConfig config);

  [[nodiscard]] Status Run(std::stop_token stop,
                           std::function<void(std::stop_token)> on_started_leading,
                           std::function<void()> on_stopped_leading = {});
  bool IsLeader() const;
  const std::string& identity() const { return config_.identity; }

 private:
  enum class Attempt { kAcquired, kHeldByOther, kError };
  Attempt TryAcquireOrRenew(Status* error);
  Attempt TryAcquireOrRenewUnsafe(Status* error);  // may throw json::exception
  void Release();
  void ReleaseUnsafe();

  kube::Client* const client_;
  const LeaderElectionConfig config_;

  mutable Mutex mu_;
  bool leader_ GUARDED_BY(mu_) = false;
  bool lost_ GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_renew_ GUARDED_BY(mu_);
  std::string observed_record_;                          // holder+renewTime+rv seen last
  std::chrono::steady_clock::time_point observed_time_;  // when observed_record_ changed
};

// `clock`'s calendar time in RFC 3339 with microseconds, the Lease MicroTime format.
std::string MicroTimeNow(const Clock& clock);

}  // namespace kubetrain::runtime
