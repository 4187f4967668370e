#include "trainer/serve/protocol.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
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

// `count` values of input `name` (index as InputIndex) from its binary data, little-endian
// as the extension sends them: FP32 and INT64 as 4 and 8 bytes each, BYTES as a 4-byte
// length before each element. The same checks as the JSON data's.
Status TakeBinary(std::string_view raw, const std::string& name, int index, size_t count,
                  Columns* c) {
  static_assert(std::endian::native == std::endian::little);
  if (index == 2) {
    if (c->lines) return Bad("input criteo_line given twice");
    c->lines.emplace();
    while (!raw.empty()) {
      uint32_t n = 0;
      if (raw.size() < sizeof n) return Bad("input criteo_line: binary data ends in a length");
      std::memcpy(&n, raw.data(), sizeof n);
      raw.remove_prefix(sizeof n);
      if (n > raw.size()) return Bad("input criteo_line: an element runs past its binary data");
      if (c->lines->size() >= count) break;  // more elements than the shape: said below
      c->lines->emplace_back(raw.substr(0, n));
      raw.remove_prefix(n);
    }
    if (c->lines->size() != count || !raw.empty()) {
      return Bad("input criteo_line: shape says " + std::to_string(count) +
                 " elements, the binary data has " + (raw.empty() ? "" : "more than ") +
                 std::to_string(c->lines->size()));
    }
    return Status::Ok();
  }
  const size_t width = index == 0 ? sizeof(float) : sizeof(int64_t);
  if (raw.size() != count * width) {
    return Bad("input " + name + ": shape says " + std::to_string(count) + " values (" +
               std::to_string(count * width) + " bytes), binary_data_size is " +
               std::to_string(raw.size()));
  }
  if (index == 0) {
    if (c->dense) return Bad("input " + name + " given twice");
    std::vector<float>& out = c->dense.emplace(count);
    std::memcpy(out.data(), raw.data(), raw.size());
    for (size_t i = 0; i < count; ++i) {
      if (!std::isfinite(out[i])) {
        return Bad("input " + name + ": value " + std::to_string(i) +
                   " of the binary data is not a finite FP32");
      }
    }
  } else {
    if (c->cat) return Bad("input cat_ids given twice");
    std::vector<uint64_t>& out = c->cat.emplace(count);
    std::memcpy(out.data(), raw.data(), raw.size());  // INT64 as two's complement: the ids
  }
  return Status::Ok();
}

