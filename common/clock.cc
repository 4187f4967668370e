#include "common/clock.h"

#include <vector>

namespace kubetrain {
namespace {

class SystemClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::now();
  }
  bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                 std::stop_token stop, TimePoint deadline,
                 const std::function<bool()>& ready) override {
    return cv.wait_until(lock, stop, deadline, ready);
  }
};

}  // namespace

bool Clock::SleepUntil(TimePoint deadline, std::stop_token stop) {
  std::mutex mu;
  std::condition_variable_any cv;  // notified by nobody: only the deadline or `stop` ends it
  std::unique_lock lock(mu);
  (void)WaitUntil(lock, cv, stop, deadline, [] { return false; });
  return Now() >= deadline;
}

Clock& RealClock() {
  static SystemClock* const clock = new SystemClock();  // never destroyed: used until exit
  return *clock;
}

FakeClock::FakeClock(std::chrono::system_clock::time_point wall_start)
    : wall_start_(wall_start), start_(std::chrono::steady_clock::now()) {}

Clock::TimePoint FakeClock::Now() const {
  MutexLock lock(mu_);
  return start_ + elapsed_;
}

std::chrono::system_clock::time_point FakeClock::WallNow() const {
  MutexLock lock(mu_);
  return wall_start_ + elapsed_;
}

bool FakeClock::WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                          std::stop_token stop, TimePoint deadline,
                          const std::function<bool()>& ready) {
  Waiter self{lock.mutex(), &cv, deadline};
  {
    MutexLock guard(mu_);
    if (start_ + elapsed_ >= deadline) return ready();
    waiters_.insert(&self);
    cv_.notify_all();  // AwaitWaiters
  }
  cv.wait(lock, stop, [&] { return ready() || Now() >= deadline; });
  MutexLock guard(mu_);
  waiters_.erase(&self);
  if (self.pins > 0) {
    // An Advance is about to take our mutex to notify us: let it, and wait.
    guard.Unlock();
    lock.unlock();
    guard.Lock();
    cv_.wait(guard.native(), [&] { return self.pins == 0; });
    guard.Unlock();
    lock.lock();
  }
  return ready();
}

void FakeClock::Advance(Duration d) {
  std::vector<Waiter*> due;
  {
    MutexLock guard(mu_);
    if (d > Duration::zero()) elapsed_ += d;
    for (Waiter* w : waiters_) {
      if (w->deadline <= start_ + elapsed_) {
        ++w->pins;
        due.push_back(w);
      }
    }
  }
  for (Waiter* w : due) {
    {
      std::lock_guard waiter_lock(*w->mutex);
      w->cv->notify_all();
    }
    MutexLock guard(mu_);
    --w->pins;
    cv_.notify_all();
  }
}

int FakeClock::WaitersLocked() const {
  int n = 0;
  for (const Waiter* w : waiters_) n += w->deadline > start_ + elapsed_;
  return n;
}

int FakeClock::Waiters() const {
  MutexLock lock(mu_);
  return WaitersLocked();
}

bool FakeClock::AwaitWaiters(int n, std::chrono::milliseconds timeout) const {
  MutexLock lock(mu_);
  return cv_.wait_for(lock.native(), timeout, [&]() REQUIRES(mu_) { return WaitersLocked() >= n; });
}

}  // namespace kubetrain
