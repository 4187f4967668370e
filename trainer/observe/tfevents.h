// TensorBoard event files ("tfevents"), written without TensorFlow: what TensorBoard's
// own reader (EventAccumulator, `tensorboard --logdir`) reads as scalar curves.
//
// Format: a file named events.out.tfevents.<unix seconds>.<host>.<pid> is a sequence of
// records, each: uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
// `length` bytes of data, uint32 masked CRC-32C of the data (crc32c.h). Each record's
// data is a serialized tensorflow.Event: wall_time (1, double), step (2, int64), then
// either file_version (3, string; "brain.Event:2" in the first record) or summary (5,
// a Summary of Values: tag (1, string) and simple_value (2, float)).
//
// EventWriter:
// Flow: Add() encodes one Event into a pending buffer in memory (no syscall);
//   MaybeFlush() writes the pending records when the flush interval has passed since the
//   last flush, Flush() at once. A local directory gets one append (write(2)) per flush to
//   its file. An s3:// directory gets its whole file PUT again at each flush (S3 objects
//   cannot be appended to; the storage layer's WriteObject), so the interval bounds the
//   requests, and the object is capped at Options::max_s3_bytes (later events are dropped,
//   counted in dropped_events()).
// Guarantees: a flushed file is a valid event file; a process killed mid-flush leaves at
//   most one truncated record at the end, which TensorBoard's reader skips. Records are
//   never reordered.
// Thread-safety: none; one owner (the role's thread) calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kubetrain::trainer::observe {

inline constexpr std::string_view kFileVersion = "brain.Event:2";

struct Scalar {
  std::string_view tag;
  float value = 0;
};

// One record around `data` (the framing above).
std::string FrameRecord(std::string_view data);
// The records' data, in order. A truncated last record ends the list (as TensorBoard
// treats a file being written); a CRC mismatch is DataLoss.
StatusOr<std::vector<std::string>> ParseRecords(std::string_view file);

// Serialized tensorflow.Event messages.
std::string FileVersionEvent(double wall_time);
std::string ScalarEvent(double wall_time, int64_t step, std::span<const Scalar> values);

// What ScalarEvent encoded, read back (tests, and a sanity check of the encoding).
struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;
};
StatusOr<DecodedEvent> DecodeEvent(std::string_view data);

// events.out.tfevents.<secs>.<host>.<pid>
std::string EventFileName(int64_t unix_seconds, std::string_view host, int pid);

class EventWriter {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::string dir;  // a local directory (created) or an s3:// prefix
    std::chrono::milliseconds flush_interval{10000};
    size_t max_s3_bytes = size_t{64} << 20;
    // Injected for tests; default: steady_clock, and system_clock seconds for wall_time.
    std::function<Clock::time_point()> now;
    std::function<double()> wall_time;
    // The file name's parts; default: gethostname() and getpid().
    std::string host;
    int pid = 0;
  };

  // Creates the file (its first record, the file version, is written at once).
  // Errors: Internal when the local directory or file cannot be created; S3 errors as the
  // storage layer returns them.
  static StatusOr<std::unique_ptr<EventWriter>> Open(Options options);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // Buffers one Event with these scalars at `step`.
  void Add(int64_t step, std::span<const Scalar> values);
  // Flush() when the interval has passed since the last flush; else nothing.
  Status MaybeFlush();
  Status Flush();

  const std::string& path() const { return path_; }
  uint64_t flushes() const { return flushes_; }
  uint64_t dropped_events() const { return dropped_; }

 private:
  EventWriter(Options options, std::string path, int fd);

  const Options options_;
  const std::string path_;
  const int fd_;         // local file (O_APPEND); -1 for S3
  std::string pending_;  // framed records not yet written
  uint64_t pending_events_ = 0;
  std::string s3_object_;  // S3: everything flushed so far (the object is PUT whole)
  Clock::time_point last_flush_;
  uint64_t flushes_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace kubetrain::trainer::observe
