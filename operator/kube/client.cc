// kube::Client's verbs and watch, over a Transport (transport.h); the served
// documents are decoded by ParseServedJson (served_json.cc).
#include "operator/kube/client.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "operator/kube/transport.h"

namespace kubetrain::kube {
namespace {

using json = nlohmann::json;

std::string PercentEncode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

void AddParam(std::string& q, std::string_view key, std::string_view value) {
  if (value.empty()) return;
  q += q.empty() ? '?' : '&';
  q += key;
  q += '=';
  q += PercentEncode(value);
}

std::string ListQuery(const ListOptions& o, bool watch) {
  std::string q;
  if (watch) AddParam(q, "watch", "true");
  AddParam(q, "labelSelector", o.label_selector);
  AddParam(q, "fieldSelector", o.field_selector);
  if (o.limit > 0 && !watch) AddParam(q, "limit", std::to_string(o.limit));
  if (!watch) AddParam(q, "continue", o.continue_token);
  AddParam(q, "resourceVersion", o.resource_version);
  if (!watch) AddParam(q, "resourceVersionMatch", o.resource_version_match);
  if (watch && o.timeout_seconds > 0)
    AddParam(q, "timeoutSeconds", std::to_string(o.timeout_seconds));
  if (watch && o.allow_watch_bookmarks) AddParam(q, "allowWatchBookmarks", "true");
  return q;
}

}  // namespace

std::string ResourcePath(const ResourceRef& r, std::string_view ns, std::string_view name,
                         std::string_view subresource) {
  std::string p = r.group.empty() ? "/api/" + r.version : "/apis/" + r.group + "/" + r.version;
  if (r.namespaced && !ns.empty()) {
    p += "/namespaces/";
    p += PercentEncode(ns);
  }
  p += "/";
  p += r.resource;
  if (!name.empty()) {
    p += "/";
    p += PercentEncode(name);
    if (!subresource.empty()) {
      p += "/";
      p += subresource;
    }
  }
  return p;
}

Status ApiError(long http_status, std::string_view body, std::string_view what) {
  std::string reason, message;
  try {
    json j = json::parse(body);
    if (j.is_object() && j.value("kind", "") == "Status") {
      reason = j.value("reason", "");
      message = j.value("message", "");
    }
  } catch (const json::exception&) {
  }
  if (message.empty()) message = std::string(body.substr(0, 512));
  // The status code and, when the body names none, the reason for each HTTP status.
  struct Mapping {
    long http_status;
    StatusCode code;
    std::string_view reason;
  };
  static constexpr Mapping kMappings[] = {
      {400, StatusCode::kInvalidArgument, "BadRequest"},
      {401, StatusCode::kUnauthenticated, "Unauthorized"},
      {403, StatusCode::kPermissionDenied, "Forbidden"},
      {404, StatusCode::kNotFound, "NotFound"},
      {409, StatusCode::kConflict, "Conflict"},
      {410, StatusCode::kGone, "Gone"},
      {422, StatusCode::kInvalidArgument, "Invalid"},
      {429, StatusCode::kResourceExhausted, "TooManyRequests"},
      {504, StatusCode::kDeadlineExceeded, "Timeout"},
  };
  StatusCode code = http_status >= 500 ? StatusCode::kUnavailable : StatusCode::kInternal;
  std::string_view default_reason = "HTTP";
  for (const Mapping& m : kMappings) {
    if (m.http_status == http_status) {
      code = m.code;
      default_reason = m.reason;
      break;
    }
  }
  if (http_status == 409 && reason == "AlreadyExists") code = StatusCode::kAlreadyExists;
  if (reason.empty()) reason = default_reason;
  // An "Expired" reason may come with other codes in old servers.
  if (reason == "Expired" || reason == "Gone") code = StatusCode::kGone;
  return Status(code, reason + " (" + std::to_string(http_status) + ") " + std::string(what) +
                          ": " + message);
}

StatusOr<std::unique_ptr<Client>> Client::Create(Config config) {
  if (config.server.empty()) return InvalidArgument("kube client: config has no server");
  return std::unique_ptr<Client>(new Client(NewCurlTransport(std::move(config))));
}

Client::Client(std::unique_ptr<Transport> transport) : transport_(std::move(transport)) {}
Client::~Client() = default;

const Config& Client::config() const {
  return transport_->config();
}

namespace {

// The transport error, or the API error for a non-2xx response.
Status CheckOk(const StatusOr<HttpResponse>& resp, std::string_view what) {
  if (!resp.ok()) return resp.status();
  if (resp->status < 200 || resp->status >= 300) return ApiError(resp->status, resp->body, what);
  return Status::Ok();
}

StatusOr<json> Decode(const StatusOr<HttpResponse>& resp, std::string_view what,
                      ServedShape shape = ServedShape::kObject, bool drop_managed_fields = false,
                      const FieldFilter* fields = nullptr) {
  KT_RETURN_IF_ERROR(CheckOk(resp, what));
  auto parsed = ParseServedJson(resp->body, shape, drop_managed_fields, fields);
  if (!parsed.ok()) {
    return Internal(std::string(what) + ": response is not JSON: " + parsed.status().message());
  }
  return parsed;
}

std::string NameOf(const json& obj) {
  if (!obj.is_object()) return "";
  auto md = obj.find("metadata");
  if (md == obj.end() || !md->is_object()) return "";
  return md->value("name", "");
}

// A request body. Objects carry strings from workloads (termination
// messages, names, labels) that may not be valid UTF-8; dump() would throw on
// them, so ill-formed bytes become U+FFFD instead, as the apiserver's own
// JSON decoder does.
std::string DumpBody(const json& obj) {
  return obj.dump(-1, ' ', false, json::error_handler_t::replace);
}

// PUT of a whole object (or its subresource) at its own name; `verb` names the
// caller in the error for an object without a name.
StatusOr<json> PutObject(Client& c, const ResourceRef& r, std::string_view ns, const json& obj,
                         std::string_view subresource, std::string_view verb) {
  std::string name = NameOf(obj);
  if (name.empty()) return InvalidArgument(std::string(verb) + ": object has no metadata.name");
  std::string path = ResourcePath(r, ns, name, subresource);
  return Decode(c.Do("PUT", path, DumpBody(obj)), "PUT " + path, ServedShape::kObject, true);
}

}  // namespace

StatusOr<HttpResponse> Client::Do(std::string_view method, const std::string& path,
                                  const std::string& body, std::string_view content_type) {
  return transport_->Send(method, path, body, content_type, nullptr, {},
                          static_cast<long>(transport_->config().request_timeout.count()));
}

Status Client::Stream(const std::string& path, const std::function<bool(std::string_view)>& on_data,
                      std::stop_token stop, std::chrono::milliseconds timeout) {
  Transport::DataFn fn = on_data;
  auto resp = transport_->Send("GET", path, "", "", &fn, stop, static_cast<long>(timeout.count()));
  if (resp.ok() && stop.stop_requested()) return Status::Ok();
  return CheckOk(resp, "GET " + path);
}

StatusOr<json> Client::Get(const ResourceRef& r, std::string_view ns, std::string_view name) {
  std::string path = ResourcePath(r, ns, name);
  return Decode(Do("GET", path), "GET " + path);
}

StatusOr<json> Client::List(const ResourceRef& r, std::string_view ns, const ListOptions& opts) {
  std::string path = ResourcePath(r, ns) + ListQuery(opts, false);
  return Decode(Do("GET", path), "GET " + path, ServedShape::kList, opts.drop_managed_fields,
                opts.fields.get());
}

namespace {

std::string ContinueOf(const json& list) {
  auto md = list.find("metadata");
  if (md == list.end() || !md->is_object()) return "";
  auto c = md->find("continue");
  return c != md->end() && c->is_string() ? c->get<std::string>() : "";
}

}  // namespace

Status Client::ListPages(const ResourceRef& r, std::string_view ns, ListOptions opts,
                         const std::function<Status(json&& page)>& on_page) {
  for (bool first = true;; first = false) {
    auto page = List(r, ns, opts);
    if (!page.ok()) return page.status();
    if (!page->is_object()) return Internal("LIST " + ResourcePath(r, ns) + ": not a list object");
    std::string cont = ContinueOf(*page);
    KT_RETURN_IF_ERROR(on_page(std::move(*page)));
    if (cont.empty()) return Status::Ok();
    opts.continue_token = std::move(cont);
    if (first) opts.resource_version.clear();  // continue tokens carry their own snapshot
  }
}

StatusOr<json> Client::ListAll(const ResourceRef& r, std::string_view ns, ListOptions opts) {
  json result;
  Status s = ListPages(r, ns, std::move(opts), [&](json&& page) -> Status {
    if (result.is_null()) {
      result = std::move(page);
      if (!result["items"].is_array()) result["items"] = json::array();
      if (!result["metadata"].is_object()) result["metadata"] = json::object();
    } else if (auto items = page.find("items"); items != page.end() && items->is_array()) {
      for (auto& it : *items) result["items"].push_back(std::move(it));
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  result["metadata"].erase("continue");
  return result;
}

StatusOr<json> Client::Create(const ResourceRef& r, std::string_view ns, const json& obj) {
  std::string path = ResourcePath(r, ns);
  return Decode(Do("POST", path, DumpBody(obj)), "POST " + path, ServedShape::kObject, true);
}

Status Client::CreateUnread(const ResourceRef& r, std::string_view ns, const json& obj) {
  std::string path = ResourcePath(r, ns);
  return CheckOk(Do("POST", path, DumpBody(obj)), "POST " + path);
}

StatusOr<json> Client::Update(const ResourceRef& r, std::string_view ns, const json& obj) {
  return PutObject(*this, r, ns, obj, "", "Update");
}

StatusOr<json> Client::UpdateStatus(const ResourceRef& r, std::string_view ns, const json& obj) {
  return PutObject(*this, r, ns, obj, "status", "UpdateStatus");
}

StatusOr<json> Client::Patch(const ResourceRef& r, std::string_view ns, std::string_view name,
                             PatchType type, const json& patch, const PatchOptions& opts) {
  std::string path = ResourcePath(r, ns, name, opts.subresource);
  std::string q;
  AddParam(q, "fieldManager", opts.field_manager);
  std::string_view ct;
  switch (type) {
    case PatchType::kMerge:
      ct = "application/merge-patch+json";
      break;
    case PatchType::kJson:
      ct = "application/json-patch+json";
      break;
    case PatchType::kStrategicMerge:
      ct = "application/strategic-merge-patch+json";
      break;
    case PatchType::kApply:
      ct = "application/apply-patch+yaml";  // JSON is valid YAML
      if (opts.field_manager.empty())
        return InvalidArgument("Patch: server-side apply needs a field manager");
      if (opts.force) AddParam(q, "force", "true");
      break;
  }
  return Decode(Do("PATCH", path + q, DumpBody(patch), ct), "PATCH " + path, ServedShape::kObject,
                true);
}

StatusOr<json> Client::Apply(const ResourceRef& r, std::string_view ns, const json& obj,
                             std::string_view field_manager, bool force,
                             std::string_view subresource) {
  std::string name = NameOf(obj);
  if (name.empty()) return InvalidArgument("Apply: object has no metadata.name");
  PatchOptions opts;
  opts.field_manager = field_manager;
  opts.force = force;
  opts.subresource = subresource;
  return Patch(r, ns, name, PatchType::kApply, obj, opts);
}

Status Client::Delete(const ResourceRef& r, std::string_view ns, std::string_view name,
                      const DeleteOptions& opts) {
  std::string path = ResourcePath(r, ns, name);
  json body = {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}};
  if (!opts.propagation_policy.empty()) body["propagationPolicy"] = opts.propagation_policy;
  if (opts.grace_period_seconds) body["gracePeriodSeconds"] = *opts.grace_period_seconds;
  if (!opts.precondition_uid.empty()) body["preconditions"]["uid"] = opts.precondition_uid;
  if (!opts.precondition_resource_version.empty())
    body["preconditions"]["resourceVersion"] = opts.precondition_resource_version;
  return CheckOk(Do("DELETE", path, DumpBody(body)), "DELETE " + path);
}

Status Client::Watch(const ResourceRef& r, std::string_view ns, const ListOptions& opts,
                     const WatchHandler& handler, std::stop_token stop) {
  std::string path = ResourcePath(r, ns) + ListQuery(opts, true);
  const std::string what = "WATCH " + path;
  std::string pending;  // an incomplete line carried across chunks
  Status result;
  Transport::DataFn on_data = [&](std::string_view chunk) -> bool {
    pending.append(chunk);
    size_t start = 0;
    for (;;) {
      size_t nl = pending.find('\n', start);
      if (nl == std::string::npos) break;
      std::string_view line(pending.data() + start, nl - start);
      start = nl + 1;
      if (line.empty()) continue;
      auto parsed = ParseServedJson(line, ServedShape::kWatchEvent, opts.drop_managed_fields,
                                    opts.fields.get());
      if (!parsed.ok()) {
        result = Internal(what + ": malformed watch event: " + parsed.status().message());
        return false;
      }
      try {
        json& ev = *parsed;
        std::string type = ev.value("type", "");
        WatchEvent out;
        if (type == "ADDED") {
          out.type = WatchEventType::kAdded;
        } else if (type == "MODIFIED") {
          out.type = WatchEventType::kModified;
        } else if (type == "DELETED") {
          out.type = WatchEventType::kDeleted;
        } else if (type == "BOOKMARK") {
          out.type = WatchEventType::kBookmark;
        } else if (type == "ERROR") {
          const json& st = ev["object"];
          long code = st.is_object() ? st.value("code", 500L) : 500L;
          result = ApiError(code, st.dump(), what);
          return false;
        } else {
          result = Internal(what + ": unknown watch event type \"" + type + "\"");
          return false;
        }
        out.object = std::move(ev["object"]);
        result = handler(std::move(out));
        if (!result.ok()) return false;
      } catch (const json::exception& e) {
        result = Internal(what + ": malformed watch event: " + e.what());
        return false;
      }
    }
    pending.erase(0, start);
    return true;
  };
  // The server ends the watch after timeoutSeconds; the client allows a
  // margin on top so a silent, dead connection is still noticed.
  long timeout_ms = opts.timeout_seconds > 0 ? (opts.timeout_seconds + 30) * 1000L : 0L;
  auto resp = transport_->Send("GET", path, "", "", &on_data, stop, timeout_ms);
  if (!result.ok()) return result;
  if (resp.ok() && stop.stop_requested()) return Status::Ok();
  return CheckOk(resp, what);
}

}  // namespace kubetrain::kube
