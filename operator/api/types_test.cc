#include "operator/api/types.h"

#include <gtest/gtest.h>

namespace kubetrain::api {
namespace {

TEST(TimeTest, FormatsAndParsesRfc3339RoundTrip) {
  StatusOr<Time> t = ParseTime("2026-11-21T13:45:21Z");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(FormatTime(*t), "2026-11-21T13:45:21Z");
  EXPECT_EQ(t->time_since_epoch().count(), 1795268721);
}

TEST(TimeTest, AcceptsOffsetsAndTruncatesFractions) {
  StatusOr<Time> t = ParseTime("2026-11-21T15:45:21.987+02:00");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(FormatTime(*t), "2026-11-21T13:45:21Z");
}

TEST(TimeTest, RejectsMalformedTimes) {
  for (const char* bad : {"", "2026-11-21", "2026-11-21T13:45:21", "2026-13-01T00:00:00Z",
                          "2026-11-21T13:45:21Zjunk", "2026-02-30T00:00:00Z"}) {
    EXPECT_FALSE(ParseTime(bad).ok()) << bad;
  }
}

TEST(RoleTest, TableMapsKeysAndLowerNames) {
  EXPECT_EQ(ReplicaTypeFromKey("PS"), ReplicaType::kPS);
  EXPECT_EQ(ReplicaTypeFromKey("ps"), std::nullopt);
  EXPECT_EQ(ReplicaTypeFromLower("evaluator"), ReplicaType::kEvaluator);
  EXPECT_EQ(Role(ReplicaType::kWorker).lower, "worker");
  EXPECT_FALSE(Role(ReplicaType::kEvaluator).in_cluster);
  EXPECT_TRUE(Role(ReplicaType::kChief).in_cluster);
  for (const RoleInfo& r : kRoles) EXPECT_EQ(r.key.size(), r.lower.size()) << r.key;
}

TEST(TrainingJobStatusTest, FinishedWhenSucceededOrFailedIsTrue) {
  TrainingJobStatus s;
  EXPECT_FALSE(s.Finished());
  s.conditions.push_back({ConditionType::kFailed, false, "", "", Time{}});
  EXPECT_FALSE(s.Finished());
  s.conditions.push_back({ConditionType::kSucceeded, true, "", "", Time{}});
  EXPECT_TRUE(s.Finished());
}

}  // namespace
}  // namespace kubetrain::api

namespace kubetrain::api {
namespace {

// Found by api_json_fuzz: year 448 was written back as "448-11-26T..." (strftime's %Y is
// not zero-padded), which ParseTime refuses, so a job's status did not round-trip.
TEST(TimeTest, EarlyYearsRoundTripAndOutOfRangeOffsetsAreRefused) {
  StatusOr<Time> t = ParseTime("0448-11-26T10:00:01Z");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(FormatTime(*t), "0448-11-26T10:00:01Z");
  StatusOr<Time> again = ParseTime(FormatTime(*t));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *t);
  EXPECT_FALSE(ParseTime("0001-01-01T00:00:00+00:01").ok());
  EXPECT_FALSE(ParseTime("9999-12-31T23:59:59-00:01").ok());
  EXPECT_TRUE(ParseTime("9999-12-31T23:59:59Z").ok());
}

}  // namespace
}  // namespace kubetrain::api

namespace kubetrain::api {
namespace {

constexpr Time kT0{std::chrono::seconds(1'800'000'000)};
constexpr Time kT1{std::chrono::seconds(1'800'000'060)};

// "<Ready>/<Reconciling>/<Stalled>:<Ready's reason>", "-" for an absent condition.
std::string Summary(const std::vector<Condition>& conditions) {
  auto value = [&](ConditionType t) -> std::string {
    for (const Condition& c : conditions) {
      if (c.type == t) return c.status ? "True" : "False";
    }
    return "-";
  };
  std::string reason;
  for (const Condition& c : conditions) {
    if (c.type == ConditionType::kReady) reason = c.reason;
  }
  return value(ConditionType::kReady) + "/" + value(ConditionType::kReconciling) + "/" +
         value(ConditionType::kStalled) + ":" + reason;
}

TEST(SummaryConditionsTest, FollowTheJobFromPendingToSucceededAsKstatusReadsThem) {
  std::vector<Condition> c;
  SetSummaryConditions(c, kT0);
  EXPECT_EQ(Summary(c), "False/True/-:Pending");  // InProgress
  c.push_back({ConditionType::kCreated, true, "TrainingJobCreated", "created", kT0});
  SetSummaryConditions(c, kT0);
  EXPECT_EQ(Summary(c), "False/True/-:TrainingJobCreated");
  c.push_back({ConditionType::kRunning, true, "TrainingJobRunning", "every replica", kT0});
  c.push_back({ConditionType::kUnschedulable, true, "Unschedulable", "1 of 2 pods", kT0});
  SetSummaryConditions(c, kT0);
  EXPECT_EQ(Summary(c), "False/True/-:Unschedulable");  // why it waits, not that it runs
  c.back().status = false;
  SetSummaryConditions(c, kT0);
  EXPECT_EQ(Summary(c), "False/True/-:TrainingJobRunning");
  c.push_back({ConditionType::kSucceeded, true, "TrainingJobSucceeded", "worker 0", kT1});
  SetSummaryConditions(c, kT1);
  EXPECT_EQ(Summary(c), "True/-/-:TrainingJobSucceeded");  // Current
  const std::vector<Condition> once = c;
  SetSummaryConditions(c, kT1 + std::chrono::seconds(5));
  EXPECT_EQ(c, once);  // idempotent: no status write per reconcile
  for (const Condition& x : c) {
    if (x.type == ConditionType::kReady) {
      EXPECT_EQ(x.last_transition_time, kT1);
    }
  }
}

TEST(SummaryConditionsTest, FailedIsStalledAndNotReconciling) {
  std::vector<Condition> c = {{ConditionType::kRunning, true, "TrainingJobRunning", "up", kT0}};
  SetSummaryConditions(c, kT0);
  c[0].status = false;
  c.push_back({ConditionType::kFailed, true, "BackoffLimitExceeded", "worker 0 exited 1", kT1});
  SetSummaryConditions(c, kT1);
  EXPECT_EQ(Summary(c), "False/-/True:BackoffLimitExceeded");  // Failed
  for (const Condition& x : c) {
    if (x.type == ConditionType::kStalled) {
      EXPECT_EQ(x.message, "worker 0 exited 1");
    }
  }
}

TEST(SummaryConditionsTest, RefusedIsStalledUnlessItWaitsForQuota) {
  std::vector<Condition> c = {
      {ConditionType::kCreateRefused, true, "PodCreateForbidden", "violates PodSecurity", kT0}};
  SetSummaryConditions(c, kT0);
  EXPECT_EQ(Summary(c), "False/-/True:PodCreateForbidden");
  c[0].reason = "QuotaExceeded";
  SetSummaryConditions(c, kT1);
  EXPECT_EQ(Summary(c), "False/True/-:QuotaExceeded");  // Stalled removed, not set False
}

TEST(SummaryConditionsTest, SuspendedIsInProgress) {
  std::vector<Condition> c = {{ConditionType::kSuspended, true, "Suspended", "spec", kT0}};
  SetSummaryConditions(c, kT0);
  EXPECT_EQ(Summary(c), "False/True/-:Suspended");
}

}  // namespace
}  // namespace kubetrain::api