// A v2 input tensor into `c`.
// `binary` (null without the binary extension's header): the binary data not taken yet.
Status TakeV2Input(const json& in, const TensorLayout& l, Columns* c, std::string_view* binary) {
  if (!in.is_object()) return Bad("each of \"inputs\" must be an object");
  const auto name_it = in.find("name");
  if (name_it == in.end() || !name_it->is_string()) return Bad("an input has no \"name\"");
  const std::string name = name_it->get<std::string>();
  const int index = InputIndex(l, name);
  if (index < 0) return UnknownInput(l, name);
  // The binary tensor data extension: the data is the next binary_data_size bytes after
  // the JSON header.
  std::optional<std::string_view> raw;
  if (const auto p = in.find("parameters"); p != in.end()) {
    if (!p->is_object()) return Bad("input " + name + ": \"parameters\" must be an object");
    if (const auto size = p->find("binary_data_size"); size != p->end()) {
      if (!binary) {
        return Bad("input " + name +
                   ": binary_data_size without the Inference-Header-Content-Length header");
      }
      if (!size->is_number_unsigned())
        return Bad("input " + name + ": binary_data_size must be a non-negative integer");
      const uint64_t n = size->get<uint64_t>();
      if (n > binary->size()) {
        return Bad("input " + name + ": binary_data_size " + std::to_string(n) + ", but only " +
                   std::to_string(binary->size()) + " bytes of binary data are left");
      }
      raw = binary->substr(0, n);
      binary->remove_prefix(n);
    }
  }
  const auto dt = in.find("datatype");
  const auto shape = in.find("shape");
  const auto data = in.find("data");
  if (dt == in.end() || !dt->is_string()) return Bad("input " + name + ": no \"datatype\"");
  if (shape == in.end() || !shape->is_array()) return Bad("input " + name + ": no \"shape\"");
  if (raw && data != in.end()) return Bad("input " + name + ": both \"data\" and binary_data_size");
  if (!raw && data == in.end()) return Bad("input " + name + ": no \"data\"");
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
  if (raw) {
    KT_RETURN_IF_ERROR(TakeBinary(*raw, name, index, count, c));
    if (index == 0) c->dense_rows = dims[0];
    if (index == 1) c->cat_rows = dims[0];
    return Status::Ok();
  }
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

// The fast path of ParseV2Infer: a strict, bounded reader of the v2 request's common shape.
//
// Flow: one pass over the body. "data" of dense / features is read number by number with
//   std::from_chars into the column that becomes the Batch (reserved from "shape", bounded
//   by max_examples), cat_ids likewise as INT64; keys it does not know are skipped (still
//   checked to be JSON).
// Guarantees: it either returns exactly what the nlohmann reader (ParseV2InferReference)
//   returns for the same body, or nullopt, and the caller then runs the reference reader,
//   which gives the answer and every error message. It gives up (nullopt) on anything
//   unusual instead of handling it: a problem of any kind, strings with escapes or
//   non-ASCII bytes, duplicate keys, criteo_line, input
//   "parameters", nesting deeper than kMaxJsonDepth, numbers from_chars calls out of
//   range. "data" before "name" is checked in passing and read at the end of its object.
//   So a bad request costs at most three passes, and the fuzz target checks that
//   both readers agree.
// Assumptions: JSON per RFC 8259; numbers equal strtod's (from_chars is exact too), FP32
//   values are rounded from the double like the reference does.
class V2Reader {
 public:
  V2Reader(std::string_view body, const TensorLayout& layout, int max_examples)
      : p_(body.data()), end_(body.data() + body.size()), l_(layout), max_examples_(max_examples) {}

  std::optional<ParsedRequest> Read() {
    ParsedRequest out;
    out.form = RequestForm::kV2;
    Columns c;
    bool seen_id = false, seen_inputs = false, seen_outputs = false;
    if (!Eat('{')) return std::nullopt;
    if (!Eat('}')) {
      do {
        std::string_view key;
        if (!String(&key) || !Eat(':')) return std::nullopt;
        if (key == "id") {
          std::string_view id;
          if (seen_id || !String(&id)) return std::nullopt;
          seen_id = true;
          out.id = id;
        } else if (key == "inputs") {
          if (seen_inputs || !Eat('[') || Peek(']')) return std::nullopt;
          seen_inputs = true;
          do {
            if (!Tensor(&c)) return std::nullopt;
          } while (Eat(','));
          if (!Eat(']')) return std::nullopt;
        } else if (key == "outputs") {
          if (seen_outputs || !Outputs()) return std::nullopt;
          seen_outputs = true;
        } else if (key == "parameters") {
          return std::nullopt;  // binary_data_output, perhaps: the reference reads it
        } else if (!Skip(1)) {
          return std::nullopt;
        }
      } while (Eat(','));
      if (!Eat('}')) return std::nullopt;
    }
    Ws();
    if (p_ != end_ || !seen_inputs) return std::nullopt;
    auto batch = Assemble(l_, c, max_examples_);
    if (!batch.ok()) return std::nullopt;
    out.examples = std::move(*batch);
    return out;
  }

 private:
  static bool Digit(char c) { return c >= '0' && c <= '9'; }

  void Ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool Peek(char c) {
    Ws();
    return p_ < end_ && *p_ == c;
  }
  bool Eat(char c) {
    if (!Peek(c)) return false;
    ++p_;
    return true;
  }

  // A string of printable ASCII without escapes (anything else: the reference reader).
  bool String(std::string_view* out) {
    if (!Eat('"')) return false;
    const char* start = p_;
    for (; p_ < end_; ++p_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        *out = std::string_view(start, static_cast<size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x80) return false;
    }
    return false;
  }

  // The span of one RFC 8259 number at p_ (moved past it); `integer` when it has neither
  // fraction nor exponent.
  bool Number(const char** begin, bool* integer) {
    Ws();
    const char* q = p_;
    if (q < end_ && *q == '-') ++q;
    if (q >= end_) return false;
    if (*q == '0') {
      ++q;
    } else if (*q >= '1' && *q <= '9') {
      while (q < end_ && Digit(*q)) ++q;
    } else {
      return false;
    }
    *integer = true;
    if (q < end_ && *q == '.') {
      *integer = false;
      if (++q >= end_ || !Digit(*q)) return false;
      while (q < end_ && Digit(*q)) ++q;
    }
    if (q < end_ && (*q == 'e' || *q == 'E')) {
      *integer = false;
      if (++q < end_ && (*q == '+' || *q == '-')) ++q;
      if (q >= end_ || !Digit(*q)) return false;
      while (q < end_ && Digit(*q)) ++q;
    }
    *begin = p_;
    p_ = q;
    return true;
  }

  bool Float(float* out) {
    const char* begin = nullptr;
    bool integer = false;
    if (!Number(&begin, &integer)) return false;
    double d = 0;
    const auto [ptr, ec] = std::from_chars(begin, p_, d);
    if (ec != std::errc() || ptr != p_) return false;
    if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) return false;
    *out = static_cast<float>(d);
    return true;
  }

  bool Int64(int64_t* out) {
    const char* begin = nullptr;
    bool integer = false;
    if (!Number(&begin, &integer) || !integer) return false;
    const auto [ptr, ec] = std::from_chars(begin, p_, *out);
    return ec == std::errc() && ptr == p_;
  }

  // A number or nested lists of them (v2 takes flat and nested data) into `out`.
  template <typename T>
  bool Data(int depth, std::vector<T>* out) {
    if (!Peek('[')) return Scalar(out);
    if (++depth > kMaxJsonDepth) return false;
    ++p_;
    if (Eat(']')) return true;
    do {
      if (Peek('[')) {
        if (!Data(depth, out)) return false;
      } else if (!Scalar(out)) {
        return false;
      }
    } while (Eat(','));
    return Eat(']');
  }
  bool Scalar(std::vector<float>* out) {
    float f = 0;
    if (!Float(&f)) return false;
    out->push_back(f);
    return true;
  }
  bool Scalar(std::vector<uint64_t>* out) {
    int64_t v = 0;
    if (!Int64(&v)) return false;
    out->push_back(static_cast<uint64_t>(v));
    return true;
  }

  // Skips one JSON value of nesting `depth` (its container's), checking its syntax.
  bool Skip(int depth) {
    Ws();
    if (p_ >= end_) return false;
    if (*p_ == '"') {
      std::string_view s;
      return String(&s);
    }
    if (*p_ == '[' || *p_ == '{') {
      const bool object = *p_ == '{';
      if (++depth > kMaxJsonDepth) return false;
      ++p_;
      if (Eat(object ? '}' : ']')) return true;
      do {
        std::string_view key;
        if (object && (!String(&key) || !Eat(':'))) return false;
        if (!Skip(depth)) return false;
      } while (Eat(','));
      return Eat(object ? '}' : ']');
    }
    for (const std::string_view word : {"true", "false", "null"}) {
      if (static_cast<size_t>(end_ - p_) >= word.size() &&
          std::string_view(p_, word.size()) == word) {
        p_ += word.size();
        return true;
      }
    }
    const char* begin = nullptr;
    bool integer = false;
    return Number(&begin, &integer);
  }

  // One element of "inputs" (nesting 2) into `c`, checked as TakeV2Input checks it.
  bool Tensor(Columns* c) {
    if (!Eat('{')) return false;
    int index = -1;
    const char* deferred = nullptr;  // "data" that came before "name"
    std::string_view name, datatype;
    std::vector<int64_t> dims;
    bool seen_name = false, seen_type = false, seen_shape = false, seen_data = false;
    size_t got = 0;
    if (!Eat('}')) {
      do {
        std::string_view key;
        if (!String(&key) || !Eat(':')) return false;
        if (key == "name") {
          if (seen_name || !String(&name)) return false;
          seen_name = true;
          index = InputIndex(l_, name);
          if (index < 0 || index == 2) return false;  // unknown, or criteo_line
        } else if (key == "datatype") {
          if (seen_type || !String(&datatype)) return false;
          seen_type = true;
        } else if (key == "shape") {
          if (seen_shape || !Eat('[')) return false;
          seen_shape = true;
          if (!Eat(']')) {
            do {
              int64_t d = 0;
              if (!Int64(&d) || d < 0 || d > (int64_t{1} << 30)) return false;
              dims.push_back(d);
            } while (Eat(','));
            if (!Eat(']')) return false;
          }
        } else if (key == "data" && !seen_name) {
          // Before "name" (sorted keys, as nlohmann and many JSON writers put them): checked
          // now, read once the name is known.
          if (seen_data) return false;
          seen_data = true;
          Ws();
          deferred = p_;
          if (!Skip(3)) return false;
        } else if (key == "data") {
          if (seen_data) return false;
          seen_data = true;
          if (!ReadData(index, dims, c, &got)) return false;
        } else if (key == "parameters") {
          return false;  // the reference reader refuses the binary extension by name
        } else if (!Skip(3)) {
          return false;
        }
      } while (Eat(','));
      if (!Eat('}')) return false;
    }
    if (!seen_name || !seen_type || !seen_shape || !seen_data) return false;
    if (deferred != nullptr) {
      const char* resume = p_;
      p_ = deferred;
      if (!ReadData(index, dims, c, &got)) return false;
      p_ = resume;
    }
    const int width = index == 0 ? DenseWidth(l_) : l_.num_cat;
    if (datatype != (index == 0 ? "FP32" : "INT64")) return false;
    if (dims.size() != 2 || dims[1] != width) return false;
    if (got != static_cast<size_t>(dims[0]) * static_cast<size_t>(width)) return false;
    (index == 0 ? c->dense_rows : c->cat_rows) = dims[0];
    return true;
  }

  // The "data" at p_ of input `index` into its column of `c`; `got` its values.
  bool ReadData(int index, const std::vector<int64_t>& dims, Columns* c, size_t* got) {
    // The rows the shape promises, if it came first (bounded: more is refused later).
    const int width = index == 0 ? DenseWidth(l_) : l_.num_cat;
    const size_t expect = dims.size() == 2
                              ? static_cast<size_t>(std::min<int64_t>(dims[0], max_examples_)) *
                                    static_cast<size_t>(width)
                              : 0;
    if (index == 0) {
      if (c->dense) return false;
      c->dense.emplace().reserve(expect);
      if (!Data(3, &*c->dense)) return false;
      *got = c->dense->size();
    } else {
      if (c->cat) return false;
      c->cat.emplace().reserve(expect);
      if (!Data(3, &*c->cat)) return false;
      *got = c->cat->size();
    }
    return true;
  }

  // "outputs": objects naming this model's output, without binary_data true.
  bool Outputs() {
    if (!Eat('[')) return false;
    if (Eat(']')) return true;
    do {
      if (!Eat('{')) return false;
      bool named = false;
      if (!Eat('}')) {
        do {
          std::string_view key, name;
          if (!String(&key) || !Eat(':')) return false;
          if (key == "name") {
            if (named || !String(&name) || name != l_.output_name) return false;
            named = true;
          } else if (key == "parameters") {
            if (!OutputParameters()) return false;
          } else if (!Skip(3)) {
            return false;
          }
        } while (Eat(','));
        if (!Eat('}')) return false;
      }
      if (!named) return false;
    } while (Eat(','));
    return Eat(']');
  }
  // An output's "parameters": an object whose "binary_data", if any, is false.
  bool OutputParameters() {
    if (!Eat('{')) return false;
    if (Eat('}')) return true;
    bool seen = false;
    do {
      std::string_view key;
      if (!String(&key) || !Eat(':')) return false;
      if (key == "binary_data") {
        static constexpr std::string_view kFalse = "false";
        Ws();
        if (seen || static_cast<size_t>(end_ - p_) < kFalse.size() ||
            std::string_view(p_, kFalse.size()) != kFalse)
          return false;
        seen = true;
        p_ += kFalse.size();
      } else if (!Skip(4)) {
        return false;
      }
    } while (Eat(','));
    return Eat('}');
  }

  const char* p_;
  const char* const end_;
  const TensorLayout& l_;
  const int max_examples_;
};

