// kube::Client: generic REST verbs and watch against one Kubernetes apiserver.
//
//   auto client = kube::Client::Create(*kube::LoadDefaultConfig(flag_kubeconfig));
//   auto pod = (*client)->Get(kube::kPods, "default", "worker-0");
//   if (!pod.ok() && pod.status().code() == StatusCode::kNotFound) ...
//
// Errors are Status values. API errors map their reason to a code and keep the
// reason and the server's message in the text ("Conflict (409): ..."):
//   NotFound -> kNotFound, AlreadyExists -> kAlreadyExists, Conflict -> kConflict,
//   Invalid/BadRequest -> kInvalidArgument, Gone/Expired -> kGone,
//   Forbidden -> kPermissionDenied, Unauthorized -> kUnauthenticated,
//   TooManyRequests -> kResourceExhausted, 5xx/connection -> kUnavailable/kInternal,
//   Timeout -> kDeadlineExceeded.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "operator/kube/config.h"

namespace kubetrain::kube {

// Names an API resource. `group` is "" for the core group.
struct ResourceRef {
  std::string group;
  std::string version;
  std::string resource;  // plural, lower case: "pods"
  bool namespaced = true;
};

inline const ResourceRef kPods{"", "v1", "pods", true};
inline const ResourceRef kServices{"", "v1", "services", true};
inline const ResourceRef kSecrets{"", "v1", "secrets", true};
inline const ResourceRef kConfigMaps{"", "v1", "configmaps", true};
inline const ResourceRef kNetworkPolicies{"networking.k8s.io", "v1", "networkpolicies", true};
// scheduler-plugins' PodGroup (gang scheduling); a CRD, present only where installed.
inline const ResourceRef kPodGroups{"scheduling.x-k8s.io", "v1alpha1", "podgroups", true};
inline const ResourceRef kNamespaces{"", "v1", "namespaces", false};
inline const ResourceRef kNodes{"", "v1", "nodes", false};
inline const ResourceRef kLeases{"coordination.k8s.io", "v1", "leases", true};
inline const ResourceRef kEvents{"events.k8s.io", "v1", "events", true};
inline const ResourceRef kCustomResourceDefinitions{"apiextensions.k8s.io", "v1",
                                                    "customresourcedefinitions", false};

// Which fields of a served object ParseServedJson builds (ListOptions::fields):
// an object keeps only the listed keys, each with `fields` applied to its value
// (empty: all of it); an array's elements are filtered as the array itself is.
struct KeptField {
  std::string name;
  std::vector<KeptField> fields;
};
using FieldFilter = std::vector<KeptField>;

struct ListOptions {
  std::string label_selector;  // "app=x,role in (ps,worker)"
  std::string field_selector;  // "metadata.name=x"
  int64_t limit = 0;           // page size; 0 = server default (everything)
  std::string continue_token;
  std::string resource_version;        // list: "" = most recent (quorum), "0" = any
  std::string resource_version_match;  // "NotOlderThan" / "Exact"
  int timeout_seconds = 0;             // watch: server closes after this many seconds
  bool allow_watch_bookmarks = true;   // watch only
  // List items and watch event objects are parsed without their
  // metadata.managedFields: a cache never reads them and they are about a
  // third of a served Pod. (A PUT without managedFields keeps the server's.)
  bool drop_managed_fields = false;
  // List items and watch event objects are built with only these fields
  // (the rest is skipped while parsing, never built): for a cache whose
  // transform reads a few fields of a large object. Null: every field.
  std::shared_ptr<const FieldFilter> fields;
};

enum class PatchType {
  kMerge,           // application/merge-patch+json
  kJson,            // application/json-patch+json
  kStrategicMerge,  // application/strategic-merge-patch+json (built-in types only)
  kApply,           // server-side apply (application/apply-patch+yaml); needs field_manager
};

struct PatchOptions {
  std::string field_manager;  // required for kApply
  bool force = false;         // kApply: take ownership of conflicting fields
  std::string subresource;    // "" or "status"
};

struct DeleteOptions {
  std::string propagation_policy;  // "", "Foreground", "Background", "Orphan"
  std::string precondition_uid;
  std::string precondition_resource_version;
  std::optional<int64_t> grace_period_seconds;
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark };

struct WatchEvent {
  WatchEventType type;
  nlohmann::json object;
};

// Returns OK to keep watching; any error stops the watch and is returned by Watch().
using WatchHandler = std::function<Status(WatchEvent&&)>;

// One HTTP exchange, for the generic Do().
struct HttpResponse {
  long status = 0;
  std::string body;
};

// Contract: owns a pool of libcurl handles (connections are kept alive and
// reused; HTTP/2 is negotiated when the server offers it), a client-side
// token bucket (Config::qps/burst) shared by all calls, and the retry policy:
// 429 is retried for every verb after Retry-After; connection errors and 5xx
// are retried with exponential backoff for idempotent verbs only (GET, PUT,
// DELETE; never POST or PATCH). The bearer token file, if any, is re-read when
// it changes. All methods are thread-safe; Watch blocks the calling thread.
class Transport;  // transport.h

class Client {
 public:
  [[nodiscard]] static StatusOr<std::unique_ptr<Client>> Create(Config config);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Config& config() const;

