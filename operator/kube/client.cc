#include "operator/kube/client.h"

#include <curl/curl.h>
#include <openssl/ssl.h>
#include <strings.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "kubetrain/version.h"
#include "operator/kube/rate_limiter.h"

namespace kubetrain::kube {
namespace {

using json = nlohmann::json;

std::once_flag g_curl_init;

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

bool IsIdempotent(std::string_view method) {
  return method == "GET" || method == "PUT" || method == "DELETE" || method == "HEAD";
}

// Connection errors where the request cannot have reached the server.
bool NeverSent(CURLcode rc) {
  return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
         rc == CURLE_COULDNT_RESOLVE_PROXY;
}

Status CurlError(CURLcode rc, const char* errbuf, std::string_view what) {
  std::string detail = errbuf && *errbuf ? errbuf : curl_easy_strerror(rc);
  std::string msg = std::string(what) + ": " + detail;
  switch (rc) {
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
      return Status(StatusCode::kUnavailable,
                    msg + " (TLS: the server certificate is not trusted by the configured CA)");
    case CURLE_OPERATION_TIMEDOUT:
      return Status(StatusCode::kDeadlineExceeded, msg);
    default:
      return Unavailable(msg);
  }
}

struct CurlSlist {
  curl_slist* list = nullptr;
  ~CurlSlist() { curl_slist_free_all(list); }
  void Add(const std::string& s) { list = curl_slist_append(list, s.c_str()); }
};

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

class Client::Impl {
 public:
  explicit Impl(Config cfg)
      : config_(std::move(cfg)),
        limiter_(config_.qps, config_.burst),
        user_agent_(std::string("kubetrain/") + kubetrain::kVersion) {}

  ~Impl() {
    for (CURL* h : idle_) curl_easy_cleanup(h);
  }

  const Config& config() const { return config_; }

  // Sends one request with retries. `on_data`, when set, receives the body
  // incrementally (watch); then the body is only kept for non-2xx responses.
  using DataFn = std::function<bool(std::string_view)>;  // false = abort
  StatusOr<HttpResponse> Send(std::string_view method, const std::string& path,
                              const std::string& body, std::string_view content_type,
                              const DataFn* on_data, std::stop_token stop, long timeout_ms) {
    std::optional<std::mt19937> rng;  // seeded at the first retry: most requests have none
    auto backoff = std::chrono::milliseconds(100);
    bool reauthenticated = false;
    for (int attempt = 0;; ++attempt) {
      limiter_.Wait();
      CURLcode rc = CURLE_OK;
      char errbuf[CURL_ERROR_SIZE] = {0};
      HttpResponse resp;
      std::string retry_after;
      if (config_.may_write && method != "GET" && method != "HEAD" && !config_.may_write())
        return Status(StatusCode::kUnavailable,
                      std::string(method) + " " + path + ": writes are fenced (not the leader)");
      auto started = std::chrono::steady_clock::now();
      rc = Perform(method, path, body, content_type, on_data, stop, timeout_ms, resp, retry_after,
                   errbuf);
      if (config_.on_request)
        config_.on_request(method, rc == CURLE_OK ? resp.status : 0,
                           std::chrono::steady_clock::now() - started);
      if (stop.stop_requested() && rc == CURLE_ABORTED_BY_CALLBACK) return resp;
      bool retry = false;
      std::chrono::milliseconds wait = backoff;
      if (rc != CURLE_OK) {
        if (rc == CURLE_ABORTED_BY_CALLBACK || rc == CURLE_WRITE_ERROR)
          return resp;  // the data callback asked to stop
        retry = NeverSent(rc) || (IsIdempotent(method) && rc != CURLE_PEER_FAILED_VERIFICATION &&
                                  rc != CURLE_SSL_CACERT_BADFILE && on_data == nullptr);
        if (!retry || attempt >= config_.max_retries)
          return CurlError(rc, errbuf, std::string(method) + " " + config_.server + path);
      } else if (resp.status == 429) {
        retry = attempt < config_.max_retries;
        if (!retry_after.empty()) {
          try {
            wait = std::chrono::seconds(std::stoi(retry_after));
          } catch (...) {
          }
        }
      } else if (resp.status >= 500 && IsIdempotent(method) && on_data == nullptr) {
        retry = attempt < config_.max_retries;
      } else if (resp.status == 401 && config_.exec && !reauthenticated) {
        // The plugin's token was revoked or expired early: fetch a new one
        // and try once more, as client-go does.
        reauthenticated = true;
        InvalidateExecToken();
        retry = true;
        wait = std::chrono::milliseconds(0);
      }
      if (!retry) return resp;
      // Full jitter keeps many clients from retrying in lockstep.
      if (!rng) rng.emplace(std::random_device{}());
      auto jittered = std::chrono::milliseconds(
          std::uniform_int_distribution<long>(wait.count() / 2, wait.count())(*rng));
      std::this_thread::sleep_for(jittered);
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(5));
    }
  }

