// Clock: the one way kubetrain's timing code reads time and waits for it, so
// tests swap in a FakeClock and test timers without waiting for them.
//
// Two readings (client-go's PassiveClock): Now() is monotonic, for intervals,
// deadlines and backoffs; WallNow() is the calendar, for timestamps written into
// objects (api::Time). One wait, WaitUntil(): a condition-variable wait that
// also ends when Now() reaches a deadline. A component that waits for a
// deadline calls it instead of cv.wait_until, so a FakeClock's Advance() wakes
// it; its other wakeups (cv.notify) are its own, as before.
//
// Contract: every method of RealClock() and FakeClock is thread-safe.
// WaitUntil's `cv` must be waited on with `lock`'s mutex only, and outlive the
// call. The clock must outlive whatever waits on it or reads it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <stop_token>

#include "common/mutex.h"

namespace kubetrain {

class Clock {
 public:
  using Duration = std::chrono::steady_clock::duration;
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~Clock() = default;

  virtual TimePoint Now() const = 0;
  virtual std::chrono::system_clock::time_point WallNow() const = 0;

  // With `lock` held: waits on `cv` until `ready()` holds, `stop` is requested
  // or Now() reaches `deadline`, and returns ready(). `ready` is called with
  // `lock` held, as cv.wait_until's predicate is.
  virtual bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                         std::stop_token stop, TimePoint deadline,
                         const std::function<bool()>& ready) = 0;

  // Waits until Now() reaches `deadline` or `stop` is requested; true when the
  // deadline was reached (a backoff, a retry period).
  bool SleepUntil(TimePoint deadline, std::stop_token stop = {});
  bool SleepFor(Duration d, std::stop_token stop = {}) { return SleepUntil(Now() + d, stop); }
};

// The process's clock: steady_clock and system_clock. What every component
// uses unless a test hands it another.
Clock& RealClock();

// A clock that stands still until Advance(). WallNow() starts at `wall_start`
// (a fixed time, so tests are the same every run).
//
// Flow: a waiter registers its (mutex, cv, deadline) and waits on its cv;
// Advance() moves the time, then, for each waiter now due, takes the waiter's
// mutex and notifies its cv. Taking the mutex orders the notify after the
// waiter's last look at the time, so no wakeup is lost.
// Guarantees: when Advance(d) returns, every waiter due at the new time has
// been notified (it may not have run yet: tests observe its effect, e.g. with
// WorkQueue::Get(), or poll with a deadline). A waiter leaving WaitUntil waits
// for an Advance that is notifying it, with its own mutex released, so
// Advance never touches a waiter that has left.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(std::chrono::system_clock::time_point wall_start =
                         std::chrono::sys_days(std::chrono::year{2026} / 1 / 1));

  TimePoint Now() const override;
  std::chrono::system_clock::time_point WallNow() const override;
  bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                 std::stop_token stop, TimePoint deadline,
                 const std::function<bool()>& ready) override;

  // Moves the time forward by `d` (>= 0) and wakes the waiters now due.
  void Advance(Duration d);
  // Threads blocked in WaitUntil (or SleepUntil) for a time still ahead (one
  // an Advance made due is not counted, though it may not have left yet).
  int Waiters() const;
  // Blocks until at least `n` threads wait for a time still ahead, or
  // `timeout` of real time passes; true if they do. For a test that must
  // advance only once the code under test is waiting again.
  bool AwaitWaiters(int n, std::chrono::milliseconds timeout) const;

 private:
  struct Waiter {
    std::mutex* mutex;
    std::condition_variable_any* cv;
    TimePoint deadline;
    int pins = 0;  // Advances about to notify it; under the clock's mu_ (not annotatable here)
  };
  int WaitersLocked() const REQUIRES(mu_);

  const std::chrono::system_clock::time_point wall_start_;
  const TimePoint start_;

  mutable Mutex mu_;
  mutable std::condition_variable cv_;  // waiters_ or a pin changed
  Duration elapsed_ GUARDED_BY(mu_){0};
  std::set<Waiter*> waiters_ GUARDED_BY(mu_);
};

}  // namespace kubetrain
