// The strict JSON field readers that the TrainingJob and TrainingSweep parsers share
// (internal to operator/api): each reads one optional field of an object, treats null as
// absent, and returns InvalidArgument naming the field's path ("spec.port: must be an
// integer") on a wrong type, a value out of range or an unknown enum name.
#pragma once

#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kubetrain::api::json_read {

using nlohmann::json;

inline std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

inline Status Error(const std::string& path, std::string_view message) {
  return InvalidArgument(path + ": " + std::string(message));
}

inline Status ExpectObject(const json& j, const std::string& path) {
  if (!j.is_object()) return Error(path, "must be an object");
  return Status::Ok();
}

// Rejects keys of `obj` not in `known`.
inline Status RejectUnknown(const json& obj, const std::string& path,
                            std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : obj.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || k == key;
    if (!found) return Error(Join(path, key), "unknown field");
  }
  return Status::Ok();
}

// Present and not null. A null counts as absent, as in Kubernetes.
inline const json* Field(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

template <typename Int>
inline Status ReadInt(const json& obj, const std::string& path, std::string_view key, Int& out) {
  const json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  std::string p = Join(path, key);
  if (!v->is_number_integer()) return Error(p, "must be an integer");
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<Int>::max())) {
      return Error(p, "is out of range");
    }
    out = static_cast<Int>(u);
    return Status::Ok();
  }
  int64_t i = v->get<int64_t>();
  if (i < std::numeric_limits<Int>::min() || i > std::numeric_limits<Int>::max()) {
    return Error(p, "is out of range");
  }
  out = static_cast<Int>(i);
  return Status::Ok();
}

template <typename Int>
inline Status ReadInt(const json& obj, const std::string& path, std::string_view key,
                      std::optional<Int>& out) {
  if (Field(obj, key) == nullptr) return Status::Ok();
  Int value{};
  KT_RETURN_IF_ERROR(ReadInt(obj, path, key, value));
  out = value;
  return Status::Ok();
}

inline Status ReadString(const json& obj, const std::string& path, std::string_view key,
                         std::string& out) {
  const json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_string()) return Error(Join(path, key), "must be a string");
  out = v->get<std::string>();
  return Status::Ok();
}

inline Status ReadString(const json& obj, const std::string& path, std::string_view key,
                         std::optional<std::string>& out) {
  if (Field(obj, key) == nullptr) return Status::Ok();
  std::string value;
  KT_RETURN_IF_ERROR(ReadString(obj, path, key, value));
  out = std::move(value);
  return Status::Ok();
}

inline Status ReadBool(const json& obj, const std::string& path, std::string_view key, bool& out) {
  const json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return Error(Join(path, key), "must be a boolean");
  out = v->get<bool>();
  return Status::Ok();
}

inline Status ReadNumber(const json& obj, const std::string& path, std::string_view key,
                         std::optional<double>& out) {
  const json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return Error(Join(path, key), "must be a number");
  out = v->get<double>();
  return Status::Ok();
}
// Reads an enum whose wire names are Name(E) for the listed values.
template <typename E>
Status ReadEnum(const json& obj, const std::string& path, std::string_view key,
                std::initializer_list<E> values, E& out) {
  std::optional<std::string> text;
  KT_RETURN_IF_ERROR(ReadString(obj, path, key, text));
  if (!text) return Status::Ok();
  std::string allowed;
  for (E e : values) {
    if (Name(e) == *text) {
      out = e;
      return Status::Ok();
    }
    allowed += (allowed.empty() ? "" : ", ") + std::string(Name(e));
  }
  return Error(Join(path, key),
               "unsupported value \"" + *text + "\" (want one of " + allowed + ")");
}

}  // namespace kubetrain::api::json_read
