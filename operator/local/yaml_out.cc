#include "operator/local/yaml_out.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

namespace kubetrain::local {
namespace {

using nlohmann::json;

bool PlainSafe(std::string_view s) {
  if (s.empty()) return false;
  // Words some YAML reader turns into a bool or null.
  static constexpr std::array<std::string_view, 12> kReserved = {
      "true", "false", "null", "yes", "no", "on", "off", "y", "n", "~", "nan", "inf"};
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (std::find(kReserved.begin(), kReserved.end(), lower) != kReserved.end()) return false;
  // Must start with a letter or '/', and contain only a conservative set.
  if (!std::isalpha(static_cast<unsigned char>(s[0])) && s[0] != '/' && s[0] != '_') return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' &&
        c != '/')
      return false;
  }
  // Things like "e10" are strings, but "1e10" never starts with a letter; fine.
  return true;
}

std::string Scalar(const json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return PlainSafe(s) ? s : json(s).dump();
  }
  return v.dump();  // numbers, booleans, null
}

bool IsEmptyCollection(const json& v) {
  return (v.is_object() || v.is_array()) && v.empty();
}

void Emit(const json& v, int indent, std::string& out);

// Writes the value of a key or list item that follows "key:" or "-".
void EmitAfterKey(const json& v, int indent, std::string& out) {
  if (v.is_object() && !v.empty()) {
    out += '\n';
    Emit(v, indent + 2, out);
  } else if (v.is_array() && !v.empty()) {
    out += '\n';
    Emit(v, indent, out);  // a list under a key needs no extra indent
  } else {
    out += ' ';
    out += IsEmptyCollection(v) ? (v.is_object() ? "{}" : "[]") : Scalar(v);
    out += '\n';
  }
}

void Emit(const json& v, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += pad + Scalar(json(it.key())) + ":";
      EmitAfterKey(it.value(), indent, out);
    }
  } else if (v.is_array()) {
    for (const json& item : v) {
      if (item.is_object() && !item.empty()) {
        // "- first: x" then the other keys aligned under "first".
        std::string nested;
        Emit(item, indent + 2, nested);
        out += pad + "- " + nested.substr(static_cast<size_t>(indent) + 2);
      } else if (item.is_array() && !item.empty()) {
        out += pad + "-\n";
        Emit(item, indent + 2, out);
      } else {
        out += pad + "-";
        EmitAfterKey(item, indent, out);
      }
    }
  } else {
    out += pad + Scalar(v) + "\n";
  }
}

}  // namespace

std::string ToYaml(const json& value) {
  if (!value.is_object() && !value.is_array()) return Scalar(value) + "\n";
  if (value.empty()) return value.is_object() ? "{}\n" : "[]\n";
  std::string out;
  Emit(value, 0, out);
  return out;
}

}  // namespace kubetrain::local
