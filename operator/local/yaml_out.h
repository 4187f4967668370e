// JSON -> block-style YAML for humans and `kubectl apply`: what `kubetrain
// render` prints and how `kubetrain run` shows the final status.
//
// Strings are written plain only when YAML 1.1 and 1.2 both read them back as
// the same string; otherwise double-quoted with JSON escapes (valid YAML).
// So ToYaml(x) parses back to exactly x.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kubetrain::local {

std::string ToYaml(const nlohmann::json& value);

}  // namespace kubetrain::local
