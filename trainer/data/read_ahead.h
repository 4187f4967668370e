// Reads a training stripe's next batch on a background thread while the caller computes
// the current step, so reading and parsing (and building the batch's SparseLookup) leave
// the training loop's critical path. One read is in flight at a time; the reader is only
// touched by that thread between Start() and Wait(), so it needs no lock of its own.
//
// Not thread-safe: one caller thread drives Start() and Wait().
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "trainer/data/reader.h"
#include "trainer/model/batch.h"

namespace kubetrain::trainer {

class ReadAhead {
 public:
  ReadAhead(StripeReader& reader, int batch_size);
  // Waits for a read in flight, then stops the thread.
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Starts reader.Next(batch_size, batch) and, when it succeeds, lookup->Assign(*batch),
  // on the background thread. Neither may be touched until Wait() returns, and both must
  // outlive the read (the destructor waits for it). No read may be in flight.
  void Start(Batch* batch, SparseLookup* lookup);
  bool in_flight() const { return in_flight_; }
  // Waits for the read Start() began and returns what reader.Next returned.
  StatusOr<int> Wait();

 private:
  void Run();

  StripeReader& reader_;
  const int batch_size_;
  bool in_flight_ = false;  // the caller's view: Start() called, Wait() not yet

  Mutex mu_;
  std::condition_variable cv_;
  Batch* batch_ GUARDED_BY(mu_) = nullptr;
  SparseLookup* lookup_ GUARDED_BY(mu_) = nullptr;
  bool requested_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::optional<StatusOr<int>> done_ GUARDED_BY(mu_);  // the finished read's result
  std::thread thread_;                                 // last: starts once the members above exist
};

}  // namespace kubetrain::trainer
