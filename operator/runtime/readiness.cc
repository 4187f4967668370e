#include "operator/runtime/readiness.h"

namespace kubetrain::runtime {

void Readiness::Set(State next) {
  State current = state_.load();
  while (current != State::kStopping && !state_.compare_exchange_weak(current, next)) {
  }
}

Readiness::Report Readiness::Check() const {
  switch (state_.load()) {
    case State::kStarting:
      return {false, "starting"};
    case State::kStandby:
      return {true, "standby: waiting for the leader lease"};
    case State::kSyncing:
      return {false, "leader: caches not synced"};
    case State::kSynced:
      return {true, "leader: ok"};
    case State::kStopping:
      return {false, "shutting down"};
  }
  return {false, "unknown"};
}

}  // namespace kubetrain::runtime
