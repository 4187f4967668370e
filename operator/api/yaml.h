// YAML job files -> JSON, with the line of every field.
//
// Scalars follow the YAML 1.2 core schema, as Kubernetes users expect: plain
// true/false, null/~, integers and floats become JSON values; quoted scalars
// and everything else stay strings. Several documents in one file ("---") give
// several entries; empty documents are skipped.
//
// `lines` maps the field paths that FieldError and ParseTrainingJob use
// ("spec.replicaSpecs.Worker.replicas", "x.y[2].z") to 1-based line numbers,
// so callers can point at the line of a bad field. No exception escapes.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kubetrain::api {

struct YamlDocument {
  nlohmann::json value;
  int line = 1;  // where the document starts
  std::map<std::string, int> lines;

  // The line of `path` or of its closest ancestor that has one.
  int LineOf(std::string_view path) const;
};

// A file larger than this is refused (a Kubernetes object is at most ~1.5 MiB). The
// parsed values are bounded too: nesting depth 128, and about 4 Mi values and bytes
// with aliases expanded, so a small file cannot expand without bound.
inline constexpr size_t kMaxYamlBytes = size_t{2} << 20;

StatusOr<std::vector<YamlDocument>> ParseYamlDocuments(std::string_view text);

}  // namespace kubetrain::api
