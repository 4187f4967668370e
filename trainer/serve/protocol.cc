#include "trainer/serve/protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "trainer/data/reader.h"

namespace kubetrain::trainer::serve {
namespace {

using nlohmann::json;

// What a request gave, by input name, before it becomes a Batch. Rows of each are
// counted separately and must agree.
struct Columns {
  std::optional<std::vector<float>> dense;        // wide_deep "dense" or mlp "features"
  std::optional<std::vector<uint64_t>> cat;       // "cat_ids"
  std::optional<std::vector<std::string>> lines;  // "criteo_line"
  int64_t dense_rows = 0, cat_rows = 0;
};

Status Bad(std::string message) {
  return InvalidArgument(std::move(message));
}

// Refuses bodies nested deeper than kMaxJsonDepth before the parser sees them.
Status CheckDepth(std::string_view body) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return Bad("JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::Ok();
}

StatusOr<json> ParseJson(std::string_view body) {
  KT_RETURN_IF_ERROR(CheckDepth(body));
  try {
    json j = json::parse(body);
    if (!j.is_object()) return Bad("the request body must be a JSON object");
    return j;
  } catch (const json::exception& e) {
    return Bad(std::string("malformed JSON: ") + e.what());
  }
}

std::string_view InputName(const TensorLayout& l, bool dense) {
  if (!l.wide_deep) return "features";
  return dense ? "dense" : "cat_ids";
}

int DenseWidth(const TensorLayout& l) {
  return l.wide_deep ? l.num_dense : l.num_features;
}

// Appends the numbers of `v` (a number or arrays of them, any nesting: v2 allows both
// flat and nested data) to `out` as FP32.
Status AppendFloats(const json& v, std::string_view name, std::vector<float>* out) {
  if (v.is_array()) {
    for (const json& e : v) KT_RETURN_IF_ERROR(AppendFloats(e, name, out));
    return Status::Ok();
  }
  if (!v.is_number()) {
    return Bad("input " + std::string(name) + ": FP32 data must be numbers, got " +
               std::string(v.type_name()));
  }
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max())
    return Bad("input " + std::string(name) + ": " + v.dump() + " is not a finite FP32");
  out->push_back(static_cast<float>(d));
  return Status::Ok();
}

// INT64 data; the ids are the 64 bits of model.json's hash as two's complement.
Status AppendIds(const json& v, std::string_view name, std::vector<uint64_t>* out) {
  if (v.is_array()) {
    for (const json& e : v) KT_RETURN_IF_ERROR(AppendIds(e, name, out));
    return Status::Ok();
  }
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Bad("input " + std::string(name) + ": " + v.dump() + " is out of INT64 range");
    out->push_back(u);
    return Status::Ok();
  }
  if (v.is_number_integer()) {
    out->push_back(static_cast<uint64_t>(v.get<int64_t>()));
    return Status::Ok();
  }
  return Bad("input " + std::string(name) + ": INT64 data must be integers, got " +
             (v.is_number() ? "a fraction " + v.dump() : std::string(v.type_name())));
}

Status AppendLines(const json& v, std::string_view name, std::vector<std::string>* out) {
  if (v.is_array()) {
    for (const json& e : v) KT_RETURN_IF_ERROR(AppendLines(e, name, out));
    return Status::Ok();
  }
  if (!v.is_string())
    return Bad("input " + std::string(name) + ": BYTES data must be strings (Criteo lines)");
  out->push_back(v.get<std::string>());
  return Status::Ok();
}

// One row of a named input from TF Serving's row forms: exactly `width` values.
Status AppendRow(const json& row, const TensorLayout& l, bool dense, Columns* c) {
  const std::string_view name = InputName(l, dense);
  const int width = dense ? DenseWidth(l) : l.num_cat;
  if (!row.is_array() || static_cast<int>(row.size()) != width) {
    return Bad("input " + std::string(name) + ": each row must be a list of " +
               std::to_string(width) + " values, got " +
               (row.is_array() ? std::to_string(row.size()) + " values" : row.type_name()));
  }
  if (dense) {
    if (!c->dense) c->dense.emplace();
    ++c->dense_rows;
    return AppendFloats(row, name, &*c->dense);
  }
  if (!c->cat) c->cat.emplace();
  ++c->cat_rows;
  return AppendIds(row, name, &*c->cat);
}

// Which input `name` is: 0 dense/features, 1 cat_ids, 2 criteo_line, -1 none.
int InputIndex(const TensorLayout& l, std::string_view name) {
  if (!l.wide_deep) return name == "features" ? 0 : -1;
  if (name == "dense") return 0;
  if (name == "cat_ids") return 1;
  if (name == "criteo_line") return 2;
  return -1;
}

