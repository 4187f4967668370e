#include "operator/cli/logs.h"

#include <algorithm>

#include "common/storage/files.h"
#include "operator/api/types.h"

namespace kubetrain::cli {

using nlohmann::json;

std::string ReplicaOfPod(const json& pod) {
  if (!pod.is_object() || !pod.contains("metadata")) return "";
  const json& labels = pod["metadata"].value("labels", json::object());
  if (!labels.is_object()) return "";
  const std::string role = labels.value("kubetrain.io/replica-type", "");
  const std::string index = labels.value("kubetrain.io/replica-index", "");
  if (role.empty() || index.empty()) return "";
  return role + "-" + index;
}

namespace {

const json* ReplicaSpecs(const json& job) {
  if (!job.is_object()) return nullptr;
  auto spec = job.find("spec");
  if (spec == job.end() || !spec->is_object()) return nullptr;
  auto specs = spec->find("replicaSpecs");
  if (specs == spec->end() || !specs->is_object()) return nullptr;
  return &*specs;
}

}  // namespace

std::vector<std::string> ReplicasOfJob(const json& job) {
  std::vector<std::string> out;
  const json* specs = ReplicaSpecs(job);
  if (specs == nullptr) return out;
  for (const auto& role : api::kRoles) {
    auto it = specs->find(std::string(role.key));
    if (it == specs->end() || !it->is_object()) continue;
    const int64_t n = it->value("replicas", int64_t{1});
    for (int64_t i = 0; i < std::min<int64_t>(n, 10000); ++i) {
      out.push_back(std::string(role.lower) + "-" + std::to_string(i));
    }
  }
  return out;
}

std::string OutputOfJob(const json& job, json* pod_spec_out, json* container_out) {
  const json* specs = ReplicaSpecs(job);
  if (specs == nullptr) return "";
  for (std::string_view role : {"Chief", "Worker", "PS", "Evaluator"}) {
    auto it = specs->find(std::string(role));
    if (it == specs->end() || !it->is_object()) continue;
    const json& tmpl = it->value("template", json::object());
    const json& pod_spec = tmpl.is_object() ? tmpl.value("spec", json::object()) : json::object();
    if (!pod_spec.is_object()) continue;
    for (const json& c : pod_spec.value("containers", json::array())) {
      if (!c.is_object()) continue;
      const json args = c.value("args", json::array());
      if (!args.is_array()) continue;
      for (size_t i = 0; i < args.size(); ++i) {
        if (!args[i].is_string()) continue;
        const std::string a = args[i].get<std::string>();
        constexpr std::string_view kFlag = "--output";
        std::string found;
        if (a.rfind(std::string(kFlag) + "=", 0) == 0) {
          found = a.substr(kFlag.size() + 1);
        } else if (a == kFlag && i + 1 < args.size() && args[i + 1].is_string()) {
          found = args[i + 1].get<std::string>();
        } else {
          continue;
        }
        if (pod_spec_out != nullptr) *pod_spec_out = pod_spec;
        if (container_out != nullptr) *container_out = c;
        return found;
      }
    }
  }
  return "";
}

StatusOr<std::map<std::string, std::string>> ReadSavedLogs(const std::string& output) {
  const std::string dir = storage::JoinPath(output, "logs");
  auto names = storage::ListObjects(dir);
  if (!names.ok()) return names.status();
  std::map<std::string, std::string> out;
  for (const std::string& name : *names) {
    constexpr std::string_view kExt = ".log";
    // Only <replica>.log directly under logs/ (a temp file of a writer is not one).
    if (name.find('/') != std::string::npos || name.size() <= kExt.size() ||
        name.compare(name.size() - kExt.size(), kExt.size(), kExt) != 0) {
      continue;
    }
    auto text = storage::ReadObject(storage::JoinPath(dir, name));
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kNotFound) continue;  // removed since the list
      return text.status();
    }
    std::string body = std::move(*text);
    if (body.size() > kMaxSavedLogBytes) body.erase(0, body.size() - kMaxSavedLogBytes);
    out[name.substr(0, name.size() - kExt.size())] = std::move(body);
  }
  return out;
}

LinePrefixer::LinePrefixer(std::string replica, size_t width)
    : prefix_([&] {
        replica.resize(std::max(width, replica.size()), ' ');
        return replica + " | ";
      }()) {}

std::string LinePrefixer::Prefixed(std::string_view line) const {
  std::string out = prefix_;
  out.append(line);
  out += '\n';
  return out;
}

std::string LinePrefixer::Add(std::string_view chunk) {
  std::string out;
  while (!chunk.empty()) {
    const size_t nl = chunk.find('\n');
    const size_t take = nl == std::string_view::npos ? chunk.size() : nl;
    const size_t room = kMaxLineBytes - partial_.size();
    if (take >= room) {
      partial_.append(chunk.substr(0, room));
      out += Prefixed(partial_);
      partial_.clear();
      chunk.remove_prefix(room);
      if (take == room && nl != std::string_view::npos) chunk.remove_prefix(1);
      continue;
    }
    partial_.append(chunk.substr(0, take));
    if (nl == std::string_view::npos) break;
    out += Prefixed(partial_);
    partial_.clear();
    chunk.remove_prefix(nl + 1);
  }
  return out;
}

std::string LinePrefixer::Flush() {
  if (partial_.empty()) return "";
  std::string out = Prefixed(partial_);
  partial_.clear();
  return out;
}

}  // namespace kubetrain::cli
