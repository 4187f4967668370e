// The job's NetworkPolicy, judged by what it lets through: a small evaluator of
// the NetworkPolicy ingress rules (networking.k8s.io/v1 semantics, the subset
// the operator writes: podSelector/namespaceSelector matchLabels, numbered and
// named ports) asks, for a peer and a port of a job's pod, whether any rule
// admits the connection. The pod is the one the plan creates, so a named port
// resolves as the enforcer would resolve it.
#include "operator/planner/children.h"

#include <gtest/gtest.h>

#include "operator/planner/planner.h"

namespace kubetrain::planner {
namespace {

using api::ReplicaType;
using nlohmann::json;
using std::chrono::seconds;

struct Peer {
  std::string ns;
  LabelMap ns_labels;  // kubernetes.io/metadata.name is added from ns
  LabelMap pod_labels;
};

struct Target {
  std::string protocol;
  int port;
};

bool MatchLabels(const json& selector, const LabelMap& labels) {
  EXPECT_FALSE(selector.contains("matchExpressions")) << "the evaluator handles matchLabels only";
  if (!selector.contains("matchLabels")) return true;  // {} selects everything
  for (const auto& [k, v] : selector["matchLabels"].items()) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v.get<std::string>()) return false;
  }
  return true;
}

// Whether the policy (in `policy_ns`) admits `peer` to `target` on `pod`.
bool Admits(const json& policy, const std::string& policy_ns, const json& pod, const Peer& peer,
            const Target& target) {
  LabelMap ns_labels = peer.ns_labels;
  ns_labels["kubernetes.io/metadata.name"] = peer.ns;
  for (const json& rule : policy["spec"].value("ingress", json::array())) {
    bool from_ok = !rule.contains("from") || rule["from"].empty();  // absent or []: anyone
    for (const json& p : rule.value("from", json::array())) {
      EXPECT_FALSE(p.contains("ipBlock")) << "the evaluator has no addresses";
      const bool has_ns = p.contains("namespaceSelector"), has_pod = p.contains("podSelector");
      const bool ns_ok =
          has_ns ? MatchLabels(p["namespaceSelector"], ns_labels) : peer.ns == policy_ns;
      const bool pod_ok = has_pod ? MatchLabels(p["podSelector"], peer.pod_labels) : true;
      if ((has_ns || has_pod) && ns_ok && pod_ok) from_ok = true;
    }
    bool port_ok = !rule.contains("ports") || rule["ports"].empty();  // every port
    for (const json& p : rule.value("ports", json::array())) {
      if (p.value("protocol", std::string("TCP")) != target.protocol) continue;
      if (!p.contains("port")) {
        port_ok = true;
      } else if (p["port"].is_string()) {  // a named port of the target pod
        for (const json& c : pod["spec"]["containers"]) {
          for (const json& cp : c.value("ports", json::array())) {
            if (cp.value("name", std::string()) == p["port"].get<std::string>() &&
                cp.value("protocol", std::string("TCP")) == target.protocol &&
                cp["containerPort"] == target.port) {
              port_ok = true;
            }
          }
        }
      } else {
        const int lo = p["port"].get<int>(), hi = p.value("endPort", lo);
        if (target.port >= lo && target.port <= hi) port_ok = true;
      }
    }
    if (from_ok && port_ok) return true;
  }
  return false;
}

api::TrainingJob Job() {
  api::TrainingJob job;
  job.metadata.name = "tj";
  job.metadata.namespace_ = "ml";
  job.metadata.uid = "job-uid";
  job.spec.port = 3000;
  api::ReplicaSpec& r = job.spec.replica_specs[ReplicaType::kWorker];
  r.replicas = 1;
  r.pod_template = {
      {"spec",
       {{"containers", json::array({{{"name", "trainer"}, {"image", "kubetrain-trainer"}}})}}}};
  return job;
}

struct Planned {
  json policy;
  json pod;
};