 private:
  struct Transfer {
    const DataFn* on_data = nullptr;
    HttpResponse* resp = nullptr;
    std::string* retry_after = nullptr;
    CURL* handle = nullptr;
    long status = -1;
    std::stop_token stop;
  };

  static size_t OnWrite(char* ptr, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    size_t len = size * n;
    if (t->status < 0) curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &t->status);
    if (t->on_data && t->status >= 200 && t->status < 300) {
      if (!(*t->on_data)(std::string_view(ptr, len))) return 0;
      return len;
    }
    t->resp->body.append(ptr, len);
    return len;
  }

  static size_t OnHeader(char* ptr, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    std::string_view line(ptr, size * n);
    constexpr std::string_view kKey = "retry-after:";
    // Every response header passes here; only Retry-After is kept.
    if (line.size() > kKey.size() && ::strncasecmp(line.data(), kKey.data(), kKey.size()) == 0) {
      std::string_view v = line.substr(kKey.size());
      while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
      while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
      *t->retry_after = v;
    }
    return size * n;
  }

  // libcurl (7.x, OpenSSL) sets SSL_MODE_RELEASE_BUFFERS: OpenSSL then frees
  // a connection's ~17 KiB read buffer whenever a read drains it and
  // allocates it again on the next, once per watch event chunk and per
  // response; each such large malloc makes glibc consolidate its fast bins
  // (malloc_consolidate: 9% of the operator's CPU at 150 jobs). The buffer is
  // kept instead, ~17 KiB per open connection. Only called for new
  // connections; with another TLS backend the option is not built in and
  // this is never called.
  static CURLcode OnSslContext(CURL*, void* ssl_ctx, void*) {
    SSL_CTX_clear_mode(static_cast<SSL_CTX*>(ssl_ctx), SSL_MODE_RELEASE_BUFFERS);
    return CURLE_OK;
  }

