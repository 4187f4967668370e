#include "operator/runtime/readiness.h"

#include <gtest/gtest.h>

#include <string>

namespace kubetrain::runtime {
namespace {

using State = Readiness::State;

TEST(ReadinessTest, StandbyWaitingForTheLeaseIsReady) {
  Readiness r;
  r.Set(State::kStandby);
  const Readiness::Report report = r.Check();
  EXPECT_TRUE(report.ready);
  EXPECT_NE(std::string(report.message).find("standby"), std::string::npos) << report.message;
}

TEST(ReadinessTest, LeaderIsReadyOnlyOnceItsCachesSynced) {
  Readiness r;
  r.Set(State::kStandby);
  r.Set(State::kSyncing);
  EXPECT_FALSE(r.Check().ready);
  EXPECT_NE(std::string(r.Check().message).find("not synced"), std::string::npos);
  r.Set(State::kSynced);
  EXPECT_TRUE(r.Check().ready);
}

TEST(ReadinessTest, NotReadyBeforeTheRoleIsKnown) {
  Readiness r;
  EXPECT_EQ(r.state(), State::kStarting);
  EXPECT_FALSE(r.Check().ready);
}

TEST(ReadinessTest, StoppingIsFinal) {
  Readiness r;
  r.Set(State::kSynced);
  r.Set(State::kStopping);
  EXPECT_FALSE(r.Check().ready);
  // The leader's workers stop after the shutdown began; nothing makes it Ready again.
  r.Set(State::kSynced);
  r.Set(State::kStandby);
  EXPECT_EQ(r.state(), State::kStopping);
  EXPECT_FALSE(r.Check().ready);
  EXPECT_EQ(std::string(r.Check().message), "shutting down");
}

}  // namespace
}  // namespace kubetrain::runtime