  // `ns` is ignored for cluster-scoped resources; for List/Watch on a
  // namespaced resource, "" means all namespaces.
  [[nodiscard]] StatusOr<nlohmann::json> Get(const ResourceRef& r, std::string_view ns,
                                             std::string_view name);
  // One page: the List object; "metadata.continue" is set when there is more.
  [[nodiscard]] StatusOr<nlohmann::json> List(const ResourceRef& r, std::string_view ns,
                                              const ListOptions& opts = {});
  // Follows "continue" until the end; returns the List with every item and
  // the resourceVersion of the first page. A 410 mid-way is returned as kGone.
  [[nodiscard]] StatusOr<nlohmann::json> ListAll(const ResourceRef& r, std::string_view ns,
                                                 ListOptions opts = {});
  // Follows "continue" like ListAll, but hands each page (a List object) to
  // `on_page` as it arrives, so a caller that converts and frees the items
  // never holds the whole list. An error from `on_page` stops the list and is
  // returned; a 410 mid-way is kGone (the pages already delivered are stale).
  [[nodiscard]] Status ListPages(const ResourceRef& r, std::string_view ns, ListOptions opts,
                                 const std::function<Status(nlohmann::json&& page)>& on_page);
  // The writes (Create, Update, UpdateStatus, Patch, Apply) return the
  // object the server answered without its metadata.managedFields (see
  // ParseServedJson); a later PUT of it keeps the server's.
  [[nodiscard]] StatusOr<nlohmann::json> Create(const ResourceRef& r, std::string_view ns,
                                                const nlohmann::json& obj);
  // Create without parsing the server's answer, for a caller that never reads
  // it (a controller reading its children from caches): the same request,
  // retries and errors as Create.
  [[nodiscard]] Status CreateUnread(const ResourceRef& r, std::string_view ns,
                                    const nlohmann::json& obj);
  // PUT; the object's metadata.resourceVersion, when set, is a precondition
  // (stale -> kConflict).
  [[nodiscard]] StatusOr<nlohmann::json> Update(const ResourceRef& r, std::string_view ns,
                                                const nlohmann::json& obj);
  [[nodiscard]] StatusOr<nlohmann::json> UpdateStatus(const ResourceRef& r, std::string_view ns,
                                                      const nlohmann::json& obj);
  [[nodiscard]] StatusOr<nlohmann::json> Patch(const ResourceRef& r, std::string_view ns,
                                               std::string_view name, PatchType type,
                                               const nlohmann::json& patch,
                                               const PatchOptions& opts = {});
  // Server-side apply of a full intent object (needs apiVersion, kind, metadata.name).
  [[nodiscard]] StatusOr<nlohmann::json> Apply(const ResourceRef& r, std::string_view ns,
                                               const nlohmann::json& obj,
                                               std::string_view field_manager, bool force = false,
                                               std::string_view subresource = "");
  [[nodiscard]] Status Delete(const ResourceRef& r, std::string_view ns, std::string_view name,
                              const DeleteOptions& opts = {});

  // Streams watch events to `handler` until the server ends the stream (OK),
  // `stop` is requested (OK), the handler returns an error (that error), or
  // the watch fails. An expired resourceVersion ("410 Gone" as HTTP status or
  // as an ERROR event) is returned as kGone. Events are read incrementally:
  // one JSON object per line, delivered as soon as its line is complete.
  [[nodiscard]] Status Watch(const ResourceRef& r, std::string_view ns, const ListOptions& opts,
                             const WatchHandler& handler, std::stop_token stop = {});

  // GET `path` ("/api/v1/namespaces/ns/pods/p/log?follow=true") and hand the
  // body to `on_data` as it arrives, chunk by chunk (not split on lines).
  // Returns OK when the server ends the body, `stop` is requested or
  // `on_data` returns false; a non-2xx answer as the API error (see above).
  // A 429 is retried; nothing else is once the request was sent. `timeout`
  // bounds the whole exchange (zero: no bound, for a follow that lasts).
  [[nodiscard]] Status Stream(const std::string& path,
                              const std::function<bool(std::string_view)>& on_data,
                              std::stop_token stop = {},
                              std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // Raw request against `path` ("/api/v1/..."), with rate limiting and
  // retries, no error mapping. For the verbs above, prefer them.
  [[nodiscard]] StatusOr<HttpResponse> Do(std::string_view method, const std::string& path,
                                          const std::string& body = "",
                                          std::string_view content_type = "application/json");

 private:
  explicit Client(std::unique_ptr<Transport> transport);
  std::unique_ptr<Transport> transport_;
};

// URL path of a collection or an object: "/apis/g/v/namespaces/ns/res[/name[/sub]]".
std::string ResourcePath(const ResourceRef& r, std::string_view ns, std::string_view name = "",
                         std::string_view subresource = "");

// Where the objects sit in a served document, for ParseServedJson.
enum class ServedShape { kObject, kList, kWatchEvent };
// Parses a served document; with `drop_managed_fields`, the objects'
// metadata.managedFields (the object's own, a list's items', a watch event's
// object's; nothing nested deeper) are skipped while parsing, never built;
// with `fields`, so is every field of the objects it does not keep (a watch
// ERROR event's Status is kept whole).
// Malformed text: InvalidArgument with the parser's message.
[[nodiscard]] StatusOr<nlohmann::json> ParseServedJson(std::string_view text, ServedShape shape,
                                                       bool drop_managed_fields,
                                                       const FieldFilter* fields = nullptr);

// Maps an HTTP status and an apiserver Status body to a Status (see above).
Status ApiError(long http_status, std::string_view body, std::string_view what);

}  // namespace kubetrain::kube
