// The planner driven against a simulated world with a lagging view of it: the
// executor applies every plan at once, but the planner sees the children as
// they were `lag` steps earlier, as an informer cache may. Whatever the lag,
// each replica has at most one pod, every injected failure is counted exactly
// once, and the job ends as it would with a perfect view. PlannerStatusLagTest
// lags the job's status as well.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>

#include "operator/api/validation.h"
#include "operator/planner/planner.h"

namespace kubetrain::planner {
namespace {

using api::ReplicaType;
using std::chrono::seconds;

// The cluster, as the apiserver and kubelets would keep it.
class World {
 public:
  // Applies a plan like the executor: status first, then creates (AlreadyExists
  // is success), then deletes (NotFound is success).
  void Apply(const Plan& plan, api::TrainingJob& job) {
    job.status = plan.status;
    for (const ChildCreate& c : plan.creates) {
      const nlohmann::json& obj = c.object;
      const std::string& name = c.ref.name;
      if (c.ref.kind == ChildRef::Kind::kSecret) {
        secret_ = true;
      } else if (c.ref.kind == ChildRef::Kind::kConfigMap) {
        // Holds CLUSTER_CONFIG; nothing the planner observes.
      } else if (c.ref.kind == ChildRef::Kind::kService) {
        services_.insert(name);
      } else if (pods_.count(name)) {
        ++already_exists_;
      } else {
        ObservedPod pod;
        pod.name = name;
        pod.uid = name + "#" + std::to_string(++next_uid_);
        pod.role = *c.ref.role;
        pod.index = c.ref.index;
        pod.phase = PodPhase::kPending;
        pod.creation_timestamp = now_;
        pod.spec_hash = obj["metadata"]["annotations"][std::string(kSpecHashAnnotation)];
        pods_[name] = pod;
        ++creates_;
        if (job.status.Finished()) ++creates_after_finish_;
      }
    }
    for (const ChildRef& d : plan.deletes) {
      auto it = pods_.find(d.name);
      if (d.kind == ChildRef::Kind::kPod && it != pods_.end() && !it->second.deletion_timestamp) {
        it->second.deletion_timestamp = now_;
      }
    }
  }

  // One step of time: deleted pods go away, pending pods start.
  void Tick() {
    now_ += seconds(1);
    std::erase_if(pods_, [](const auto& kv) { return kv.second.deletion_timestamp.has_value(); });
    for (auto& [name, pod] : pods_) {
      if (pod.phase == PodPhase::kPending) pod.phase = PodPhase::kRunning;
    }
  }

  // The replica's container exits with `code` if it is running now. True if it did.
  bool Exit(const std::string& name, int code) {
    auto it = pods_.find(name);
    if (it == pods_.end() || it->second.phase != PodPhase::kRunning ||
        it->second.deletion_timestamp) {
      return false;
    }
    it->second.phase = code == 0 ? PodPhase::kSucceeded : PodPhase::kFailed;
    it->second.exit_code = code;
    it->second.reason = code == 0 ? "Completed" : "Error";
    return true;
  }

  ObservedChildren Snapshot() const {
    ObservedChildren o;
    o.secret_exists = secret_;
    for (const auto& [name, pod] : pods_) o.pods.push_back(pod);
    for (const std::string& s : services_) o.services.push_back({s, std::nullopt});
    return o;
  }

  api::Time now() const { return now_; }
  int creates() const { return creates_; }
  int creates_after_finish() const { return creates_after_finish_; }
  int running() const {
    int n = 0;
    for (const auto& [name, pod] : pods_) n += pod.phase == PodPhase::kRunning;
    return n;
  }