Status UnknownInput(const TensorLayout& l, std::string_view name) {
  return Bad("unknown input \"" + std::string(name) + "\" (this model takes " +
             (l.wide_deep ? "dense + cat_ids, or criteo_line" : "features") + ")");
}

// The Batch of `c`, checking that the inputs fit together and the row count.
StatusOr<Batch> Assemble(const TensorLayout& l, Columns& c, int max_examples) {
  Batch b;
  int64_t n = 0;
  if (c.lines) {
    if (c.dense || c.cat) return Bad("give either criteo_line or dense + cat_ids, not both");
    n = static_cast<int64_t>(c.lines->size());
  } else {
    if (!c.dense) return Bad(std::string("missing input ") + std::string(InputName(l, true)));
    if (l.wide_deep && !c.cat) return Bad("missing input cat_ids");
    n = c.dense_rows;
    if (l.wide_deep && c.cat_rows != n) {
      return Bad("dense has " + std::to_string(n) + " rows but cat_ids has " +
                 std::to_string(c.cat_rows));
    }
  }
  if (n == 0) return Bad("the request has no examples");
  if (n > max_examples) {
    return Bad("the request has " + std::to_string(n) + " examples; at most " +
               std::to_string(max_examples) + " per request");
  }
  b.size = static_cast<int>(n);
  b.num_dense = DenseWidth(l);
  b.num_cat = l.wide_deep ? l.num_cat : 0;
  b.label.assign(b.size, 0.f);
  if (c.lines) {
    b.dense.resize(static_cast<size_t>(b.size) * b.num_dense);
    b.cat.resize(static_cast<size_t>(b.size) * b.num_cat);
    for (int i = 0; i < b.size; ++i) {
      std::string& line = (*c.lines)[i];
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      const char sep = line.find('\t') != std::string::npos ? '\t' : ',';
      // Without the label (39 fields): the trainer's parser wants one; its value is unused.
      const size_t fields = 1 + static_cast<size_t>(std::count(line.begin(), line.end(), sep));
      if (fields == static_cast<size_t>(l.num_dense + l.num_cat)) line = "0" + (sep + line);
      if (Status s = ParseCriteoLine(line, sep, &b, i); !s.ok())
        return Bad("criteo_line " + std::to_string(i) + ": " + s.message());
    }
    return b;
  }
  b.dense = std::move(*c.dense);
  if (b.dense.size() != static_cast<size_t>(b.size) * b.num_dense) {
    return Bad(std::string("input ") + std::string(InputName(l, true)) + " has " +
               std::to_string(b.dense.size()) + " values, not " + std::to_string(b.size) + " x " +
               std::to_string(b.num_dense));
  }
  if (l.wide_deep) {
    b.cat = std::move(*c.cat);
    if (b.cat.size() != static_cast<size_t>(b.size) * b.num_cat) {
      return Bad("input cat_ids has " + std::to_string(b.cat.size()) + " values, not " +
                 std::to_string(b.size) + " x " + std::to_string(b.num_cat));
    }
  }
  return b;
}

