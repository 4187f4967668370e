#include "operator/api/types.h"

#include <cctype>
#include <cstdio>
#include <ctime>
#include <initializer_list>

namespace kubetrain::api {

Time Now(const Clock& clock) {
  return std::chrono::floor<std::chrono::seconds>(clock.WallNow());
}

std::string FormatTime(Time t) {
  std::time_t secs = static_cast<std::time_t>(t.time_since_epoch().count());
  std::tm tm{};
  gmtime_r(&secs, &tm);
  // Not strftime's %Y: glibc writes year 448 as "448", which ParseTime (4 digits) refuses.
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

namespace {

// Reads exactly `n` digits at `pos`, advancing it.
bool Digits(std::string_view s, size_t& pos, size_t n, int& out) {
  if (pos + n > s.size()) return false;
  out = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = s[pos + i];
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  pos += n;
  return true;
}

bool Expect(std::string_view s, size_t& pos, char c) {
  if (pos >= s.size() || std::toupper(static_cast<unsigned char>(s[pos])) != c) return false;
  ++pos;
  return true;
}

}  // namespace

StatusOr<Time> ParseTime(std::string_view text) {
  auto bad = [&] { return InvalidArgument("invalid RFC 3339 time \"" + std::string(text) + "\""); };
  size_t pos = 0;
  int year, month, day, hour, minute, second;
  if (!Digits(text, pos, 4, year) || !Expect(text, pos, '-') || !Digits(text, pos, 2, month) ||
      !Expect(text, pos, '-') || !Digits(text, pos, 2, day) || !Expect(text, pos, 'T') ||
      !Digits(text, pos, 2, hour) || !Expect(text, pos, ':') || !Digits(text, pos, 2, minute) ||
      !Expect(text, pos, ':') || !Digits(text, pos, 2, second)) {
    return bad();
  }
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    size_t start = pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
    if (pos == start) return bad();
  }
  int offset_seconds = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    int oh, om;
    if (!Digits(text, pos, 2, oh) || !Expect(text, pos, ':') || !Digits(text, pos, 2, om)) {
      return bad();
    }
    offset_seconds = sign * (oh * 3600 + om * 60);
  } else {
    return bad();
  }
  if (pos != text.size()) return bad();
  std::chrono::year_month_day ymd{std::chrono::year(year), std::chrono::month(month),
                                  std::chrono::day(day)};
  if (!ymd.ok() || hour > 23 || minute > 59 || second > 60) return bad();
  const Time t = Time(std::chrono::sys_days(ymd)) + std::chrono::hours(hour) +
                 std::chrono::minutes(minute) + std::chrono::seconds(second) -
                 std::chrono::seconds(offset_seconds);
  // Only what FormatTime writes back as four digits (an offset can move 0000-01-01 or
  // 9999-12-31 out of that range).
  using std::chrono::January, std::chrono::December;
  static const Time kFirst(std::chrono::sys_days(std::chrono::year(1) / January / 1));
  static const Time kLast(std::chrono::sys_days(std::chrono::year(9999) / December / 31) +
                          std::chrono::seconds(86399));
  if (t < kFirst || t > kLast) return bad();
  return t;
}

const RoleInfo& Role(ReplicaType type) {
  for (const RoleInfo& r : kRoles) {
    if (r.type == type) return r;
  }
  return kRoles[0];  // unreachable: kRoles covers every enumerator
}

std::optional<ReplicaType> ReplicaTypeFromKey(std::string_view key) {
  for (const RoleInfo& r : kRoles) {
    if (r.key == key) return r.type;
  }
  return std::nullopt;
}

std::optional<ReplicaType> ReplicaTypeFromLower(std::string_view lower) {
  for (const RoleInfo& r : kRoles) {
    if (r.lower == lower) return r.type;
  }
  return std::nullopt;
}

ReplicaType CoordinatorRole(const TrainingJobSpec& spec) {
  return *ReplicaTypeFromLower(contract::CoordinatorRole(spec.Replicas(ReplicaType::kChief) > 0));
}

std::string_view Name(RestartPolicy p) {
  switch (p) {
    case RestartPolicy::kNever:
      return "Never";
    case RestartPolicy::kOnFailure:
      return "OnFailure";
    case RestartPolicy::kAlways:
      return "Always";
    case RestartPolicy::kExitCode:
      return "ExitCode";
  }
  return "?";
}

std::string_view Name(DisruptionPolicy p) {
  return p == DisruptionPolicy::kCount ? "Count" : "Ignore";
}

