#include "operator/controller/observe_pod.h"

#include <gtest/gtest.h>

namespace kubetrain::controller {

using planner::ObservedPod;
using planner::PodPhase;
namespace {

using api::ReplicaType;
using nlohmann::json;

TEST(ObservePodTest, ReadsTheMainContainersTermination) {
  json pod = json::parse(R"({
    "metadata": {"name": "tj-worker-1", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z",
                 "deletionTimestamp": "2026-01-01T00:01:00Z",
                 "annotations": {"kubetrain.io/spec-hash": "0123456789abcdef"},
                 "labels": {"kubetrain.io/job-name": "tj", "kubetrain.io/replica-type": "worker",
                            "kubetrain.io/replica-index": "1"}},
    "spec": {"containers": [{"name": "sidecar"}, {"name": "trainer"}]},
    "status": {"phase": "Failed", "containerStatuses": [
      {"name": "sidecar", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
      {"name": "trainer", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                   "message": "{\"auc\": 0.7}"}}}]}})");
  StatusOr<ObservedPod> p = ObservePod(pod);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->name, "tj-worker-1");
  EXPECT_EQ(p->uid, "u1");
  EXPECT_EQ(p->role, ReplicaType::kWorker);
  EXPECT_EQ(p->index, 1);
  EXPECT_EQ(p->phase, PodPhase::kFailed);
  EXPECT_EQ(p->exit_code, 137);
  EXPECT_EQ(p->reason, "OOMKilled");
  EXPECT_EQ(p->message, "{\"auc\": 0.7}");
  EXPECT_EQ(api::FormatTime(*p->deletion_timestamp), "2026-01-01T00:01:00Z");
  EXPECT_EQ(api::FormatTime(*p->creation_timestamp), "2026-01-01T00:00:00Z");
  EXPECT_EQ(p->spec_hash, "0123456789abcdef");
}

TEST(ObservePodTest, WorkloadTextLosesTerminalEscapesAndIsCut) {
  json pod = json::parse(R"({
    "metadata": {"name": "tj-worker-0", "labels": {"kubetrain.io/job-name": "tj",
                 "kubetrain.io/replica-type": "worker", "kubetrain.io/replica-index": "0"}},
    "spec": {"containers": [{"name": "trainer"}]},
    "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state":
      {"terminated": {"exitCode": 1, "reason": "Error\u001b[2J"}}}]}})");
  pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] =
      "fine\x1b]8;;http://evil\x07link\n" + std::string(10'000, 'x');
  StatusOr<ObservedPod> p = ObservePod(pod);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->reason.find('\x1b'), std::string::npos) << p->reason;
  EXPECT_EQ(p->message.find('\x1b'), std::string::npos);
  EXPECT_EQ(p->message.find('\x07'), std::string::npos);
  EXPECT_EQ(p->message.rfind("fine", 0), 0u);
  EXPECT_NE(p->message.find("link\n"), std::string::npos) << "newlines stay";
  EXPECT_LE(p->message.size(), 4096u) << "the kubelet's own cap";
}

TEST(ObservePodTest, ReadsWhenTheMainContainerStartedRunning) {
  json pod = json::parse(R"({
    "metadata": {"name": "tj-ps-0", "labels": {"kubetrain.io/replica-type": "ps",
                                               "kubetrain.io/replica-index": "0"}},
    "spec": {"containers": [{"name": "sidecar"}, {"name": "trainer"}]},
    "status": {"phase": "Running", "containerStatuses": [
      {"name": "sidecar", "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}},
      {"name": "trainer", "state": {"running": {"startedAt": "2026-01-01T00:00:05Z"}}}]}})");
  StatusOr<ObservedPod> p = ObservePod(pod);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(p->running_since);
  EXPECT_EQ(api::FormatTime(*p->running_since), "2026-01-01T00:00:05Z");
  pod["status"]["containerStatuses"][1]["state"] = {{"waiting", {{"reason", "PodInitializing"}}}};
  EXPECT_FALSE(ObservePod(pod)->running_since);
}

