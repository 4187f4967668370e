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