// Appends `v` as JSON: the shortest decimal that reads back as the same FP32, or null.
void AppendFloat(float v, std::string* out) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, ec == std::errc() ? end : buf);
}

// `s` as a JSON string (invalid UTF-8 replaced).
std::string Quote(std::string_view s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

StatusOr<ParsedRequest> ParseV2Json(std::string_view body, const TensorLayout& layout,
                                    int max_examples, std::optional<size_t> json_length);

}  // namespace

StatusOr<ParsedRequest> ParseV2Infer(std::string_view body, const TensorLayout& layout,
                                     int max_examples, std::optional<size_t> json_length) {
  if (!json_length) {
    if (auto fast = V2Reader(body, layout, max_examples).Read()) return std::move(*fast);
  }
  return ParseV2InferReference(body, layout, max_examples, json_length);
}

StatusOr<ParsedRequest> ParseV2InferReference(std::string_view body, const TensorLayout& layout,
                                              int max_examples, std::optional<size_t> json_length) {
  try {
    return ParseV2Json(body, layout, max_examples, json_length);
  } catch (const json::exception& e) {  // a type error in a request nlohmann parsed
    return Bad(std::string("bad request: ") + e.what());
  }
}

namespace {
StatusOr<ParsedRequest> ParseV2Json(std::string_view body, const TensorLayout& layout,
                                    int max_examples, std::optional<size_t> json_length) {
  std::optional<std::string_view> binary;
  if (json_length) {
    if (*json_length > body.size()) {
      return Bad("Inference-Header-Content-Length is " + std::to_string(*json_length) +
                 ", but the body has " + std::to_string(body.size()) + " bytes");
    }
    binary = body.substr(*json_length);
    body = body.substr(0, *json_length);
  }
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
  for (const json& in : *inputs)
    KT_RETURN_IF_ERROR(TakeV2Input(in, layout, &c, binary ? &*binary : nullptr));
  if (binary && !binary->empty()) {
    return Bad(std::to_string(binary->size()) +
               " bytes of binary data follow what the inputs' binary_data_size take");
  }
  const auto flag = [](const json& parameters, const char* key) -> StatusOr<bool> {
    if (!parameters.is_object()) return Bad("\"parameters\" must be an object");
    const auto v = parameters.find(key);
    if (v == parameters.end()) return false;
    if (!v->is_boolean()) return Bad(std::string(key) + " must be true or false");
    return v->get<bool>();
  };
  if (const auto p = j.find("parameters"); p != j.end()) {
    KT_ASSIGN_OR_RETURN(r.binary_output, flag(*p, "binary_data_output"));
  }
  if (const auto outs = j.find("outputs"); outs != j.end()) {
    if (!outs->is_array()) return Bad("\"outputs\" must be a list");
    for (const json& o : *outs) {
      if (!o.is_object() || !o.contains("name") || o["name"] != layout.output_name)
        return Bad("unknown output requested; this model has \"" + layout.output_name + "\"");
      if (const auto p = o.find("parameters"); p != o.end()) {
        KT_ASSIGN_OR_RETURN(const bool binary_data, flag(*p, "binary_data"));
        r.binary_output = binary_data;  // the output's own wish over the request's
      }
    }
  }
  KT_ASSIGN_OR_RETURN(r.examples, Assemble(layout, c, max_examples));
  return r;
}

}  // namespace

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