// A v2 input tensor into `c`.
Status TakeV2Input(const json& in, const TensorLayout& l, Columns* c) {
  if (!in.is_object()) return Bad("each of \"inputs\" must be an object");
  const auto name_it = in.find("name");
  if (name_it == in.end() || !name_it->is_string()) return Bad("an input has no \"name\"");
  const std::string name = name_it->get<std::string>();
  const int index = InputIndex(l, name);
  if (index < 0) return UnknownInput(l, name);
  if (const auto p = in.find("parameters");
      p != in.end() && p->is_object() && p->contains("binary_data_size")) {
    return Bad("input " + name +
               ": the binary tensor data extension is not supported; send JSON data "
               "(tritonclient: binary_data=False)");
  }
  const auto dt = in.find("datatype");
  const auto shape = in.find("shape");
  const auto data = in.find("data");
  if (dt == in.end() || !dt->is_string()) return Bad("input " + name + ": no \"datatype\"");
  if (shape == in.end() || !shape->is_array()) return Bad("input " + name + ": no \"shape\"");
  if (data == in.end()) return Bad("input " + name + ": no \"data\"");
  std::vector<int64_t> dims;
  for (const json& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 30))
      return Bad("input " + name + ": shape must be non-negative integers");
    dims.push_back(d.get<int64_t>());
  }
  const std::string datatype = dt->get<std::string>();
  const std::string want = index == 0 ? "FP32" : index == 1 ? "INT64" : "BYTES";
  if (datatype != want)
    return Bad("input " + name + ": datatype " + datatype + ", expected " + want);
  const int width = index == 0 ? DenseWidth(l) : l.num_cat;
  if (index == 2) {
    if (!(dims.size() == 1 || (dims.size() == 2 && dims[1] == 1)))
      return Bad("input criteo_line: shape must be [n] or [n, 1]");
  } else if (dims.size() != 2 || dims[1] != width) {
    std::string got;
    for (const int64_t d : dims) got += (got.empty() ? "" : ", ") + std::to_string(d);
    return Bad("input " + name + ": shape [" + got + "], expected [n, " + std::to_string(width) +
               "]");
  }
  const size_t count = static_cast<size_t>(dims[0]) * (index == 2 ? 1 : width);
  size_t got = 0;
  if (index == 0) {
    if (c->dense) return Bad("input " + name + " given twice");
    c->dense.emplace();
    KT_RETURN_IF_ERROR(AppendFloats(*data, name, &*c->dense));
    c->dense_rows = dims[0];
    got = c->dense->size();
  } else if (index == 1) {
    if (c->cat) return Bad("input cat_ids given twice");
    c->cat.emplace();
    KT_RETURN_IF_ERROR(AppendIds(*data, name, &*c->cat));
    c->cat_rows = dims[0];
    got = c->cat->size();
  } else {
    if (c->lines) return Bad("input criteo_line given twice");
    c->lines.emplace();
    KT_RETURN_IF_ERROR(AppendLines(*data, name, &*c->lines));
    got = c->lines->size();
  }
  if (got != count) {
    return Bad("input " + name + ": shape says " + std::to_string(count) + " values, data has " +
               std::to_string(got));
  }
  return Status::Ok();
}

// One TF Serving instance (a row of every input).
Status TakeInstance(const json& inst, const TensorLayout& l, Columns* c) {
  if (inst.is_string()) {
    if (!l.wide_deep) return Bad("this model takes no Criteo lines");
    if (!c->lines) c->lines.emplace();
    c->lines->push_back(inst.get<std::string>());
    return Status::Ok();
  }
  if (inst.is_array()) {
    if (l.wide_deep)
      return Bad(
          "a Wide & Deep instance is an object {\"dense\": [...], \"cat_ids\": [...]} "
          "or a Criteo line");
    return AppendRow(inst, l, true, c);
  }
  if (!inst.is_object()) return Bad("an instance must be an object, a list or a string");
  for (const auto& [name, value] : inst.items()) {
    const int index = InputIndex(l, name);
    if (index < 0) return UnknownInput(l, name);
    if (index == 2) {
      if (!value.is_string()) return Bad("criteo_line must be a string");
      if (!c->lines) c->lines.emplace();
      c->lines->push_back(value.get<std::string>());
    } else {
      KT_RETURN_IF_ERROR(AppendRow(value, l, index == 0, c));
    }
  }
  return Status::Ok();
}

// TF Serving's columnar "inputs" value of one input: rows of it.
Status TakeColumn(const json& v, const TensorLayout& l, int index, Columns* c) {
  if (!v.is_array()) return Bad("each input of \"inputs\" must be a list of rows");
  for (const json& row : v) {
    if (index == 2) {
      if (!row.is_string()) return Bad("criteo_line rows must be strings");
      if (!c->lines) c->lines.emplace();
      c->lines->push_back(row.get<std::string>());
    } else {
      KT_RETURN_IF_ERROR(AppendRow(row, l, index == 0, c));
    }
  }
  return Status::Ok();
}

