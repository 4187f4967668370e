#include "operator/controller/refusal.h"

#include <gtest/gtest.h>

namespace kubetrain::controller {

using planner::ChildRef;
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RefusalTest, Http403WithQuotaWordsIsQuotaExceededAndQuotesTheApiserver) {
  const Status error(StatusCode::kPermissionDenied,
                     "Forbidden (403) POST /api/v1/namespaces/ml/pods: pods \"tj-worker-2\" is "
                     "forbidden: exceeded quota: two-pods, requested: pods=1, used: pods=2, "
                     "limited: pods=2");
  auto r = ClassifyRefusedCreate("Pod", "tj-worker-2", error);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->reason, "QuotaExceeded");
  EXPECT_EQ(r->message,
            "cannot create pod tj-worker-2: pods \"tj-worker-2\" is forbidden: exceeded quota: "
            "two-pods, requested: pods=1, used: pods=2, limited: pods=2");
  const Status scoped(StatusCode::kPermissionDenied,
                      "Forbidden (403): pods \"x\" is forbidden: insufficient quota to match "
                      "these scopes: [{PriorityClass In [high]}]");
  EXPECT_EQ(ClassifyRefusedCreate("Pod", "x", scoped)->reason, "QuotaExceeded");
}

TEST(RefusalTest, Other403sAreForbiddenByKindAndOtherErrorsAreNoRefusal) {
  const Status psa(StatusCode::kPermissionDenied,
                   "Forbidden (403) POST /api/v1/namespaces/ml/pods: pods \"tj-ps-0\" is "
                   "forbidden: violates PodSecurity \"restricted:latest\": privileged");
  EXPECT_EQ(ClassifyRefusedCreate("Pod", "tj-ps-0", psa)->reason, "PodCreateForbidden");
  EXPECT_EQ(ClassifyRefusedCreate("Secret", "tj-auth", psa)->reason, "SecretCreateForbidden");
  EXPECT_EQ(ClassifyRefusedCreate("Secret", "tj-auth", psa)
                ->message.rfind("cannot create secret tj-auth: pods", 0),
            0u);
  EXPECT_FALSE(ClassifyRefusedCreate("Pod", "p", Status(StatusCode::kUnavailable, "503")));
  EXPECT_FALSE(ClassifyRefusedCreate("Pod", "p", Status(StatusCode::kAlreadyExists, "409")));
  EXPECT_FALSE(ClassifyRefusedCreate("Pod", "p", Status(StatusCode::kInvalidArgument, "422")));
}