namespace {

// The v2 response around its one output's own fields, in nlohmann's (sorted) key order, for
// both RenderV2 and RenderV2Binary:
//   {["id":...,]"model_name":...,"model_version":...,"outputs":[{ <fields> ,"shape":[n,k]}]}
// where the fields are "data":[...], then "datatype" and "name" (JSON), or "datatype",
// "name", then "parameters" (binary).
void AppendV2Head(const ParsedRequest& request, std::string_view model_name,
                  std::string_view version, std::string* out) {
  out->append("{");
  if (!request.id.empty()) out->append("\"id\":").append(Quote(request.id)).append(",");
  out->append("\"model_name\":").append(Quote(model_name));
  out->append(",\"model_version\":").append(Quote(version));
  out->append(",\"outputs\":[{");
}
void AppendV2TypeAndName(const TensorLayout& layout, std::string* out) {
  out->append("\"datatype\":\"FP32\",\"name\":").append(Quote(layout.output_name));
}
void AppendV2Tail(const ParsedRequest& request, const TensorLayout& layout, std::string* out) {
  out->append(",\"shape\":[").append(std::to_string(request.examples.size));
  out->append(",").append(std::to_string(layout.num_outputs)).append("]}]}");
}

}  // namespace

std::string RenderV2(const ParsedRequest& request, const TensorLayout& layout,
                     std::string_view model_name, std::string_view version,
                     const std::vector<float>& probs) {
  // The numbers through to_chars.
  const size_t count = static_cast<size_t>(request.examples.size) * layout.num_outputs;
  std::string out;
  out.reserve(160 + request.id.size() + 16 * count);
  AppendV2Head(request, model_name, version, &out);
  out.append("\"data\":[");
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) out.push_back(',');
    AppendFloat(probs[i], &out);
  }
  out.append("],");
  AppendV2TypeAndName(layout, &out);
  AppendV2Tail(request, layout, &out);
  return out;
}