 private:
  api::Time now_{seconds(1'800'000'000)};
  std::map<std::string, ObservedPod> pods_;
  std::set<std::string> services_;
  bool secret_ = false;
  int next_uid_ = 0;
  int creates_ = 0;
  int already_exists_ = 0;
  int creates_after_finish_ = 0;
};

api::TrainingJob Job() {
  api::TrainingJob job;
  job.metadata.name = "tj";
  job.metadata.namespace_ = "ml";
  job.metadata.uid = "job-uid";
  for (ReplicaType t : {ReplicaType::kPS, ReplicaType::kWorker}) {
    api::ReplicaSpec& r = job.spec.replica_specs[t];
    r.replicas = 2;
    r.restart_policy = api::RestartPolicy::kOnFailure;
    r.pod_template = {{"spec", {{"containers", {{{"name", "trainer"}}}}}}};
  }
  job.spec.run_policy.backoff_limit = 5;
  return job;
}

// Script: a worker and a PS fail (retryable), then worker 0 succeeds.
struct Outcome {
  api::TrainingJobStatus status;
  int failures_injected = 0;
  int creates = 0;
  int creates_after_finish = 0;
  int running_at_end = 0;
};

Outcome Simulate(int lag) {
  World world;
  api::TrainingJob job = Job();
  std::deque<ObservedChildren> views;
  Outcome out;
  std::map<int, std::pair<std::string, int>> script = {
      {6, {"tj-worker-1", 137}}, {12, {"tj-ps-0", 1}}, {30, {"tj-worker-0", 0}}};
  PlanInput input;
  for (int step = 0; step < 60; ++step) {
    if (auto it = script.find(step); it != script.end()) {
      // Retry until the replica is running (it may be mid-restart).
      if (world.Exit(it->second.first, it->second.second)) {
        out.failures_injected += it->second.second != 0;
      } else {
        script[step + 1] = it->second;
      }
    }
    views.push_back(world.Snapshot());
    if (static_cast<int>(views.size()) > lag + 1) views.pop_front();
    input.now = world.now();
    Plan plan = PlanJob(job, views.front(), input);
    world.Apply(plan, job);
    world.Tick();
  }
  out.status = job.status;
  out.creates = world.creates();
  out.creates_after_finish = world.creates_after_finish();
  out.running_at_end = world.running();
  return out;
}

class PlannerSimTest : public ::testing::TestWithParam<int> {};

// The invariants every simulation must keep: two injected failures, each
// counted once; four pods plus exactly one replacement per failure (no
// duplicates, ever); nothing created after the finish; and, cleanPodPolicy
// Running, nothing left running once the view catches up.
void ExpectEveryFailureCountedOnceAndSuccess(const Outcome& out) {
  EXPECT_EQ(out.failures_injected, 2);
  EXPECT_TRUE(out.status.IsTrue(api::ConditionType::kSucceeded)) << out.status.state;
  EXPECT_EQ(out.status.replica_statuses.at(ReplicaType::kWorker).restarts, 1);
  EXPECT_EQ(out.status.replica_statuses.at(ReplicaType::kPS).restarts, 1);
  EXPECT_EQ(out.creates, 6);
  EXPECT_EQ(out.creates_after_finish, 0);
  EXPECT_EQ(out.running_at_end, 0);
}

TEST_P(PlannerSimTest, EveryFailureCountsOnceAndTheJobSucceeds) {
  ExpectEveryFailureCountedOnceAndSuccess(Simulate(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Lag, PlannerSimTest, ::testing::Values(0, 1, 2, 3, 5));

// The job's status lags too: a status written by one plan shows in the job the
// planner is given only `status_lag` steps later (a slow informer). As in the
// job controller, a status write carries the resourceVersion it was planned
// from and a stale one is refused (409 Conflict) with the rest of the plan, and
// the controller plans from the status it wrote last while the cache still
// shows the version that write replaced.
struct LagCase {
  int children_lag;
  int status_lag;
  bool remember_written;  // the controller's overlay of its last write
};

class StoredJob {
 public:
  StoredJob() : job_(Job()) { history_.push_back({job_.status, rv_}); }

  // The status the cache shows `lag` steps after the newest write.
  std::pair<api::TrainingJobStatus, int> Cached(int lag) const {
    const size_t back = std::min<size_t>(static_cast<size_t>(lag), history_.size() - 1);
    return history_[history_.size() - 1 - back];
  }
  // False (409 Conflict) unless `from_rv` is the stored version.
  bool WriteStatus(int from_rv, const api::TrainingJobStatus& status) {
    if (from_rv != rv_) return false;
    job_.status = status;
    ++rv_;
    return true;
  }
  void EndStep() { history_.push_back({job_.status, rv_}); }
  int rv() const { return rv_; }
  api::TrainingJob& job() { return job_; }

 private:
  api::TrainingJob job_;
  int rv_ = 1;
  std::deque<std::pair<api::TrainingJobStatus, int>> history_;  // one entry per step
};

struct LagOutcome : Outcome {
  int conflicts = 0;
};

LagOutcome SimulateStatusLag(const LagCase& c) {
  World world;
  StoredJob stored;
  std::deque<ObservedChildren> views;
  LagOutcome out;
  std::map<int, std::pair<std::string, int>> script = {
      {6, {"tj-worker-1", 137}}, {12, {"tj-ps-0", 1}}, {30, {"tj-worker-0", 0}}};
  struct Written {
    int from_rv, to_rv;
    api::TrainingJobStatus status;
  };
  std::optional<Written> written;
  PlanInput input;
  for (int step = 0; step < 90; ++step) {
    if (auto it = script.find(step); it != script.end()) {
      if (world.Exit(it->second.first, it->second.second)) {
        out.failures_injected += it->second.second != 0;
      } else {
        script[step + 1] = it->second;
      }
    }
    views.push_back(world.Snapshot());
    if (static_cast<int>(views.size()) > c.children_lag + 1) views.pop_front();

    api::TrainingJob seen = stored.job();
    auto [cached_status, cached_rv] = stored.Cached(c.status_lag);
    seen.status = cached_status;
    int rv = cached_rv;
    if (c.remember_written && written) {
      if (written->from_rv == cached_rv) {
        seen.status = written->status;
        rv = written->to_rv;
      } else {
        written.reset();
      }
    }
    input.now = world.now();
    Plan plan = PlanJob(seen, views.front(), input);
    bool applied = true;
    if (plan.status_changed) {
      applied = stored.WriteStatus(rv, plan.status);
      if (applied) {
        written = Written{cached_rv, stored.rv(), plan.status};
      } else {
        ++out.conflicts;
        written.reset();
      }
    }
    if (applied) {
      api::TrainingJob truth = stored.job();  // Apply sets the status it was given
      plan.status = truth.status;
      world.Apply(plan, truth);
    }
    stored.EndStep();
    world.Tick();
  }
  out.status = stored.job().status;
  out.creates = world.creates();
  out.creates_after_finish = world.creates_after_finish();
  out.running_at_end = world.running();
  return out;
}

class PlannerStatusLagTest : public ::testing::TestWithParam<LagCase> {};

TEST_P(PlannerStatusLagTest, EveryFailureCountsOnceAndTheJobSucceeds) {
  LagOutcome out = SimulateStatusLag(GetParam());
  ExpectEveryFailureCountedOnceAndSuccess(out);
  // Forgotten writes make every plan from a stale status conflict, but the
  // job still gets through.
  if (!GetParam().remember_written) {
    EXPECT_GT(out.conflicts, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Lag, PlannerStatusLagTest,
                         ::testing::Values(LagCase{0, 1, true}, LagCase{0, 2, true},
                                           LagCase{1, 1, true}, LagCase{2, 2, true},
                                           LagCase{1, 2, false}, LagCase{2, 1, false}),
                         [](const ::testing::TestParamInfo<LagCase>& p) {
                           return "Children" + std::to_string(p.param.children_lag) + "Status" +
                                  std::to_string(p.param.status_lag) +
                                  (p.param.remember_written ? "Remembered" : "Forgotten");
                         });

bool SameView(const ObservedChildren& a, const ObservedChildren& b) {
  if (a.secret_exists != b.secret_exists || a.pods.size() != b.pods.size() ||
      a.services.size() != b.services.size()) {
    return false;
  }
  for (size_t i = 0; i < a.pods.size(); ++i) {
    if (a.pods[i].uid != b.pods[i].uid || a.pods[i].phase != b.pods[i].phase ||
        a.pods[i].deletion_timestamp != b.pods[i].deletion_timestamp) {
      return false;
    }
  }
  return true;
}

// Timers: the planner runs only when what it sees changes or when its last
// requeue_after is due, like a controller that never polls. The deadline and the
// TTL must still fire, on time.
TEST(PlannerTimerTest, DeadlineAndTtlFireThroughRequeueAlone) {
  World world;
  api::TrainingJob job = Job();
  job.spec.run_policy.active_deadline_seconds = 20;
  job.spec.run_policy.ttl_seconds_after_finished = 15;
  PlanInput input;
  std::optional<ObservedChildren> last_view;
  api::Time due = api::Time::max();  // no timer set
  std::optional<api::Time> deleted_at;
  int plans = 0;
  const api::Time start = world.now();
  for (int step = 0; step < 100 && !deleted_at; ++step) {
    ObservedChildren view = world.Snapshot();
    const bool changed = !last_view || !SameView(*last_view, view);
    const bool timer = world.now() >= due;
    if (changed || timer) {
      input.now = world.now();
      Plan plan = PlanJob(job, view, input);
      ++plans;
      world.Apply(plan, job);
      due = plan.requeue_after ? world.now() + *plan.requeue_after : api::Time::max();
      if (plan.delete_job) deleted_at = world.now();
      last_view = std::move(view);
    }
    world.Tick();
  }
  ASSERT_TRUE(job.status.IsTrue(api::ConditionType::kFailed));
  EXPECT_EQ(job.status.Find(api::ConditionType::kFailed)->reason, "DeadlineExceeded");
  EXPECT_EQ(job.status.completion_time, start + seconds(20));
  ASSERT_TRUE(deleted_at.has_value());
  EXPECT_EQ(*deleted_at, start + seconds(35));
  EXPECT_LT(plans, 10);  // woken by changes and timers, not by polling
}

}  // namespace
}  // namespace kubetrain::planner