Planned Plan(const api::TrainingJob& job, const MetricsIngress& metrics = {}) {
  PlanInput in;
  in.now = api::Time{seconds(1'800'000'000)};
  in.auth_key.fill(1);
  in.network_policy = true;
  in.metrics_ingress = metrics;
  const planner::Plan plan = PlanJob(job, {}, in);
  Planned out;
  for (const ChildCreate& c : plan.creates) {
    if (c.ref.kind == ChildRef::Kind::kNetworkPolicy) out.policy = c.object;
    if (c.ref.kind == ChildRef::Kind::kPod) out.pod = c.object;
  }
  EXPECT_FALSE(out.policy.is_null());
  EXPECT_FALSE(out.pod.is_null());
  return out;
}

const Peer kSameJob{"ml", {}, {{"kubetrain.io/job-name", "tj"}}};
const Peer kOtherJobSameNs{"ml", {}, {{"kubetrain.io/job-name", "other"}}};
// A pod in another namespace wearing the job's label.
const Peer kNeighbour{"tenant-b", {}, {{"kubetrain.io/job-name", "tj"}}};
const Peer kOperator{"kubetrain-system", {}, {{"app.kubernetes.io/name", "kubetrain-operator"}}};
// The operator's labels in a namespace a tenant controls.
const Peer kFakeOperator{"tenant-b", {}, {{"app.kubernetes.io/name", "kubetrain-operator"}}};
const Peer kMonitoring{"monitoring", {{"team", "obs"}}, {{"app", "prometheus"}}};

const Target kTraining{"TCP", 3000}, kMetrics{"TCP", 9090}, kSsh{"TCP", 22}, kDns{"UDP", 53},
    kSctp{"SCTP", 3000};

TEST(JobNetworkPolicyTest, OnlyTheJobReachesTheTrainingPortAndOnlyTheOperatorTheMetricsPort) {
  const Planned p = Plan(Job());
  const auto admits = [&](const Peer& peer, const Target& t) {
    return Admits(p.policy, "ml", p.pod, peer, t);
  };
  EXPECT_EQ(p.policy["spec"]["podSelector"],
            json({{"matchLabels", {{"kubetrain.io/job-name", "tj"}}}}));
  EXPECT_EQ(p.policy["spec"]["policyTypes"], json::array({"Ingress"}));
  EXPECT_TRUE(admits(kSameJob, kTraining));
  EXPECT_TRUE(admits(kOperator, kMetrics));
  // Nothing else, from anyone: the job's own pods need only the training port.
  for (const Peer* peer :
       {&kSameJob, &kOtherJobSameNs, &kNeighbour, &kOperator, &kFakeOperator, &kMonitoring}) {
    for (const Target* t : {&kTraining, &kMetrics, &kSsh, &kDns, &kSctp}) {
      const bool allowed =
          (peer == &kSameJob && t == &kTraining) || (peer == &kOperator && t == &kMetrics);
      EXPECT_EQ(admits(*peer, *t), allowed) << peer->ns << " " << peer->pod_labels.begin()->second
                                            << " -> " << t->protocol << "/" << t->port;
    }
  }
  // No rule without peers: one would admit every source (what undid a
  // namespace's default-deny).
  for (const json& rule : p.policy["spec"]["ingress"]) {
    ASSERT_TRUE(rule.contains("from"));
    EXPECT_FALSE(rule["from"].empty());
  }
}

TEST(JobNetworkPolicyTest, TheMetricsRuleFollowsTheOperatorsFlagsAndMonitoringNamespaces) {
  MetricsIngress metrics;
  metrics.operator_namespace = "ops";
  metrics.operator_pod_labels = {{"app.kubernetes.io/name", "kubetrain-operator"},
                                 {"app.kubernetes.io/instance", "kt"}};
  metrics.namespace_selectors = {{{"team", "obs"}}};
  const Planned p = Plan(Job(), metrics);
  const auto admits = [&](const Peer& peer, const Target& t) {
    return Admits(p.policy, "ml", p.pod, peer, t);
  };
  const Peer helm_operator{"ops", {}, metrics.operator_pod_labels};
  EXPECT_TRUE(admits(helm_operator, kMetrics));
  EXPECT_FALSE(admits(helm_operator, kTraining));
  EXPECT_FALSE(admits(kOperator, kMetrics));  // the default namespace is no longer it
  EXPECT_FALSE(admits({"ops", {}, {{"app.kubernetes.io/name", "kubetrain-operator"}}}, kMetrics))
      << "every operator label must match";
  EXPECT_TRUE(admits(kMonitoring, kMetrics));
  EXPECT_FALSE(admits(kMonitoring, kTraining));
  EXPECT_FALSE(admits(kMonitoring, kSsh));
  EXPECT_FALSE(admits({"monitoring", {{"team", "other"}}, {}}, kMetrics));
}

// The template's own "metrics" port (another number) is the one the progress
// reader reads, so the one the policy opens; 9090 is then closed.
TEST(JobNetworkPolicyTest, TheMetricsPortIsTheTemplatesNamedPort) {
  api::TrainingJob job = Job();
  job.spec.replica_specs[ReplicaType::kWorker].pod_template["spec"]["containers"][0]["ports"] =
      json::array({{{"name", "metrics"}, {"containerPort", 9100}}});
  const Planned p = Plan(job);
  EXPECT_TRUE(Admits(p.policy, "ml", p.pod, kOperator, {"TCP", 9100}));
  EXPECT_FALSE(Admits(p.policy, "ml", p.pod, kOperator, kMetrics));
  EXPECT_FALSE(Admits(p.policy, "ml", p.pod, kNeighbour, {"TCP", 9100}));
}

TEST(ParseLabelsTest, ReadsKeyValueListsAndRefusesWhatASelectorCouldNotHold) {
  auto l = ParseLabels("app.kubernetes.io/name=kubetrain-operator,app.kubernetes.io/instance=kt");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(*l, (LabelMap{{"app.kubernetes.io/name", "kubetrain-operator"},
                          {"app.kubernetes.io/instance", "kt"}}));
  EXPECT_EQ(*ParseLabels("kubernetes.io/metadata.name=monitoring"),
            (LabelMap{{"kubernetes.io/metadata.name", "monitoring"}}));
  EXPECT_EQ(*ParseLabels("empty="), (LabelMap{{"empty", ""}}));
  for (const char* bad : {"", "novalue", "=v", "a=b,", "a=b c", "a/=b", "-a=b", "a=b-", "a=b=c"}) {
    EXPECT_FALSE(ParseLabels(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseLabels("a=" + std::string(64, 'x')).ok());
}

}  // namespace
}  // namespace kubetrain::planner
