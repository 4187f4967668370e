// Store<T>: the informer's thread-safe, indexed cache of compact objects.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"

namespace kubetrain::runtime {

// Contract: maps keys ("ns/name") to shared, immutable objects. One writer
// (the informer's reflector thread), many readers; every method is
// thread-safe. Readers get shared_ptr<const T> snapshots that stay valid after
// the store changes: copy before modifying. Indexes map an index value to the
// keys of the objects that produce it; they are registered before the first
// write and kept consistent with every write. Replace swaps the whole content
// and every index at once, so readers never see half a relist.
template <typename T>
class Store {
 public:
  using Ptr = std::shared_ptr<const T>;
  using IndexFunc = std::function<std::vector<std::string>(const T&)>;
  using Map = std::unordered_map<std::string, Ptr>;

  // Registers an index. Call before the store is filled.
  void AddIndex(std::string name, IndexFunc fn) {
    WriterMutexLock lock(mu_);
    funcs_.emplace(name, std::move(fn));
    indexes_[std::move(name)];
  }

  Ptr Get(std::string_view key) const {
    ReaderMutexLock lock(mu_);
    auto it = items_.find(std::string(key));
    return it == items_.end() ? nullptr : it->second;
  }

  std::vector<Ptr> List() const {
    ReaderMutexLock lock(mu_);
    std::vector<Ptr> out;
    out.reserve(items_.size());
    for (const auto& [k, v] : items_) out.push_back(v);
    return out;
  }

  std::vector<std::string> Keys() const {
    ReaderMutexLock lock(mu_);
    std::vector<std::string> out;
    out.reserve(items_.size());
    for (const auto& [k, v] : items_) out.push_back(k);
    return out;
  }

  // Objects whose index `index` yields `value`; empty for an unknown index.
  std::vector<Ptr> ByIndex(std::string_view index, std::string_view value) const {
    ReaderMutexLock lock(mu_);
    std::vector<Ptr> out;
    auto idx = indexes_.find(std::string(index));
    if (idx == indexes_.end()) return out;
    auto keys = idx->second.find(std::string(value));
    if (keys == idx->second.end()) return out;
    for (const auto& k : keys->second) out.push_back(items_.at(k));
    return out;
  }

  size_t size() const {
    ReaderMutexLock lock(mu_);
    return items_.size();
  }

  // Inserts or replaces; returns the previous object (nullptr if none).
  Ptr Upsert(const std::string& key, Ptr obj) {
    WriterMutexLock lock(mu_);
    Ptr old;
    auto it = items_.find(key);
    if (it != items_.end()) {
      old = it->second;
      Unindex(key, *old);
      it->second = obj;
    } else {
      items_.emplace(key, obj);
    }
    Index(key, *obj);
    return old;
  }

  // Removes; returns the removed object (nullptr if absent).
  Ptr Erase(const std::string& key) {
    WriterMutexLock lock(mu_);
    auto it = items_.find(key);
    if (it == items_.end()) return nullptr;
    Ptr old = it->second;
    Unindex(key, *old);
    items_.erase(it);
    return old;
  }

  // Swaps in `items` and rebuilds every index; returns the previous content.
  Map Replace(Map items) {
    std::map<std::string, Index_> fresh;
    for (const auto& [name, fn] : funcs_) {
      auto& idx = fresh[name];
      for (const auto& [k, v] : items)
        for (auto& value : fn(*v)) idx[std::move(value)].insert(k);
    }
    WriterMutexLock lock(mu_);
    std::swap(items_, items);
    indexes_ = std::move(fresh);
    return items;
  }

 private:
  using Index_ = std::unordered_map<std::string, std::set<std::string>>;

  void Index(const std::string& key, const T& obj) REQUIRES(mu_) {
    for (const auto& [name, fn] : funcs_)
      for (auto& value : fn(obj)) indexes_[name][std::move(value)].insert(key);
  }
  void Unindex(const std::string& key, const T& obj) REQUIRES(mu_) {
    for (const auto& [name, fn] : funcs_) {
      auto& idx = indexes_[name];
      for (const auto& value : fn(obj)) {
        auto it = idx.find(value);
        if (it == idx.end()) continue;
        it->second.erase(key);
        if (it->second.empty()) idx.erase(it);
      }
    }
  }

  mutable SharedMutex mu_;
  Map items_ GUARDED_BY(mu_);
  // Written by AddIndex before the store is filled, read-only after (Replace reads it unlocked).
  std::map<std::string, IndexFunc> funcs_;
  std::map<std::string, Index_> indexes_ GUARDED_BY(mu_);
};

// Standard index names and functions for types with an ObjectMeta `meta`.
inline constexpr char kNamespaceIndex[] = "namespace";
inline constexpr char kOwnerUidIndex[] = "owner-uid";

template <typename T>
std::vector<std::string> NamespaceIndexFunc(const T& o) {
  return {o.meta.ns};
}
// The owner index value of a controller reference: "<namespace>/<uid>". An
// ownerReference names no namespace and a namespaced owner can only own objects
// in its own namespace, so a child in another namespace that claims the UID
// must not be found under the owner's.
inline std::string OwnerIndexValue(std::string_view ns, std::string_view uid) {
  std::string out(ns);
  out += '/';
  out += uid;
  return out;
}
template <typename T>
std::vector<std::string> OwnerUidIndexFunc(const T& o) {
  if (!o.meta.controller) return {};
  return {OwnerIndexValue(o.meta.ns, o.meta.controller->uid)};
}
// Index name for a label index: "label:<key>".
inline std::string LabelIndexName(std::string_view label_key) {
  return "label:" + std::string(label_key);
}
template <typename T>
typename Store<T>::IndexFunc LabelIndexFunc(std::string label_key) {
  return [label_key = std::move(label_key)](const T& o) -> std::vector<std::string> {
    const std::string* v = o.meta.Label(label_key);
    if (!v) return {};
    return {*v};
  };
}

}  // namespace kubetrain::runtime
