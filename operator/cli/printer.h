// `kubetrain get`'s tables: the printer columns of the TrainingJob and
// TrainingSweep CRDs (crds/*.yaml, compiled in), evaluated on served objects
// as `kubectl get` shows them, so the two always agree.
//
// Contract: pure functions, no I/O; thread-safe. A column's JSONPath is the
// subset the CRDs use: `.a.b.c` and `.a[?(@.key=="value")].b`; anything else is
// an error when the columns are loaded (a unit test loads the shipped CRDs).
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kubetrain::cli {

struct PrinterColumn {
  std::string name;       // "Progress"
  std::string type;       // "string", "integer", "number", "date", ...
  std::string json_path;  // ".status.progress.percent"
  int priority = 0;       // 0: shown by default; more: only with -o wide
};

// The additionalPrinterColumns of the served version of a CRD document (YAML).
[[nodiscard]] StatusOr<std::vector<PrinterColumn>> LoadPrinterColumns(std::string_view crd_yaml);

// The compiled-in CRDs' columns. Errors only if the compiled-in CRDs are bad.
[[nodiscard]] StatusOr<std::vector<PrinterColumn>> TrainingJobColumns();
[[nodiscard]] StatusOr<std::vector<PrinterColumn>> TrainingSweepColumns();

// The values `path` selects in `object` (one element per match; none if a
// field is missing). Errors: InvalidArgument for a path outside the subset.
[[nodiscard]] StatusOr<std::vector<nlohmann::json>> EvalJsonPath(const nlohmann::json& object,
                                                                 std::string_view path);

// "5s", "4m10s" below 10 minutes, "3h", "2d5h", "400d": kubectl's age format
// (k8s.io/apimachinery/pkg/util/duration.HumanDuration).
std::string HumanDuration(std::chrono::seconds d);

// One cell: a string as it is, a number as JSON prints it, a date as its age
// at `now`, several matches joined with ','; "" for none.
std::string Cell(const PrinterColumn& column, const std::vector<nlohmann::json>& values,
                 std::chrono::system_clock::time_point now);

// A table: NAME (after NAMESPACE with `with_namespace`), then each column of
// priority 0 (every column with `wide`); cells padded to the widest plus three
// spaces, as kubectl aligns them. Ends with a newline; "" for no objects.
std::string FormatTable(const std::vector<PrinterColumn>& columns,
                        const std::vector<nlohmann::json>& objects, bool wide, bool with_namespace,
                        std::chrono::system_clock::time_point now);

}  // namespace kubetrain::cli
