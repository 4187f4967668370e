// JobController against a fake apiserver (runtime/fake_api_client.h: objects
// in memory, watch events streamed): how the executor carries out plans. The
// same behaviours run against a real control plane in tests/controller/.
#include "operator/controller/job_controller.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "operator/api/json.h"
#include "operator/controller/job_client.h"
#include "operator/controller/kueue_integration.h"
#include "operator/kueue/workload.h"
#include "operator/progress/fake_metrics_servers.h"
#include "operator/runtime/fake_api_client.h"
#include "operator/runtime/metrics.h"

namespace kubetrain::controller {
namespace {

using nlohmann::json;
using runtime::AdvanceUntil;
using runtime::Eventually;
using runtime::FakeApi;
using runtime::NowhereClient;
using runtime::RecorderOptions;
using runtime::Settle;
using std::chrono::milliseconds;
using std::chrono::seconds;

json Job(const std::string& restart_policy = "OnFailure") {
  const json tmpl = {{"spec", {{"containers", {{{"name", "trainer"}, {"image", "x"}}}}}}};
  return {
      {"apiVersion", "kubetrain.io/v1alpha1"},
      {"kind", "TrainingJob"},
      {"metadata", {{"name", "tj"}, {"namespace", "ml"}, {"uid", "job-uid"}, {"generation", 1}}},
      {"spec",
       {{"replicaSpecs",
         {{"Worker", {{"replicas", 2}, {"restartPolicy", restart_policy}, {"template", tmpl}}}}}}}};
}

// A pod of the job as the apiserver would serve it.
json Pod(int index, const std::string& phase, int exit_code = 0) {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", "tj-worker-" + std::to_string(index)},
                {"namespace", "ml"},
                {"labels",
                 {{"kubetrain.io/job-name", "tj"},
                  {"kubetrain.io/replica-type", "worker"},
                  {"kubetrain.io/replica-index", std::to_string(index)}}},
                {"ownerReferences",
                 {{{"apiVersion", "kubetrain.io/v1alpha1"},
                   {"kind", "TrainingJob"},
                   {"name", "tj"},
                   {"uid", "job-uid"},
                   {"controller", true}}}}}},
              {"spec", {{"containers", {{{"name", "trainer"}}}}}},
              {"status", {{"phase", phase}}}};
  if (phase == "Failed" || phase == "Succeeded") {
    pod["status"]["containerStatuses"] = {
        {{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", exit_code}}}}}}};
  }
  return pod;
}

JobControllerOptions Options() {
  JobControllerOptions o;
  o.namespaces = {"ml"};
  o.workers = 2;
  o.read_progress = false;  // status.progress is not under test
  return o;
}

// Accepts every Event POSTed to it (the recorder's client points here) and
// keeps them.
class EventSink {
 public:
  EventSink() {
    server_.Post(R"(/apis/events.k8s.io/v1/namespaces/([^/]+)/events)",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   std::lock_guard lock(mu_);
                   events_.push_back(json::parse(req.body, nullptr, false));
                   res.status = 201;
                   res.set_content(req.body, "application/json");
                 });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::jthread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(milliseconds(1));
  }
  ~EventSink() { server_.stop(); }
  std::unique_ptr<kube::Client> Client() const {
    kube::Config config;
    config.server = "http://127.0.0.1:" + std::to_string(port_);
    config.max_retries = 0;
    auto client = kube::Client::Create(std::move(config));
    return std::move(*client);
  }
  // The events with `reason`, in order.
  std::vector<json> With(const std::string& reason) {
    std::lock_guard lock(mu_);
    std::vector<json> out;
    for (const json& e : events_) {
      if (e.is_object() && e.value("reason", "") == reason) out.push_back(e);
    }
    return out;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<json> events_;  // guarded by mu_
  std::jthread thread_;       // joined first
};

// Runs a JobController over `api` until destroyed; its events go to `events`
// when given, else nowhere.
class Running {
 public:
  explicit Running(FakeApi* api, JobControllerOptions options = Options(),
                   EventSink* events = nullptr)
      : events_client_(events != nullptr ? events->Client() : NowhereClient()),
        recorder_(events_client_.get(), RecorderOptions()),
        metrics_(&registry_),
        controller_(api, &recorder_, &metrics_, std::move(options)) {
    Status s = controller_.Start(seconds(10));
    EXPECT_TRUE(s.ok()) << s.ToString();
    thread_ = std::jthread([this](std::stop_token stop) { controller_.Run(stop); });
  }
  double Registry(std::string_view name, std::string_view labels = "") const {
    return registry_.Get(name, labels);
  }
  bool Idle() const { return controller_.Idle(); }

 private:
  std::unique_ptr<kube::Client> events_client_;
  runtime::EventRecorder recorder_;
  runtime::Metrics registry_;
  Metrics metrics_;
  JobController controller_;
  std::jthread thread_;  // stopped and joined first
};

// The controller on a FakeClock: timers (retries, requeues, the coalescing
// window) fire only when the test moves the clock, so "nothing more happens"
// is asserted after the controller is done rather than after a sleep.
JobControllerOptions OnClock(FakeClock* clock, JobControllerOptions o = Options()) {
  o.clock = clock;
  return o;
}

// After the seeded objects' creationTimestamp (2026-11-22T20:00:00Z), as the
// real clock is.
std::chrono::system_clock::time_point TestWallStart() {
  return std::chrono::sys_days(std::chrono::year{2026} / 11 / 23);
}

// Moves `clock` forward by `total` in `steps` and lets the controller settle
// after each, so what a step makes due (a retry, a requeue) runs before the
// next: `total` of the controller's time, in no real time.
void AdvanceAndSettle(FakeClock& clock, FakeApi& api, const Running& controller,
                      std::chrono::milliseconds total, int steps = 10) {
  ASSERT_TRUE(Settle(api, controller));
  for (int i = 0; i < steps; ++i) {
    clock.Advance(i + 1 < steps ? total / steps : total - (steps - 1) * (total / steps));
    ASSERT_TRUE(Settle(api, controller)) << "step " << i;
  }
}

std::string Reason(const json& job, const std::string& type) {
  const json status = job.value("status", json::object());
  for (const json& c : status.value("conditions", json::array())) {
    if (c.value("type", "") == type && c.value("status", "") == "True") {
      return c.value("reason", "");
    }
  }
  return "";
}

// The message of the job's condition `type` (whatever its status).
std::string Message(const json& job, const std::string& type) {
  const json status = job.value("status", json::object());
  for (const json& c : status.value("conditions", json::array())) {
    if (c.value("type", "") == type) return c.value("message", "");
  }
  return "";
}

// Where a pod's first container reads CLUSTER_CONFIG from (its valueFrom).
std::string ClusterConfigSource(const json& pod) {
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == "CLUSTER_CONFIG") return e["valueFrom"].dump();
  }
  return "";
}

// The Secret the pod's KUBETRAIN_AUTH_KEY comes from.
std::string AuthKeySecret(const json& pod) {
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == "KUBETRAIN_AUTH_KEY") return e["valueFrom"]["secretKeyRef"].value("name", "");
  }
  return "";
}

size_t Count(const std::vector<FakeApi::Call>& calls, const std::string& verb,
             const std::string& resource, StatusCode code) {
  size_t n = 0;
  for (const auto& c : calls) n += c.verb == verb && c.resource == resource && c.code == code;
  return n;
}

TEST(JobControllerTest, WritesTheStatusBeforeDeletingAFailedPod) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  api.Seed(kube::kPods, Pod(0, "Running"));
  api.Seed(kube::kPods, Pod(1, "Failed", 137));
  Running controller(&api);
  ASSERT_TRUE(Eventually([&] {
    for (const auto& c : api.calls()) {
      if (c.verb == "delete" && c.name == "tj-worker-1" && c.code == StatusCode::kOk) return true;
    }
    return false;
  }));
  const auto calls = api.calls();
  size_t status_written = calls.size(), deleted = calls.size();
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].verb == "update_status" && calls[i].code == StatusCode::kOk &&
        status_written == calls.size()) {
      status_written = i;
    }
    if (calls[i].verb == "delete" && calls[i].name == "tj-worker-1") deleted = i;
  }
  EXPECT_LT(status_written, deleted);
  // The written status counted the failure (its pod's UID) before the pod went.
  const json job = *api.Get(kTrainingJobs, "ml", "tj");
  EXPECT_EQ(job["status"]["replicaStatuses"]["Worker"].value("restarts", 0), 1) << job.dump();
}

TEST(JobControllerTest, AlreadyExistsCountsAsCreated) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  // Every pod create answers 409 although the caches never show the pods.
  api.FailNext("create", "pods", Status(StatusCode::kAlreadyExists, "AlreadyExists (409)"), 2);
  FakeClock clock(TestWallStart());
  JobControllerOptions options = OnClock(&clock);
  options.status_coalesce = milliseconds(0);  // Created at once
  Running controller(&api, options);
  ASSERT_TRUE(Eventually(
      [&] { return Count(api.calls(), "create", "pods", StatusCode::kAlreadyExists) == 2; }));
  ASSERT_TRUE(
      Eventually([&] { return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Created") != ""; }));
  // No error, no retry: the expectations treat the pods as there (Pending).
  AdvanceAndSettle(clock, api, controller, milliseconds(300));  // a wrong retry would be due
  EXPECT_EQ(controller.Registry("kubetrain_reconcile_errors_total"), 0);
  std::string log;
  for (const auto& c : api.calls()) {
    log +=
        c.verb + " " + c.resource + "/" + c.name + " " + std::string(StatusCodeName(c.code)) + "\n";
  }
  EXPECT_EQ(Count(api.calls(), "create", "pods", StatusCode::kOk), 0u) << log;
  EXPECT_EQ(Count(api.calls(), "create", "pods", StatusCode::kAlreadyExists), 2u) << log;
}

TEST(JobControllerTest, RejectedPodFailsTheJobOnceWithInvalidSpec) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  api.FailNext("create", "pods",
               Status(StatusCode::kInvalidArgument, "Invalid (422): spec.containers[0].image"));
  FakeClock clock(TestWallStart());
  Running controller(&api, OnClock(&clock));
  // The failure is planned by the reconcile after the one whose create was
  // rejected: a retry, on the clock.
  ASSERT_TRUE(AdvanceUntil(clock, api, controller, [&] {
    return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Failed") == "InvalidSpec";
  }));
  const std::string message = Message(*api.Get(kTrainingJobs, "ml", "tj"), "Failed");
  EXPECT_NE(message.find("the apiserver rejected pod tj-worker-"), std::string::npos) << message;
  EXPECT_NE(message.find("spec.containers[0].image"), std::string::npos) << message;
  AdvanceAndSettle(clock, api, controller, milliseconds(300));  // a wrong retry would be due
  // Once: one rejected create, one job failed, and the finished job gets no new
  // pod. Its other pod may have been created beside the rejected one (creates
  // run concurrently); the failed job deletes it (cleanPodPolicy Running).
  EXPECT_EQ(Count(api.calls(), "create", "pods", StatusCode::kInvalidArgument), 1u);
  EXPECT_LE(Count(api.calls(), "create", "pods", StatusCode::kOk), 1u);
  EXPECT_TRUE(Eventually([&] {
    return !api.Get(kube::kPods, "ml", "tj-worker-0") && !api.Get(kube::kPods, "ml", "tj-worker-1");
  }));
  EXPECT_EQ(controller.Registry("kubetrain_jobs_failed_total"), 1);
}

TEST(JobControllerTest, StatusConflictIsRetried) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  api.FailNext("update_status", "trainingjobs", Status(StatusCode::kConflict, "Conflict (409)"));
  JobControllerOptions options = Options();
  options.status_coalesce = milliseconds(0);  // the first status goes at once
  Running controller(&api, options);
  ASSERT_TRUE(Eventually([&] {
    return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Created") == "TrainingJobCreated";
  }));
  const auto calls = api.calls();
  EXPECT_EQ(Count(calls, "update_status", "trainingjobs", StatusCode::kConflict), 1u);
  EXPECT_GE(Count(calls, "update_status", "trainingjobs", StatusCode::kOk), 1u);
  // Nothing was created before the status that the first plan needed was written.
  EXPECT_EQ(calls.front().verb, "update_status");
  EXPECT_EQ(calls.front().code, StatusCode::kConflict);
}

