#include "operator/api/yaml.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <regex>

#include "common/utf8.h"

namespace kubetrain::api {

using nlohmann::json;

namespace {

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// A plain (unquoted, untagged) scalar under the YAML 1.2 core schema.
json PlainScalar(const std::string& s) {
  static const std::regex kNull("^(null|Null|NULL|~|)$");
  static const std::regex kTrue("^(true|True|TRUE)$");
  static const std::regex kFalse("^(false|False|FALSE)$");
  static const std::regex kInt("^[-+]?[0-9]+$");
  static const std::regex kHex("^0x[0-9a-fA-F]+$");
  static const std::regex kOct("^0o[0-7]+$");
  static const std::regex kFloat("^[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?$");
  if (std::regex_match(s, kNull)) return nullptr;
  if (std::regex_match(s, kTrue)) return true;
  if (std::regex_match(s, kFalse)) return false;
  errno = 0;
  if (std::regex_match(s, kInt)) {
    long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno == 0) return v;
    return s;  // out of range: keep the text rather than lose digits
  }
  if (std::regex_match(s, kHex)) return std::strtoll(s.c_str() + 2, nullptr, 16);
  if (std::regex_match(s, kOct)) return std::strtoll(s.c_str() + 2, nullptr, 8);
  if (std::regex_match(s, kFloat)) return std::strtod(s.c_str(), nullptr);
  if (s == ".inf" || s == "+.inf" || s == ".Inf") return std::numeric_limits<double>::infinity();
  if (s == ".nan" || s == ".NaN") return std::numeric_limits<double>::quiet_NaN();
  return s;
}

// JSON strings must be UTF-8 (json::dump() throws on anything else, and the apiserver
// would refuse it), but yaml-cpp passes ill-formed bytes through and decodes a "\uD800"
// escape to a surrogate: such a scalar is an error at its line.
Status CheckUtf8(const std::string& s, const YAML::Mark& mark) {
  if (SanitizeUtf8(s) == s) return Status::Ok();
  return InvalidArgument("line " + std::to_string(mark.line + 1) + ": not valid UTF-8");
}

StatusOr<json> Convert(const YAML::Node& node, const std::string& path, YamlDocument& doc) {
  if (!path.empty()) doc.lines.emplace(path, node.Mark().line + 1);
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return json(nullptr);
    case YAML::NodeType::Scalar: {
      KT_RETURN_IF_ERROR(CheckUtf8(node.Scalar(), node.Mark()));
      const std::string& tag = node.Tag();
      if (tag == "?") return PlainScalar(node.Scalar());
      if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
          tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
        return PlainScalar(node.Scalar());
      }
      return json(node.Scalar());
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (size_t i = 0; i < node.size(); ++i) {
        KT_ASSIGN_OR_RETURN(json v, Convert(node[i], path + "[" + std::to_string(i) + "]", doc));
        out.push_back(std::move(v));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          return InvalidArgument("line " + std::to_string(kv.first.Mark().line + 1) +
                                 ": mapping keys must be scalars");
        }
        const std::string key = kv.first.Scalar();
        KT_RETURN_IF_ERROR(CheckUtf8(key, kv.first.Mark()));
        if (out.contains(key)) {
          return InvalidArgument("line " + std::to_string(kv.first.Mark().line + 1) +
                                 ": duplicate key \"" + key + "\"");
        }
        std::string child = Join(path, key);
        doc.lines[child] = kv.first.Mark().line + 1;
        KT_ASSIGN_OR_RETURN(json v, Convert(kv.second, child, doc));
        // The key's line is more useful than the value's for a nested block.
        doc.lines[child] = kv.first.Mark().line + 1;
        out[key] = std::move(v);
      }
      return out;
    }
  }
  return json(nullptr);
}

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
  std::vector<YAML::Node> nodes;
  try {
    nodes = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgument("invalid YAML at line " + std::to_string(e.mark.line + 1) + ": " +
                           e.msg);
  }
  std::vector<YamlDocument> docs;
  try {
    for (const YAML::Node& node : nodes) {
      if (node.IsNull()) continue;
      YamlDocument doc;
      doc.line = node.Mark().line + 1;
      KT_ASSIGN_OR_RETURN(doc.value, Convert(node, "", doc));
      docs.push_back(std::move(doc));
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument("invalid YAML at line " + std::to_string(e.mark.line + 1) + ": " +
                           e.msg);
  }
  return docs;
}

}  // namespace kubetrain::api
