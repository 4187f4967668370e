// Compact cached objects: what the informer keeps instead of whole JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kubetrain::runtime {

// The controller owner (ownerReferences[] entry with controller: true).
struct OwnerRef {
  std::string kind;
  std::string name;
  std::string uid;

  friend bool operator==(const OwnerRef&, const OwnerRef&) = default;
};

// The parts of metadata a controller needs. Labels are a sorted vector, not a
// map: fewer allocations and half the memory for the typical 3-6 labels.
struct ObjectMeta {
  std::string ns;
  std::string name;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::vector<std::pair<std::string, std::string>> labels;
  std::optional<OwnerRef> controller;
  std::string deletion_timestamp;  // "" when not being deleted

  friend bool operator==(const ObjectMeta&, const ObjectMeta&) = default;

  // "namespace/name", or "name" for cluster-scoped objects.
  std::string Key() const { return ns.empty() ? name : ns + "/" + name; }
  // nullptr when the label is not set.
  const std::string* Label(std::string_view key) const;
};

// Parses metadata; InvalidArgument when the object has no metadata.name.
[[nodiscard]] StatusOr<ObjectMeta> ParseObjectMeta(const nlohmann::json& obj);

// The whole object, for resources where a compact form is not worth it.
struct GenericObject {
  ObjectMeta meta;
  nlohmann::json object;
};
[[nodiscard]] StatusOr<GenericObject> ToGenericObject(const nlohmann::json& obj);

// A served object kept as minified JSON text, parsed when read: a job's
// parsed tree takes 8 times its text (every value a heap node), and a
// controller reads the object once per reconcile. metadata.managedFields is
// not kept (a PUT without it keeps the server's).
struct CompactObject {
  ObjectMeta meta;
  std::string text;
  // The object, parsed afresh: a copy the caller may modify.
  nlohmann::json Object() const;
};
[[nodiscard]] StatusOr<CompactObject> ToCompactObject(const nlohmann::json& obj);

// "namespace/name" split back; ns is "" for cluster-scoped keys.
std::pair<std::string, std::string> SplitKey(std::string_view key);

}  // namespace kubetrain::runtime