// A 422 on a status write (a status the CRD's schema refuses) is surfaced (a
// StatusWriteFailed event, the reconcile error counted) and retried with
// backoff, not taken for permanent by its code: the job got no status, and,
// status first, no pod, until something else about it changed.
TEST(JobControllerTest, RefusedStatusWriteIsReportedAndRetried) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  api.FailNext("update_status", "trainingjobs",
               Status(StatusCode::kInvalidArgument,
                      "Invalid (422): status.conditions[0].message: Too long"));
  FakeClock clock(TestWallStart());
  JobControllerOptions options = OnClock(&clock);
  options.status_coalesce = milliseconds(0);  // the first status goes at once
  EventSink events;
  Running controller(&api, options, &events);
  ASSERT_TRUE(AdvanceUntil(clock, api, controller, [&] {
    return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Created") == "TrainingJobCreated";
  }));
  const auto calls = api.calls();
  EXPECT_EQ(Count(calls, "update_status", "trainingjobs", StatusCode::kInvalidArgument), 1u);
  EXPECT_EQ(calls.front().code, StatusCode::kInvalidArgument);  // nothing created before
  EXPECT_GE(controller.Registry("kubetrain_reconcile_errors_total"), 1);
  ASSERT_TRUE(Eventually([&] { return events.With("StatusWriteFailed").size() == 1; }));
  const std::string note = events.With("StatusWriteFailed")[0].value("note", "");
  EXPECT_NE(note.find("Too long"), std::string::npos) << note;
}

// ---- Gang scheduling: the PodGroup ------------------------------------------------

json GangJob() {
  json job = Job();
  job["spec"]["runPolicy"] = {
      {"schedulingPolicy", {{"schedulerName", "gang"}, {"minAvailable", 2}}}};
  return job;
}

std::string CallLog(const std::vector<FakeApi::Call>& calls) {
  std::string log;
  for (const auto& c : calls) {
    log +=
        c.verb + " " + c.resource + "/" + c.name + " " + std::string(StatusCodeName(c.code)) + "\n";
  }
  return log;
}

TEST(JobControllerGangTest, CreatesThePodGroupBeforeAnyPod) {
  FakeApi api;
  api.Seed(kTrainingJobs, GangJob());
  Running controller(&api);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  const auto calls = api.calls();
  size_t group = calls.size(), first_pod = calls.size();
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].verb == "create" && calls[i].resource == "podgroups") group = i;
    if (calls[i].verb == "create" && calls[i].resource == "pods" && first_pod == calls.size())
      first_pod = i;
  }
  EXPECT_LT(group, first_pod) << CallLog(calls);
  const auto pg = api.Get(kube::kPodGroups, "ml", "tj-job-uid");
  ASSERT_TRUE(pg.has_value());
  EXPECT_EQ((*pg)["spec"]["minMember"], 2);
  EXPECT_EQ((*pg)["metadata"]["ownerReferences"][0]["uid"], "job-uid");
  EXPECT_EQ((*api.Get(kube::kPods, "ml", "tj-worker-0"))["spec"]["schedulerName"], "gang");
}

TEST(JobControllerGangTest, AnOutdatedPodGroupIsReplacedBeforeThePods) {
  FakeApi api;
  api.Seed(kTrainingJobs, GangJob());
  api.Seed(kube::kPodGroups, {{"apiVersion", "scheduling.x-k8s.io/v1alpha1"},
                              {"kind", "PodGroup"},
                              {"metadata", {{"name", "tj-job-uid"}, {"namespace", "ml"}}},
                              {"spec", {{"minMember", 5}, {"minResources", {{"cpu", "9"}}}}}});
  Running controller(&api);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  EXPECT_EQ(Count(api.calls(), "patch", "podgroups", StatusCode::kOk), 1u) << CallLog(api.calls());
  // The whole spec is replaced: minResources (no requests now) is gone too.
  EXPECT_EQ((*api.Get(kube::kPodGroups, "ml", "tj-job-uid"))["spec"], json({{"minMember", 2}}));
}

TEST(JobControllerGangTest, NoPodGroupApiFailsTheJobAndCreatesNoPod) {
  FakeApi api;
  api.Seed(kTrainingJobs, GangJob());
  api.FailNext("create", "podgroups", Status(StatusCode::kNotFound, "NotFound (404)"));
  FakeClock clock(TestWallStart());
  Running controller(&api, OnClock(&clock));
  ASSERT_TRUE(AdvanceUntil(clock, api, controller, [&] {
    return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Failed") == "GangSchedulingUnavailable";
  }));
  const std::string message = Message(*api.Get(kTrainingJobs, "ml", "tj"), "Failed");
  EXPECT_NE(message.find("PodGroup API (scheduling.x-k8s.io/v1alpha1 podgroups) is not installed"),
            std::string::npos)
      << message;
  AdvanceAndSettle(clock, api, controller, milliseconds(300));  // a wrong retry would be due
  EXPECT_EQ(Count(api.calls(), "create", "pods", StatusCode::kOk), 0u) << CallLog(api.calls());
  EXPECT_EQ(Count(api.calls(), "create", "podgroups", StatusCode::kNotFound), 1u);
}

TEST(JobControllerGangTest, NoRightToCreatePodGroupsSaysWhichGrantIsMissing) {
  FakeApi api;
  api.Seed(kTrainingJobs, GangJob());
  api.FailNext("create", "podgroups",
               Status(StatusCode::kPermissionDenied, "Forbidden (403): podgroups"));
  Running controller(&api);
  ASSERT_TRUE(Eventually([&] {
    return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Failed") == "GangSchedulingUnavailable";
  }));
  const std::string message = Message(*api.Get(kTrainingJobs, "ml", "tj"), "Failed");
  EXPECT_NE(message.find("grant create and patch on scheduling.x-k8s.io podgroups"),
            std::string::npos)
      << message;
  EXPECT_EQ(Count(api.calls(), "create", "pods", StatusCode::kOk), 0u);
}

TEST(JobControllerTest, LiveCountChangesWaitForTheCoalesceWindowAndGoInOneWrite) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  FakeClock clock(TestWallStart());
  JobControllerOptions options = OnClock(&clock);
  options.status_coalesce = seconds(1);
  Running controller(&api, options);
  // Created waits a window for the pods (they stay Pending here), then goes
  // with their Pending counts in one write.
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  AdvanceAndSettle(clock, api, controller, milliseconds(999));
  EXPECT_EQ(Count(api.calls(), "update_status", "trainingjobs", StatusCode::kOk), 0u);
  clock.Advance(milliseconds(1));
  ASSERT_TRUE(Eventually([&] {
    const json job = *api.Get(kTrainingJobs, "ml", "tj");
    const json status = job.value("status", json::object());
    const json workers =
        status.value("replicaStatuses", json::object()).value("Worker", json::object());
    return workers.value("active", 0) == 2;
  }));
  AdvanceAndSettle(clock, api, controller, milliseconds(300));  // a wrong extra write would be due
  const auto calls = api.calls();
  EXPECT_EQ(Count(calls, "update_status", "trainingjobs", StatusCode::kOk), 1u);
  EXPECT_EQ(Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Created"), "TrainingJobCreated");
}

// The cluster JSON goes into the job's auth Secret: a new job gets no ConfigMap,
// one write fewer, and its pods read CLUSTER_CONFIG from the Secret.
TEST(JobControllerTest, ANewJobKeepsItsClusterInTheSecretAndCreatesNoConfigMap) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  Running controller(&api);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  const auto calls = api.calls();
  EXPECT_EQ(Count(calls, "create", "secrets", StatusCode::kOk), 1u);
  EXPECT_EQ(Count(calls, "create", "configmaps", StatusCode::kOk), 0u);
  EXPECT_EQ(Count(calls, "update", "configmaps", StatusCode::kOk), 0u);
  const json secret = *api.Get(kube::kSecrets, "ml", "tj-auth-job-uid");
  const std::string cluster = secret["stringData"].value("cluster", "");
  EXPECT_NE(cluster.find("tj-worker-1.tj.ml.svc.cluster.local:2222"), std::string::npos) << cluster;
  const json pod = *api.Get(kube::kPods, "ml", "tj-worker-0");
  const std::string source = ClusterConfigSource(pod);
  EXPECT_EQ(source, R"({"secretKeyRef":{"key":"cluster","name":"tj-auth-job-uid"}})");
}

// After an operator upgrade: a job whose pods an earlier operator made (with
// CLUSTER_CONFIG from the ConfigMap, and a Secret holding only the key) gets its
// missing replica with the same reference, and its ConfigMap is kept up to date;
// the running pod stays.
TEST(JobControllerTest, AJobFromAnEarlierOperatorKeepsReadingItsConfigMap) {
  FakeApi api;
  json job = Job();
  job["status"] = {{"startTime", "2026-11-22T20:00:00Z"},
                   {"conditions",
                    {{{"type", "Created"},
                      {"status", "True"},
                      {"reason", "TrainingJobCreated"},
                      {"lastTransitionTime", "2026-11-22T20:00:00Z"}}}}};
  api.Seed(kTrainingJobs, job);
  json old_pod = Pod(0, "Running");
  old_pod["spec"]["containers"][0]["env"] = {
      {{"name", "CLUSTER_CONFIG"},
       {"valueFrom", {{"configMapKeyRef", {{"name", "tj-cluster"}, {"key", "cluster"}}}}}},
      {{"name", "KUBETRAIN_AUTH_KEY"},
       {"valueFrom", {{"secretKeyRef", {{"name", "tj-auth"}, {"key", "key"}}}}}}};
  api.Seed(kube::kPods, old_pod);
  api.Seed(kube::kSecrets, {{"apiVersion", "v1"},
                            {"kind", "Secret"},
                            {"metadata", {{"name", "tj-auth"}, {"namespace", "ml"}}},
                            {"data", {{"key", "AAAA"}}}});
  Running controller(&api);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 1; }));
  const json pod = *api.Get(kube::kPods, "ml", "tj-worker-1");
  const std::string source = ClusterConfigSource(pod);
  EXPECT_EQ(source, R"({"configMapKeyRef":{"key":"cluster","name":"tj-cluster"}})");
  // Its key from the Secret the running pod reads (not a UID-named one).
  EXPECT_EQ(AuthKeySecret(pod), "tj-auth");
  const auto calls = api.calls();
  EXPECT_EQ(Count(calls, "create", "configmaps", StatusCode::kOk), 1u);
  EXPECT_EQ(Count(calls, "create", "secrets", StatusCode::kAlreadyExists), 1u);
  EXPECT_EQ(Count(calls, "delete", "pods", StatusCode::kOk), 0u);
  const json cm = *api.Get(kube::kConfigMaps, "ml", "tj-cluster");
  EXPECT_NE(cm["data"].value("cluster", "").find("tj-worker-1"), std::string::npos) << cm.dump();
  EXPECT_FALSE(api.Get(kube::kSecrets, "ml", "tj-auth")->contains("stringData"));  // untouched
}

// A job re-created under the same name before the garbage collector removed
// the earlier job's Secret "tj-auth" (which had 1 worker's host list): the new
// job's Secret is named by its UID, so it never meets that one. Before, its
// pods read their key from the earlier Secret; once the garbage collector
// removed it, the first replacement pod re-created it with a new key and the
// job failed (AuthSecretDeleted).
TEST(JobControllerTest, ASameNamedEarlierJobsSecretIsNeverUsed) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  api.Seed(kube::kSecrets,
           {{"apiVersion", "v1"},
            {"kind", "Secret"},
            {"metadata",
             {{"name", "tj-auth"},
              {"namespace", "ml"},
              {"ownerReferences",
               {{{"kind", "TrainingJob"}, {"name", "tj"}, {"uid", "an-earlier-tj"}}}}}},
            {"data", {{"key", "AAAA"}}},
            {"stringData",
             {{"cluster", R"({"worker":["tj-worker-0.tj.ml.svc.cluster.local:2222"]})"}}}});
  Running controller(&api);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  for (const char* name : {"tj-worker-0", "tj-worker-1"}) {
    const json pod = *api.Get(kube::kPods, "ml", name);
    EXPECT_EQ(ClusterConfigSource(pod),
              R"({"secretKeyRef":{"key":"cluster","name":"tj-auth-job-uid"}})")
        << name;
    EXPECT_EQ(AuthKeySecret(pod), "tj-auth-job-uid") << name;
  }
  const json secret = *api.Get(kube::kSecrets, "ml", "tj-auth-job-uid");
  EXPECT_NE(secret["stringData"].value("cluster", "").find("tj-worker-1"), std::string::npos);

  // The garbage collector removes the earlier job's Secret; then a pod goes.
  ASSERT_TRUE(api.Delete(kube::kSecrets, "ml", "tj-auth", {}).ok());
  ASSERT_TRUE(api.Delete(kube::kPods, "ml", "tj-worker-0", {}).ok());
  ASSERT_TRUE(Eventually([&] {
    return Count(api.calls(), "create", "pods", StatusCode::kOk) == 3 ||
           !Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Failed").empty();
  }));
  EXPECT_EQ(Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Failed"), "");
  ASSERT_TRUE(api.Get(kube::kPods, "ml", "tj-worker-0"));
  EXPECT_EQ(AuthKeySecret(*api.Get(kube::kPods, "ml", "tj-worker-0")), "tj-auth-job-uid");
  EXPECT_EQ(Count(api.calls(), "create", "configmaps", StatusCode::kOk), 0u);
}

