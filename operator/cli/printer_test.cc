#include "operator/cli/printer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kubetrain::cli {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;

std::vector<std::string> Names(const std::vector<PrinterColumn>& cols, bool wide) {
  std::vector<std::string> out;
  for (const auto& c : cols) {
    if (wide || c.priority == 0) out.push_back(c.name);
  }
  return out;
}

// The compiled-in CRDs load, and every JSONPath they use is one EvalJsonPath evaluates.
TEST(PrinterTest, ShippedCrdColumnsLoad) {
  auto jobs = TrainingJobColumns();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_THAT(Names(*jobs, false),
              ::testing::IsSupersetOf({"State", "Progress", "ETA", "AUC", "Age"}));
  EXPECT_THAT(Names(*jobs, true), ::testing::IsSupersetOf({"PS", "Workers"}));
  auto sweeps = TrainingSweepColumns();
  ASSERT_TRUE(sweeps.ok()) << sweeps.status().ToString();
  EXPECT_THAT(Names(*sweeps, false), ::testing::IsSupersetOf({"Best", "Trials", "State", "Age"}));
}

TEST(PrinterTest, EvalJsonPathFieldsAndFilters) {
  const json obj = json::parse(R"({
    "status": {"state": "Running", "progress": {"percent": 42},
               "conditions": [{"type": "Created", "reason": "A"},
                              {"type": "Ready", "reason": "TrainingJobRunning"}]}})");
  EXPECT_THAT(*EvalJsonPath(obj, ".status.state"), ElementsAre(json("Running")));
  EXPECT_THAT(*EvalJsonPath(obj, ".status.progress.percent"), ElementsAre(json(42)));
  EXPECT_THAT(*EvalJsonPath(obj, R"(.status.conditions[?(@.type=="Ready")].reason)"),
              ElementsAre(json("TrainingJobRunning")));
  EXPECT_TRUE(EvalJsonPath(obj, R"(.status.conditions[?(@.type=="Gone")].reason)")->empty());
  EXPECT_TRUE(EvalJsonPath(obj, ".status.metrics.eval.auc")->empty());
  EXPECT_TRUE(EvalJsonPath(obj, ".status.state.deeper")->empty());
}

TEST(PrinterTest, EvalJsonPathRefusesWhatItCannotEvaluate) {
  for (const char* bad : {"", "status.state", ".a[0]", ".a[*].b", ".a..b", ".a[?(@.x>1)]"}) {
    EXPECT_FALSE(EvalJsonPath(json::object(), bad).ok()) << bad;
  }
  EXPECT_FALSE(LoadPrinterColumns(R"(
spec:
  versions:
    - name: v1
      served: true
      additionalPrinterColumns: [{name: X, type: string, jsonPath: ".items[0].x"}]
)")
                   .ok());
}

// k8s.io/apimachinery/pkg/util/duration's HumanDuration test cases.
TEST(PrinterTest, HumanDurationAsKubectl) {
  using std::chrono::hours;
  using std::chrono::minutes;
  using std::chrono::seconds;
  EXPECT_EQ(HumanDuration(seconds(1)), "1s");
  EXPECT_EQ(HumanDuration(seconds(70)), "70s");
  EXPECT_EQ(HumanDuration(seconds(190)), "3m10s");
  EXPECT_EQ(HumanDuration(minutes(4)), "4m");
  EXPECT_EQ(HumanDuration(minutes(10)), "10m");
  EXPECT_EQ(HumanDuration(minutes(179)), "179m");
  EXPECT_EQ(HumanDuration(hours(3) + minutes(5)), "3h5m");
  EXPECT_EQ(HumanDuration(hours(8)), "8h");
  EXPECT_EQ(HumanDuration(hours(47)), "47h");
  EXPECT_EQ(HumanDuration(hours(48)), "2d");
  EXPECT_EQ(HumanDuration(hours(76)), "3d4h");
  EXPECT_EQ(HumanDuration(hours(24 * 400)), "400d");
  EXPECT_EQ(HumanDuration(hours(24 * 365 * 3 + 24 * 10)), "3y10d");
  EXPECT_EQ(HumanDuration(hours(24 * 365 * 9)), "9y");
  EXPECT_EQ(HumanDuration(seconds(-1)), "0s");
  EXPECT_EQ(HumanDuration(seconds(-5)), "<invalid>");
}

TEST(PrinterTest, TableAlignsCellsAsKubectlAndLeavesMissingOnesBlank) {
  const std::vector<PrinterColumn> cols = {
      {"State", "string", ".status.state", 0},
      {"Progress", "integer", ".status.progress.percent", 0},
      {"AUC", "number", ".status.metrics.eval.auc", 0},
      {"Workers", "integer", ".spec.replicaSpecs.Worker.replicas", 1},
      {"Age", "date", ".metadata.creationTimestamp", 0},
  };
  const auto now = std::chrono::sys_days{std::chrono::year{2026} / 11 / 27} + std::chrono::hours(3);
  const std::vector<json> jobs = {
      json::parse(R"({"metadata": {"name": "a-long-name", "namespace": "ns1",
                                   "creationTimestamp": "2026-11-27T02:55:00Z"},
                      "spec": {"replicaSpecs": {"Worker": {"replicas": 2}}},
                      "status": {"state": "Succeeded", "progress": {"percent": 100},
                                 "metrics": {"eval": {"auc": 0.7812}}}})"),
      json::parse(R"({"metadata": {"name": "b", "namespace": "ns2",
                                   "creationTimestamp": "2026-11-27T02:59:50Z"}})"),
  };
  EXPECT_EQ(FormatTable(cols, jobs, false, false, now),
            "NAME          STATE       PROGRESS   AUC      AGE\n"
            "a-long-name   Succeeded   100        0.7812   5m\n"
            "b                                             10s\n");
  EXPECT_EQ(FormatTable(cols, jobs, true, true, now),
            "NAMESPACE   NAME          STATE       PROGRESS   AUC      WORKERS   AGE\n"
            "ns1         a-long-name   Succeeded   100        0.7812   2         5m\n"
            "ns2         b                                                       10s\n");
  EXPECT_EQ(FormatTable(cols, {}, false, false, now), "");
}

TEST(PrinterTest, CellsFromWorkloadsCannotBreakTheTable) {
  const PrinterColumn reason{"Reason", "string", ".r", 0};
  EXPECT_EQ(Cell(reason, {json("two\nlines\tand\x1b[31m")}, {}), "two lines and [31m");
  EXPECT_EQ(Cell(reason, {json("a"), json("b")}, {}), "a,b");
  EXPECT_EQ(Cell(reason, {}, {}), "");
}

}  // namespace
}  // namespace kubetrain::cli