TEST(ObservePodTest, ReadsWhyTheSchedulerCannotPlaceIt) {
  json pod = json::parse(R"({
    "metadata": {"name": "tj-ps-0", "labels": {"kubetrain.io/replica-type": "ps",
                                               "kubetrain.io/replica-index": "0"}},
    "status": {"phase": "Pending", "conditions": [
      {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
       "message": "0/2 nodes are available: 2 Insufficient cpu."}]}})");
  StatusOr<ObservedPod> p = ObservePod(pod);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->unschedulable, "0/2 nodes are available: 2 Insufficient cpu.");
  // Scheduled, or gated (not the scheduler's verdict): nothing.
  pod["status"]["conditions"][0]["status"] = "True";
  EXPECT_EQ(ObservePod(pod)->unschedulable, "");
  pod["status"]["conditions"][0] = {
      {"type", "PodScheduled"}, {"status", "False"}, {"reason", "SchedulingGated"}};
  EXPECT_EQ(ObservePod(pod)->unschedulable, "");
  // A huge message is cut in the cache.
  pod["status"]["conditions"][0] = {{"type", "PodScheduled"},
                                    {"status", "False"},
                                    {"reason", "Unschedulable"},
                                    {"message", std::string(100'000, 'x')}};
  EXPECT_LE(ObservePod(pod)->unschedulable.size(), 1024u);
}

TEST(ObservePodTest, ReadsWhyTheKubeletCannotStartIt) {
  json pod = json::parse(R"({
    "metadata": {"name": "tj-ps-0", "labels": {"kubetrain.io/replica-type": "ps",
                                               "kubetrain.io/replica-index": "0"}},
    "spec": {"containers": [{"name": "trainer"}]},
    "status": {"phase": "Pending", "containerStatuses": [
      {"name": "trainer", "state": {"waiting": {"reason": "ImagePullBackOff",
       "message": "Back-off pulling image \"kubetrain-trainer:typo\""}}}]}})");
  StatusOr<ObservedPod> p = ObservePod(pod);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->cannot_start, "ImagePullBackOff: Back-off pulling image \"kubetrain-trainer:typo\"");
  // An init container stuck first is the one named.
  pod["status"]["initContainerStatuses"] = json::parse(
      R"([{"name": "fetch", "state": {"waiting": {"reason": "CreateContainerConfigError",
           "message": "secret \"creds\" not found"}}}])");
  EXPECT_EQ(ObservePod(pod)->cannot_start,
            "CreateContainerConfigError: secret \"creds\" not found");
  // Merely starting: nothing.
  pod["status"].erase("initContainerStatuses");
  pod["status"]["containerStatuses"][0]["state"]["waiting"] = {{"reason", "ContainerCreating"}};
  EXPECT_EQ(ObservePod(pod)->cannot_start, "");
  // A running pod's waiting container is the restart policy's business.
  pod["status"]["phase"] = "Running";
  pod["status"]["containerStatuses"][0]["state"]["waiting"] = {{"reason", "ImagePullBackOff"}};
  EXPECT_EQ(ObservePod(pod)->cannot_start, "");
}

TEST(ObservePodTest, EvictedPodTakesThePodsReason) {
  json pod = json::parse(R"({
    "metadata": {"name": "tj-ps-0", "labels": {"kubetrain.io/replica-type": "ps",
                                               "kubetrain.io/replica-index": "0"}},
    "spec": {"containers": [{"name": "x"}]},
    "status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}})");
  StatusOr<ObservedPod> p = ObservePod(pod);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->exit_code.has_value());
  EXPECT_EQ(p->reason, "Evicted");
  EXPECT_EQ(p->message, "low on memory");
}

TEST(ObservePodTest, RejectsPodsWithoutReplicaLabels) {
  EXPECT_FALSE(ObservePod(json::parse(R"({"metadata": {"name": "x"}})")).ok());
}

TEST(ObservePodTest, ReadsPhases) {
  EXPECT_EQ(PodPhaseFromString("Running"), PodPhase::kRunning);
  EXPECT_EQ(PodPhaseFromString("Succeeded"), PodPhase::kSucceeded);
  EXPECT_EQ(PodPhaseFromString("running"), PodPhase::kUnknown);
}

// A pod update reconciles its job only when it changes something
// the cache keeps; the scheduler's binding and condition timestamps do not.
TEST(CachedPodTest, SameForTheControllerIgnoresOnlyWhatTheCacheDoesNotKeep) {
  const json pending = json::parse(R"({
    "metadata": {"name": "tj-worker-0", "namespace": "ns", "uid": "u1", "resourceVersion": "5",
                 "creationTimestamp": "2026-01-01T00:00:00Z",
                 "labels": {"kubetrain.io/job-name": "tj", "kubetrain.io/replica-type": "worker",
                            "kubetrain.io/replica-index": "0"},
                 "ownerReferences": [{"kind": "TrainingJob", "name": "tj", "uid": "j1",
                                      "controller": true}]},
    "spec": {"containers": [{"name": "trainer",
                             "ports": [{"name": "metrics", "containerPort": 9090}]}]},
    "status": {"phase": "Pending"}})");
  const CachedPod a = *ToCachedPod(pending);

  json bound = pending;  // the scheduler's binding: a new version, nothing kept changes
  bound["metadata"]["resourceVersion"] = "6";
  bound["spec"]["nodeName"] = "node-1";
  bound["status"]["conditions"] = {{{"type", "PodScheduled"}, {"status", "True"}}};
  EXPECT_TRUE(SameForTheController(a, *ToCachedPod(bound)));
  EXPECT_TRUE(SameForTheController(a, a));

  json running = bound;
  running["status"]["phase"] = "Running";
  EXPECT_FALSE(SameForTheController(a, *ToCachedPod(running)));
  json with_ip = bound;  // the metrics URL appears
  with_ip["status"]["podIP"] = "10.0.0.1";
  EXPECT_FALSE(SameForTheController(a, *ToCachedPod(with_ip)));
  json deleting = bound;
  deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z";
  EXPECT_FALSE(SameForTheController(a, *ToCachedPod(deleting)));
  json relabelled = bound;  // a label nothing reads is not kept
  relabelled["metadata"]["labels"]["extra"] = "x";
  EXPECT_TRUE(SameForTheController(a, *ToCachedPod(relabelled)));
  json regrouped = bound;  // the planner reads the gang's
  regrouped["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "tj";
  EXPECT_FALSE(SameForTheController(a, *ToCachedPod(regrouped)));
  json orphaned = bound;
  orphaned["metadata"].erase("ownerReferences");
  EXPECT_FALSE(SameForTheController(a, *ToCachedPod(orphaned)));
  json unschedulable = pending;
  unschedulable["status"]["conditions"] = {
      {{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}}};
  EXPECT_FALSE(SameForTheController(a, *ToCachedPod(unschedulable)));
}