// Same for the NetworkPolicy: an earlier same-named job's policy, which the
// garbage collector is about to remove, is not taken for this job's.
TEST(JobControllerTest, ASameNamedEarlierJobsPolicyIsNeverTakenForThisJobs) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  api.Seed(kube::kNetworkPolicies,
           {{"apiVersion", "networking.k8s.io/v1"},
            {"kind", "NetworkPolicy"},
            {"metadata",
             {{"name", "tj-training"},
              {"namespace", "ml"},
              {"ownerReferences",
               {{{"kind", "TrainingJob"}, {"name", "tj"}, {"uid", "an-earlier-tj"}}}}}},
            {"spec", json::object()}});
  Running controller(&api);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  // The garbage collector removes the earlier job's policy.
  ASSERT_TRUE(api.Delete(kube::kNetworkPolicies, "ml", "tj-training", {}).ok());
  size_t ours = 0;
  for (const json& np : api.All(kube::kNetworkPolicies)) {
    for (const json& owner : np["metadata"].value("ownerReferences", json::array())) {
      ours += owner.value("uid", "") == "job-uid";
    }
  }
  EXPECT_EQ(ours, 1u) << CallLog(api.calls());
}

json JobOfWorkers(int workers) {
  json job = Job();
  job["spec"]["replicaSpecs"]["Worker"]["replicas"] = workers;
  return job;
}

// The pods of a job are created with several calls in flight (after its
// Secret, and its first pod alone: slow start), each exactly once.
TEST(JobControllerConcurrencyTest, PodsAreCreatedConcurrentlyEachOnceAfterTheSecret) {
  FakeApi api;
  api.Seed(kTrainingJobs, JobOfWorkers(12));
  api.GatherPodCreates(3);
  JobControllerOptions options = Options();
  options.create_parallelism = 3;
  Running controller(&api, options);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 12; }));
  EXPECT_EQ(api.max_pods_in_flight(), 3);  // never more than create_parallelism
  const auto calls = api.calls();
  size_t secret = calls.size(), first_pod = calls.size();
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].verb != "create") continue;
    if (calls[i].resource == "secrets" && secret == calls.size()) secret = i;
    if (calls[i].resource == "pods" && first_pod == calls.size()) first_pod = i;
  }
  EXPECT_LT(secret, first_pod);
  std::set<std::string> names;
  for (const auto& c : calls) {
    if (c.verb == "create" && c.resource == "pods") {
      EXPECT_TRUE(names.insert(c.name).second) << c.name;
    }
  }
  EXPECT_EQ(names.size(), 12u);
}

// One by one when asked.
TEST(JobControllerConcurrencyTest, ParallelismOneCreatesOnePodAtATime) {
  FakeApi api;
  api.Seed(kTrainingJobs, JobOfWorkers(4));
  JobControllerOptions options = Options();
  options.create_parallelism = 1;
  Running controller(&api, options);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 4; }));
  EXPECT_EQ(api.max_pods_in_flight(), 1);
}

// A pod create that fails among concurrent ones is reported (a reconcile
// error), retried, and the pod made once; the others are not made twice.
TEST(JobControllerConcurrencyTest, AFailedConcurrentCreateIsRetriedAndNoPodIsMadeTwice) {
  FakeApi api;
  api.Seed(kTrainingJobs, JobOfWorkers(8));
  api.FailNext("create", "pods", Status(StatusCode::kUnavailable, "ServiceUnavailable (503)"), 2);
  FakeClock clock(TestWallStart());
  Running controller(&api, OnClock(&clock));
  ASSERT_TRUE(AdvanceUntil(clock, api, controller, [&] {
    return Count(api.calls(), "create", "pods", StatusCode::kOk) == 8;
  }));  // the retry after the 503s waits for its backoff on the clock
  EXPECT_GE(controller.Registry("kubetrain_reconcile_errors_total"), 1);
  AdvanceAndSettle(clock, api, controller, milliseconds(300));  // a wrong extra create would be due
  const auto calls = api.calls();
  EXPECT_EQ(Count(calls, "create", "pods", StatusCode::kUnavailable), 2u);
  EXPECT_EQ(Count(calls, "create", "pods", StatusCode::kOk), 8u);
  EXPECT_EQ(Count(calls, "create", "pods", StatusCode::kAlreadyExists), 0u);
}

// ---- Replacement pods: the Secret and the NetworkPolicy --------------------------

// The creates among `calls` from index `from` on, as "resource/name Code"
// lines, sorted (calls in flight together are logged in any order).
std::string CreatesFrom(const std::vector<FakeApi::Call>& calls, size_t from) {
  std::vector<std::string> lines;
  for (size_t i = from; i < calls.size(); ++i) {
    if (calls[i].verb != "create") continue;
    lines.push_back(calls[i].resource + "/" + calls[i].name + " " +
                    std::string(StatusCodeName(calls[i].code)) + "\n");
  }
  std::sort(lines.begin(), lines.end());
  std::string log;
  for (const std::string& line : lines) log += line;
  return log;
}

// The job's two worker pods report Running.
void MarkWorkersRunning(FakeApi& api) {
  for (const char* name : {"tj-worker-0", "tj-worker-1"}) {
    json pod = *api.Get(kube::kPods, "ml", name);
    pod["status"]["phase"] = "Running";
    api.Seed(kube::kPods, std::move(pod));
  }
}

// Marks the job's pods Running and waits until the status counts them (with
// status_coalesce 0, written by a reconcile whose caches show both pods: a pod
// deleted before they did would stay expected until expectation_timeout).
void BringUp(FakeApi& api) {
  MarkWorkersRunning(api);
  ASSERT_TRUE(Eventually([&] {
    return api.Get(kTrainingJobs, "ml", "tj")
               ->value("status", json::object())
               .value("running", 0) == 2;
  }));
}

JobControllerOptions Uncoalesced() {
  JobControllerOptions o = Options();
  o.status_coalesce = milliseconds(0);
  return o;
}

// An operator process that creates the job's pods, sees them run, and stops.
void RunUntilUpThenStop(FakeApi& api) {
  Running first(&api, Uncoalesced());
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  BringUp(api);
}

// Deletes tj-worker-1 and waits for its replacement (the `n`th pod created);
// returns the creates made from the delete on. Secret creates are held until
// a pod create comes (FakeApi::HoldSecretCreatesUntilAPodCreate).
std::string ReplaceWorker1(FakeClock& clock, FakeApi& api, const Running& controller, size_t n) {
  const size_t from = api.calls().size();
  api.HoldSecretCreatesUntilAPodCreate();
  EXPECT_TRUE(api.Delete(kube::kPods, "ml", "tj-worker-1", {}).ok());
  EXPECT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == n; }));
  // The status saying 1 running went out before that create (same reconcile).
  BringUp(api);
  AdvanceAndSettle(clock, api, controller, milliseconds(300));  // a wrong extra create would be due
  return CreatesFrom(api.calls(), from);
}

// A replacement pod goes out alongside its job's Secret create (whose 409 says
// the Secret is still there; a success would fail the job, AuthSecretDeleted)
// and without the NetworkPolicy this process created. Before, the Secret's and
// the policy's creates went first, one after the other, each a 409.
TEST(JobControllerReplacementTest, GoesOutWithTheSecretAndWithoutAKnownPolicy) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  FakeClock clock(TestWallStart());
  Running controller(&api, OnClock(&clock, Uncoalesced()));
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  EXPECT_EQ(Count(api.calls(), "create", "networkpolicies", StatusCode::kOk), 1u);
  BringUp(api);
  for (size_t n : {3u, 4u}) {
    EXPECT_EQ(ReplaceWorker1(clock, api, controller, n),
              "pods/tj-worker-1 OK\n"
              "secrets/tj-auth-job-uid AlreadyExists\n");
  }
  // Each Secret create was in flight with its pod's, not before it.
  EXPECT_EQ(api.secret_holds_timed_out(), 0);
}

// An operator that restarts knows no policy: the job's first replacement pod
// sends it once, alongside the pod; the next one does not.
TEST(JobControllerReplacementTest, AfterARestartThePolicyIsSentOnceAlongsideThePod) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  ASSERT_NO_FATAL_FAILURE(RunUntilUpThenStop(api));
  FakeClock clock(TestWallStart());
  Running controller(&api, OnClock(&clock, Uncoalesced()));
  EXPECT_EQ(ReplaceWorker1(clock, api, controller, 3),
            "networkpolicies/tj-training-job-uid AlreadyExists\n"
            "pods/tj-worker-1 OK\n"
            "secrets/tj-auth-job-uid AlreadyExists\n");
  EXPECT_EQ(ReplaceWorker1(clock, api, controller, 4),
            "pods/tj-worker-1 OK\n"
            "secrets/tj-auth-job-uid AlreadyExists\n");
  EXPECT_EQ(api.secret_holds_timed_out(), 0);
}

// A pod deleted before the controller's cache showed it is replaced at once,
// not once its create expectation times out (60 s).
TEST(JobControllerReplacementTest, APodGoneBeforeTheCacheSawItIsReplacedAtOnce) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  api.DeleteOnCreate("tj-worker-1");
  Running controller(&api);
  ASSERT_TRUE(Eventually([&] {
    size_t n = 0;
    for (const auto& c : api.calls()) {
      n += c.verb == "create" && c.name == "tj-worker-1" && c.code == StatusCode::kOk;
    }
    return n == 2;
  }));
  EXPECT_TRUE(api.Get(kube::kPods, "ml", "tj-worker-1").has_value());
}

// A policy an older operator wrote (here: every port open to every pod) is brought to this
// operator's spec once per process: at the job's first pods, and for a job whose pods all
// run when the operator restarts (an upgrade), without waiting for a pod to be replaced.
json WidePolicy() {
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata",
           {{"name", "tj-training-job-uid"},
            {"namespace", "ml"},
            {"labels", {{"kubetrain.io/job-name", "tj"}}},
            {"ownerReferences", {{{"kind", "TrainingJob"}, {"name", "tj"}, {"uid", "job-uid"}}}}}},
          {"spec",
           {{"podSelector", {{"matchLabels", {{"kubetrain.io/job-name", "tj"}}}}},
            {"policyTypes", {"Ingress"}},
            {"ingress", json::array({json::object()})}}}};
}

bool PolicyIsNarrow(FakeApi& api) {
  auto np = api.Get(kube::kNetworkPolicies, "ml", "tj-training-job-uid");
  if (!np) return false;
  const json& ingress = (*np)["spec"].value("ingress", json::array());
  if (ingress.size() != 2) return false;
  for (const json& rule : ingress) {
    if (!rule.contains("ports") || !rule.contains("from")) return false;
  }
  return true;
}

TEST(JobControllerTest, AnOlderOperatorsWiderPolicyIsReplacedAtTheJobsFirstPods) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  api.Seed(kube::kNetworkPolicies, WidePolicy());
  Running controller(&api);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  ASSERT_TRUE(Eventually([&] { return PolicyIsNarrow(api); }))
      << api.Get(kube::kNetworkPolicies, "ml", "tj-training-job-uid")->dump();
  EXPECT_EQ(Count(api.calls(), "patch", "networkpolicies", StatusCode::kOk), 1u);
}

TEST(JobControllerTest, ARunningJobsWiderPolicyIsReplacedWhenANewOperatorStarts) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  ASSERT_NO_FATAL_FAILURE(RunUntilUpThenStop(api));
  ASSERT_TRUE(PolicyIsNarrow(api));
  EXPECT_EQ(Count(api.calls(), "patch", "networkpolicies", StatusCode::kOk), 0u);
  api.Seed(kube::kNetworkPolicies, WidePolicy());  // as an older operator left it
  Running controller(&api, Uncoalesced());
  ASSERT_TRUE(Eventually([&] { return PolicyIsNarrow(api); }))
      << api.Get(kube::kNetworkPolicies, "ml", "tj-training-job-uid")->dump();
  EXPECT_EQ(Count(api.calls(), "create", "pods", StatusCode::kOk), 2u);  // no pod replaced
  EXPECT_EQ(Count(api.calls(), "patch", "networkpolicies", StatusCode::kOk), 1u);
}