  static int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto* t = static_cast<Transfer*>(user);
    return t->stop.stop_requested() ? 1 : 0;
  }

  CURL* Acquire() {
    {
      MutexLock lock(pool_mu_);
      if (!idle_.empty()) {
        CURL* h = idle_.back();
        idle_.pop_back();
        return h;
      }
    }
    return curl_easy_init();
  }

  void Release(CURL* h) {
    // curl_easy_reset clears options but keeps the handle's live connections,
    // so the next request on it reuses the TCP/TLS session.
    curl_easy_reset(h);
    MutexLock lock(pool_mu_);
    if (idle_.size() < kMaxIdle) {
      idle_.push_back(h);
      return;
    }
    curl_easy_cleanup(h);
  }

  // What authenticates one request: a bearer token and/or a client
  // certificate. Immutable once made; a transfer holds its snapshot, since
  // curl borrows the certificate bytes (CURL_BLOB_NOCOPY) for its duration.
  struct Credentials {
    std::string token;
    std::string cert_pem;
    std::string key_pem;
  };

  // An exec plugin's credential (token and/or client certificate) is cached
  // until it is about to expire, or a 401 marks it stale (InvalidateExecToken);
  // a plugin that names no expiry is run again only after a 401, as client-go
  // does. A failed refresh keeps the old credential (the apiserver's 401 then
  // says why) and is logged to stderr once per attempt.
  std::shared_ptr<const Credentials> ExecCredentials() {
    MutexLock lock(token_mu_);
    if (!exec_credentials_) {
      // What the plugin gave when the kubeconfig was loaded.
      exec_credentials_ = std::make_shared<const Credentials>(
          Credentials{config_.token, config_.client_cert_pem, config_.client_key_pem});
      exec_expiry_ = config_.exec_expiry;
    }
    const auto now = std::chrono::system_clock::now();
    const bool empty = exec_credentials_->token.empty() && exec_credentials_->cert_pem.empty();
    if (exec_stale_ || empty || (exec_expiry_ && now + std::chrono::seconds(10) >= *exec_expiry_)) {
      auto cred = RunExecPlugin(*config_.exec, config_);
      exec_stale_ = false;
      if (cred.ok() && (!cred->token.empty() || !cred->client_cert_pem.empty())) {
        exec_credentials_ = std::make_shared<const Credentials>(
            Credentials{cred->token, cred->client_cert_pem, cred->client_key_pem});
        exec_expiry_ = cred->expiry;
      } else if (!cred.ok()) {
        std::fprintf(stderr, "kube client: refreshing the exec credential failed: %s\n",
                     cred.status().ToString().c_str());
      }
    }
    return exec_credentials_;
  }
  void InvalidateExecToken() {
    MutexLock lock(token_mu_);
    exec_stale_ = true;
  }

  std::shared_ptr<const Credentials> CurrentCredentials() {
    if (config_.exec) return ExecCredentials();
    return std::make_shared<const Credentials>(
        Credentials{Token(), config_.client_cert_pem, config_.client_key_pem});
  }

  std::string Token() {
    if (config_.token_file.empty()) return config_.token;
    struct stat st {};
    MutexLock lock(token_mu_);
    // Kubelet rotates projected tokens by swapping a symlink; a changed
    // mtime (to the nanosecond) or size means a new token.
    if (::stat(config_.token_file.c_str(), &st) == 0 &&
        (st.st_mtim.tv_sec != token_mtime_.tv_sec || st.st_mtim.tv_nsec != token_mtime_.tv_nsec ||
         st.st_size != token_size_ || cached_token_.empty())) {
      auto tok = ReadFile(config_.token_file);
      if (tok.ok()) {
        std::string v = *tok;
        while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.pop_back();
        cached_token_ = v;
        token_mtime_ = st.st_mtim;
        token_size_ = st.st_size;
      }
    }
    return cached_token_;
  }

  CURLcode Perform(std::string_view method, const std::string& path, const std::string& body,
                   std::string_view content_type, const DataFn* on_data, std::stop_token stop,
                   long timeout_ms, HttpResponse& resp, std::string& retry_after, char* errbuf) {
    CURL* h = Acquire();
    if (!h) return CURLE_OUT_OF_MEMORY;
    std::string url = config_.server + path;
    Transfer t{on_data, &resp, &retry_after, h, -1, stop};
    CurlSlist headers;
    headers.Add("Accept: application/json");
    if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH")
      headers.Add("Content-Type: " + std::string(content_type));
    const std::shared_ptr<const Credentials> creds = CurrentCredentials();
    if (!creds->token.empty()) headers.Add("Authorization: Bearer " + creds->token);

    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.list);
    curl_easy_setopt(h, CURLOPT_USERAGENT, user_agent_.c_str());
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(config_.connect_timeout.count()));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");  // gzip when the server offers it
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &Impl::OnWrite);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &Impl::OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, &Impl::OnProgress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
    // TLS: verification stays on unless the kubeconfig says otherwise.
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, config_.insecure_skip_tls_verify ? 0L : 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, config_.insecure_skip_tls_verify ? 0L : 2L);
    curl_easy_setopt(h, CURLOPT_SSL_CTX_FUNCTION, &Impl::OnSslContext);
    curl_blob ca{}, cert{}, key{};
    if (!config_.ca_pem.empty()) {
      ca = {const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(), CURL_BLOB_NOCOPY};
      curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
    }
    if (!creds->cert_pem.empty()) {
      cert = {const_cast<char*>(creds->cert_pem.data()), creds->cert_pem.size(), CURL_BLOB_NOCOPY};
      key = {const_cast<char*>(creds->key_pem.data()), creds->key_pem.size(), CURL_BLOB_NOCOPY};
      curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
      curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
      curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
      curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
    std::string m(method);
    if (m == "GET") {
      curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, m.c_str());
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    resp.status = status;
    // Certificates and the error buffer are only borrowed for this transfer.
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
    Release(h);
    return rc;
  }

  // Each handle keeps its own connection. The operator has up to
  // workers x create parallelism requests in flight besides its watches
  // (32 at --workers 8; 24 connections were open with 40 jobs): a pool of 16
  // closed the connections of every burst above it and opened new ones, a
  // TLS handshake each. Handles kept idle never exceed the most ever in use
  // at once, so the peak memory is the same.
  static constexpr size_t kMaxIdle = 64;

  // Constant after construction.
  const Config config_;
  TokenBucket limiter_;
  const std::string user_agent_;

  Mutex pool_mu_;
  std::vector<CURL*> idle_ GUARDED_BY(pool_mu_);

  Mutex token_mu_;
  std::string cached_token_ GUARDED_BY(token_mu_);
  timespec token_mtime_ GUARDED_BY(token_mu_){};
  off_t token_size_ GUARDED_BY(token_mu_) = -1;
  std::shared_ptr<const Credentials> exec_credentials_ GUARDED_BY(token_mu_);
  bool exec_stale_ GUARDED_BY(token_mu_) = false;
  std::optional<std::chrono::system_clock::time_point> exec_expiry_ GUARDED_BY(token_mu_);
};

