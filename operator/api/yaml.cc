#include "operator/api/yaml.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "common/utf8.h"

namespace kubetrain::api {

using nlohmann::json;

namespace {

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

bool AllOf(std::string_view s, bool (*pred)(char)) {
  for (char c : s) {
    if (!pred(c)) return false;
  }
  return true;
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}
bool IsHexDigit(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool IsOctDigit(char c) {
  return c >= '0' && c <= '7';
}
bool IsSign(char c) {
  return c == '-' || c == '+';
}

// [-+]?[0-9]+
bool IsInt(std::string_view s) {
  if (!s.empty() && IsSign(s[0])) s.remove_prefix(1);
  return !s.empty() && AllOf(s, IsDigit);
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsFloat(std::string_view s) {
  if (!s.empty() && IsSign(s[0])) s.remove_prefix(1);
  size_t e = s.find_first_of("eE");
  std::string_view mantissa = s.substr(0, e);
  if (e != std::string_view::npos) {
    std::string_view exponent = s.substr(e + 1);
    if (!exponent.empty() && IsSign(exponent[0])) exponent.remove_prefix(1);
    if (exponent.empty() || !AllOf(exponent, IsDigit)) return false;
  }
  size_t dot = mantissa.find('.');
  std::string_view whole = mantissa.substr(0, dot);
  if (!AllOf(whole, IsDigit)) return false;
  if (dot == std::string_view::npos) return !whole.empty();
  std::string_view fraction = mantissa.substr(dot + 1);
  if (!AllOf(fraction, IsDigit)) return false;
  return !whole.empty() || !fraction.empty();
}

// The digits of `s` (already checked) in `base`; the text itself when out of range
// rather than lose digits.
json Integer(const std::string& s, size_t skip, int base) {
  errno = 0;
  long long v = std::strtoll(s.c_str() + skip, nullptr, base);
  if (errno != 0) return s;
  return v;
}

// A plain (unquoted, untagged) scalar under the YAML 1.2 core schema. Hand-written
// matchers, not std::regex: libstdc++'s regex recurses once per character and
// overflows the stack on a long scalar.
json PlainScalar(const std::string& s) {
  if (s.empty() || s == "null" || s == "Null" || s == "NULL" || s == "~") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  std::string_view v(s);
  if (IsInt(v)) return Integer(s, 0, 10);
  if (v.size() > 2 && v.starts_with("0x") && AllOf(v.substr(2), IsHexDigit)) {
    return Integer(s, 2, 16);
  }
  if (v.size() > 2 && v.starts_with("0o") && AllOf(v.substr(2), IsOctDigit)) {
    return Integer(s, 2, 8);
  }
  if (IsFloat(v)) return std::strtod(s.c_str(), nullptr);
  if (s == ".inf" || s == "+.inf" || s == ".Inf") return std::numeric_limits<double>::infinity();
  if (s == ".nan" || s == ".NaN") return std::numeric_limits<double>::quiet_NaN();
  return s;
}

std::string AtLine(const YAML::Mark& mark) {
  return "line " + std::to_string(mark.line + 1);
}

// JSON strings must be UTF-8 (json::dump() throws on anything else, and the apiserver
// would refuse it), but yaml-cpp passes ill-formed bytes through and decodes a "\uD800"
// escape to a surrogate: such a scalar is an error at its line.
Status CheckUtf8(const std::string& s, const YAML::Mark& mark) {
  if (SanitizeUtf8(s) == s) return Status::Ok();
  return InvalidArgument(AtLine(mark) + ": not valid UTF-8");
}

// Builds each document's JSON straight from yaml-cpp's parse events instead of
// YAML::LoadAll's node graph, for three reasons found by api_yaml_fuzz and by hand:
// LoadAll never returns on a stray ',' at document level (yaml-cpp 0.7 reports an
// endless run of empty documents without consuming the token, and the vector of them
// grows until std::bad_alloc ends the process); walking the graph copies an alias's
// whole subtree at every use (a "billion laughs" file of a few hundred bytes expands
// exponentially); and a recursive walk has no depth bound of its own. Here the
// nesting is an explicit stack, and every value added, alias copies included, is
// charged against kMaxWeight (one per value plus its string bytes).
//
// Events carry no return value, so the first error is kept and later events are
// ignored; ParseYamlDocuments stops after the document in which it occurred.
class JsonBuilder final : public YAML::EventHandler {
 public:
  static constexpr size_t kMaxDepth = 128;
  static constexpr size_t kMaxWeight = size_t{4} << 20;

  explicit JsonBuilder(std::vector<YamlDocument>* docs) : docs_(docs) {}

  const Status& status() const { return status_; }
  // The position of the last document's start: a document that starts where the
  // one before it did consumed nothing (the ',' case above).
  int last_document_pos() const { return last_document_pos_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    last_document_pos_ = mark.pos;
    doc_ = YamlDocument{};
    has_root_ = false;
    stack_.clear();
  }

  void OnDocumentEnd() override {
    if (!status_.ok() || !has_root_ || doc_.value.is_null()) return;
    docs_->push_back(std::move(doc_));
  }

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (KeyExpected(mark)) return;
    Add(mark, anchor, nullptr, 1);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (KeyExpected(mark)) return;
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) return Fail(InvalidArgument(AtLine(mark) + ": unknown alias"));
    Add(mark, YAML::NullAnchor, it->second.value, it->second.weight);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    if (!status_.ok()) return;
    if (Status s = CheckUtf8(value, mark); !s.ok()) return Fail(std::move(s));
    if (!stack_.empty() && stack_.back().is_map && !stack_.back().key) {
      Frame& map = stack_.back();
      if (map.value.contains(value)) {
        return Fail(InvalidArgument(AtLine(mark) + ": duplicate key \"" + value + "\""));
      }
      if (!Charge(value.size() + 1)) return;
      map.key = value;
      map.key_mark = mark;
      return;
    }
    json v = value;
    if (tag == "?" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
        tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
      v = PlainScalar(value);
    }
    Add(mark, anchor, std::move(v), value.size() + 1);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor, /*is_map=*/false);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor, /*is_map=*/true);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Frame {
    json value;
    std::string path;
    bool is_map = false;
    YAML::anchor_t anchor = YAML::NullAnchor;
    size_t weight_at_start = 0;
    std::optional<std::string> key;  // a map's key whose value comes next
    YAML::Mark key_mark;
  };
  struct Anchored {
    json value;
    size_t weight = 0;
  };

