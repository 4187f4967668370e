#include "operator/controller/refusal.h"

#include <algorithm>
#include <cctype>

#include "common/utf8.h"

namespace kubetrain::controller {

using planner::ChildRef;
namespace {

// The apiserver's own message inside a kube::Client error ("Forbidden (403)
// POST /api/v1/namespaces/ml/pods: pods \"x\" is forbidden: ..."): what
// follows the first ": " after the status code; the whole text otherwise.
std::string_view ApiserverMessage(std::string_view error) {
  const size_t code_end = error.find(')');
  if (code_end == std::string_view::npos) return error;
  const size_t colon = error.find(": ", code_end);
  if (colon == std::string_view::npos) return error;
  return error.substr(colon + 2);
}

bool Contains(std::string_view text, std::string_view word) {
  return text.find(word) != std::string_view::npos;
}

}  // namespace

std::string SanitizeApiMessage(std::string_view text, size_t max_bytes) {
  std::string out = CleanText(text, text.size() * 3);  // U+FFFD is 3 bytes: nothing cut here
  if (out.size() <= max_bytes) return out;
  constexpr std::string_view kCut = "...";
  return TruncateUtf8(out, max_bytes > kCut.size() ? max_bytes - kCut.size() : 0) +
         std::string(kCut);
}

std::optional<CreateRefusal> ClassifyRefusedCreate(std::string_view kind, std::string_view child,
                                                   const Status& error) {
  if (error.code() != StatusCode::kPermissionDenied) return std::nullopt;
  const std::string quote = SanitizeApiMessage(ApiserverMessage(error.message()));
  // ResourceQuota admission: "exceeded quota: <name>, requested: ...", with
  // scope selectors "insufficient quota to match these scopes", and "status
  // unknown for quota: <name>" before the quota controller has counted.
  const bool quota = Contains(quote, "exceeded quota") || Contains(quote, "insufficient quota") ||
                     Contains(quote, "status unknown for quota");
  std::string lower(kind);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return CreateRefusal{
      quota ? "QuotaExceeded" : std::string(kind) + "CreateForbidden",
      "cannot create " + lower + " " + SanitizeApiMessage(child, 253) + ": " + quote};
}

CreateRefusal ChildNameConflict(std::string_view kind, std::string_view child,
                                std::string_view holder) {
  std::string lower(kind);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string name = SanitizeApiMessage(child, 253);
  return CreateRefusal{"ChildNameConflict", "cannot create " + lower + " " + name + ": a " + lower +
                                                " of that name exists and is not this job's (" +
                                                SanitizeApiMessage(holder) +
                                                "); delete or rename it"};
}

std::optional<Refusals::State> Refusals::Get(const std::string& key) {
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end() || !it->second.refused) return std::nullopt;
  return it->second.state;
}

std::optional<std::chrono::milliseconds> Refusals::UntilProbe(const std::string& key) {
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end() || !it->second.refused) return std::nullopt;
  return std::chrono::ceil<std::chrono::milliseconds>(it->second.state.next_probe - clock_());
}

Refusals::Change Refusals::Refused(const std::string& key, ChildRef::Kind kind,
                                   CreateRefusal refusal) {
  MutexLock lock(mu_);
  const auto now = clock_();
  Entry& e = jobs_[key];
  Change change = Change::kSame;
  if (!e.refused) {
    change = Change::kNew;
    e.wait = std::chrono::milliseconds(0);
  } else if (e.state.refusal.reason != refusal.reason || (e.state.kind && *e.state.kind != kind)) {
    change = Change::kReasonChanged;
  } else if (e.state.refusal.message != refusal.message) {
    change = Change::kMessageChanged;
  }
  e.refused = true;
  e.wait = e.wait.count() == 0 ? schedule_.first : std::min(2 * e.wait, schedule_.max);
  e.state.refusal = std::move(refusal);
  e.state.kind = kind;
  e.state.next_probe = now + e.wait;
  return change;
}

bool Refusals::Accepted(const std::string& key, ChildRef::Kind kind) {
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end() || !it->second.refused) return false;
  const std::optional<ChildRef::Kind>& refused = it->second.state.kind;
  const bool clears =
      refused ? *refused == kind : kind == ChildRef::Kind::kPod || kind == ChildRef::Kind::kService;
  if (clears) it->second.refused = false;
  return clears;
}

void Refusals::Clear(const std::string& key) {
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it != jobs_.end()) it->second.refused = false;
}

void Refusals::Seed(const std::string& key, CreateRefusal refusal) {
  MutexLock lock(mu_);
  auto [it, added] = jobs_.try_emplace(key);
  if (!added) return;  // this process knows better (refused, or cleared since)
  it->second.refused = true;
  it->second.state = State{std::move(refusal), std::nullopt, clock_()};
  // The probe is due now; a refusal then waits `first`, as a new one.
  it->second.wait = std::chrono::milliseconds(0);
}

void Refusals::Forget(const std::string& key) {
  MutexLock lock(mu_);
  jobs_.erase(key);
}

}  // namespace kubetrain::controller
