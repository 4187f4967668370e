#include "operator/kube/transport.h"

#include <curl/curl.h>
#include <openssl/ssl.h>
#include <strings.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
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

std::once_flag g_curl_init;

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

class CurlTransport final : public Transport {
 public:
  explicit CurlTransport(Config cfg)
      : config_(std::move(cfg)),
        limiter_(config_.qps, config_.burst),
        user_agent_(std::string("kubetrain/") + kubetrain::kVersion) {}

  ~CurlTransport() override {
    for (CURL* h : idle_) curl_easy_cleanup(h);
  }

  const Config& config() const override { return config_; }

  StatusOr<HttpResponse> Send(std::string_view method, const std::string& path,
                              const std::string& body, std::string_view content_type,
                              const DataFn* on_data, std::stop_token stop,
                              long timeout_ms) override {
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
  // says why) and is reported to Config::on_credential_error once per attempt.
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
      } else if (!cred.ok() && config_.on_credential_error) {
        config_.on_credential_error(cred.status());
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
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &CurlTransport::OnWrite);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &CurlTransport::OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, &CurlTransport::OnProgress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
    // TLS: verification stays on unless the kubeconfig says otherwise.
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, config_.insecure_skip_tls_verify ? 0L : 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, config_.insecure_skip_tls_verify ? 0L : 2L);
    curl_easy_setopt(h, CURLOPT_SSL_CTX_FUNCTION, &CurlTransport::OnSslContext);
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

}  // namespace

std::unique_ptr<Transport> NewCurlTransport(Config config) {
  std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  return std::make_unique<CurlTransport>(std::move(config));
}

}  // namespace kubetrain::kube