// A policy deleted behind the job's back comes back with the job's next pod
// once it is due to be checked again (network_policy_recheck; 0: every pod).
TEST(JobControllerReplacementTest, ADeletedPolicyComesBackWithTheNextPodOnceDue) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  FakeClock clock(TestWallStart());
  JobControllerOptions options = OnClock(&clock, Uncoalesced());
  options.network_policy_recheck = seconds(0);
  Running controller(&api, options);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  BringUp(api);
  ASSERT_TRUE(api.Delete(kube::kNetworkPolicies, "ml", "tj-training-job-uid", {}).ok());
  const std::string creates = ReplaceWorker1(clock, api, controller, 3);
  EXPECT_NE(creates.find("networkpolicies/tj-training-job-uid OK\n"), std::string::npos) << creates;
  EXPECT_TRUE(api.Get(kube::kNetworkPolicies, "ml", "tj-training-job-uid").has_value());
}

// ---- The first status -------------------------------------------------------------

size_t StatusWrites(FakeApi& api) {
  return Count(api.calls(), "update_status", "trainingjobs", StatusCode::kOk);
}

// A new job whose pods come up within the coalesce window writes its status
// once: Created and Running together (before: Created, then Running).
TEST(JobControllerFirstStatusTest, CreatedGoesWithRunningWhenThePodsComeUpInTheWindow) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  FakeClock clock(TestWallStart());
  JobControllerOptions options = OnClock(&clock);
  options.status_coalesce = seconds(60);
  Running controller(&api, options);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  AdvanceAndSettle(clock, api, controller, seconds(59));  // within the window: no write
  EXPECT_EQ(StatusWrites(api), 0u);
  MarkWorkersRunning(api);
  ASSERT_TRUE(Eventually([&] {
    return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Running") == "TrainingJobRunning";
  }));
  AdvanceAndSettle(clock, api, controller, milliseconds(300));  // a wrong extra write would be due
  EXPECT_EQ(StatusWrites(api), 1u);
  const json job = *api.Get(kTrainingJobs, "ml", "tj");
  EXPECT_EQ(Reason(job, "Created"), "TrainingJobCreated");
  EXPECT_EQ(job["status"].value("running", 0), 2);
  EXPECT_TRUE(job["status"].contains("startTime")) << job.dump();
  EXPECT_EQ(controller.Registry("kubetrain_jobs_created_total"), 1);
}

// Every write a new job causes until it runs: its Secret, NetworkPolicy and
// pods, then its job-wide Service once the pods run (before: with the pods, so
// the endpoint controllers rewrote its Endpoints and EndpointSlice as each pod
// got its IP and turned ready), then one status.
TEST(JobControllerFirstStatusTest, ANewJobWritesItsServiceOnceItsPodsRun) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  FakeClock clock(TestWallStart());
  JobControllerOptions options = OnClock(&clock);
  options.status_coalesce = seconds(60);
  Running controller(&api, options);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  AdvanceAndSettle(clock, api, controller, seconds(59));  // a wrong early create would be made
  EXPECT_EQ(Count(api.calls(), "create", "services", StatusCode::kOk), 0u);
  MarkWorkersRunning(api);
  ASSERT_TRUE(Eventually([&] {
    return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Running") == "TrainingJobRunning";
  }));
  AdvanceAndSettle(clock, api, controller, milliseconds(300));  // a wrong extra write would be due
  std::vector<std::string> writes;
  for (const FakeApi::Call& c : api.calls()) {
    if (c.verb == "create" && c.resource == "pods") {
      if (writes.empty() || writes.back() != "create pods") writes.push_back("create pods");
      continue;  // concurrent: counted below
    }
    writes.push_back(c.verb + " " + c.resource + (c.code == StatusCode::kOk ? "" : " failed"));
  }
  // The Service create and the status write may go in either order: the
  // reconcile that sees the pods run issues both.
  if (writes.size() == 5 && writes[3] == "update_status trainingjobs")
    std::swap(writes[3], writes[4]);
  EXPECT_EQ(writes,
            (std::vector<std::string>{"create secrets", "create networkpolicies", "create pods",
                                      "create services", "update_status trainingjobs"}));
  EXPECT_EQ(Count(api.calls(), "create", "pods", StatusCode::kOk), 2u);
  EXPECT_TRUE(api.Get(kube::kServices, "ml", "tj"));
}

// Pods that cannot be scheduled: the job says so at once, with Created, not
// after the window.
TEST(JobControllerFirstStatusTest, AJobThatCannotStartSaysWhyAtOnce) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  JobControllerOptions options = Options();
  options.status_coalesce = seconds(60);
  Running controller(&api, options);
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 2; }));
  json pod = *api.Get(kube::kPods, "ml", "tj-worker-0");
  pod["status"]["phase"] = "Pending";
  pod["status"]["conditions"] = {{{"type", "PodScheduled"},
                                  {"status", "False"},
                                  {"reason", "Unschedulable"},
                                  {"message", "0/3 nodes are available"}}};
  api.Seed(kube::kPods, std::move(pod));
  ASSERT_TRUE(Eventually([&] {
    return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Unschedulable") == "Unschedulable";
  }));
  EXPECT_EQ(Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Created"), "TrainingJobCreated");
  EXPECT_EQ(StatusWrites(api), 1u);
}

// Pods that stay Pending without a reason (pulling images): Created is
// written once the window has passed, with the time of the first plan.
TEST(JobControllerFirstStatusTest, CreatedIsWrittenAfterOneWindowWhileThePodsArePending) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  JobControllerOptions options = Options();
  options.status_coalesce = seconds(2);
  const auto before = std::chrono::system_clock::now();
  Running controller(&api, options);
  ASSERT_TRUE(Eventually([&] { return StatusWrites(api) == 1; }));
  const auto written = std::chrono::system_clock::now();
  EXPECT_GE(written - before, seconds(2));
  const json job = *api.Get(kTrainingJobs, "ml", "tj");
  EXPECT_EQ(Reason(job, "Created"), "TrainingJobCreated");
  EXPECT_EQ(job["status"]["replicaStatuses"]["Worker"].value("active", 0), 2) << job.dump();
  // The start time is the first plan's, not the write's: at least 1 s before it.
  const auto start = api::ParseTime(job["status"].value("startTime", ""));
  ASSERT_TRUE(start.ok()) << job.dump();
  EXPECT_LT(*start, std::chrono::time_point_cast<api::Time::duration>(written - seconds(1)))
      << job.dump();
}

// The CRD defaults a new job's status.state to Created, so the job reads
// Created before any write: its first status may wait 4 windows for its pods
// (at 500 jobs they take over a minute to run) and still go once, with Running.
TEST(JobControllerFirstStatusTest, AJobReadingTheDefaultStateCreatedWaitsFourWindows) {
  FakeApi api;
  json served = Job();
  served["status"] = {{"state", "Created"}};  // as the apiserver serves it
  api.Seed(kTrainingJobs, served);
  JobControllerOptions options = Options();
  options.status_coalesce = seconds(1);
  const auto before = std::chrono::steady_clock::now();
  Running controller(&api, options);
  ASSERT_TRUE(Eventually([&] { return StatusWrites(api) == 1; }));
  EXPECT_GE(std::chrono::steady_clock::now() - before, seconds(4));
  const json job = *api.Get(kTrainingJobs, "ml", "tj");
  EXPECT_EQ(Reason(job, "Created"), "TrainingJobCreated");
  EXPECT_EQ(job["status"]["replicaStatuses"]["Worker"].value("active", 0), 2) << job.dump();
}

// --- Kueue: the fake plays Kueue's part by writing Workload status.

JobControllerOptions KueueOptions() {
  JobControllerOptions o = Options();
  o.kueue = true;
  return o;
}

json QueuedJob(const std::string& queue) {
  json job = Job();
  job["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", queue}};
  return job;
}

json Flavor() {
  return {{"apiVersion", "kueue.x-k8s.io/v1beta1"},
          {"kind", "ResourceFlavor"},
          {"metadata", {{"name", "default"}}},
          {"spec", json::object()}};
}

// The job's only Workload, once the controller made it.
std::optional<json> OnlyWorkload(FakeApi& api) {
  const std::vector<json> all = api.All(kWorkloads);
  if (all.size() != 1) return std::nullopt;
  return all[0];
}

// As Kueue admits a Workload: quota reserved, admitted, one flavor.
void Admit(FakeApi& api, json wl) {
  wl["status"] = {{"conditions",
                   {{{"type", "QuotaReserved"}, {"status", "True"}, {"reason", "QuotaReserved"}},
                    {{"type", "Admitted"}, {"status", "True"}, {"reason", "Admitted"}}}},
                  {"admission",
                   {{"clusterQueue", "cq"},
                    {"podSetAssignments",
                     {{{"name", "worker"}, {"count", 2}, {"flavors", {{"cpu", "default"}}}}}}}}};
  auto written = api.UpdateStatus(kWorkloads, "ml", wl);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
}

void RemoveQueueLabel(FakeApi& api) {
  json job = *api.Get(kTrainingJobs, "ml", "tj");
  job["metadata"]["labels"].erase("kueue.x-k8s.io/queue-name");
  ASSERT_TRUE(api.Update(kTrainingJobs, "ml", job).ok());
}

void SetQueueLabel(FakeApi& api, const std::string& queue) {
  json job = *api.Get(kTrainingJobs, "ml", "tj");
  job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = queue;
  ASSERT_TRUE(api.Update(kTrainingJobs, "ml", job).ok());
}

// Worker 0 exits 0: the job succeeds (its other pods are deleted).
void FinishPods(FakeApi& api) {
  auto updated = api.Update(kube::kPods, "ml", Pod(0, "Succeeded"));
  ASSERT_TRUE(updated.ok()) << updated.status().ToString();
}

bool WorkloadFinished(FakeApi& api) {
  std::optional<json> wl = OnlyWorkload(api);
  return wl && Reason(*wl, "Finished") == "Succeeded";
}

// Before, removing the label of a queued job ran it at once (its Workload left
// holding quota); it now waits in its Workload's queue, runs when admitted,
// and finishes the Workload when it ends.
TEST(JobControllerKueueTest, AQueuedJobWhoseLabelIsRemovedRunsOnlyOnceAdmitted) {
  FakeApi api;
  api.Seed(kResourceFlavors, Flavor());
  api.Seed(kTrainingJobs, QueuedJob("q"));
  Running controller(&api, KueueOptions());
  ASSERT_TRUE(Eventually([&] { return OnlyWorkload(api).has_value(); }));
  RemoveQueueLabel(api);
  ASSERT_TRUE(Eventually([&] {
    return Message(*api.Get(kTrainingJobs, "ml", "tj"), "Suspended").find("label was removed") !=
           std::string::npos;
  }));
  EXPECT_TRUE(api.All(kube::kPods).empty()) << "the job ran without being admitted";
  EXPECT_EQ(Count(api.calls(), "create", "pods", StatusCode::kOk), 0u);

  Admit(api, *OnlyWorkload(api));
  ASSERT_TRUE(Eventually([&] { return api.All(kube::kPods).size() == 2; }));
  FinishPods(api);
  EXPECT_TRUE(Eventually([&] { return WorkloadFinished(api); })) << OnlyWorkload(api)->dump();
}

