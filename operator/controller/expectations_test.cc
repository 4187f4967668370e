#include "operator/controller/expectations.h"

#include <gtest/gtest.h>

namespace kubetrain::controller {

using planner::ChildRef;
using planner::ObservedChildren;
using planner::PlanInput;
using planner::PodPhase;
namespace {

using api::ReplicaType;
using std::chrono::seconds;

const api::Time kNow{seconds(1'800'000'000)};

// A clock the test moves by hand.
struct FakeClock {
  Expectations::Clock::time_point now{seconds(1'000)};
  std::function<Expectations::Clock::time_point()> fn() {
    return [this] { return now; };
  }
};

ChildRef PodRef(int32_t index) {
  return {ChildRef::Kind::kPod, "tj-worker-" + std::to_string(index), ReplicaType::kWorker, index};
}

TEST(ExpectationsTest, AnUnseenCreatedPodIsPendingUntilTheCacheShowsIt) {
  FakeClock clock;
  Expectations e(seconds(60), clock.fn());
  e.ExpectCreate("ml/tj", PodRef(1));
  ObservedChildren observed;
  e.Adjust("ml/tj", observed, kNow);
  ASSERT_EQ(observed.pods.size(), 1u);
  EXPECT_EQ(observed.pods[0].name, "tj-worker-1");
  EXPECT_EQ(observed.pods[0].role, ReplicaType::kWorker);
  EXPECT_EQ(observed.pods[0].index, 1);
  EXPECT_EQ(observed.pods[0].phase, PodPhase::kPending);
  EXPECT_EQ(observed.pods[0].creation_timestamp, kNow);

  // Seen once: the expectation is dropped, the cache alone speaks.
  ObservedChildren seen;
  seen.pods.push_back(observed.pods[0]);
  seen.pods[0].phase = PodPhase::kRunning;
  e.Adjust("ml/tj", seen, kNow);
  ASSERT_EQ(seen.pods.size(), 1u);
  EXPECT_EQ(seen.pods[0].phase, PodPhase::kRunning);
  ObservedChildren later;
  e.Adjust("ml/tj", later, kNow);
  EXPECT_TRUE(later.pods.empty());
}

// A replica's Pod and Service share a name: expecting one must not forget the other.
TEST(ExpectationsTest, APodAndItsServiceAreExpectedApart) {
  Expectations e(seconds(60));
  e.ExpectCreate("ml/tj", PodRef(1));
  e.ExpectCreate("ml/tj", {ChildRef::Kind::kService, "tj-worker-1", ReplicaType::kWorker, 1});
  ObservedChildren observed;
  e.Adjust("ml/tj", observed, kNow);
  ASSERT_EQ(observed.pods.size(), 1u);
  ASSERT_EQ(observed.services.size(), 1u);
  EXPECT_EQ(observed.pods[0].name, "tj-worker-1");
  EXPECT_EQ(observed.services[0].name, "tj-worker-1");
}

TEST(ExpectationsTest, AnExpiredCreateIsForgotten) {
  FakeClock clock;
  Expectations e(seconds(60), clock.fn());
  e.ExpectCreate("ml/tj", PodRef(0));
  clock.now += seconds(61);
  ObservedChildren observed;
  e.Adjust("ml/tj", observed, kNow);
  EXPECT_TRUE(observed.pods.empty());  // assumed lost: planned again
}

TEST(ExpectationsTest, ADeletedPodIsBeingDeletedUntilItGoes) {
  FakeClock clock;
  Expectations e(seconds(60), clock.fn());
  e.ExpectDelete("ml/tj", PodRef(0));
  ObservedChildren observed;
  observed.pods.push_back({});
  observed.pods[0].name = "tj-worker-0";
  e.Adjust("ml/tj", observed, kNow);
  EXPECT_EQ(observed.pods[0].deletion_timestamp, kNow);
  ObservedChildren gone;
  e.Adjust("ml/tj", gone, kNow);  // not there any more: the expectation ends
  ObservedChildren back;
  back.pods.push_back({});
  back.pods[0].name = "tj-worker-0";  // a new pod of the same name
  e.Adjust("ml/tj", back, kNow);
  EXPECT_FALSE(back.pods[0].deletion_timestamp.has_value());
}

TEST(ExpectationsTest, SecretAndConfigMapCreatesNeedNoWaiting) {
  Expectations e(seconds(60));
  e.ExpectCreate("ml/tj", {ChildRef::Kind::kSecret, "tj-auth-job-uid"});
  e.ExpectCreate("ml/tj", {ChildRef::Kind::kService, "tj-worker-0", ReplicaType::kWorker, 0});
  ObservedChildren observed;
  e.Adjust("ml/tj", observed, kNow);
  EXPECT_TRUE(observed.pods.empty());
  ASSERT_EQ(observed.services.size(), 1u);
  EXPECT_EQ(observed.services[0].name, "tj-worker-0");
}

TEST(ExpectationsTest, TheWrittenStatusStandsWhileTheCacheShowsTheOldVersion) {
  Expectations e(seconds(60));
  api::TrainingJobStatus status;
  status.state = "Running";
  e.StatusWritten("ml/tj", "10", "11", status);
  auto last = e.LastStatus("ml/tj", "10");
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->status.state, "Running");
  EXPECT_EQ(last->resource_version, "11");
  // The cache moved on (to our write or past it): the cache wins from now on.
  EXPECT_FALSE(e.LastStatus("ml/tj", "11").has_value());
  EXPECT_FALSE(e.LastStatus("ml/tj", "10").has_value());
}

// Two writes while the cache lagged (the second went over the first's 11
// while the cache still showed 10): when the cache then shows 11, the second
// write (12) is still the newest, not the cache's 11, whose version would
// conflict. The chain grows with each write over one of its versions.
TEST(ExpectationsTest, TheWrittenStatusStandsWhileTheCacheShowsAnyEarlierWriteOfItsChain) {
  Expectations e(seconds(60));
  api::TrainingJobStatus status;
  status.state = "Running";
  e.StatusWritten("ml/tj", "10", "11", status);
  status.state = "Succeeded";
  e.StatusWritten("ml/tj", "10", "12", status);  // over 11, the cache still at 10
  auto last = e.LastStatus("ml/tj", "11");
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->status.state, "Succeeded");
  EXPECT_EQ(last->resource_version, "12");
  e.StatusWritten("ml/tj", "11", "13", status);  // over 12, the cache at 11
  ASSERT_TRUE(e.LastStatus("ml/tj", "12").has_value());
  EXPECT_EQ(e.LastStatus("ml/tj", "10")->resource_version, "13");
  // Caught up: the cache wins from now on.
  EXPECT_FALSE(e.LastStatus("ml/tj", "13").has_value());
  EXPECT_FALSE(e.LastStatus("ml/tj", "12").has_value());
  // A write over a version outside the chain (someone else's) starts anew.
  e.StatusWritten("ml/tj", "20", "21", status);
  e.StatusWritten("ml/tj", "30", "31", status);
  EXPECT_FALSE(e.LastStatus("ml/tj", "20").has_value());
}

// A TFJob's status goes in two writes (status, then the state annotation):
// the cache showing the first is half-written, not the version before it,
// nor the final one, nor after the write failed.
TEST(ExpectationsTest, TheFirstOfTwoStatusWritesIsHalfWritten) {
  Expectations e(seconds(60));
  api::TrainingJobStatus status;
  status.state = "Running";
  EXPECT_FALSE(e.HalfWritten("tfjob:ml/tf", "11"));
  e.StatusWritten("tfjob:ml/tf", "10", "12", status, "11");
  EXPECT_FALSE(e.HalfWritten("tfjob:ml/tf", "10"));
  EXPECT_TRUE(e.HalfWritten("tfjob:ml/tf", "11"));
  EXPECT_FALSE(e.HalfWritten("tfjob:ml/tf", "12"));
  e.StatusWritten("ml/tj", "10", "11", status);  // one request: never half
  EXPECT_FALSE(e.HalfWritten("ml/tj", ""));
  e.ForgetStatus("tfjob:ml/tf");
  EXPECT_FALSE(e.HalfWritten("tfjob:ml/tf", "11"));
}

TEST(ExpectationsTest, ARejectionIsPlannedUntilRecorded) {
  Expectations e(seconds(60));
  e.ChildRejected("ml/tj", "the apiserver rejected pod tj-worker-0: bad");
  e.AuthSecretReplaced("ml/tj");
  PlanInput input;
  e.FillPlanInput("ml/tj", input);
  EXPECT_EQ(input.rejected_child, "the apiserver rejected pod tj-worker-0: bad");
  EXPECT_TRUE(input.auth_secret_replaced);
  e.FailureRecorded("ml/tj");
  PlanInput after;
  e.FillPlanInput("ml/tj", after);
  EXPECT_FALSE(after.rejected_child.has_value());
  EXPECT_FALSE(after.auth_secret_replaced);
  PlanInput other;
  e.FillPlanInput("ml/other", other);
  EXPECT_FALSE(other.rejected_child.has_value());
}

TEST(ExpectationsTest, ConfigMapContentIsKnownOnceWritten) {
  Expectations e(seconds(60));
  EXPECT_FALSE(e.ConfigMapHolds("ml/tj", "{a}", /*created=*/false));  // unknown: replace it
  e.ConfigMapWritten("ml/tj", "{a}");
  EXPECT_TRUE(e.ConfigMapHolds("ml/tj", "{a}", false));
  EXPECT_FALSE(e.ConfigMapHolds("ml/tj", "{b}", false));  // reshaped spec
  EXPECT_TRUE(e.ConfigMapHolds("ml/tj", "{b}", /*created=*/true));
  e.Forget("ml/tj");
  EXPECT_FALSE(e.ConfigMapHolds("ml/tj", "{b}", false));
}

TEST(ExpectationsTest, AChildSeenToExistIsKnownForItsJobUidForMaxAge) {
  FakeClock clock;
  Expectations e(seconds(60), clock.fn());
  const auto np = ChildRef::Kind::kNetworkPolicy;
  EXPECT_FALSE(e.KnowsChild("ml/tj", "uid-1", np, seconds(600)));
  e.ChildExists("ml/tj", "uid-1", np);
  EXPECT_TRUE(e.KnowsChild("ml/tj", "uid-1", np, seconds(600)));
  EXPECT_FALSE(e.KnowsChild("ml/tj", "uid-1", ChildRef::Kind::kSecret, seconds(600)));
  // A same-named job of another UID knows nothing.
  EXPECT_FALSE(e.KnowsChild("ml/tj", "uid-2", np, seconds(600)));
  EXPECT_FALSE(e.KnowsChild("ml/tj", "", np, seconds(600)));
  clock.now += seconds(600);
  EXPECT_FALSE(e.KnowsChild("ml/tj", "uid-1", np, seconds(600)));  // due to be checked again
  e.ChildExists("ml/tj", "uid-1", np);
  EXPECT_TRUE(e.KnowsChild("ml/tj", "uid-1", np, seconds(600)));
  e.ChildExists("ml/tj", "uid-2", ChildRef::Kind::kSecret);  // the name's new job
  EXPECT_FALSE(e.KnowsChild("ml/tj", "uid-1", np, seconds(600)));
  EXPECT_FALSE(e.KnowsChild("ml/tj", "uid-2", np, seconds(600)));
  e.ChildExists("ml/tj", "uid-2", np);
  e.Forget("ml/tj");
  EXPECT_FALSE(e.KnowsChild("ml/tj", "uid-2", np, seconds(600)));
}

TEST(ExpectationsTest, ADeferredStatusStandsUnwrittenWhileTheCacheShowsItsVersion) {
  Expectations e(seconds(60));
  api::TrainingJobStatus status;
  status.start_time = kNow;
  e.StatusDeferred("ml/tj", "5", status);
  auto got = e.LastStatus("ml/tj", "5");
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->unwritten);
  EXPECT_EQ(got->resource_version, "5");  // the write goes over the cached version
  EXPECT_EQ(got->status.start_time, kNow);
  EXPECT_FALSE(e.LastStatus("ml/tj", "6").has_value());  // the job changed: plan afresh
  EXPECT_FALSE(e.LastStatus("ml/tj", "5").has_value());
  e.StatusWritten("ml/tj", "5", "7", status);
  EXPECT_FALSE(e.LastStatus("ml/tj", "5")->unwritten);
}

TEST(ExpectationsTest, APodSeenGoneIsNoLongerAwaited) {
  Expectations e(seconds(60));
  e.ExpectCreate("ml/tj", PodRef(0));
  e.ExpectCreate("ml/tj", PodRef(1));
  e.PodGone("ml/tj", "tj-worker-1");  // created and deleted before a reconcile saw it
  ObservedChildren observed;
  e.Adjust("ml/tj", observed, kNow);
  ASSERT_EQ(observed.pods.size(), 1u);
  EXPECT_EQ(observed.pods[0].name, "tj-worker-0");
  e.PodGone("ml/other", "tj-worker-0");  // another job's: nothing
}

}  // namespace
}  // namespace kubetrain::controller
