// A token bucket: `qps` tokens per second, at most `burst` saved up.
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "common/mutex.h"

namespace kubetrain::kube {

// Contract: Reserve() takes one token and says how long the caller must wait
// before using it (zero when a token was available). Reservations are never
// refused, so waiting callers queue up in FIFO order of reservation.
// qps <= 0 means unlimited. Thread-safe.
class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  TokenBucket(double qps, int burst) : qps_(qps), burst_(std::max(1, burst)), tokens_(burst_) {}

  // Takes a token at time `now`; returns the delay until it may be used.
  std::chrono::nanoseconds Reserve(Clock::time_point now) {
    if (qps_ <= 0) return std::chrono::nanoseconds(0);
    MutexLock lock(mu_);
    if (!started_) {
      last_ = now;
      started_ = true;
    }
    if (now > last_) {
      tokens_ = std::min<double>(
          burst_, tokens_ + qps_ * std::chrono::duration<double>(now - last_).count());
      last_ = now;
    }
    tokens_ -= 1;
    if (tokens_ >= 0) return std::chrono::nanoseconds(0);
    return std::chrono::nanoseconds(static_cast<long long>(-tokens_ / qps_ * 1e9));
  }

  // Blocks until a token may be used.
  void Wait() {
    auto d = Reserve(Clock::now());
    if (d.count() > 0) std::this_thread::sleep_for(d);
  }

 private:
  const double qps_;
  const int burst_;
  Mutex mu_;
  double tokens_ GUARDED_BY(mu_);  // negative = reserved ahead
  Clock::time_point last_ GUARDED_BY(mu_){};
  bool started_ GUARDED_BY(mu_) = false;
};

}  // namespace kubetrain::kube