// Before, an admitted job that lost its label never finished its Workload:
// the Workload kept the quota until the job was deleted.
TEST(JobControllerKueueTest, AnAdmittedJobThatLosesItsLabelFinishesItsWorkload) {
  FakeApi api;
  api.Seed(kResourceFlavors, Flavor());
  api.Seed(kTrainingJobs, QueuedJob("q"));
  Running controller(&api, KueueOptions());
  ASSERT_TRUE(Eventually([&] { return OnlyWorkload(api).has_value(); }));
  Admit(api, *OnlyWorkload(api));
  ASSERT_TRUE(Eventually([&] { return api.All(kube::kPods).size() == 2; }));
  RemoveQueueLabel(api);
  FinishPods(api);
  ASSERT_TRUE(
      Eventually([&] { return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Succeeded") != ""; }));
  EXPECT_TRUE(Eventually([&] { return WorkloadFinished(api); })) << OnlyWorkload(api)->dump();
}

// Before, a changed queue label left the Workload in the old queue.
TEST(JobControllerKueueTest, AChangedQueueLabelMovesThePendingWorkload) {
  FakeApi api;
  api.Seed(kTrainingJobs, QueuedJob("q1"));
  Running controller(&api, KueueOptions());
  ASSERT_TRUE(Eventually([&] { return OnlyWorkload(api).has_value(); }));
  EXPECT_EQ(OnlyWorkload(api)->at("spec").value("queueName", ""), "q1");
  SetQueueLabel(api, "q2");
  EXPECT_TRUE(Eventually([&] {
    std::optional<json> wl = OnlyWorkload(api);
    return wl && wl->at("spec").value("queueName", "") == "q2";
  })) << OnlyWorkload(api)->dump();
  EXPECT_TRUE(api.All(kube::kPods).empty());
}

// The Workload cache lists only the operator's own Workloads (label
// kubetrain.io/job-name), never other job kinds'. Before, it listed every
// Workload with Kueue's job-uid label. A Workload an older operator made
// without the label is labelled at start (migration) and the cache finds it:
// its admitted job keeps running. An orphan (job replaced) is found by the
// job-name index and its finalizer dropped.
TEST(JobControllerKueueTest, CachesOnlyItsOwnWorkloadsAndLabelsAnOlderOperators) {
  FakeApi api;
  api.Seed(kResourceFlavors, Flavor());
  api.Seed(kTrainingJobs, QueuedJob("q"));
  json foreign = {{"apiVersion", "kueue.x-k8s.io/v1beta1"},
                  {"kind", "Workload"},
                  {"metadata",
                   {{"name", "job-batch-1-abcde"},
                    {"namespace", "ml"},
                    {"labels", {{"kueue.x-k8s.io/job-uid", "batch-uid"}}},
                    {"ownerReferences",
                     {{{"apiVersion", "batch/v1"},
                       {"kind", "Job"},
                       {"name", "batch-1"},
                       {"uid", "batch-uid"},
                       {"controller", true}}}}}},
                  {"spec", {{"queueName", "q"}, {"podSets", json::array()}}}};
  api.Seed(kWorkloads, foreign);
  // An older operator's Workload of this job, admitted: no job-name label.
  auto parsed = api::ParseTrainingJob(QueuedJob("q"));
  ASSERT_TRUE(parsed.ok());
  json older = kueue::BuildWorkload(*parsed, "q", std::nullopt);
  older["metadata"]["labels"].erase("kubetrain.io/job-name");
  api.Seed(kWorkloads, older);
  Admit(api, *api.Get(kWorkloads, "ml", older["metadata"]["name"]));
  // A Workload of an earlier job of the same name, being deleted.
  json orphan = older;
  orphan["metadata"]["name"] = "trainingjob-tj-00000";
  orphan["metadata"]["ownerReferences"][0]["uid"] = "earlier-uid";
  orphan["metadata"]["labels"]["kubetrain.io/job-name"] = "tj";
  orphan["metadata"]["deletionTimestamp"] = "2026-11-22T20:00:00Z";
  api.Seed(kWorkloads, orphan);

  Running controller(&api, KueueOptions());
  ASSERT_TRUE(Eventually([&] { return api.All(kube::kPods).size() == 2; }))
      << "the older operator's admitted Workload was not found";
  const json labelled = *api.Get(kWorkloads, "ml", older["metadata"]["name"]);
  EXPECT_EQ(labelled["metadata"]["labels"].value("kubetrain.io/job-name", ""), "tj");
  EXPECT_FALSE(api.Get(kWorkloads, "ml", "job-batch-1-abcde")
                   ->at("metadata")["labels"]
                   .contains("kubetrain.io/job-name"));
  EXPECT_TRUE(Eventually([&] {
    return api.Get(kWorkloads, "ml", "trainingjob-tj-00000")
        ->at("metadata")
        .value("finalizers", json::array())
        .empty();
  }));
  const std::set<std::string> cached =
      api.Served("workloads", "kueue.x-k8s.io/job-uid,kubetrain.io/job-name");
  EXPECT_FALSE(cached.empty()) << "the cache's selector changed";
  EXPECT_FALSE(cached.contains("job-batch-1-abcde")) << "another job kind's Workload was cached";
  EXPECT_TRUE(api.Served("workloads", "kueue.x-k8s.io/job-uid").empty())
      << "the cache listed every job integration's Workloads";
}

// The cache may not have seen a Workload yet (just created) when the job's
// label is removed: a job Kueue held reads its Workload from the apiserver
// before it runs. (Here the cache never sees it: the Workload lacks the labels
// the cache and the migration select on.)
TEST(JobControllerKueueTest, AJobKueueHeldReadsItsUncachedWorkloadBeforeRunning) {
  FakeApi api;
  json job = Job();
  job["status"] = {{"conditions",
                    {{{"type", "Created"}, {"status", "True"}, {"reason", "TrainingJobCreated"}},
                     {{"type", "Suspended"},
                      {"status", "True"},
                      {"reason", "WaitingForAdmission"},
                      {"message", "waiting"}}}}};
  api.Seed(kTrainingJobs, job);
  auto parsed = api::ParseTrainingJob(Job());
  ASSERT_TRUE(parsed.ok());
  json wl = kueue::BuildWorkload(*parsed, "q", std::nullopt);
  wl["metadata"].erase("labels");
  api.Seed(kWorkloads, wl);
  Running controller(&api, KueueOptions());
  ASSERT_TRUE(Eventually([&] {
    return Message(*api.Get(kTrainingJobs, "ml", "tj"), "Suspended").find("label was removed") !=
           std::string::npos;
  })) << api.Get(kTrainingJobs, "ml", "tj")->dump();
  EXPECT_TRUE(api.All(kube::kPods).empty()) << "the job ran without being admitted";
}

// ---- Refused creates --------------------------------------------

// Pod Security admission's answer to a privileged pod, with a terminal escape
// an admission webhook could as well have put there.
Status PodSecurityRefusal() {
  return Status(StatusCode::kPermissionDenied,
                "Forbidden (403) POST /api/v1/namespaces/ml/pods: pods \"tj-worker-0\" is "
                "forbidden: violates PodSecurity \"restricted:latest\": privileged (container "
                "\"trainer\" must not set securityContext.privileged=true)\x1b[31m");
}

// The job's condition `type` as JSON, or null.
json Condition(const json& job, const std::string& type) {
  for (const json& c : job.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == type) return c;
  }
  return nullptr;
}

JobControllerOptions FastProbes() {
  JobControllerOptions o = Options();
  o.refused_probe = {milliseconds(300), milliseconds(600)};
  return o;
}

// A namespace that refuses the job's pods (Pod Security): the first reconcile
// sends one pod create (slow start), then the job says why (condition
// CreateRefused, a FailedCreate Warning event quoting the apiserver without
// its control characters) and probes with one create per wait (300 ms, then
// 600 ms here; 10 s then 20 s by default) instead of retrying every pod on the
// work queue's backoff. Once the namespace lets pods in, the next probe
// creates one, the rest follow at once and the condition goes. Before, every
// attempt sent all 5 creates with no event and no condition.
TEST(JobControllerRefusedTest, ARefusedPodSaysWhyAndIsProbedOneCreateAtATime) {
  FakeApi api;
  api.Seed(kTrainingJobs, JobOfWorkers(5));
  api.RefuseCreates("pods", PodSecurityRefusal());
  EventSink events;
  Running controller(&api, FastProbes(), &events);
  ASSERT_TRUE(Eventually([&] {
    return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "CreateRefused") == "PodCreateForbidden";
  })) << api.Get(kTrainingJobs, "ml", "tj")->dump();
  const auto refused_at = std::chrono::steady_clock::now();
  EXPECT_EQ(Count(api.calls(), "create", "pods", StatusCode::kPermissionDenied), 1u)
      << CallLog(api.calls());
  const std::string message = Message(*api.Get(kTrainingJobs, "ml", "tj"), "CreateRefused");
  EXPECT_NE(message.find("cannot create pod tj-worker-0: pods \"tj-worker-0\" is forbidden: "
                         "violates PodSecurity"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
  ASSERT_TRUE(Eventually([&] { return events.With("FailedCreate").size() == 1; }));
  const json event = events.With("FailedCreate")[0];
  EXPECT_EQ(event.value("type", ""), "Warning");
  EXPECT_EQ(event["regarding"].value("name", ""), "tj");
  EXPECT_EQ(event.value("note", ""), message);

  // Probes: at 0.3, 0.9 and 1.5 s after the refusal; 1 + 3 creates in 2 s.
  std::this_thread::sleep_until(refused_at + milliseconds(2000));  // a window to count in
  const size_t refused = Count(api.calls(), "create", "pods", StatusCode::kPermissionDenied);
  EXPECT_GE(refused, 3u) << CallLog(api.calls());
  EXPECT_LE(refused, 5u) << CallLog(api.calls());
  EXPECT_EQ(controller.Registry("kubetrain_reconcile_errors_total"), 0);
  EXPECT_EQ(events.With("FailedCreate").size(), 1u);  // once per refusal, not per probe

  api.AcceptCreates("pods");
  const auto accepted_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      Eventually([&] { return Count(api.calls(), "create", "pods", StatusCode::kOk) == 5; }));
  EXPECT_LT(std::chrono::steady_clock::now() - accepted_at, milliseconds(600 + 1400));
  ASSERT_TRUE(Eventually([&] {
    return Condition(*api.Get(kTrainingJobs, "ml", "tj"), "CreateRefused").is_null();
  })) << api.Get(kTrainingJobs, "ml", "tj")->dump();
}

// A ResourceQuota of 2 pods and a 5-pod job: the condition names the quota,
// the 2 pods it allows exist; quota raised, the other 3 follow.
TEST(JobControllerRefusedTest, QuotaExceededNamesTheQuotaAndTheRestFollowOnceRaised) {
  FakeApi api;
  api.Seed(kTrainingJobs, JobOfWorkers(5));
  api.RefuseCreates("pods",
                    Status(StatusCode::kPermissionDenied,
                           "Forbidden (403) POST /api/v1/namespaces/ml/pods: pods \"tj-worker-2\" "
                           "is forbidden: exceeded quota: two-pods, requested: pods=1, used: "
                           "pods=2, limited: pods=2"),
                    /*allow=*/2);
  EventSink events;
  Running controller(&api, FastProbes(), &events);
  ASSERT_TRUE(Eventually([&] {
    return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "CreateRefused") == "QuotaExceeded";
  })) << api.Get(kTrainingJobs, "ml", "tj")->dump();
  EXPECT_NE(Message(*api.Get(kTrainingJobs, "ml", "tj"), "CreateRefused")
                .find("exceeded quota: two-pods"),
            std::string::npos);
  EXPECT_EQ(api.All(kube::kPods).size(), 2u);
  ASSERT_TRUE(Eventually([&] { return events.With("FailedCreate").size() == 1; }));

  api.AcceptCreates("pods");
  ASSERT_TRUE(Eventually([&] { return api.All(kube::kPods).size() == 5; }));
  ASSERT_TRUE(Eventually(
      [&] { return Condition(*api.Get(kTrainingJobs, "ml", "tj"), "CreateRefused").is_null(); }));
  EXPECT_EQ(Count(api.calls(), "create", "pods", StatusCode::kOk), 5u);
}

// A pod of the child's name that the job does not own. Its
// create answers AlreadyExists; before, that counted as created and the job
// waited for a pod that never showed, silently, again and again. Now the
// job says whose the pod is, and takes the name once it is free.
TEST(JobControllerRefusedTest, ASameNamedPodTheJobDoesNotOwnIsReportedAndItsNameTakenOnceFree) {
  FakeApi api;
  api.Seed(kTrainingJobs, Job());
  json foreign = Pod(1, "Running");
  foreign["metadata"].erase("labels");
  foreign["metadata"]["ownerReferences"] = {{{"apiVersion", "apps/v1"},
                                             {"kind", "ReplicaSet"},
                                             {"name", "web"},
                                             {"uid", "rs-uid"},
                                             {"controller", true}}};
  api.Seed(kube::kPods, foreign);
  EventSink events;
  Running controller(&api, FastProbes(), &events);
  ASSERT_TRUE(Eventually([&] {
    return Reason(*api.Get(kTrainingJobs, "ml", "tj"), "CreateRefused") == "ChildNameConflict";
  })) << api.Get(kTrainingJobs, "ml", "tj")->dump();
  const std::string message = Message(*api.Get(kTrainingJobs, "ml", "tj"), "CreateRefused");
  EXPECT_NE(message.find("cannot create pod tj-worker-1"), std::string::npos) << message;
  EXPECT_NE(message.find("controlled by ReplicaSet web"), std::string::npos) << message;
  ASSERT_TRUE(Eventually([&] { return events.With("FailedCreate").size() == 1; }));
  EXPECT_TRUE(api.Get(kube::kPods, "ml", "tj-worker-0").has_value());

  ASSERT_TRUE(api.Delete(kube::kPods, "ml", "tj-worker-1", {}).ok());
  ASSERT_TRUE(Eventually([&] {
    auto pod = api.Get(kube::kPods, "ml", "tj-worker-1");
    return pod && (*pod)["metadata"]["ownerReferences"][0].value("uid", "") == "job-uid";
  }));
  ASSERT_TRUE(Eventually(
      [&] { return Condition(*api.Get(kTrainingJobs, "ml", "tj"), "CreateRefused").is_null(); }));
}

// After a restart the status is what the operator knows: a job whose status
// says CreateRefused probes at once; the probe goes through, the pods follow
// and the condition goes, in a few status writes (no loop on the cache still
// showing the condition this process cleared).
TEST(JobControllerRefusedTest, AfterARestartARefusedJobProbesAtOnceAndClearsItsCondition) {
  FakeApi api;
  json job = Job();
  job["status"] = {{"state", "Created"},
                   {"conditions",
                    {{{"type", "Created"},
                      {"status", "True"},
                      {"reason", "TrainingJobCreated"},
                      {"message", "TrainingJob tj is created"},
                      {"lastTransitionTime", "2026-11-22T20:00:00Z"}},
                     {{"type", "CreateRefused"},
                      {"status", "True"},
                      {"reason", "QuotaExceeded"},
                      {"message", "cannot create pod tj-worker-0: exceeded quota: q"},
                      {"lastTransitionTime", "2026-11-22T20:00:00Z"}}}}};
  api.Seed(kTrainingJobs, job);
  FakeClock clock(TestWallStart());
  Running controller(&api, OnClock(&clock));  // default probes: the first is due at once
  ASSERT_TRUE(Eventually([&] { return api.All(kube::kPods).size() == 2; }));
  ASSERT_TRUE(Eventually([&] {
    return Condition(*api.Get(kTrainingJobs, "ml", "tj"), "CreateRefused").is_null();
  })) << api.Get(kTrainingJobs, "ml", "tj")->dump();
  AdvanceAndSettle(clock, api, controller, milliseconds(500));  // a wrong loop of writes would run
  EXPECT_LE(StatusWrites(api), 2u) << CallLog(api.calls());
  EXPECT_EQ(Reason(*api.Get(kTrainingJobs, "ml", "tj"), "Failed"), "");
}

// ---- lost nodes and disruptions ------------------------------------

// A pod of the job being deleted `ago` before now (its deletionTimestamp),
// on node-a, its uid given.
// The job's auth Secret, as its first plan left it (its pods are seeded live).
void SeedSecret(FakeApi& api) {
  api.Seed(kube::kSecrets, {{"apiVersion", "v1"},
                            {"kind", "Secret"},
                            {"metadata", {{"name", "tj-auth-job-uid"}, {"namespace", "ml"}}},
                            {"data", {{"key", "AAAA"}}}});
}

json Terminating(int index, std::chrono::seconds ago, const std::string& uid) {
  json pod = Pod(index, "Running");
  pod["metadata"]["uid"] = uid;
  pod["metadata"]["deletionTimestamp"] = api::FormatTime(
      std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now()) - ago);
  pod["metadata"]["deletionGracePeriodSeconds"] = 30;
  pod["spec"]["nodeName"] = "node-a";
  return pod;
}