json OutputRows(const TensorLayout& l, const std::vector<float>& probs, int n) {
  json rows = json::array();
  for (int i = 0; i < n; ++i) {
    json row = json::array();
    for (int k = 0; k < l.num_outputs; ++k)
      row.push_back(probs[static_cast<size_t>(i) * l.num_outputs + k]);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

StatusOr<ParsedRequest> ParseV2Infer(std::string_view body, const TensorLayout& layout,
                                     int max_examples) {
  KT_ASSIGN_OR_RETURN(json j, ParseJson(body));
  ParsedRequest r;
  r.form = RequestForm::kV2;
  if (const auto id = j.find("id"); id != j.end()) {
    if (!id->is_string()) return Bad("\"id\" must be a string");
    r.id = id->get<std::string>();
  }
  const auto inputs = j.find("inputs");
  if (inputs == j.end() || !inputs->is_array() || inputs->empty())
    return Bad("the request needs \"inputs\": a non-empty list of tensors");
  Columns c;
  for (const json& in : *inputs) KT_RETURN_IF_ERROR(TakeV2Input(in, layout, &c));
  if (const auto outs = j.find("outputs"); outs != j.end()) {
    if (!outs->is_array()) return Bad("\"outputs\" must be a list");
    for (const json& o : *outs) {
      if (!o.is_object() || !o.contains("name") || o["name"] != layout.output_name)
        return Bad("unknown output requested; this model has \"" + layout.output_name + "\"");
      if (const auto p = o.find("parameters");
          p != o.end() && p->is_object() && p->value("binary_data", false)) {
        return Bad("output " + layout.output_name +
                   ": the binary tensor data extension is not supported "
                   "(tritonclient: binary_data=False)");
      }
    }
  }
  KT_ASSIGN_OR_RETURN(r.examples, Assemble(layout, c, max_examples));
  return r;
}

StatusOr<ParsedRequest> ParseTfPredict(std::string_view body, const TensorLayout& layout,
                                       int max_examples) {
  KT_ASSIGN_OR_RETURN(json j, ParseJson(body));
  const bool has_instances = j.contains("instances"), has_inputs = j.contains("inputs");
  if (has_instances == has_inputs)
    return Bad("the request needs exactly one of \"instances\" (rows) or \"inputs\" (columns)");
  ParsedRequest r;
  Columns c;
  if (has_instances) {
    r.form = RequestForm::kTfInstances;
    const json& inst = j["instances"];
    if (!inst.is_array()) return Bad("\"instances\" must be a list");
    if (static_cast<int64_t>(inst.size()) > max_examples) {
      return Bad("the request has " + std::to_string(inst.size()) + " examples; at most " +
                 std::to_string(max_examples) + " per request");
    }
    for (const json& i : inst) KT_RETURN_IF_ERROR(TakeInstance(i, layout, &c));
  } else {
    r.form = RequestForm::kTfInputs;
    const json& in = j["inputs"];
    if (in.is_object()) {
      for (const auto& [name, value] : in.items()) {
        const int index = InputIndex(layout, name);
        if (index < 0) return UnknownInput(layout, name);
        KT_RETURN_IF_ERROR(TakeColumn(value, layout, index, &c));
      }
    } else if (in.is_array()) {
      // A single unnamed input: the MLP's features, or Wide & Deep's Criteo lines.
      const bool lines = !in.empty() && in.front().is_string();
      if (layout.wide_deep && !lines)
        return Bad("Wide & Deep \"inputs\" must name its inputs (dense, cat_ids) or be lines");
      KT_RETURN_IF_ERROR(TakeColumn(in, layout, lines ? 2 : 0, &c));
    } else {
      return Bad("\"inputs\" must be an object or a list");
    }
  }
  KT_ASSIGN_OR_RETURN(r.examples, Assemble(layout, c, max_examples));
  return r;
}

std::string RenderV2(const ParsedRequest& request, const TensorLayout& layout,
                     std::string_view model_name, std::string_view version,
                     const std::vector<float>& probs) {
  json out = {{"model_name", model_name}, {"model_version", version}};
  if (!request.id.empty()) out["id"] = request.id;
  const int n = request.examples.size;
  std::vector<float> data(probs.begin(),
                          probs.begin() + static_cast<size_t>(n) * layout.num_outputs);
  out["outputs"] = json::array({{{"name", layout.output_name},
                                 {"datatype", "FP32"},
                                 {"shape", {n, layout.num_outputs}},
                                 {"data", std::move(data)}}});
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string RenderTf(const ParsedRequest& request, const TensorLayout& layout,
                     const std::vector<float>& probs) {
  const std::string key = request.form == RequestForm::kTfInputs ? "outputs" : "predictions";
  return json{{key, OutputRows(layout, probs, request.examples.size)}}.dump();
}

std::string RenderV2Metadata(const TensorLayout& layout, std::string_view model_name,
                             std::string_view version) {
  json inputs = json::array();
  if (layout.wide_deep) {
    inputs.push_back({{"name", "dense"}, {"datatype", "FP32"}, {"shape", {-1, layout.num_dense}}});
    inputs.push_back({{"name", "cat_ids"}, {"datatype", "INT64"}, {"shape", {-1, layout.num_cat}}});
  } else {
    inputs.push_back(
        {{"name", "features"}, {"datatype", "FP32"}, {"shape", {-1, layout.num_features}}});
  }
  return json{
      {"name", model_name},
      {"versions", {version}},
      {"platform", "kubetrain"},
      {"inputs", std::move(inputs)},
      {"outputs",
       {{{"name", layout.output_name}, {"datatype", "FP32"}, {"shape", {-1, layout.num_outputs}}}}}}
      .dump();
}

std::string RenderError(std::string_view message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kubetrain::trainer::serve
