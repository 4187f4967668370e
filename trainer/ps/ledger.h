// What a parameter server remembers about the workers' pushes, so each push is applied once,
// and which workers have finished. Saved with the shard in its checkpoint file.
//
//   Flow: a worker process picks a random 64-bit incarnation when it starts and tells every
//     PS (rank, incarnation) in its hello. It numbers its pushes to each PS 1, 2, 3, ... (one
//     counter per PS). It sends push n+1 to a PS only after that PS acknowledged push n, and
//     after a lost connection it re-sends the unacknowledged push unchanged (same number) on
//     a new connection. The PS applies push (incarnation, n) only if n is above the last
//     number it applied for that incarnation; otherwise it acknowledges without applying (a
//     duplicate: the PS got it before the connection broke, or a copy of it is still queued
//     on the old connection).
//   Guarantees: a push is applied at most once, and, since the worker re-sends until it is
//     acknowledged, exactly once while the PS lives. Numbers may skip (a PS restored from an
//     older checkpoint sees later numbers next), never go back. The ledger is saved under the
//     shard's lock with the parameters, so a restored PS holds both as of the same instant:
//     pushes in the checkpoint are duplicates afterwards, later ones (lost with the PS's
//     memory) are applied when re-sent. A restarted worker is a new incarnation, numbered
//     afresh; pushes of its old incarnation still in flight are checked against the old
//     incarnation's own record. The finished set survives a PS restart as of the checkpoint.
//   Assumptions: incarnations do not collide (64 random bits). Per rank only the
//     kIncarnationsPerRank most recent incarnations are remembered; a push of a forgotten one
//     is refused (kUnknown), never applied, since the PS cannot tell whether it was.
//     Synchronous training does not use the numbers (its step barrier dedups a re-sent push);
//     it only counts.
//
// Not thread-safe: ParamShard holds it under its own lock.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace kubetrain::trainer {

// Applied and duplicate (acknowledged, not applied) pushes, since this process started.
struct PushCounts {
  uint64_t applied = 0;
  uint64_t duplicate = 0;
  friend bool operator==(const PushCounts&, const PushCounts&) = default;
};

class PushLedger {
 public:
  static constexpr int kIncarnationsPerRank = 8;

  enum class Outcome { kApply, kDuplicate, kUnknown };

  // A worker said hello. Remembers the incarnation (the rank's oldest is forgotten beyond
  // kIncarnationsPerRank). Idempotent: a reconnect of the same incarnation changes nothing.
  void Hello(int32_t rank, uint64_t incarnation);
  // Whether push `seq` of `incarnation` is to be applied; kApply records it (call it only
  // when the push is then applied, under the same lock) and counts it, kDuplicate counts it.
  Outcome Admit(int32_t rank, uint64_t incarnation, uint64_t seq);
  // Counting only (synchronous training).
  void Count(int32_t rank, bool applied);

  // Records that worker `rank` finished; returns how many have.
  int MarkFinished(int32_t rank);
  const std::set<int32_t>& finished() const { return finished_; }

  PushCounts total() const { return total_; }
  const std::map<int32_t, PushCounts>& by_rank() const { return by_rank_; }
  // The last number applied for `incarnation` (0: none or unknown).
  uint64_t last_seq(uint64_t incarnation) const;

  // The saved form: u32 n, n x {i32 rank, u64 incarnation, u64 last seq, u64 order},
  // u32 m, m x i32 finished rank. Counts are not saved (they are this process's).
  void AppendTo(std::string* out) const;
  // Replaces the remembered incarnations and the finished set with those read from `in`,
  // advancing `*in` past them. InvalidArgument (nothing changed) for malformed bytes.
  Status ReadFrom(std::string_view* in);

 private:
  struct Entry {
    int32_t rank = 0;
    uint64_t last_seq = 0;
    uint64_t order = 0;  // when it said hello first; the smallest of a rank is forgotten first
  };
  std::unordered_map<uint64_t, Entry> incarnations_;
  uint64_t next_order_ = 1;
  std::set<int32_t> finished_;
  PushCounts total_;
  std::map<int32_t, PushCounts> by_rank_;
};

}  // namespace kubetrain::trainer