TEST(JobControllerLostPodTest, ForceDeletesAPodTerminatingPastTheGraceOnItsUid) {
  FakeApi api;
  SeedSecret(api);
  api.Seed(kTrainingJobs, Job("Never"));
  api.Seed(kube::kPods, Pod(0, "Running"));
  api.Seed(kube::kPods, Terminating(1, seconds(120), "lost-uid"));
  EventSink events;
  JobControllerOptions options = Options();
  options.lost_pod_grace = seconds(60);
  options.status_coalesce = milliseconds(0);  // the count is read from the first status
  Running controller(&api, options, &events);
  // Force-deleted, then its replica recreated under the same name.
  ASSERT_TRUE(Eventually([&] {
    auto pod = api.Get(kube::kPods, "ml", "tj-worker-1");
    return pod && (*pod)["metadata"].value("uid", "") != "lost-uid";
  }));
  auto opts = api.LastDeleteOptions("pods", "tj-worker-1");
  ASSERT_TRUE(opts.has_value());
  EXPECT_EQ(opts->grace_period_seconds, std::optional<int64_t>(0));
  EXPECT_EQ(opts->precondition_uid, "lost-uid");
  ASSERT_TRUE(Eventually([&] { return !events.With("ForceDeletedLostPod").empty(); }));
  const std::string note = events.With("ForceDeletedLostPod")[0].value("note", "");
  EXPECT_NE(note.find("tj-worker-1"), std::string::npos) << note;
  EXPECT_NE(note.find("node-a"), std::string::npos) << note;
  // Deleted by someone else while running: a disruption, not a failure (Never).
  ASSERT_TRUE(Eventually([&] {
    auto job = api.Get(kTrainingJobs, "ml", "tj");
    return job && job->value("status", json::object()).value("disruptions", 0) == 1;
  })) << api.Get(kTrainingJobs, "ml", "tj")->dump();
  auto job = api.Get(kTrainingJobs, "ml", "tj");
  EXPECT_EQ(Reason(*job, "Failed"), "");
  EXPECT_EQ((*job)["status"].value("restarts", -1), 0);
}

// The grace counts from the deletion request, not from the end of the pod's own grace
// period: on the old code a pod deleted 61 s ago with a 30 s grace (lost-pod grace 60 s)
// waited another 29 s (node2.kill_node: unreachable -> Running took 104 s, goal grace +
// 15 s).
TEST(JobControllerLostPodTest, GraceCountsFromTheDeletionRequest) {
  FakeApi api;
  SeedSecret(api);
  json job = Job();
  job["spec"]["replicaSpecs"]["Worker"]["replicas"] = 3;
  api.Seed(kTrainingJobs, job);
  api.Seed(kube::kPods, Pod(0, "Running"));
  json lost = Terminating(1, seconds(31), "lost-uid");  // requested 61 s ago, grace 30 s
  api.Seed(kube::kPods, lost);
  // Requested 20 s ago with a grace of 120 s: its own grace has not passed; left alone.
  json slow = Terminating(2, seconds(-100), "slow-uid");
  slow["metadata"]["deletionGracePeriodSeconds"] = 120;
  api.Seed(kube::kPods, slow);
  JobControllerOptions options = Options();
  options.lost_pod_grace = seconds(60);
  Running controller(&api, options);
  ASSERT_TRUE(Eventually([&] {
    auto o = api.LastDeleteOptions("pods", "tj-worker-1");
    return o && o->grace_period_seconds == std::optional<int64_t>(0);
  }));
  EXPECT_FALSE(api.LastDeleteOptions("pods", "tj-worker-2").has_value());
}

TEST(JobControllerLostPodTest, WaitsForTheGraceThenForceDeletes) {
  FakeApi api;
  SeedSecret(api);
  api.Seed(kTrainingJobs, Job());
  api.Seed(kube::kPods, Pod(0, "Running"));
  const auto seeded = std::chrono::steady_clock::now();
  api.Seed(kube::kPods, Terminating(1, seconds(0), "slow-uid"));
  JobControllerOptions options = Options();
  options.lost_pod_grace = seconds(3);
  Running controller(&api, options);
  ASSERT_TRUE(Eventually([&] {
    auto o = api.LastDeleteOptions("pods", "tj-worker-1");
    return o && o->grace_period_seconds == std::optional<int64_t>(0);
  }));
  // Not before its deletionTimestamp (whole seconds) plus the grace: a timer, not a poll.
  EXPECT_GE(std::chrono::steady_clock::now() - seeded, seconds(2));
}

TEST(JobControllerLostPodTest, ZeroGraceNeverForceDeletes) {
  FakeApi api;
  SeedSecret(api);
  api.Seed(kTrainingJobs, Job());
  api.Seed(kube::kPods, Pod(0, "Running"));
  api.Seed(kube::kPods, Terminating(1, seconds(3600), "lost-uid"));
  JobControllerOptions options = Options();
  options.lost_pod_grace = seconds(0);
  options.status_coalesce = milliseconds(0);
  Running controller(&api, options);
  // The job's status is written once its pods are seen: by then, no delete.
  ASSERT_TRUE(Eventually([&] {
    auto job = api.Get(kTrainingJobs, "ml", "tj");
    return job && job->value("status", json::object()).value("disruptions", 0) == 1;
  }));
  EXPECT_FALSE(api.LastDeleteOptions("pods", "tj-worker-1").has_value());
}

TEST(JobControllerDisruptionTest, APodThatVanishesWhileRunningIsADisruptionCountedOnce) {
  FakeApi api;
  SeedSecret(api);
  api.Seed(kTrainingJobs, Job("Never"));
  json pod0 = Pod(0, "Running");
  pod0["metadata"]["uid"] = "w0-uid";
  api.Seed(kube::kPods, pod0);
  api.Seed(kube::kPods, Pod(1, "Running"));
  EventSink events;
  Running controller(&api, Options(), &events);
  ASSERT_TRUE(Eventually([&] {
    auto job = api.Get(kTrainingJobs, "ml", "tj");
    return job && Reason(*job, "Running") == "TrainingJobRunning";
  }));
  api.Vanish(kube::kPods, "ml", "tj-worker-0");  // its node went, pod GC removed it
  ASSERT_TRUE(Eventually([&] {
    auto pod = api.Get(kube::kPods, "ml", "tj-worker-0");
    return pod && (*pod)["metadata"].value("uid", "") != "w0-uid";
  }));
  ASSERT_TRUE(Eventually([&] { return !events.With("PodDisrupted").empty(); }));
  auto job = api.Get(kTrainingJobs, "ml", "tj");
  EXPECT_EQ(Reason(*job, "Failed"), "");
  EXPECT_EQ((*job)["status"].value("disruptions", 0), 1);
  EXPECT_EQ((*job)["status"].value("restarts", -1), 0);
  EXPECT_EQ((*job)["status"]["replicaStatuses"]["Worker"].value("disruptions", 0), 1);
  EXPECT_EQ(events.With("PodDisrupted").size(), 1u);
}

// Fails on the code before disruptions were told from failures: the job failed with ReplicaFailed.
TEST(JobControllerDisruptionTest, AnEvictedPodUnderNeverIsReplacedNotAFailure) {
  FakeApi api;
  SeedSecret(api);
  api.Seed(kTrainingJobs, Job("Never"));
  api.Seed(kube::kPods, Pod(0, "Running"));
  json evicted = Pod(1, "Failed");
  evicted["metadata"]["uid"] = "evicted-uid";
  evicted["status"] = {{"phase", "Failed"},
                       {"reason", "Evicted"},
                       {"message", "The node was low on resource: memory."}};
  api.Seed(kube::kPods, evicted);
  EventSink events;
  JobControllerOptions options = Options();
  options.status_coalesce = milliseconds(0);
  Running controller(&api, options, &events);
  ASSERT_TRUE(Eventually([&] {
    auto pod = api.Get(kube::kPods, "ml", "tj-worker-1");
    return pod && (*pod)["metadata"].value("uid", "") != "evicted-uid";
  }));
  ASSERT_TRUE(Eventually([&] { return !events.With("PodDisrupted").empty(); }));
  auto job = api.Get(kTrainingJobs, "ml", "tj");
  EXPECT_EQ(Reason(*job, "Failed"), "");
  EXPECT_EQ((*job)["status"].value("restarts", -1), 0);
  EXPECT_EQ((*job)["status"].value("disruptions", 0), 1);
}