std::string_view Name(CleanPodPolicy p) {
  switch (p) {
    case CleanPodPolicy::kNone:
      return "None";
    case CleanPodPolicy::kRunning:
      return "Running";
    case CleanPodPolicy::kAll:
      return "All";
  }
  return "?";
}

std::string_view Name(SuccessPolicy p) {
  switch (p) {
    case SuccessPolicy::kChiefOrWorker0:
      return "ChiefOrWorker0";
    case SuccessPolicy::kAllWorkers:
      return "AllWorkers";
  }
  return "?";
}

std::string_view Name(ServiceMode m) {
  switch (m) {
    case ServiceMode::kPerReplica:
      return "PerReplica";
    case ServiceMode::kJobWide:
      return "JobWide";
  }
  return "?";
}

namespace {
constexpr std::array<std::pair<ConditionType, std::string_view>, 12> kConditionNames = {{
    {ConditionType::kCreated, "Created"},
    {ConditionType::kRunning, "Running"},
    {ConditionType::kRestarting, "Restarting"},
    {ConditionType::kSucceeded, "Succeeded"},
    {ConditionType::kFailed, "Failed"},
    {ConditionType::kSuspended, "Suspended"},
    {ConditionType::kUnschedulable, "Unschedulable"},
    {ConditionType::kCannotStart, "CannotStart"},
    {ConditionType::kCreateRefused, "CreateRefused"},
    {ConditionType::kReady, "Ready"},
    {ConditionType::kReconciling, "Reconciling"},
    {ConditionType::kStalled, "Stalled"},
}};
}  // namespace

std::string_view Name(ConditionType t) {
  for (const auto& [type, name] : kConditionNames) {
    if (type == t) return name;
  }
  return "?";
}

std::optional<ConditionType> ConditionTypeFromName(std::string_view name) {
  for (const auto& [type, n] : kConditionNames) {
    if (n == name) return type;
  }
  return std::nullopt;
}

void SetSummaryConditions(std::vector<Condition>& conditions, Time now) {
  auto find = [&](ConditionType type) -> Condition* {
    for (Condition& c : conditions) {
      if (c.type == type) return &c;
    }
    return nullptr;
  };
  auto true_one = [&](ConditionType type) -> const Condition* {
    const Condition* c = find(type);
    return c != nullptr && c->status ? c : nullptr;
  };
  auto set = [&](ConditionType type, bool value, const std::string& reason,
                 const std::string& message) {
    if (Condition* c = find(type)) {
      if (c->status != value) c->last_transition_time = now;
      c->status = value;
      c->reason = reason;
      c->message = message;
    } else {
      conditions.push_back({type, value, reason, message, now});
    }
  };
  auto remove = [&](ConditionType type) {
    std::erase_if(conditions, [&](const Condition& c) { return c.type == type; });
  };

  // The condition that decides, most final first; the rest are InProgress.
  const Condition* decider = nullptr;
  for (ConditionType t :
       {ConditionType::kSucceeded, ConditionType::kFailed, ConditionType::kCreateRefused,
        ConditionType::kSuspended, ConditionType::kCannotStart, ConditionType::kUnschedulable,
        ConditionType::kRestarting, ConditionType::kRunning, ConditionType::kCreated}) {
    if ((decider = true_one(t)) != nullptr) break;
  }
  // Copies: `set` may reallocate the vector `decider` points into.
  const std::string reason = decider != nullptr ? decider->reason : "Pending";
  const std::string message =
      decider != nullptr ? decider->message : "waiting for the operator to act on it";
  const bool succeeded = decider != nullptr && decider->type == ConditionType::kSucceeded;
  const bool stalled =
      decider != nullptr &&
      (decider->type == ConditionType::kFailed ||
       (decider->type == ConditionType::kCreateRefused && decider->reason != "QuotaExceeded"));
  set(ConditionType::kReady, succeeded, reason, message);
  if (succeeded || stalled) {
    remove(ConditionType::kReconciling);
  } else {
    set(ConditionType::kReconciling, true, reason, message);
  }
  if (stalled) {
    set(ConditionType::kStalled, true, reason, message);
  } else {
    remove(ConditionType::kStalled);
  }
}

int32_t TrainingJobSpec::Replicas(ReplicaType type) const {
  auto it = replica_specs.find(type);
  return it == replica_specs.end() ? 0 : it->second.replicas;
}

const Condition* TrainingJobStatus::Find(ConditionType type) const {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool TrainingJobStatus::IsTrue(ConditionType type) const {
  const Condition* c = Find(type);
  return c != nullptr && c->status;
}

bool TrainingJobStatus::Finished() const {
  return IsTrue(ConditionType::kSucceeded) || IsTrue(ConditionType::kFailed);
}

}  // namespace kubetrain::api