// The pod informer builds only CachedPodFields of each served pod;
// ToCachedPod reads from that what it reads from the whole pod, for every
// field it keeps, and the rest of the spec is not built.
TEST(CachedPodTest, CachedPodFieldsHoldEverythingToCachedPodReads) {
  const json pod = json::parse(R"({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "tj-worker-1", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                 "generation": 2, "creationTimestamp": "2026-01-01T00:00:00Z",
                 "deletionTimestamp": "2026-01-01T00:01:00Z",
                 "annotations": {"kubetrain.io/spec-hash": "0123456789abcdef",
                                 "example.com/note": "not read"},
                 "labels": {"kubetrain.io/job-name": "tj", "kubetrain.io/replica-type": "worker",
                            "kubetrain.io/replica-index": "1",
                            "training.kubeflow.org/job-name": "tj",
                            "training.kubeflow.org/replica-type": "worker"},
                 "ownerReferences": [{"kind": "TrainingJob", "name": "tj", "uid": "j1",
                                      "controller": true}],
                 "managedFields": [{"manager": "kubetrain"}]},
    "spec": {"volumes": [{"name": "v", "secret": {"secretName": "tj-auth"}}],
             "nodeSelector": {"type": "kwok"},
             "initContainers": [{"name": "init", "image": "busybox"}],
             "containers": [
               {"name": "sidecar", "image": "s", "ports": [{"name": "metrics", "containerPort": 1}]},
               {"name": "trainer", "image": "kubetrain-trainer", "args": ["--x"],
                "ports": [{"name": "grpc", "containerPort": 2222},
                          {"name": "metrics", "containerPort": 9090}],
                "env": [{"name": "POD_NAME", "value": "worker-1"},
                        {"name": "CLUSTER_CONFIG", "valueFrom": {"secretKeyRef":
                          {"name": "tj-auth-j1", "key": "cluster"}}},
                        {"name": "KUBETRAIN_AUTH_KEY", "valueFrom": {"secretKeyRef":
                          {"name": "tj-auth", "key": "key"}}}]}]},
    "status": {"phase": "Pending", "podIP": "10.0.0.9", "reason": "R", "message": "M",
      "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "message": "0/2 nodes are available"}],
      "initContainerStatuses": [{"name": "init", "state": {"waiting": {
        "reason": "ErrImagePull", "message": "no such image"}}}],
      "containerStatuses": [
        {"name": "trainer", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                     "message": "m"}}}]}})");
  const json built =
      kube::ParseServedJson(pod.dump(), kube::ServedShape::kObject, true, CachedPodFields().get())
          .value();
  EXPECT_FALSE(built["spec"].contains("volumes"));
  EXPECT_FALSE(built["spec"]["containers"][1].contains("image"));
  EXPECT_FALSE(built["spec"]["containers"][1]["env"][0].contains("value"));
  // Nor the labels and annotations nothing reads (a TFJob's pods carry v1's too).
  EXPECT_EQ(built["metadata"]["labels"].size(), 2u) << built["metadata"].dump();
  EXPECT_EQ(built["metadata"]["annotations"].size(), 1u) << built["metadata"].dump();

  auto whole = ToCachedPod(pod);
  auto kept = ToCachedPod(built);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->meta, whole->meta);
  EXPECT_TRUE(kept->pod == whole->pod);
  EXPECT_EQ(kept->metrics_url, whole->metrics_url);
  // The pod reads as the whole one does in every field the test set.
  EXPECT_EQ(kept->metrics_url, "http://10.0.0.9:9090/metrics");
  EXPECT_TRUE(kept->pod.cluster_config_in_secret);
  EXPECT_TRUE(kept->pod.legacy_auth_secret);
  EXPECT_EQ(kept->pod.exit_code, 137);
  EXPECT_EQ(kept->pod.spec_hash, "0123456789abcdef");
  EXPECT_EQ(kept->pod.role, api::ReplicaType::kWorker);
  EXPECT_EQ(kept->pod.index, 1);
  EXPECT_EQ(kept->pod.labels.size(), 2u);
  EXPECT_TRUE(kept->meta.labels.empty());
  EXPECT_EQ(kept->pod.unschedulable, "0/2 nodes are available");
  EXPECT_EQ(kept->pod.cannot_start, "ErrImagePull: no such image");
  ASSERT_TRUE(kept->meta.controller);
  EXPECT_EQ(kept->meta.controller->uid, "j1");
}

}  // namespace
}  // namespace kubetrain::controller
