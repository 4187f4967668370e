// Refused creates: what the apiserver said when it would not create a child of
// a job, and when the job may try again.
//
// A create answered 403 (ResourceQuota exceeded, Pod Security admission, a
// priority class the namespace may not use, RBAC), or a same-named object the
// job does not own standing where its child goes, cannot succeed by retrying at
// once. The executor then says so (condition CreateRefused, a FailedCreate
// Warning event) and probes: one create at a time, kProbeFirst after the
// refusal, doubling up to kProbeMax, instead of sending every missing child
// on the work queue's backoff. A create of the refused kind that goes through
// clears the refusal; the job's other children follow at once.
//
// Flow (per job key): Refused() on each refused create -> Due() false until
// the probe time -> the next reconcile sends one create -> Refused() again
// (the wait doubles) or Accepted() (the refusal is gone). Seed() restores a
// refusal from the job's status after a restart, with the probe due at once.
// Guarantees: while refused, a job sends at most one probe per wait, and the
// wait never exceeds RefusalSchedule::max, so a job proceeds within max (plus
// one reconcile) of the cause going away.
//
// Thread-safe: every method takes the object's own lock.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "common/status.h"
#include "operator/planner/planner.h"

namespace kubetrain::controller {

// The condition's reason and message for one refused create.
struct CreateRefusal {
  std::string reason;   // QuotaExceeded, PodCreateForbidden, ..., ChildNameConflict
  std::string message;  // names the child, quotes the apiserver (sanitised, bounded)

  friend bool operator==(const CreateRefusal&, const CreateRefusal&) = default;
};

// At most this many bytes of the apiserver's message are quoted (an Event's
// note may hold 1 kB).
inline constexpr size_t kMaxRefusalQuoteBytes = 800;

// `text` as it may go into a status or an event: CleanText (common/utf8.h:
// valid UTF-8, control characters but newline and tab replaced, terminal
// escapes with them), at most `max_bytes` bytes, "..." ending a cut one.
std::string SanitizeApiMessage(std::string_view text, size_t max_bytes = kMaxRefusalQuoteBytes);

// The refusal a create of `kind` ("Pod", "Service", "Secret", ...) named
// `child` answered with `error`, when it is one: a 403 (PermissionDenied).
// Reason QuotaExceeded when the apiserver's message says a quota is exceeded,
// insufficient or not counted yet, else <kind>CreateForbidden. Anything else:
// nullopt.
std::optional<CreateRefusal> ClassifyRefusedCreate(std::string_view kind, std::string_view child,
                                                   const Status& error);

// A `kind` named `child` exists and is not the job's (`holder` says whose).
CreateRefusal ChildNameConflict(std::string_view kind, std::string_view child,
                                std::string_view holder);

struct RefusalSchedule {
  std::chrono::milliseconds first{10000};  // the wait after a first refusal
  std::chrono::milliseconds max{20000};    // the wait doubles up to this
};

class Refusals {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Refusals(RefusalSchedule schedule,
                    std::function<Clock::time_point()> clock = &Clock::now)
      : schedule_(schedule), clock_(std::move(clock)) {}

  struct State {
    CreateRefusal refusal;
    // The kind refused; unset after Seed() (any Pod or Service create clears it).
    std::optional<planner::ChildRef::Kind> kind;
    Clock::time_point next_probe;
  };
  std::optional<State> Get(const std::string& key);
  // How long until the job's next probe (<= 0: due); nullopt when not refused.
  std::optional<std::chrono::milliseconds> UntilProbe(const std::string& key);

  // What a Refused() call changed.
  enum class Change { kNew, kReasonChanged, kMessageChanged, kSame };
  // A create of `kind` was refused: the next probe waits `first` after a new
  // refusal, else twice the last wait, at most `max`.
  Change Refused(const std::string& key, planner::ChildRef::Kind kind, CreateRefusal refusal);
  // A create of `kind` went through: clears a refusal of that kind (or a
  // seeded one, when `kind` is a Pod or Service). Returns whether it did.
  bool Accepted(const std::string& key, planner::ChildRef::Kind kind);
  // Nothing is refused any more (the job has nothing left to create, or stopped).
  void Clear(const std::string& key);
  // The job's status says it is refused and this process never knew of a
  // refusal of it (it restarted): refused as the status says, the probe due
  // now. No-op when this process refused or cleared the job since it started:
  // a status that still shows a refusal it cleared is not one.
  void Seed(const std::string& key, CreateRefusal refusal);
  // The job is gone.
  void Forget(const std::string& key);

 private:
  // Kept after a refusal clears (refused false) until Forget(), so Seed()
  // does not take a status written before the clearing for a new refusal.
  struct Entry {
    bool refused = false;
    State state;
    std::chrono::milliseconds wait{0};
  };

  // Constant after construction.
  const RefusalSchedule schedule_;
  const std::function<Clock::time_point()> clock_;

  Mutex mu_;
  std::map<std::string, Entry> jobs_ GUARDED_BY(mu_);
};

}  // namespace kubetrain::controller
