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
  KT_ASSIGN_OR_RETURN(ObjectMeta meta, ParseObjectMeta(obj));
  return GenericObject{std::move(meta), obj};
}

StatusOr<CompactObject> ToCompactObject(const json& obj) {
  KT_ASSIGN_OR_RETURN(ObjectMeta meta, ParseObjectMeta(obj));
  // Ill-formed UTF-8 (never served by the apiserver) becomes U+FFFD, not a throw.
  const auto dump = [](const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  const json& md = obj["metadata"];
  if (md.contains("managedFields")) {
    json copy = obj;
    copy["metadata"].erase("managedFields");
    return CompactObject{std::move(meta), dump(copy)};
  }
  return CompactObject{std::move(meta), dump(obj)};
}

json CompactObject::Object() const {
  return json::parse(text);
}

std::pair<std::string, std::string> SplitKey(std::string_view key) {
  auto slash = key.find('/');
  if (slash == std::string_view::npos) return {"", std::string(key)};
  return {std::string(key.substr(0, slash)), std::string(key.substr(slash + 1))};
}

}  // namespace kubetrain::runtime
