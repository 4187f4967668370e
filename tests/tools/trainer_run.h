// What the multi-process trainer tests share when they start trainers by hand:
// flag lists with overridable defaults, a loopback CLUSTER_CONFIG and the
// workload contract's environment.
#pragma once

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kubetrain::testing {

// A test auth key: 64 hex digits, as the operator's Secret carries.
inline constexpr char kTestAuthKey[] =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// `base` flags followed by `extra`; a flag in `extra` that is also in `base`
// replaces base's value instead of being repeated.
inline std::vector<std::string> MergeFlags(std::vector<std::pair<std::string, std::string>> base,
                                           const std::vector<std::string>& extra) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < extra.size(); ++i) {
    auto it = std::find_if(base.begin(), base.end(),
                           [&](const auto& kv) { return kv.first == extra[i]; });
    if (it != base.end() && i + 1 < extra.size()) {
      it->second = extra[++i];
    } else {
      rest.push_back(extra[i]);
    }
  }
  std::vector<std::string> flags;
  for (const auto& [k, v] : base) flags.insert(flags.end(), {k, v});
  flags.insert(flags.end(), rest.begin(), rest.end());
  return flags;
}

// CLUSTER_CONFIG for PS and workers listening on these loopback ports.
inline std::string LoopbackClusterConfig(const std::vector<int>& ps,
                                         const std::vector<int>& workers) {
  nlohmann::json j;
  for (int p : ps) j["ps"].push_back("127.0.0.1:" + std::to_string(p));
  for (int w : workers) j["worker"].push_back("127.0.0.1:" + std::to_string(w));
  return j.dump();
}

// The environment the operator gives a trainer pod.
inline std::map<std::string, std::string> TrainerEnv(const std::string& cluster,
                                                     const std::string& pod,
                                                     const std::string& key = kTestAuthKey) {
  return {{"CLUSTER_CONFIG", cluster}, {"POD_NAME", pod}, {"KUBETRAIN_AUTH_KEY", key}};
}

}  // namespace kubetrain::testing