StatusOr<std::unique_ptr<Client>> Client::Create(Config config) {
  std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (config.server.empty()) return InvalidArgument("kube client: config has no server");
  return std::unique_ptr<Client>(new Client(std::make_unique<Impl>(std::move(config))));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const Config& Client::config() const {
  return impl_->config();
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
  try {
    return ParseServedJson(resp->body, shape, drop_managed_fields, fields);
  } catch (const json::exception& e) {
    return Internal(std::string(what) + ": response is not JSON: " + e.what());
  }
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
  return impl_->Send(method, path, body, content_type, nullptr, {},
                     static_cast<long>(impl_->config().request_timeout.count()));
}

Status Client::Stream(const std::string& path, const std::function<bool(std::string_view)>& on_data,
                      std::stop_token stop, std::chrono::milliseconds timeout) {
  Impl::DataFn fn = on_data;
  auto resp = impl_->Send("GET", path, "", "", &fn, stop, static_cast<long>(timeout.count()));
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
  Impl::DataFn on_data = [&](std::string_view chunk) -> bool {
    pending.append(chunk);
    size_t start = 0;
    for (;;) {
      size_t nl = pending.find('\n', start);
      if (nl == std::string::npos) break;
      std::string_view line(pending.data() + start, nl - start);
      start = nl + 1;
      if (line.empty()) continue;
      try {
        json ev = ParseServedJson(line, ServedShape::kWatchEvent, opts.drop_managed_fields,
                                  opts.fields.get());
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
  auto resp = impl_->Send("GET", path, "", "", &on_data, stop, timeout_ms);
  if (!result.ok()) return result;
  if (resp.ok() && stop.stop_requested()) return Status::Ok();
  return CheckOk(resp, what);
}

namespace {

// Builds the DOM of a served document as json::parse does, minus the served
// objects' metadata.managedFields (if dropped) and the fields a FieldFilter
// does not keep: a SAX handler, so a skipped value is never
// built and a kept key costs no more than in json::parse (a parse callback
// copies every key into a json string and calls through std::function).
class ServedDomBuilder {
 public:
  ServedDomBuilder(ServedShape shape, bool drop_managed_fields, const FieldFilter* fields)
      : watch_event_(shape == ServedShape::kWatchEvent),
        drop_managed_fields_(drop_managed_fields),
        fields_(fields) {
    // The keys (or array levels, "") from the document down to the object
    // whose metadata.managedFields is dropped, "metadata" included.
    switch (shape) {
      case ServedShape::kObject:
        path_ = {"metadata"};
        break;
      case ServedShape::kList:
        path_ = {"items", "", "metadata"};
        break;
      case ServedShape::kWatchEvent:
        path_ = {"object", "metadata"};
        break;
    }
  }

  json Take() { return std::move(root_); }

  bool null() { return Value(nullptr); }
  bool boolean(bool v) { return Value(v); }
  bool number_integer(json::number_integer_t v) { return Value(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Value(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return Value(v); }
  bool string(json::string_t& v) {
    // A watch event's type comes before its object (the apiserver writes
    // them in that order): an ERROR event's object is a Status, not one of
    // the watched objects, and is built whole (its code says 410 Gone).
    if (watch_event_ && stack_.size() == 1 && type_key_ && v == "ERROR") error_event_ = true;
    return Value(std::move(v));
  }
  bool binary(json::binary_t& v) { return Value(json::binary(std::move(v))); }

  bool start_object(std::size_t) { return Open(json::value_t::object); }
  bool start_array(std::size_t) { return Open(json::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(json::string_t& k) {
    if (skip_depth_ > 0) return true;
    Frame& f = stack_.back();
    if (f.matched == Steps() && drop_managed_fields_ && k == "managedFields") {
      skip_next_ = true;
      return true;
    }
    if (stack_.size() == 1) type_key_ = k == "type";
    next_keep_ = nullptr;
    if (f.keep != nullptr) {
      auto kept = std::find_if(f.keep->begin(), f.keep->end(),
                               [&](const KeptField& field) { return field.name == k; });
      if (kept == f.keep->end()) {
        skip_next_ = true;
        return true;
      }
      if (!kept->fields.empty()) next_keep_ = &kept->fields;
    }
    f.key_matches = KeyStep(f.matched, k);
    slot_ = &(*f.node)[std::move(k)];
    return true;
  }

  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& ex) {
    throw ex;
  }

 private:
  struct Frame {
    json* node;
    // How many steps of path_ lead here; -1 when off the path.
    int matched;
    // The fields of this object (of this array's elements) kept; null: all.
    const FieldFilter* keep = nullptr;
    bool key_matches = false;  // an object's last key is the next step
  };

  int Steps() const { return static_cast<int>(path_.size()); }
  // Whether step `i` of path_ is key `k` (an object's member), or an array's
  // element ("" in path_).
  bool KeyStep(int i, std::string_view k) const {
    return i >= 0 && i < Steps() && !path_[static_cast<size_t>(i)].empty() &&
           path_[static_cast<size_t>(i)] == k;
  }
  bool ElementStep(int i) const {
    return i >= 0 && i < Steps() && path_[static_cast<size_t>(i)].empty();
  }

  // Where the next value goes: the document, an array's end or the slot of
  // the object's last key. Returns it with the path steps matched there.
  json* Place(json&& v, int* matched) {
    if (stack_.empty()) {
      root_ = std::move(v);
      *matched = 0;
      return &root_;
    }
    Frame& f = stack_.back();
    const bool array = f.node->is_array();
    const bool on_path = array ? ElementStep(f.matched) : f.key_matches;
    *matched = on_path ? f.matched + 1 : -1;
    if (array) {
      f.node->push_back(std::move(v));
      return &f.node->back();
    }
    *slot_ = std::move(v);
    return slot_;
  }

  template <class T>
  bool Value(T&& v) {
    if (skip_depth_ > 0) return true;
    if (skip_next_) {
      skip_next_ = false;
      return true;
    }
    int matched;
    Place(json(std::forward<T>(v)), &matched);
    return true;
  }

  bool Open(json::value_t type) {
    if (skip_depth_ > 0 || skip_next_) {
      skip_next_ = false;
      ++skip_depth_;
      return true;
    }
    // What of the new container is kept: the served object (one step above
    // its metadata on the path) is filtered by fields_; below it, a member
    // by its field's filter and an array's elements as the array.
    const FieldFilter* keep = nullptr;
    if (!stack_.empty()) keep = stack_.back().node->is_array() ? stack_.back().keep : next_keep_;
    int matched;
    json* node = Place(json(type), &matched);
    if (matched == Steps() - 1) keep = error_event_ ? nullptr : fields_;
    stack_.push_back(Frame{node, matched, keep});
    return true;
  }

  bool Close() {
    if (skip_depth_ > 0) {
      --skip_depth_;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  const bool watch_event_;
  const bool drop_managed_fields_;
  const FieldFilter* const fields_;
  bool type_key_ = false;     // the document's last key was "type"
  bool error_event_ = false;  // a watch event of type ERROR: its object is kept whole
  std::vector<std::string_view> path_;
  json root_;
  std::vector<Frame> stack_;
  json* slot_ = nullptr;
  const FieldFilter* next_keep_ = nullptr;  // the filter of the last key's value
  bool skip_next_ = false;  // the next value is not kept (managedFields, filtered out)
  int skip_depth_ = 0;      // containers open inside a dropped value
};

}  // namespace

json ParseServedJson(std::string_view text, ServedShape shape, bool drop_managed_fields,
                     const FieldFilter* fields) {
  if (!drop_managed_fields && fields == nullptr) return json::parse(text);
  ServedDomBuilder builder(shape, drop_managed_fields, fields);
  json::sax_parse(text, &builder);
  return builder.Take();
}

}  // namespace kubetrain::kube