TEST(JobControllerDisruptionTest, APodTheOperatorDeletesIsNoDisruption) {
  FakeApi api;
  SeedSecret(api);
  api.Seed(kTrainingJobs, Job());
  api.Seed(kube::kPods, Pod(0, "Running"));
  api.Seed(kube::kPods, Pod(1, "Failed", 137));
  Running controller(&api);
  // The failed pod is deleted and recreated: a restart, no disruption.
  ASSERT_TRUE(Eventually([&] {
    auto pod = api.Get(kube::kPods, "ml", "tj-worker-1");
    return pod && pod->value("status", json::object()).value("phase", "") != "Failed";
  }));
  auto job = api.Get(kTrainingJobs, "ml", "tj");
  EXPECT_EQ((*job)["status"].value("restarts", 0), 1);
  EXPECT_EQ((*job)["status"].value("disruptions", 0), 0);
}

// --- Kubeflow TFJobs (--tfjob; tfjob_exec.h) ---

json TFJobObject(const std::string& name, std::optional<std::string> managed_by = std::nullopt,
                 const std::string& chief_key = "") {
  auto replica = [](int n) {
    return json{
        {"replicas", n},
        {"template", {{"spec", {{"containers", {{{"name", "tensorflow"}, {"image", "tf:2"}}}}}}}}};
  };
  json specs = {{"PS", replica(1)}, {"Worker", replica(2)}};
  if (!chief_key.empty()) specs = {{chief_key, replica(1)}, {"Worker", replica(1)}};
  json tf = {{"apiVersion", "kubeflow.org/v1"},
             {"kind", "TFJob"},
             {"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", name + "-uid"}}},
             {"spec", {{"tfReplicaSpecs", specs}}}};
  if (managed_by) tf["spec"]["runPolicy"]["managedBy"] = *managed_by;
  return tf;
}

JobControllerOptions TFJobOptions(TFJobMode mode) {
  JobControllerOptions o = Options();
  o.tfjob = mode;
  o.status_coalesce = milliseconds(0);  // every status change written at once
  return o;
}

// Sets pod `name`'s phase (and its tensorflow container's exit code when it ended).
void SetPhase(FakeApi& api, const std::string& name, const std::string& phase, int exit_code = 0) {
  json pod = *api.Get(kube::kPods, "ml", name);
  pod["status"] = {{"phase", phase}};
  if (phase == "Failed" || phase == "Succeeded") {
    pod["status"]["containerStatuses"] = {
        {{"name", "tensorflow"}, {"state", {{"terminated", {{"exitCode", exit_code}}}}}}};
  }
  ASSERT_TRUE(api.Update(kube::kPods, "ml", pod).ok());
}

std::set<std::string> PodNames(FakeApi& api) {
  std::set<std::string> names;
  for (const json& p : api.All(kube::kPods)) names.insert(p["metadata"].value("name", ""));
  return names;
}

// The types of the status' conditions, oldest first, each "Type=True|False".
std::vector<std::string> ConditionSequence(const json& tf) {
  std::vector<std::string> out;
  for (const json& c : tf["status"].value("conditions", json::array())) {
    out.push_back(c.value("type", "") + "=" + c.value("status", "") + "/" + c.value("reason", ""));
  }
  return out;
}

std::string Env(const json& container, const std::string& name) {
  for (const json& e : container.value("env", json::array())) {
    if (e.value("name", "") == name) return e.value("value", "");
  }
  return "";
}

// A TFJob training-operator left half-way: its pod holds the child's name and is the
// TFJob's own (its controller) but lacks kubetrain's job label, so no cache shows it.
// Before, the create's AlreadyExists counted as done and the job waited for a pod that
// never showed, again and again, with no reason anywhere. Now the create is refused
// with whose the pod is, and the name is taken once the pod is deleted.
TEST(JobControllerTFJobTest, APodTrainingOperatorLeftForTheTFJobIsReportedAndItsNameTakenOnceFree) {
  FakeApi api;
  api.Seed(kTFJobs, TFJobObject("half"));
  json left = {{"apiVersion", "v1"},
               {"kind", "Pod"},
               {"metadata",
                {{"name", "half-worker-1"},
                 {"namespace", "ml"},
                 {"uid", "left-uid"},
                 {"labels",
                  {{"training.kubeflow.org/job-name", "half"},
                   {"training.kubeflow.org/replica-type", "worker"},
                   {"training.kubeflow.org/replica-index", "1"}}},
                 {"ownerReferences",
                  {{{"apiVersion", "kubeflow.org/v1"},
                    {"kind", "TFJob"},
                    {"name", "half"},
                    {"uid", "half-uid"},
                    {"controller", true}}}}}},
               {"spec", {{"containers", {{{"name", "tensorflow"}, {"image", "tf:2"}}}}}},
               {"status", {{"phase", "Running"}}}};
  api.Seed(kube::kPods, left);
  EventSink events;
  JobControllerOptions o = TFJobOptions(TFJobMode::kAll);
  o.refused_probe = FastProbes().refused_probe;
  Running controller(&api, o, &events);
  ASSERT_TRUE(Eventually([&] { return events.With("FailedCreate").size() == 1; }));
  const std::string message = events.With("FailedCreate")[0].value("note", "");
  EXPECT_NE(message.find("cannot create pod half-worker-1"), std::string::npos) << message;
  EXPECT_NE(message.find("controlled by TFJob half"), std::string::npos) << message;
  EXPECT_NE(message.find("lacks the label kubetrain.io/job-name"), std::string::npos) << message;
  // The reason is in the job's own state too (v1's status has no place for it).
  ASSERT_TRUE(Eventually([&] {
    const json tf = *api.Get(kTFJobs, "ml", "half");
    const json annotations = tf["metadata"].value("annotations", json::object());
    return annotations.value("kubetrain.io/tfjob-state", "").find("ChildNameConflict") !=
           std::string::npos;
  })) << api.Get(kTFJobs, "ml", "half")->dump();
  EXPECT_EQ((*api.Get(kube::kPods, "ml", "half-worker-1"))["metadata"].value("uid", ""),
            "left-uid");  // never deleted by kubetrain

  ASSERT_TRUE(api.Delete(kube::kPods, "ml", "half-worker-1", {}).ok());
  ASSERT_TRUE(Eventually([&] {
    auto pod = api.Get(kube::kPods, "ml", "half-worker-1");
    return pod && (*pod)["metadata"].contains("labels") &&
           (*pod)["metadata"]["labels"].contains("kubetrain.io/job-name");
  }));
}

TEST(JobControllerTFJobTest, ManagedTakesOnlyTFJobsManagedByKubetrain) {
  FakeApi api;
  api.Seed(kTFJobs, TFJobObject("ours", "kubetrain.io/operator"));
  api.Seed(kTFJobs, TFJobObject("plain"));
  api.Seed(kTFJobs, TFJobObject("peer", "kubeflow.org/training-operator"));
  Running controller(&api, TFJobOptions(TFJobMode::kManaged));
  ASSERT_TRUE(Eventually([&] { return PodNames(api).count("ours-worker-1") == 1; }));
  ASSERT_TRUE(Settle(api, controller));
  for (const std::string& name : PodNames(api)) EXPECT_TRUE(name.starts_with("ours-")) << name;
  for (const auto& c : api.calls()) {
    EXPECT_FALSE(c.name.starts_with("plain") || c.name.starts_with("peer"))
        << c.verb << " " << c.resource << "/" << c.name;
  }
}

TEST(JobControllerTFJobTest, AllTakesEveryTFJobButAnotherControllersOne) {
  FakeApi api;
  api.Seed(kTFJobs, TFJobObject("ours", "kubetrain.io/operator"));
  api.Seed(kTFJobs, TFJobObject("plain"));
  api.Seed(kTFJobs, TFJobObject("peer", "kubeflow.org/training-operator"));
  api.Seed(kTFJobs, TFJobObject("multi", "kueue.x-k8s.io/multikueue"));
  Running controller(&api, TFJobOptions(TFJobMode::kAll));
  ASSERT_TRUE(Eventually([&] {
    auto names = PodNames(api);
    return names.count("ours-worker-1") == 1 && names.count("plain-worker-1") == 1;
  }));
  ASSERT_TRUE(Settle(api, controller));
  for (const auto& c : api.calls()) {
    EXPECT_FALSE(c.name.starts_with("peer") || c.name.starts_with("multi"))
        << c.verb << " " << c.resource << "/" << c.name;
  }
  EXPECT_FALSE(api.Get(kTFJobs, "ml", "peer")->contains("status"));
}

TEST(JobControllerTFJobTest, ATFJobFinishedBeforeTheTakeoverIsNeverRunAgain) {
  FakeApi api;
  json done = TFJobObject("done");  // training-operator ran it to the end
  done["status"] = {{"conditions",
                     {{{"type", "Created"}, {"status", "True"}, {"reason", "TFJobCreated"}},
                      {{"type", "Succeeded"}, {"status", "True"}, {"reason", "TFJobSucceeded"}}}}};
  api.Seed(kTFJobs, done);
  api.Seed(kTFJobs, TFJobObject("fresh"));
  Running controller(&api, TFJobOptions(TFJobMode::kAll));
  ASSERT_TRUE(Eventually([&] { return PodNames(api).count("fresh-worker-1") == 1; }));
  ASSERT_TRUE(Settle(api, controller));
  for (const auto& c : api.calls()) {
    EXPECT_FALSE(c.name.starts_with("done")) << c.verb << " " << c.resource << "/" << c.name;
  }
  const json stored = *api.Get(kTFJobs, "ml", "done");
  EXPECT_EQ(stored["status"], done["status"]);
  EXPECT_FALSE(stored["metadata"].contains("annotations"));
}

TEST(JobControllerTFJobTest, OffNeitherListsNorTouchesTFJobs) {
  FakeApi api;
  api.Seed(kTFJobs, TFJobObject("ours", "kubetrain.io/operator"));
  api.Seed(kTrainingJobs, Job());
  Running controller(&api, TFJobOptions(TFJobMode::kOff));
  ASSERT_TRUE(Eventually([&] { return PodNames(api).count("tj-worker-1") == 1; }));
  ASSERT_TRUE(Settle(api, controller));
  EXPECT_TRUE(api.Served("tfjobs", "").empty());
  EXPECT_EQ(PodNames(api), (std::set<std::string>{"tj-worker-0", "tj-worker-1"}));
}

TEST(JobControllerTFJobTest, ChildrenHaveV1sNamesLabelsPortAndTfConfig) {
  FakeApi api;
  api.Seed(kTFJobs, TFJobObject("mnist"));
  Running controller(&api, TFJobOptions(TFJobMode::kAll));
  ASSERT_TRUE(Eventually([&] { return PodNames(api).size() == 3; }));
  EXPECT_EQ(PodNames(api),
            (std::set<std::string>{"mnist-ps-0", "mnist-worker-0", "mnist-worker-1"}));
  const json pod = *api.Get(kube::kPods, "ml", "mnist-worker-1");
  const json& labels = pod["metadata"]["labels"];
  EXPECT_EQ(labels.value("training.kubeflow.org/job-name", ""), "mnist");
  EXPECT_EQ(labels.value("training.kubeflow.org/replica-type", ""), "worker");
  EXPECT_EQ(labels.value("training.kubeflow.org/replica-index", ""), "1");
  EXPECT_EQ(labels.value("training.kubeflow.org/operator-name", ""), "tfjob-controller");
  EXPECT_FALSE(labels.contains("training.kubeflow.org/job-role"));  // worker 1: not the master
  EXPECT_EQ((*api.Get(kube::kPods, "ml", "mnist-worker-0"))["metadata"]["labels"].value(
                "training.kubeflow.org/job-role", ""),
            "master");
  const json& owner = pod["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "TFJob");
  EXPECT_EQ(owner["apiVersion"], "kubeflow.org/v1");
  EXPECT_EQ(owner["uid"], "mnist-uid");
  EXPECT_EQ(owner["controller"], true);
  const json& tf = pod["spec"]["containers"][0];
  EXPECT_EQ(tf["name"], "tensorflow");
  // v1.9.3's bytes: keys sorted, the hosts <pod>.<ns>.svc:<port>, environment cloud.
  EXPECT_EQ(Env(tf, "TF_CONFIG"),
            R"({"cluster":{"ps":["mnist-ps-0.ml.svc:2222"],"worker":["mnist-worker-0.ml.svc:2222",)"
            R"("mnist-worker-1.ml.svc:2222"]},"task":{"type":"worker","index":1},)"
            R"("environment":"cloud"})");
  bool port = false;
  for (const json& p : tf["ports"])
    port = port || (p["name"] == "tfjob-port" && p["containerPort"] == 2222);
  EXPECT_TRUE(port) << tf["ports"].dump();
  // The Services once the pods run (as for a TrainingJob): one per replica, v1's.
  for (const char* n : {"mnist-ps-0", "mnist-worker-0", "mnist-worker-1"})
    SetPhase(api, n, "Running");
  ASSERT_TRUE(
      Eventually([&] { return api.Get(kube::kServices, "ml", "mnist-worker-1").has_value(); }));
  const json svc = *api.Get(kube::kServices, "ml", "mnist-worker-1");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["ports"], json::parse(R"([{"name":"tfjob-port","port":2222}])"));
  EXPECT_EQ(svc["spec"]["selector"].value("training.kubeflow.org/replica-index", ""), "1");
  EXPECT_EQ(svc["metadata"]["ownerReferences"][0]["kind"], "TFJob");
}

