#include "operator/cli/operator_options.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

namespace kubetrain::operator_cli {
namespace {

OperatorOptions Parse(std::vector<std::string> args) {
  OperatorOptions o;
  CLI::App app;
  AddOperatorFlags(app, &o);
  args.insert(args.begin(), "kubetrain-operator");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return o;
}

TEST(OperatorOptionsTest, NoFlagsGiveTheDocumentedDefaults) {
  const OperatorOptions o = Parse({});
  EXPECT_EQ(o.workers, 4);
  EXPECT_EQ(o.metrics_addr, "0.0.0.0:8080");
  EXPECT_EQ(o.health_addr, "0.0.0.0:8081");
  EXPECT_EQ(o.lease_namespace, "kubetrain-system");
  EXPECT_EQ(o.lease_name, "kubetrain-operator");
  EXPECT_TRUE(o.network_policy);
  EXPECT_FALSE(o.leader_elect);
  EXPECT_EQ(o.tfjob, "off");
  EXPECT_TRUE(ValidateOperatorOptions(o).ok());
}

TEST(OperatorOptionsTest, TfjobTakesOffManagedOrAll) {
  EXPECT_EQ(Parse({"--tfjob", "managed"}).tfjob, "managed");
  EXPECT_EQ(Parse({"--tfjob=all"}).tfjob, "all");
  EXPECT_THROW(Parse({"--tfjob", "yes"}), CLI::ValidationError);
}

TEST(OperatorOptionsTest, FlagsLandInTheirFields) {
  const OperatorOptions o =
      Parse({"--namespace", "a", "--namespace", "b", "--leader-elect", "--workers", "8",
             "--network-policy=false", "--network-policy-metrics-from", "x=1", "--progress-qps",
             "0", "--health-addr", "127.0.0.1:0"});
  EXPECT_EQ(o.namespaces, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(o.leader_elect);
  EXPECT_EQ(o.workers, 8);
  EXPECT_FALSE(o.network_policy);
  EXPECT_EQ(o.metrics_from, (std::vector<std::string>{"x=1"}));
  EXPECT_EQ(o.progress_qps, 0);
  EXPECT_EQ(o.health_addr, "127.0.0.1:0");
}

TEST(OperatorOptionsTest, OutOfRangeFlagIsRefusedByTheParser) {
  EXPECT_THROW(Parse({"--workers", "0"}), CLI::ValidationError);
  EXPECT_THROW(Parse({"--log-format", "xml"}), CLI::ValidationError);
}

TEST(OperatorOptionsTest, MetricsAndProbesOnOnePortAreRefused) {
  OperatorOptions o;
  o.metrics_addr = "127.0.0.1:9000";
  o.health_addr = "0.0.0.0:9000";
  const Status s = ValidateOperatorOptions(o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("share a port"), std::string::npos) << s.message();
  // Both off is no clash.
  o.metrics_addr = o.health_addr = "0.0.0.0:0";
  EXPECT_TRUE(ValidateOperatorOptions(o).ok());
}

TEST(OperatorOptionsTest, RenewDeadlineMustBeShorterThanTheLeaseWhenElecting) {
  OperatorOptions o;
  o.renew_deadline_s = o.lease_duration_s;
  EXPECT_TRUE(ValidateOperatorOptions(o).ok());  // no election, no lease
  o.leader_elect = true;
  EXPECT_EQ(ValidateOperatorOptions(o).code(), StatusCode::kInvalidArgument);
}

TEST(OperatorOptionsTest, EnvironmentFillsOnlyWhatTheFlagsLeftEmpty) {
  std::map<std::string, std::string> env = {{"POD_NAMESPACE", "ops"}, {"POD_NAME", "op-1"}};
  auto getenv = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  OperatorOptions o;
  ResolveFromEnvironment(&o, getenv);
  EXPECT_EQ(o.operator_namespace, "ops");
  EXPECT_EQ(o.lease_identity, "op-1");

  OperatorOptions given;
  given.operator_namespace = "mine";
  given.lease_identity = "me";
  ResolveFromEnvironment(&given, getenv);
  EXPECT_EQ(given.operator_namespace, "mine");
  EXPECT_EQ(given.lease_identity, "me");

  env["POD_NAME"] = "";  // an empty POD_NAME leaves the identity to be generated
  OperatorOptions empty;
  ResolveFromEnvironment(&empty, getenv);
  EXPECT_EQ(empty.lease_identity, "");
}

}  // namespace
}  // namespace kubetrain::operator_cli
