// Readiness: what an operator replica's /readyz reports.
//
// Health is the replica's own state, not leadership (as in controller-runtime):
// a standby that waits for the leader Lease is Ready. Were it not, a Deployment
// with two replicas would never finish a rolling update: the surge pod waits
// for the Lease, and the old leader that holds it is not removed until the
// surge pod is Ready. Only the work is gated by the Lease, and only the leader
// has caches whose sync it must wait for.
//
//   state      /readyz  body
//   kStarting  503      "starting"  (before the replica knows its role)
//   kStandby   200      "standby: waiting for the leader lease"
//   kSyncing   503      "leader: caches not synced"
//   kSynced    200      "leader: ok"
//   kStopping  503      "shutting down"
//
// Contract: thread-safe; every call is wait-free. kStopping is final: once
// set, Set() with any other state is ignored, so a leader whose workers stop
// after a shutdown began never reports itself Ready again. The object holds no
// pointer to the controller, so /readyz cannot reach one that is destroyed.
#pragma once

#include <atomic>
#include <string_view>

namespace kubetrain::runtime {

class Readiness {
 public:
  enum class State { kStarting, kStandby, kSyncing, kSynced, kStopping };
  struct Report {
    bool ready;
    std::string_view message;  // static text, one line, no newline
  };

  void Set(State next);
  State state() const { return state_.load(); }
  Report Check() const;

 private:
  std::atomic<State> state_{State::kStarting};
};

}  // namespace kubetrain::runtime