  void Fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
  }

  bool Charge(size_t weight) {
    weight_ += weight;
    if (weight_ <= kMaxWeight) return true;
    Fail(InvalidArgument("the file expands to more than " + std::to_string(kMaxWeight) +
                         " values and bytes (aliases included)"));
    return false;
  }

  // A map wants a key here and the node is not a scalar.
  bool KeyExpected(const YAML::Mark& mark) {
    if (!status_.ok()) return true;
    if (stack_.empty() || !stack_.back().is_map || stack_.back().key) return false;
    Fail(InvalidArgument(AtLine(mark) + ": mapping keys must be scalars"));
    return true;
  }

  // Where the next value goes: its path, with its line recorded (a map value has its
  // key's line, which is more useful than the value's for a nested block).
  std::string Place(const YAML::Mark& mark) {
    if (stack_.empty()) {
      doc_.line = mark.line + 1;
      return "";
    }
    Frame& parent = stack_.back();
    std::string path;
    int line = mark.line + 1;
    if (parent.is_map) {
      path = Join(parent.path, *parent.key);
      line = parent.key_mark.line + 1;
    } else {
      path = parent.path + "[" + std::to_string(parent.value.size()) + "]";
    }
    doc_.lines[path] = line;
    return path;
  }

  void Attach(json v) {
    if (stack_.empty()) {
      doc_.value = std::move(v);
      has_root_ = true;
      return;
    }
    Frame& parent = stack_.back();
    if (parent.is_map) {
      parent.value[*parent.key] = std::move(v);
      parent.key.reset();
    } else {
      parent.value.push_back(std::move(v));
    }
  }

  void Add(const YAML::Mark& mark, YAML::anchor_t anchor, json v, size_t weight) {
    if (!status_.ok() || !Charge(weight)) return;
    Place(mark);
    if (anchor != YAML::NullAnchor) anchors_[anchor] = Anchored{v, weight};
    Attach(std::move(v));
  }

  void Open(const YAML::Mark& mark, YAML::anchor_t anchor, bool is_map) {
    if (KeyExpected(mark) || !Charge(1)) return;
    if (stack_.size() >= kMaxDepth) {
      return Fail(InvalidArgument(AtLine(mark) + ": nested deeper than " +
                                  std::to_string(kMaxDepth) + " levels"));
    }
    Frame f;
    f.path = Place(mark);
    f.is_map = is_map;
    f.value = is_map ? json::object() : json::array();
    f.anchor = anchor;
    f.weight_at_start = weight_ - 1;
    stack_.push_back(std::move(f));
  }

  void Close() {
    if (!status_.ok() || stack_.empty()) return;
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (f.anchor != YAML::NullAnchor) {
      anchors_[f.anchor] = Anchored{f.value, weight_ - f.weight_at_start};
    }
    Attach(std::move(f.value));
  }

  std::vector<YamlDocument>* docs_;
  Status status_;
  YamlDocument doc_;
  bool has_root_ = false;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, Anchored> anchors_;
  size_t weight_ = 0;
  int last_document_pos_ = -1;
};

}  // namespace

int YamlDocument::LineOf(std::string_view path) const {
  std::string p(path);
  while (!p.empty()) {
    auto it = lines.find(p);
    if (it != lines.end()) return it->second;
    size_t cut = p.find_last_of(".[");
    if (cut == std::string::npos) break;
    p.resize(cut);
  }
  return line;
}

StatusOr<std::vector<YamlDocument>> ParseYamlDocuments(std::string_view text) {
  if (text.size() > kMaxYamlBytes) {
    return InvalidArgument("the file is " + std::to_string(text.size()) +
                           " bytes; a job file may have at most " + std::to_string(kMaxYamlBytes));
  }
  std::vector<YamlDocument> docs;
  JsonBuilder builder(&docs);
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    int before = -1;
    while (parser.HandleNextDocument(builder)) {
      KT_RETURN_IF_ERROR(builder.status());
      if (builder.last_document_pos() == before) {
        return InvalidArgument("invalid YAML at byte " + std::to_string(before) +
                               ": unexpected content after the document (a stray ','?)");
      }
      before = builder.last_document_pos();
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument("invalid YAML at line " + std::to_string(e.mark.line + 1) + ": " +
                           e.msg);
  }
  KT_RETURN_IF_ERROR(builder.status());
  return docs;
}

}  // namespace kubetrain::api