std::string RenderV2Binary(const ParsedRequest& request, const TensorLayout& layout,
                           std::string_view model_name, std::string_view version,
                           const std::vector<float>& probs, size_t* json_length) {
  const size_t count = static_cast<size_t>(request.examples.size) * layout.num_outputs;
  std::string out;
  out.reserve(200 + request.id.size() + 4 * count);
  AppendV2Head(request, model_name, version, &out);
  AppendV2TypeAndName(layout, &out);
  out.append(",\"parameters\":{\"binary_data_size\":")
      .append(std::to_string(4 * count))
      .append("}");
  AppendV2Tail(request, layout, &out);
  *json_length = out.size();
  static_assert(std::endian::native == std::endian::little);
  out.append(reinterpret_cast<const char*>(probs.data()), 4 * std::min(count, probs.size()));
  return out;
}

std::string RenderTf(const ParsedRequest& request, const TensorLayout& layout,
                     const std::vector<float>& probs) {
  std::string out =
      request.form == RequestForm::kTfInputs ? "{\"outputs\":[" : "{\"predictions\":[";
  out.reserve(out.size() + 4 +
              static_cast<size_t>(request.examples.size) * layout.num_outputs * 16);
  for (int i = 0; i < request.examples.size; ++i) {
    out.append(i > 0 ? ",[" : "[");
    for (int k = 0; k < layout.num_outputs; ++k) {
      if (k > 0) out.push_back(',');
      AppendFloat(probs[static_cast<size_t>(i) * layout.num_outputs + k], &out);
    }
    out.push_back(']');
  }
  out.append("]}");
  return out;
}

std::string RenderV2Metadata(const TensorLayout& layout, std::string_view model_name,
                             std::string_view version,
                             const std::map<std::string, std::string>& parameters) {
  json inputs = json::array();
  if (layout.wide_deep) {
    inputs.push_back({{"name", "dense"}, {"datatype", "FP32"}, {"shape", {-1, layout.num_dense}}});
    inputs.push_back({{"name", "cat_ids"}, {"datatype", "INT64"}, {"shape", {-1, layout.num_cat}}});
  } else {
    inputs.push_back(
        {{"name", "features"}, {"datatype", "FP32"}, {"shape", {-1, layout.num_features}}});
  }
  json out{{"name", model_name},
           {"versions", {version}},
           {"platform", "kubetrain"},
           {"inputs", std::move(inputs)},
           {"outputs",
            {{{"name", layout.output_name},
              {"datatype", "FP32"},
              {"shape", {-1, layout.num_outputs}}}}}};
  if (!parameters.empty()) out["parameters"] = parameters;
  return out.dump();
}

std::string RenderError(std::string_view message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kubetrain::trainer::serve