TEST(JobControllerTFJobTest, AMasterKeepsV1sNameAndTaskType) {
  FakeApi api;
  api.Seed(kTFJobs, TFJobObject("mnist", std::nullopt, "Master"));
  Running controller(&api, TFJobOptions(TFJobMode::kAll));
  ASSERT_TRUE(Eventually([&] { return PodNames(api).size() == 2; }));
  ASSERT_TRUE(Settle(api, controller));
  EXPECT_EQ(PodNames(api), (std::set<std::string>{"mnist-master-0", "mnist-worker-0"}));
  const json master = *api.Get(kube::kPods, "ml", "mnist-master-0");
  EXPECT_NE(Env(master["spec"]["containers"][0], "TF_CONFIG")
                .find(R"("task":{"type":"master","index":0})"),
            std::string::npos);
  EXPECT_EQ(master["metadata"]["labels"].value("training.kubeflow.org/job-role", ""), "master");
  // The planner sees its chief in the master pod: running it creates nothing more.
  SetPhase(api, "mnist-master-0", "Running");
  SetPhase(api, "mnist-worker-0", "Running");
  ASSERT_TRUE(Settle(api, controller));
  EXPECT_EQ(PodNames(api), (std::set<std::string>{"mnist-master-0", "mnist-worker-0"}));
  EXPECT_EQ(Count(api.calls(), "delete", "pods", StatusCode::kOk), 0u);
}

// status.progress of a Master TFJob: read from <job>-master-0 (the planner's
// chief-0), kept in the state annotation (v1's CRD prunes status.progress).
TEST(JobControllerTFJobTest, ProgressIsReadFromAMastersPod) {
  progress::FakeMetricsServers servers;
  auto url = servers.Add(progress::FakeMetricsServers::Mode::kMetrics,
                         "kubetrain_trainer_step 7\nkubetrain_trainer_total_steps 10\n"
                         "kubetrain_trainer_samples_per_second 1000\n");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  const int port = std::stoi(url->substr(url->rfind(':') + 1));
  FakeApi api;
  api.Seed(kTFJobs, TFJobObject("mnist", std::nullopt, "Master"));
  JobControllerOptions o = TFJobOptions(TFJobMode::kAll);
  o.read_progress = true;
  o.progress.schedule = {.qps = 1000, .burst = 100, .interval = milliseconds(10)};
  o.progress.tracker.min_publish_interval = seconds(0);
  Running controller(&api, o);
  ASSERT_TRUE(Eventually([&] { return PodNames(api).size() == 2; }));
  for (const char* n : {"mnist-master-0", "mnist-worker-0"}) {
    json pod = *api.Get(kube::kPods, "ml", n);
    for (json& p : pod["spec"]["containers"][0]["ports"]) {  // the trainer's, served here
      if (p.value("name", "") == "metrics") p["containerPort"] = port;
    }
    pod["status"] = {{"phase", "Running"}, {"podIP", "127.0.0.1"}};
    ASSERT_TRUE(api.Update(kube::kPods, "ml", pod).ok());
  }
  auto state = [&] {
    const json tf = *api.Get(kTFJobs, "ml", "mnist");
    const json* a = tf.contains("metadata") && tf["metadata"].contains("annotations")
                        ? &tf["metadata"]["annotations"]
                        : nullptr;
    if (a == nullptr || !a->contains(std::string(kTFJobStateAnnotation))) return json::object();
    return json::parse((*a)[std::string(kTFJobStateAnnotation)].get<std::string>());
  };
  ASSERT_TRUE(Eventually([&] { return state().contains("progress"); }))
      << state().dump() << " reads: " << servers.requests(*url);
  EXPECT_EQ(state()["progress"].value("step", 0), 7) << state().dump();
}

// The progress reader's schedule reads the controller's clock: on a FakeClock
// with an hour between reads, the second read comes once the clock has moved
// an hour, in no real time. (Before, the reader kept the real clock: the
// second read was an hour of real time away.)
TEST(JobControllerTFJobTest, TheProgressReaderFollowsTheControllersClock) {
  progress::FakeMetricsServers servers;
  auto url = servers.Add(progress::FakeMetricsServers::Mode::kMetrics,
                         "kubetrain_trainer_step 7\nkubetrain_trainer_total_steps 10\n");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  const int port = std::stoi(url->substr(url->rfind(':') + 1));
  FakeApi api;
  api.Seed(kTFJobs, TFJobObject("mnist", std::nullopt, "Master"));
  FakeClock clock(TestWallStart());
  JobControllerOptions o = OnClock(&clock, TFJobOptions(TFJobMode::kAll));
  o.read_progress = true;
  o.progress.schedule = {.qps = 1000, .burst = 100, .interval = std::chrono::hours(1)};
  o.progress.tracker.min_publish_interval = seconds(0);
  Running controller(&api, o);
  ASSERT_TRUE(Eventually([&] { return PodNames(api).size() == 2; }));
  for (const char* n : {"mnist-master-0", "mnist-worker-0"}) {
    json pod = *api.Get(kube::kPods, "ml", n);
    for (json& p : pod["spec"]["containers"][0]["ports"]) {
      if (p.value("name", "") == "metrics") p["containerPort"] = port;
    }
    pod["status"] = {{"phase", "Running"}, {"podIP", "127.0.0.1"}};
    ASSERT_TRUE(api.Update(kube::kPods, "ml", pod).ok());
  }
  ASSERT_TRUE(Eventually([&] { return servers.requests(*url) >= 1; }));
  ASSERT_TRUE(Settle(api, controller));
  EXPECT_EQ(servers.requests(*url), 1);
  clock.Advance(std::chrono::hours(1));
  EXPECT_TRUE(Eventually([&] { return servers.requests(*url) >= 2; }))
      << "no second read after an hour of the controller's clock";
}

TEST(JobControllerTFJobTest, StatusGoesCreatedRunningSucceededInV1sShape) {
  FakeApi api;
  api.Seed(kTFJobs, TFJobObject("mnist"));
  Running controller(&api, TFJobOptions(TFJobMode::kAll));
  ASSERT_TRUE(Eventually([&] { return PodNames(api).size() == 3; }));
  for (const char* n : {"mnist-ps-0", "mnist-worker-0", "mnist-worker-1"})
    SetPhase(api, n, "Running");
  ASSERT_TRUE(
      Eventually([&] { return Reason(*api.Get(kTFJobs, "ml", "mnist"), "Running") != ""; }));
  json tf = *api.Get(kTFJobs, "ml", "mnist");
  EXPECT_EQ(ConditionSequence(tf),
            (std::vector<std::string>{"Created=True/TFJobCreated", "Running=True/TFJobRunning"}));
  EXPECT_EQ(tf["status"]["replicaStatuses"]["Worker"].value("active", 0), 2) << tf.dump();
  EXPECT_TRUE(tf["status"].contains("startTime"));
  // The planner's own state, which v1's CRD would prune from status.
  EXPECT_TRUE(tf["metadata"]["annotations"].contains(std::string(kTFJobStateAnnotation)));
  SetPhase(api, "mnist-worker-0", "Succeeded");  // worker 0 decides, as in v1
  ASSERT_TRUE(
      Eventually([&] { return Reason(*api.Get(kTFJobs, "ml", "mnist"), "Succeeded") != ""; }));
  ASSERT_TRUE(Settle(api, controller));
  tf = *api.Get(kTFJobs, "ml", "mnist");
  // The newest last (kubectl's State column reads conditions[-1:]); the order
  // of the others within one second is tfjob_v1_test's.
  auto sequence = ConditionSequence(tf);
  ASSERT_EQ(sequence.size(), 3u) << tf.dump();
  EXPECT_EQ(sequence.back(), "Succeeded=True/TFJobSucceeded");
  std::sort(sequence.begin(), sequence.end());
  EXPECT_EQ(sequence,
            (std::vector<std::string>{"Created=True/TFJobCreated", "Running=False/TFJobRunning",
                                      "Succeeded=True/TFJobSucceeded"}));
  EXPECT_EQ(Message(tf, "Succeeded"), "TFJob ml/mnist successfully completed.");
  EXPECT_TRUE(tf["status"].contains("completionTime"));
  EXPECT_GE(tf["status"]["replicaStatuses"]["Worker"].value("succeeded", 0), 1) << tf.dump();
  // cleanPodPolicy unset: kubetrain's Running (docs/migrating-from-tfjob.md): the PS goes.
  EXPECT_FALSE(api.Get(kube::kPods, "ml", "mnist-ps-0").has_value());
  // The state annotation: a merge patch after each status write, never a PUT
  // of the whole TFJob (the RBAC grants patch, not update, on tfjobs).
  EXPECT_EQ(Count(api.calls(), "patch", "tfjobs", StatusCode::kOk),
            Count(api.calls(), "update_status", "tfjobs", StatusCode::kOk));
  EXPECT_EQ(Count(api.calls(), "update", "tfjobs", StatusCode::kOk), 0u);
}

TEST(JobControllerTFJobTest, AFailedWorkerUnderV1sDefaultNeverFailsTheTFJob) {
  FakeApi api;
  api.Seed(kTFJobs, TFJobObject("mnist"));
  Running controller(&api, TFJobOptions(TFJobMode::kAll));
  ASSERT_TRUE(Eventually([&] { return PodNames(api).size() == 3; }));
  for (const char* n : {"mnist-ps-0", "mnist-worker-0", "mnist-worker-1"})
    SetPhase(api, n, "Running");
  ASSERT_TRUE(
      Eventually([&] { return Reason(*api.Get(kTFJobs, "ml", "mnist"), "Running") != ""; }));
  SetPhase(api, "mnist-worker-1", "Failed", 1);  // restartPolicy unset: v1's Never
  ASSERT_TRUE(Eventually([&] { return Reason(*api.Get(kTFJobs, "ml", "mnist"), "Failed") != ""; }));
  const json tf = *api.Get(kTFJobs, "ml", "mnist");
  auto sequence = ConditionSequence(tf);
  ASSERT_EQ(sequence.size(), 3u) << tf.dump();
  EXPECT_EQ(sequence.back(), "Failed=True/TFJobFailed");
  std::sort(sequence.begin(), sequence.end());
  EXPECT_EQ(sequence,
            (std::vector<std::string>{"Created=True/TFJobCreated", "Failed=True/TFJobFailed",
                                      "Running=False/TFJobRunning"}));
  EXPECT_NE(Message(tf, "Failed").find("mnist-worker-1"), std::string::npos)
      << Message(tf, "Failed");
  EXPECT_EQ(tf["status"]["replicaStatuses"]["Worker"].value("failed", 0), 1) << tf.dump();
}

TEST(JobControllerTFJobTest, AnUnconvertibleTFJobFailsOnceWithItsReason) {
  FakeApi api;
  EventSink events;
  json bad = TFJobObject("bad");
  bad["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main";
  api.Seed(kTFJobs, bad);
  Running controller(&api, TFJobOptions(TFJobMode::kAll), &events);
  ASSERT_TRUE(Eventually([&] { return Reason(*api.Get(kTFJobs, "ml", "bad"), "Failed") != ""; }));
  ASSERT_TRUE(Settle(api, controller));
  const json tf = *api.Get(kTFJobs, "ml", "bad");
  EXPECT_EQ(Reason(tf, "Failed"), "TFJobFailed");
  EXPECT_NE(Message(tf, "Failed").find("spec.tfReplicaSpecs.Worker.template.spec.containers"),
            std::string::npos)
      << Message(tf, "Failed");
  EXPECT_TRUE(PodNames(api).empty());
  EXPECT_EQ(Count(api.calls(), "update_status", "tfjobs", StatusCode::kOk), 1u);
  ASSERT_TRUE(Eventually([&] { return events.With("InvalidSpec").size() == 1; }));
  EXPECT_EQ(events.With("InvalidSpec")[0]["regarding"].value("kind", ""), "TFJob");
}

}  // namespace
}  // namespace kubetrain::controller
