#include "operator/runtime/object.h"

#include <algorithm>

namespace kubetrain::runtime {
namespace {

using json = nlohmann::json;

std::string StrField(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

}  // namespace

const std::string* ObjectMeta::Label(std::string_view key) const {
  auto it = std::lower_bound(labels.begin(), labels.end(), key,
                             [](const auto& kv, std::string_view k) { return kv.first < k; });
  if (it == labels.end() || it->first != key) return nullptr;
  return &it->second;
}

StatusOr<ObjectMeta> ParseObjectMeta(const json& obj) {
  if (!obj.is_object()) return InvalidArgument("object is not a JSON object");
  auto md = obj.find("metadata");
  if (md == obj.end() || !md->is_object()) return InvalidArgument("object has no metadata");
  ObjectMeta m;
  m.name = StrField(*md, "name");
  if (m.name.empty()) return InvalidArgument("object has no metadata.name");
  m.ns = StrField(*md, "namespace");
  m.uid = StrField(*md, "uid");
  m.resource_version = StrField(*md, "resourceVersion");
  m.deletion_timestamp = StrField(*md, "deletionTimestamp");
  if (auto g = md->find("generation"); g != md->end() && g->is_number_integer())
    m.generation = g->get<int64_t>();
  if (auto l = md->find("labels"); l != md->end() && l->is_object()) {
    m.labels.reserve(l->size());
    for (auto it = l->begin(); it != l->end(); ++it)
      if (it->is_string()) m.labels.emplace_back(it.key(), it->get<std::string>());
    std::sort(m.labels.begin(), m.labels.end());  // json objects iterate sorted; keep it explicit
    m.labels.shrink_to_fit();
  }
  if (auto o = md->find("ownerReferences"); o != md->end() && o->is_array()) {
    for (const auto& ref : *o) {
      auto c = ref.find("controller");
      if (c != ref.end() && c->is_boolean() && c->get<bool>()) {
        m.controller = OwnerRef{StrField(ref, "kind"), StrField(ref, "name"), StrField(ref, "uid")};
        break;
      }
    }
  }
  return m;
}

StatusOr<GenericObject> ToGenericObject(const json& obj) {
  auto meta = ParseObjectMeta(obj);
  if (!meta.ok()) return meta.status();
  return GenericObject{std::move(*meta), obj};
}

StatusOr<PodSummary> ToPodSummary(const json& obj) {
  auto meta = ParseObjectMeta(obj);
  if (!meta.ok()) return meta.status();
  PodSummary p;
  p.meta = std::move(*meta);
  if (auto spec = obj.find("spec"); spec != obj.end() && spec->is_object())
    p.node_name = StrField(*spec, "nodeName");
  auto st = obj.find("status");
  if (st == obj.end() || !st->is_object()) return p;
  p.phase = StrField(*st, "phase");
  p.pod_ip = StrField(*st, "podIP");
  if (auto cs = st->find("containerStatuses"); cs != st->end() && cs->is_array()) {
    p.containers.reserve(cs->size());
    for (const auto& c : *cs) {
      ContainerSummary s;
      s.name = StrField(c, "name");
      if (auto rc = c.find("restartCount"); rc != c.end() && rc->is_number_integer())
        s.restart_count = rc->get<int32_t>();
      auto state = c.find("state");
      if (state != c.end() && state->is_object()) {
        if (auto t = state->find("terminated"); t != state->end() && t->is_object()) {
          s.terminated = true;
          if (auto ec = t->find("exitCode"); ec != t->end() && ec->is_number_integer())
            s.exit_code = ec->get<int32_t>();
          s.reason = StrField(*t, "reason");
        } else if (auto w = state->find("waiting"); w != state->end() && w->is_object()) {
          s.reason = StrField(*w, "reason");
        }
      }
      p.containers.push_back(std::move(s));
    }
  }
  return p;
}

std::pair<std::string, std::string> SplitKey(std::string_view key) {
  auto slash = key.find('/');
  if (slash == std::string_view::npos) return {"", std::string(key)};
  return {std::string(key.substr(0, slash)), std::string(key.substr(slash + 1))};
}

}  // namespace kubetrain::runtime