// An admission webhook's message is anyone's text: no terminal escapes, no
// newlines, valid UTF-8, bounded.
TEST(RefusalTest, TheQuotedMessageHasNoControlCharactersAndIsBounded) {
  const std::string evil =
      "denied \x1b[2J\x1b]0;owned\x07 by\nwebhook\r\t\x7f \xc2\x9b"
      "31m \xff";
  const std::string clean = SanitizeApiMessage(evil);
  for (unsigned char c : clean) {
    EXPECT_FALSE((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) << static_cast<int>(c);
  }
  EXPECT_EQ(clean.find('\x1b'), std::string::npos);
  EXPECT_EQ(clean.find("\xc2\x9b"), std::string::npos);
  EXPECT_NE(clean.find("denied"), std::string::npos);
  EXPECT_NE(clean.find("\xEF\xBF\xBD"), std::string::npos);  // the stray byte, replaced

  const std::string huge(100'000, 'a');
  const std::string bounded = SanitizeApiMessage(huge);
  EXPECT_EQ(bounded.size(), kMaxRefusalQuoteBytes);
  EXPECT_EQ(bounded.substr(bounded.size() - 3), "...");
  auto r = ClassifyRefusedCreate("Pod", "p",
                                 Status(StatusCode::kPermissionDenied, "Forbidden (403): " + huge));
  EXPECT_LT(r->message.size(), 1024u);  // fits an Event's note
}

TEST(RefusalTest, ANameConflictNamesTheObjectAndItsHolder) {
  const CreateRefusal r = ChildNameConflict("Service", "tj", "controlled by Deployment web uid 42");
  EXPECT_EQ(r.reason, "ChildNameConflict");
  EXPECT_EQ(r.message,
            "cannot create service tj: a service of that name exists and is not this job's "
            "(controlled by Deployment web uid 42); delete or rename it");
}

// An injected clock: the probe schedule without waiting.
struct FakeClock {
  Refusals::Clock::time_point now{};
  std::function<Refusals::Clock::time_point()> fn() {
    return [this] { return now; };
  }
};

TEST(RefusalsTest, ProbesWaitTenSecondsThenDoubleUpToTwentyAtMostSixAMinute) {
  FakeClock clock;
  Refusals refusals(RefusalSchedule{}, clock.fn());
  EXPECT_FALSE(refusals.UntilProbe("ml/tj"));
  const CreateRefusal quota{"QuotaExceeded", "cannot create pod tj-worker-2: exceeded quota"};
  EXPECT_EQ(refusals.Refused("ml/tj", ChildRef::Kind::kPod, quota), Refusals::Change::kNew);
  EXPECT_EQ(*refusals.UntilProbe("ml/tj"), seconds(10));
  // Refused at every probe: count the probes a minute holds.
  int creates = 1;  // the refused create itself
  auto elapsed = Refusals::Clock::duration::zero();
  std::vector<milliseconds> waits;
  while (true) {
    const milliseconds wait = *refusals.UntilProbe("ml/tj");
    if (elapsed + wait >= seconds(60)) break;
    waits.push_back(wait);
    clock.now += wait;
    elapsed += wait;
    ++creates;
    EXPECT_EQ(refusals.Refused("ml/tj", ChildRef::Kind::kPod, quota), Refusals::Change::kSame);
  }
  EXPECT_EQ(waits, (std::vector<milliseconds>{seconds(10), seconds(20), seconds(20)}));
  EXPECT_LE(creates, 6);
  // A message that moves (the quota's usage) is a change of message only.
  EXPECT_EQ(refusals.Refused("ml/tj", ChildRef::Kind::kPod, {"QuotaExceeded", "used: 3"}),
            Refusals::Change::kMessageChanged);
  EXPECT_EQ(refusals.Refused("ml/tj", ChildRef::Kind::kPod, {"PodCreateForbidden", "x"}),
            Refusals::Change::kReasonChanged);
}

TEST(RefusalsTest, OnlyACreateOfTheRefusedKindClearsIt) {
  FakeClock clock;
  Refusals refusals(RefusalSchedule{}, clock.fn());
  refusals.Refused("ml/tj", ChildRef::Kind::kPod, {"QuotaExceeded", "m"});
  EXPECT_FALSE(refusals.Accepted("ml/tj", ChildRef::Kind::kSecret));  // its 409 says nothing
  ASSERT_TRUE(refusals.Get("ml/tj"));
  EXPECT_TRUE(refusals.Accepted("ml/tj", ChildRef::Kind::kPod));
  EXPECT_FALSE(refusals.Get("ml/tj"));
  EXPECT_FALSE(refusals.UntilProbe("ml/tj"));
  // Refused again later: a new refusal, the wait from the start.
  EXPECT_EQ(refusals.Refused("ml/tj", ChildRef::Kind::kPod, {"QuotaExceeded", "m"}),
            Refusals::Change::kNew);
  EXPECT_EQ(*refusals.UntilProbe("ml/tj"), seconds(10));
}

// After a restart the status is all there is: the probe is due at once, any
// Pod or Service create clears it; a status this process already cleared
// (the cache not showing the write yet) is not taken for a refusal.
TEST(RefusalsTest, ASeededRefusalProbesAtOnceAndAClearedOneIsNotSeededAgain) {
  FakeClock clock;
  Refusals refusals(RefusalSchedule{}, clock.fn());
  refusals.Seed("ml/tj", {"PodCreateForbidden", "from the status"});
  ASSERT_TRUE(refusals.Get("ml/tj"));
  EXPECT_EQ(*refusals.UntilProbe("ml/tj"), milliseconds(0));
  EXPECT_FALSE(refusals.Accepted("ml/tj", ChildRef::Kind::kSecret));
  EXPECT_TRUE(refusals.Accepted("ml/tj", ChildRef::Kind::kPod));
  refusals.Seed("ml/tj", {"PodCreateForbidden", "the stale status"});
  EXPECT_FALSE(refusals.Get("ml/tj"));
  refusals.Forget("ml/tj");  // the job was deleted
  refusals.Seed("ml/tj", {"PodCreateForbidden", "a new job of that name"});
  EXPECT_TRUE(refusals.Get("ml/tj"));
  // A seeded refusal refused again with the same words records no new event.
  EXPECT_EQ(refusals.Refused("ml/tj", ChildRef::Kind::kPod,
                             {"PodCreateForbidden", "a new job of that name"}),
            Refusals::Change::kSame);
}

}  // namespace
}  // namespace kubetrain::controller
