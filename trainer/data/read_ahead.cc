#include "trainer/data/read_ahead.h"

#include <cassert>

namespace kubetrain::trainer {

ReadAhead::ReadAhead(StripeReader& reader, int batch_size)
    : reader_(reader), batch_size_(batch_size), thread_([this] { Run(); }) {}

ReadAhead::~ReadAhead() {
  if (in_flight_) (void)Wait();
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ReadAhead::Start(Batch* batch, SparseLookup* lookup) {
  assert(!in_flight_);
  {
    MutexLock lock(mu_);
    batch_ = batch;
    lookup_ = lookup;
    requested_ = true;
    done_.reset();
  }
  in_flight_ = true;
  cv_.notify_all();
}

StatusOr<int> ReadAhead::Wait() {
  assert(in_flight_);
  MutexLock lock(mu_);
  cv_.wait(lock.native(), [this]() REQUIRES(mu_) { return done_.has_value(); });
  in_flight_ = false;
  StatusOr<int> result = std::move(*done_);
  done_.reset();
  return result;
}

void ReadAhead::Run() {
  MutexLock lock(mu_);
  while (true) {
    cv_.wait(lock.native(), [this]() REQUIRES(mu_) { return requested_ || stop_; });
    if (!requested_) return;  // stop_, and nothing asked for
    requested_ = false;
    Batch* batch = batch_;
    SparseLookup* lookup = lookup_;
    lock.Unlock();
    StatusOr<int> n = reader_.Next(batch_size_, batch);
    if (n.ok()) lookup->Assign(*batch);
    lock.Lock();
    done_.emplace(std::move(n));
    cv_.notify_all();
  }
}

}  // namespace kubetrain::trainer
