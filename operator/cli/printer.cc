#include "operator/cli/printer.h"

#include <algorithm>

#include "operator/api/types.h"
#include "operator/api/yaml.h"
#include "operator/cli/kubetrain_crds.h"

namespace kubetrain::cli {
namespace {

using nlohmann::json;

// One step of a JSONPath: a field, optionally followed by a filter on the
// elements of the list it holds ([?(@.key=="value")]).
struct Step {
  std::string field;
  bool filter = false;
  std::string key;
  std::string value;
};

StatusOr<std::vector<Step>> ParsePath(std::string_view path) {
  const std::string whole(path);
  auto bad = [&](std::string_view why) {
    return InvalidArgument("JSONPath \"" + whole + "\": " + std::string(why) +
                           " (supported: .a.b and .a[?(@.k==\"v\")].b)");
  };
  if (path.empty() || path.front() != '.') return bad("must start with '.'");
  std::vector<Step> steps;
  while (!path.empty()) {
    if (path.front() != '.') return bad("expected '.'");
    path.remove_prefix(1);
    const size_t end = path.find_first_of(".[");
    Step step;
    step.field = std::string(path.substr(0, end));
    if (step.field.empty()) return bad("empty field name");
    path.remove_prefix(end == std::string_view::npos ? path.size() : end);
    if (!path.empty() && path.front() == '[') {
      constexpr std::string_view kOpen = "[?(@.";
      if (path.substr(0, kOpen.size()) != kOpen) return bad("only [?(@.key==\"value\")] filters");
      path.remove_prefix(kOpen.size());
      const size_t eq = path.find("==\"");
      if (eq == std::string_view::npos || eq == 0) return bad("filter without ==\"value\"");
      step.key = std::string(path.substr(0, eq));
      path.remove_prefix(eq + 3);
      const size_t close = path.find("\")]");
      if (close == std::string_view::npos) return bad("unterminated filter");
      step.value = std::string(path.substr(0, close));
      path.remove_prefix(close + 3);
      step.filter = true;
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace

StatusOr<std::vector<json>> EvalJsonPath(const json& object, std::string_view path) {
  auto steps = ParsePath(path);
  if (!steps.ok()) return steps.status();
  std::vector<const json*> current{&object};
  for (const Step& step : *steps) {
    std::vector<const json*> next;
    for (const json* node : current) {
      if (!node->is_object()) continue;
      auto it = node->find(step.field);
      if (it == node->end() || it->is_null()) continue;
      if (!step.filter) {
        next.push_back(&*it);
        continue;
      }
      if (!it->is_array()) continue;
      for (const json& element : *it) {
        if (!element.is_object()) continue;
        auto k = element.find(step.key);
        if (k != element.end() && k->is_string() && k->get<std::string>() == step.value) {
          next.push_back(&element);
        }
      }
    }
    current = std::move(next);
  }
  std::vector<json> out;
  out.reserve(current.size());
  for (const json* node : current) out.push_back(*node);
  return out;
}

StatusOr<std::vector<PrinterColumn>> LoadPrinterColumns(std::string_view crd_yaml) {
  auto docs = api::ParseYamlDocuments(crd_yaml);
  if (!docs.ok()) return docs.status();
  if (docs->size() != 1) return InvalidArgument("a CRD file holds one document");
  const json& crd = docs->front().value;
  const json* versions = nullptr;
  if (crd.contains("spec") && crd["spec"].is_object() && crd["spec"].contains("versions")) {
    versions = &crd["spec"]["versions"];
  }
  if (versions == nullptr || !versions->is_array()) return InvalidArgument("CRD without versions");
  for (const json& v : *versions) {
    if (!v.is_object() || !v.value("served", false)) continue;
    std::vector<PrinterColumn> columns;
    for (const json& c : v.value("additionalPrinterColumns", json::array())) {
      PrinterColumn col;
      col.name = c.value("name", "");
      col.type = c.value("type", "string");
      col.json_path = c.value("jsonPath", "");
      col.priority = c.value("priority", 0);
      // Refuse at load what EvalJsonPath cannot evaluate.
      if (auto check = EvalJsonPath(json::object(), col.json_path); !check.ok()) {
        return check.status();
      }
      columns.push_back(std::move(col));
    }
    return columns;
  }
  return InvalidArgument("CRD without a served version");
}

StatusOr<std::vector<PrinterColumn>> TrainingJobColumns() {
  return LoadPrinterColumns(kTrainingJobCrdYaml);
}

StatusOr<std::vector<PrinterColumn>> TrainingSweepColumns() {
  return LoadPrinterColumns(kTrainingSweepCrdYaml);
}

std::string HumanDuration(std::chrono::seconds d) {
  const long long seconds = d.count();
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 60 * 2) return std::to_string(seconds) + "s";
  const long long minutes = seconds / 60;
  if (minutes < 10) {
    const long long s = seconds % 60;
    return std::to_string(minutes) + "m" + (s == 0 ? "" : std::to_string(s) + "s");
  }
  if (minutes < 60 * 3) return std::to_string(minutes) + "m";
  const long long hours = minutes / 60;
  if (hours < 8) {
    const long long m = minutes % 60;
    return std::to_string(hours) + "h" + (m == 0 ? "" : std::to_string(m) + "m");
  }
  if (hours < 48) return std::to_string(hours) + "h";
  if (hours < 24 * 8) {
    const long long h = hours % 24;
    return std::to_string(hours / 24) + "d" + (h == 0 ? "" : std::to_string(h) + "h");
  }
  if (hours < 24 * 365 * 2) return std::to_string(hours / 24) + "d";
  if (hours < 24 * 365 * 8) {
    const long long dy = (hours / 24) % 365;
    return std::to_string(hours / 24 / 365) + "y" + (dy == 0 ? "" : std::to_string(dy) + "d");
  }
  return std::to_string(hours / 24 / 365) + "y";
}

std::string Cell(const PrinterColumn& column, const std::vector<json>& values,
                 std::chrono::system_clock::time_point now) {
  std::string out;
  for (const json& v : values) {
    if (!out.empty()) out += ",";
    if (column.type == "date" && v.is_string()) {
      auto t = api::ParseTime(v.get<std::string>());
      if (t.ok()) {
        out += HumanDuration(std::chrono::floor<std::chrono::seconds>(now) - *t);
        continue;
      }
    }
    // Strings come from workloads and users: printed as they are, minus
    // control characters that would break the table or the terminal.
    std::string s = v.is_string() ? v.get<std::string>()
                                  : v.dump(-1, ' ', false, json::error_handler_t::replace);
    for (char& c : s) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    }
    out += s;
  }
  return out;
}

std::string FormatTable(const std::vector<PrinterColumn>& columns, const std::vector<json>& objects,
                        bool wide, bool with_namespace, std::chrono::system_clock::time_point now) {
  if (objects.empty()) return "";
  std::vector<const PrinterColumn*> shown;
  for (const auto& c : columns) {
    if (wide || c.priority == 0) shown.push_back(&c);
  }
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header;
  if (with_namespace) header.push_back("NAMESPACE");
  header.push_back("NAME");
  for (const auto* c : shown) {
    std::string upper = c->name;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
    header.push_back(upper);
  }
  rows.push_back(std::move(header));
  for (const json& obj : objects) {
    std::vector<std::string> row;
    const json md = obj.value("metadata", json::object());
    if (with_namespace) row.push_back(md.value("namespace", ""));
    row.push_back(md.value("name", ""));
    for (const auto* c : shown) {
      auto values = EvalJsonPath(obj, c->json_path);
      row.push_back(values.ok() ? Cell(*c, *values, now) : "");
    }
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace kubetrain::cli
