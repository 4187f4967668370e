#include "common/storage/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "common/mutex.h"
#include "common/storage/xml.h"

namespace kubetrain::storage {

namespace {

constexpr char kShaMeta[] = "x-amz-meta-kubetrain-sha256";
const std::string kEmptySha = Sha256Hex("");

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

std::string Unquote(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

bool IsHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
}

std::once_flag g_curl_init;

// The checksum recorded for a multipart object: SHA-256 over its parts' SHA-256s (hex,
// concatenated), then "-<parts>-<part size>", so a reader can recompute it.
std::string CompositeSha(const std::vector<std::string>& part_hashes, size_t part_size) {
  std::string all;
  for (const auto& h : part_hashes) all += h;
  return Sha256Hex(all) + "-" + std::to_string(part_hashes.size()) + "-" +
         std::to_string(part_size);
}

// `data`'s checksum in the form of `recorded` (plain SHA-256, or composite).
std::string ChecksumLike(std::string_view data, const std::string& recorded) {
  const size_t dash = recorded.find('-');
  if (dash == std::string::npos) return Sha256Hex(data);
  const size_t dash2 = recorded.find('-', dash + 1);
  size_t part = 0;
  try {
    part = std::stoull(recorded.substr(dash2 + 1));
  } catch (const std::exception&) {
  }
  if (dash2 == std::string::npos || part == 0) return "unreadable";
  std::vector<std::string> hashes;
  for (size_t off = 0; off < data.size(); off += part) {
    hashes.push_back(Sha256Hex(data.substr(off, part)));
  }
  return CompositeSha(hashes, part);
}

}  // namespace

std::string S3Name(std::string_view bucket, std::string_view key) {
  return "s3://" + std::string(bucket) + "/" + std::string(key);
}

StatusOr<S3Config> S3ConfigFromEnv(const std::function<const char*(const char*)>& getenv) {
  const auto get = [&](const char* name) {
    const char* v = getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  S3Config c;
  c.credentials.access_key_id = get("AWS_ACCESS_KEY_ID");
  c.credentials.secret_access_key = get("AWS_SECRET_ACCESS_KEY");
  c.credentials.session_token = get("AWS_SESSION_TOKEN");
  if (c.credentials.access_key_id.empty() || c.credentials.secret_access_key.empty()) {
    if (!get("AWS_WEB_IDENTITY_TOKEN_FILE").empty()) {
      return InvalidArgument(
          "S3: AWS_WEB_IDENTITY_TOKEN_FILE is set but web-identity credentials are not "
          "supported; give AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (e.g. from a Secret)");
    }
    return InvalidArgument(
        "S3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (e.g. envFrom a "
        "Secret)");
  }
  c.region = get("AWS_REGION");
  if (c.region.empty()) c.region = get("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint = get("AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = get("AWS_ENDPOINT_URL");
  c.path_style = !c.endpoint.empty();
  const std::string style = get("KUBETRAIN_S3_ADDRESSING_STYLE");
  if (style == "path") {
    c.path_style = true;
  } else if (style == "virtual") {
    c.path_style = false;
  } else if (!style.empty()) {
    return InvalidArgument("KUBETRAIN_S3_ADDRESSING_STYLE must be path or virtual, not \"" + style +
                           "\"");
  }
  if (const std::string a = get("AWS_MAX_ATTEMPTS"); !a.empty()) {
    try {
      size_t used = 0;
      c.max_attempts = std::stoi(a, &used);
      if (used != a.size() || c.max_attempts < 1) throw std::invalid_argument(a);
    } catch (const std::exception&) {
      return InvalidArgument("AWS_MAX_ATTEMPTS must be a positive integer, not \"" + a + "\"");
    }
  }
  c.ca_bundle = get("AWS_CA_BUNDLE");
  return c;
}

// ---- HTTP plumbing -------------------------------------------------------------------

struct S3Client::Request {
  std::string method;
  std::string bucket;  // empty: service level (ListBuckets)
  std::string key;     // empty: bucket level
  std::vector<std::pair<std::string, std::string>> query;
  HeaderList headers;  // besides host, x-amz-*, authorization
  std::string_view body;
  bool has_body = false;
  // Streams a 2xx response body here instead of into Response::body.
  std::function<Status(std::string_view)> sink;
  // The bytes a GET asks for (its range; 0: none or unknown), for the request's deadline.
  int64_t expect_bytes = 0;
};

struct S3Client::Response {
  long status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class S3Client::HandlePool {
 public:
  ~HandlePool() {
    for (CURL* h : free_) curl_easy_cleanup(h);
  }
  CURL* Acquire() {
    {
      MutexLock lock(mu_);
      if (!free_.empty()) {
        CURL* h = free_.back();
        free_.pop_back();
        curl_easy_reset(h);
        return h;
      }
    }
    return curl_easy_init();
  }
  void Release(CURL* h) {
    MutexLock lock(mu_);
    free_.push_back(h);
  }

 private:
  Mutex mu_;
  std::vector<CURL*> free_ GUARDED_BY(mu_);
};

S3Client::S3Client(S3Config config)
    : config_(std::move(config)), pool_(std::make_unique<HandlePool>()) {
  std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::string ep = config_.endpoint.empty() ? "https://s3." + config_.region + ".amazonaws.com"
                                            : config_.endpoint;
  const size_t sep = ep.find("://");
  scheme_ = sep == std::string::npos ? "https" : ep.substr(0, sep);
  host_ = sep == std::string::npos ? ep : ep.substr(sep + 3);
  if (const size_t slash = host_.find('/'); slash != std::string::npos) host_.resize(slash);
  // The Host header carries no default port (what we sign is what we send).
  const std::string default_port = scheme_ == "http" ? ":80" : ":443";
  if (host_.size() > default_port.size() &&
      host_.compare(host_.size() - default_port.size(), default_port.size(), default_port) == 0) {
    host_.resize(host_.size() - default_port.size());
  }
}

S3Client::~S3Client() = default;

namespace {

struct Transfer {
  CURL* handle = nullptr;
  S3Client::Response* response = nullptr;
  const std::function<Status(std::string_view)>* sink = nullptr;
  Status sink_status;
  Status limit;             // a response bound passed (ResourceExhausted)
  size_t header_bytes = 0;  // all responses' header lines so far (redirects, 100 Continue)
};

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, size * n);
  t->header_bytes += line.size();
  if (t->header_bytes > S3Client::kMaxHeaderBytes) {
    t->limit = Status(
        StatusCode::kResourceExhausted,
        "response headers longer than " + std::to_string(S3Client::kMaxHeaderBytes) + " bytes");
    return 0;  // aborts the transfer
  }
  if (line.rfind("HTTP/", 0) == 0) {
    t->response->headers.clear();  // a new response (after 100 Continue or a redirect)
  } else if (const size_t colon = line.find(':'); colon != std::string_view::npos) {
    t->response->headers[Lower(line.substr(0, colon))] = Trim(line.substr(colon + 1));
  }
  return size * n;
}

size_t OnWrite(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  long status = 0;
  curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &status);
  if (t->sink != nullptr && *t->sink && status >= 200 && status < 300) {
    Status s = (*t->sink)(std::string_view(data, size * n));
    if (!s.ok()) {
      t->sink_status = s;
      return 0;  // aborts the transfer
    }
  } else {
    if (t->response->body.size() + size * n > S3Client::kMaxBufferedBody) {
      t->limit = Status(StatusCode::kResourceExhausted,
                        "response body longer than " + std::to_string(S3Client::kMaxBufferedBody) +
                            " bytes (HTTP " + std::to_string(status) + ")");
      return 0;
    }
    t->response->body.append(data, size * n);
  }
  return size * n;
}

}  // namespace

StatusOr<S3Client::Response> S3Client::SendOnce(const Request& r) {
  // Address: path-style https://host/bucket/key, virtual-hosted https://bucket.host/key.
  std::string host = host_, path;
  if (r.bucket.empty()) {
    path = "/";
  } else if (config_.path_style) {
    path = "/" + UriEncode(r.bucket, false) + (r.key.empty() ? "" : "/" + UriEncode(r.key, true));
  } else {
    host = r.bucket + "." + host_;
    path = "/" + UriEncode(r.key, true);
  }
  const std::string query = CanonicalQuery(r.query);
  const std::string url = scheme_ + "://" + host + path + (query.empty() ? "" : "?" + query);

  SigningRequest sr;
  sr.method = r.method;
  sr.canonical_uri = path;
  sr.query = r.query;
  sr.headers = r.headers;
  // A body's SHA-256 given by the caller as x-amz-content-sha256 is used as it is.
  const auto given = std::find_if(sr.headers.begin(), sr.headers.end(),
                                  [](const auto& h) { return h.first == "x-amz-content-sha256"; });
  if (given != sr.headers.end()) {
    sr.payload_hash = given->second;
  } else {
    sr.payload_hash = r.has_body ? Sha256Hex(r.body) : kEmptySha;
    sr.headers.emplace_back("x-amz-content-sha256", sr.payload_hash);
  }
  sr.headers.emplace_back("host", host);
  const Signature sig =
      SignV4(sr, config_.credentials, config_.region, "s3", std::chrono::system_clock::now());

  curl_slist* list = nullptr;
  const auto add = [&](const std::string& k, const std::string& v) {
    list = curl_slist_append(list, (k + ": " + v).c_str());
  };
  for (const auto& [k, v] : sr.headers) add(k, v);
  for (const auto& [k, v] : sig.added_headers) add(k, v);
  add("Authorization", sig.authorization);
  list = curl_slist_append(list, "Expect:");  // no 100-continue round trip
  if (!r.has_body) list = curl_slist_append(list, "Content-Type:");

  Response resp;
  CURL* h = pool_->Acquire();
  Transfer t{h, &resp, &r.sink, Status::Ok(), Status::Ok()};
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(config_.connect_timeout.count()));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(config_.stall_timeout.count()));
  {
    const int64_t bytes =
        std::max<int64_t>(r.expect_bytes, r.has_body ? static_cast<int64_t>(r.body.size()) : 0);
    const int64_t rate = std::max<int64_t>(1, config_.min_transfer_rate);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(config_.request_timeout.count() + bytes / rate * 1000 +
                                       (bytes % rate) * 1000 / rate));
  }
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &OnWrite);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024);
  if (!config_.ca_bundle.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, config_.ca_bundle.c_str());
  if (r.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (r.method == "GET") {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  if (r.has_body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, r.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  }
  const CURLcode rc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(list);
  pool_->Release(h);
  if (!t.limit.ok()) {
    return Status(t.limit.code(), scheme_ + "://" + host + ": " + t.limit.message());
  }
  if (!t.sink_status.ok()) return t.sink_status;
  if (rc != CURLE_OK) {
    return Unavailable(scheme_ + "://" + host + ": " +
                       (errbuf[0] != '\0' ? std::string(errbuf) : curl_easy_strerror(rc)));
  }
  return resp;
}

void S3Client::Backoff(int attempt) const {
  // Full jitter: uniform in [0, min(cap, base * 2^attempt)].
  thread_local std::mt19937_64 rng(std::random_device{}());
  const int64_t ceiling = std::min<int64_t>(config_.retry_cap.count(),
                                            config_.retry_base.count() << std::min(attempt, 20));
  std::uniform_int_distribution<int64_t> d(0, ceiling);
  std::this_thread::sleep_for(std::chrono::milliseconds(d(rng)));
}

namespace {

bool RetryableStatus(const S3Client::Response& r) {
  if (r.status == 500 || r.status == 502 || r.status == 503 || r.status == 504) return true;
  return r.status == 400 && XmlText(r.body, "Code") == "RequestTimeout";
}

// The error for a non-2xx response to a request on `what`.
Status ResponseError(const S3Client::Response& r, const std::string& what) {
  std::string code = XmlText(r.body, "Code"), message = XmlText(r.body, "Message");
  if (code.empty()) {
    if (r.status == 404) code = "NotFound (no such bucket or key)";
    if (r.status == 403) code = "Forbidden (wrong credentials or no access)";
    if (r.status == 412) code = "PreconditionFailed";
  }
  std::string text = what + ": HTTP " + std::to_string(r.status);
  if (!code.empty()) text += " " + code;
  if (!message.empty()) text += ": " + message;
  switch (r.status) {
    case 400:
    case 405:
    case 411:
    case 416:
      return InvalidArgument(text);
    case 401:
    case 403:
      return Status(StatusCode::kPermissionDenied, text);
    case 404:
      return NotFound(text);
    case 409:
      return Status(StatusCode::kConflict, text);
    case 412:
      return Status(StatusCode::kAlreadyExists, text);
    default:
      if (r.status >= 500) return Unavailable(text);
      return Internal(text);
  }
}

}  // namespace

StatusOr<S3Client::Response> S3Client::Send(const Request& r) {
  const std::string what =
      r.bucket.empty() ? "s3://" : (r.key.empty() ? "s3://" + r.bucket : S3Name(r.bucket, r.key));
  for (int attempt = 1;; ++attempt) {
    auto resp = SendOnce(r);
    const bool last = attempt >= config_.max_attempts;
    if (!resp.ok()) {
      if (resp.status().code() == StatusCode::kResourceExhausted) {
        return Status(resp.status().code(), what + ": " + resp.status().message());
      }
      if (resp.status().code() != StatusCode::kUnavailable) return resp.status();
      if (last) {
        return Unavailable(what + ": " + resp.status().message() + " (after " +
                           std::to_string(attempt) + " attempts)");
      }
    } else if (resp->status >= 200 && resp->status < 300) {
      // CompleteMultipartUpload can fail inside a 200 response.
      if (resp->body.find("<Error>") != std::string::npos) {
        resp->status = XmlText(resp->body, "Code") == "SlowDown" ? 503 : 500;
        if (last) return ResponseError(*resp, what);
      } else {
        return resp;
      }
    } else if (!RetryableStatus(*resp) || last) {
      Status s = ResponseError(*resp, what);
      if (last && RetryableStatus(*resp)) {
        return Unavailable(s.message() + " (after " + std::to_string(attempt) + " attempts)");
      }
      return s;
    }
    Backoff(attempt);
  }
}

// ---- operations ----------------------------------------------------------------------

Status S3Client::CreateBucket(std::string_view bucket) {
  Request r{"PUT",  std::string(bucket), "", {}, {{"Content-Type", "application/xml"}}, "", true,
            nullptr};
  auto resp = Send(r);
  if (!resp.ok() && resp.status().message().find("BucketAlreadyOwnedByYou") != std::string::npos) {
    return Status::Ok();
  }
  return resp.status();
}

StatusOr<ObjectInfo> S3Client::Head(std::string_view bucket, std::string_view key) {
  Request r{"HEAD", std::string(bucket), std::string(key), {}, {}, {}, false, nullptr};
  auto resp = Send(r);
  if (!resp.ok()) return resp.status();
  ObjectInfo info;
  info.key = key;
  info.etag = Unquote(resp->Header("etag"));
  try {
    info.size = std::stoll(resp->Header("content-length"));
  } catch (const std::exception&) {
    return Internal(S3Name(bucket, key) + ": HEAD response without a Content-Length");
  }
  return info;
}

Status S3Client::GetRange(std::string_view bucket, std::string_view key, int64_t offset,
                          int64_t length, const std::function<Status(std::string_view)>& sink,
                          std::string_view if_match) {
  const std::string name = S3Name(bucket, key);
  if (length == 0) return Status::Ok();
  int64_t received = 0;
  for (int attempt = 1;; ++attempt) {
    Request r{"GET", std::string(bucket), std::string(key), {}, {}, {}, false, nullptr};
    const int64_t from = offset + received;
    r.headers.emplace_back("Range", "bytes=" + std::to_string(from) + "-" +
                                        (length < 0 ? "" : std::to_string(offset + length - 1)));
    if (!if_match.empty()) r.headers.emplace_back("If-Match", "\"" + std::string(if_match) + "\"");
    int64_t this_attempt = 0;
    if (length > 0) r.expect_bytes = length - received;
    r.sink = [&](std::string_view chunk) {
      if (length >= 0 && received + static_cast<int64_t>(chunk.size()) > length) {
        return Status(
            StatusCode::kResourceExhausted,
            "the server sent more than the " + std::to_string(length) + " bytes asked for");
      }
      this_attempt += static_cast<int64_t>(chunk.size());
      received += static_cast<int64_t>(chunk.size());
      return sink(chunk);
    };
    auto resp = SendOnce(r);
    const bool last = attempt >= config_.max_attempts;
    if (resp.ok() && (resp->status == 200 || resp->status == 206)) {
      if (resp->status == 200 && from != 0) {
        return Internal(name + ": the server ignored the Range header");
      }
      int64_t expected = -1;
      try {
        expected = std::stoll(resp->Header("content-length"));
      } catch (const std::exception&) {
      }
      if (expected >= 0 && this_attempt != expected) {
        if (last) {
          return Unavailable(name + ": short read: " + std::to_string(this_attempt) + " of " +
                             std::to_string(expected) + " bytes");
        }
      } else if (length >= 0 && received != length) {
        return DataLoss(
            name + ": the object is shorter than requested: " + std::to_string(offset + received) +
            " of " + std::to_string(offset + length) + " bytes (truncated object?)");
      } else {
        return Status::Ok();
      }
    } else if (resp.ok() && resp->status == 416 && from > offset) {
      return Status::Ok();  // resumed exactly at the end
    } else if (resp.ok() && resp->status == 412 && !if_match.empty()) {
      return Status(StatusCode::kConflict,
                    name + ": the object changed while being read (it no longer has ETag " +
                        std::string(if_match) + ")");
    } else if (resp.ok() && (!RetryableStatus(*resp) || last)) {
      return ResponseError(*resp, name);
    } else if (!resp.ok()) {
      if (resp.status().code() == StatusCode::kResourceExhausted) {
        return Status(resp.status().code(), name + ": " + resp.status().message());
      }
      if (resp.status().code() != StatusCode::kUnavailable) return resp.status();
      if (last) {
        return Unavailable(name + ": " + resp.status().message() + " (after " +
                           std::to_string(attempt) + " attempts)");
      }
    }
    Backoff(attempt);
  }
}

StatusOr<std::string> S3Client::GetOnce(std::string_view bucket, std::string_view key) {
  const std::string name = S3Name(bucket, key);
  // HEAD first: the length, ETag and checksum to expect, and a clear NotFound.
  Request hr{"HEAD", std::string(bucket), std::string(key), {}, {}, {}, false, nullptr};
  auto head = Send(hr);
  if (!head.ok()) return head.status();
  int64_t size = 0;
  try {
    size = std::stoll(head->Header("content-length"));
  } catch (const std::exception&) {
    return Internal(name + ": HEAD response without a Content-Length");
  }
  const std::string etag = Unquote(head->Header("etag"));
  std::string data;
  // Reserved up to 64 MiB: the rest grows as bytes arrive (a HEAD's length is the server's word).
  data.reserve(static_cast<size_t>(std::min<int64_t>(size, int64_t{64} << 20)));
  KT_RETURN_IF_ERROR(GetRange(
      bucket, key, 0, size,
      [&](std::string_view chunk) {
        data.append(chunk);
        return Status::Ok();
      },
      etag));
  if (const std::string want = head->Header(kShaMeta); !want.empty()) {
    if (ChecksumLike(data, want) != want) {
      return DataLoss(name + ": SHA-256 of the " + std::to_string(data.size()) +
                      " bytes read does not match the one recorded at upload (corrupt or "
                      "truncated object)");
    }
  } else if (etag.size() == 32 && IsHex(etag)) {
    if (Hex(Md5(data)) != Lower(etag)) {
      return DataLoss(name + ": MD5 of the data read does not match its ETag (corrupt object)");
    }
  }
  return data;
}

StatusOr<std::string> S3Client::Get(std::string_view bucket, std::string_view key) {
  // An object replaced between the HEAD and the GET (Conflict) is read again, as a new
  // object, up to max_attempts times; bytes that do not match the recorded checksum are read
  // once more (a copy damaged in transit is not a corrupt object) and are DataLoss if they
  // still do not.
  int mismatches = 0;
  for (int attempt = 1;; ++attempt) {
    auto got = GetOnce(bucket, key);
    if (got.ok()) return got;
    const StatusCode code = got.status().code();
    const bool last = attempt >= std::max(2, config_.max_attempts);
    if (code == StatusCode::kDataLoss && ++mismatches < 2 && !last) continue;
    if (code == StatusCode::kConflict && !last) continue;
    if (code == StatusCode::kConflict) {
      return Unavailable(got.status().message() + " (after " + std::to_string(attempt) +
                         " attempts)");
    }
    return got.status();
  }
}

Status S3Client::Put(std::string_view bucket, std::string_view key, std::string_view body,
                     const PutOptions& options) {
  Request r{"PUT", std::string(bucket), std::string(key), {}, {}, body, true, nullptr};
  r.headers.emplace_back("Content-Type", options.content_type);
  r.headers.emplace_back("Content-MD5", Base64(Md5(body)));
  r.headers.emplace_back(kShaMeta, Sha256Hex(body));
  if (options.if_none_match) r.headers.emplace_back("If-None-Match", "*");
  return Send(r).status();
}

Status S3Client::Upload(std::string_view bucket, std::string_view key, std::string_view body,
                        const PutOptions& options) {
  if (body.size() <= config_.part_size) return Put(bucket, key, body, options);
  return Multipart(bucket, key, body, options);
}

// Flow: part hashes (parallel) -> CreateMultipartUpload (with the object's checksum) ->
// parts uploaded by up to upload_parallelism threads (each part's SHA-256 checked by the
// server through the signature) -> CompleteMultipartUpload with the part list. Any failure aborts
// the upload, so no parts are left behind (best effort: an abort that fails is not reported over
// the cause).
Status S3Client::Multipart(std::string_view bucket, std::string_view key, std::string_view body,
                           const PutOptions& options) {
  const size_t part = config_.part_size;
  const size_t parts = (body.size() + part - 1) / part;
  const int threads = static_cast<int>(
      std::min<size_t>(parts, static_cast<size_t>(std::max(1, config_.upload_parallelism))));
  const auto parallel = [&](const std::function<void(size_t)>& fn) {
    std::atomic<size_t> next{0};
    const auto run = [&] {
      for (size_t i = next++; i < parts; i = next++) fn(i);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(run);
    run();
    for (auto& t : pool) t.join();
  };
  // Every part's SHA-256 first, in parallel: each part is signed with its hash (the server
  // checks the bytes against it), and the object's checksum recorded at initiation is
  // derived from them. One pass over the data in all.
  std::vector<std::string> hashes(parts);
  parallel([&](size_t i) { hashes[i] = Sha256Hex(body.substr(i * part, part)); });

  KT_ASSIGN_OR_RETURN(const std::string upload_id,
                      CreateMultipart(bucket, key, options, CompositeSha(hashes, part)));
  std::vector<std::string> etags(parts);
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status first_error;  // guarded by mu (a local: not annotatable)
  parallel([&](size_t i) {
    if (failed) return;
    auto etag = UploadPart(bucket, key, upload_id, static_cast<int>(i + 1),
                           body.substr(i * part, part), hashes[i]);
    if (etag.ok()) {
      etags[i] = std::move(*etag);
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.ok()) first_error = etag.status();
    failed = true;
  });
  if (failed) {
    AbortMultipart(bucket, key, upload_id);
    return first_error;
  }
  Status s = CompleteMultipart(bucket, key, upload_id, etags, options);
  if (!s.ok()) AbortMultipart(bucket, key, upload_id);
  return s;
}

StatusOr<std::string> S3Client::CreateMultipart(std::string_view bucket, std::string_view key,
                                                const PutOptions& options,
                                                std::string_view checksum) {
  Request init{"POST", std::string(bucket), std::string(key), {{"uploads", ""}}, {}, "", true,
               nullptr};
  init.headers.emplace_back("Content-Type", options.content_type);
  if (!checksum.empty()) init.headers.emplace_back(kShaMeta, std::string(checksum));
  auto created = Send(init);
  if (!created.ok()) return created.status();
  std::string upload_id = XmlText(created->body, "UploadId");
  if (upload_id.empty()) {
    return Internal(S3Name(bucket, key) + ": CreateMultipartUpload returned no UploadId");
  }
  return upload_id;
}

StatusOr<std::string> S3Client::UploadPart(std::string_view bucket, std::string_view key,
                                           std::string_view upload_id, int part_number,
                                           std::string_view body, std::string_view sha256_hex) {
  Request r{
      "PUT",
      std::string(bucket),
      std::string(key),
      {{"partNumber", std::to_string(part_number)}, {"uploadId", std::string(upload_id)}},
      {{"Content-Type", "application/octet-stream"},
       {"x-amz-content-sha256", sha256_hex.empty() ? Sha256Hex(body) : std::string(sha256_hex)}},
      body,
      true,
      nullptr};
  auto resp = Send(r);
  if (!resp.ok()) return resp.status();
  std::string etag = Unquote(resp->Header("etag"));
  if (etag.empty()) {
    return Internal(S3Name(bucket, key) + ": part " + std::to_string(part_number) + " has no ETag");
  }
  return etag;
}

Status S3Client::CompleteMultipart(std::string_view bucket, std::string_view key,
                                   std::string_view upload_id,
                                   const std::vector<std::string>& etags,
                                   const PutOptions& options) {
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i) {
    xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>\"" + etags[i] +
           "\"</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  Request done{"POST",
               std::string(bucket),
               std::string(key),
               {{"uploadId", std::string(upload_id)}},
               {{"Content-Type", "application/xml"}},
               xml,
               true,
               nullptr};
  if (options.if_none_match) done.headers.emplace_back("If-None-Match", "*");
  return Send(done).status();
}

void S3Client::AbortMultipart(std::string_view bucket, std::string_view key,
                              std::string_view upload_id) {
  Request r{"DELETE",
            std::string(bucket),
            std::string(key),
            {{"uploadId", std::string(upload_id)}},
            {},
            {},
            false,
            nullptr};
  (void)Send(r);
}

StatusOr<ListPage> S3Client::List(std::string_view bucket, std::string_view prefix,
                                  std::string_view continuation_token, int max_keys) {
  Request r{"GET", std::string(bucket), "", {}, {}, {}, false, nullptr};
  r.query = {
      {"list-type", "2"}, {"prefix", std::string(prefix)}, {"max-keys", std::to_string(max_keys)}};
  if (!continuation_token.empty()) {
    r.query.emplace_back("continuation-token", std::string(continuation_token));
  }
  auto resp = Send(r);
  if (!resp.ok()) return resp.status();
  ListPage page;
  for (std::string_view c : XmlElements(resp->body, "Contents")) {
    ObjectInfo o;
    o.key = XmlText(c, "Key");
    o.etag = Unquote(XmlText(c, "ETag"));
    try {
      o.size = std::stoll(XmlText(c, "Size"));
    } catch (const std::exception&) {
      return Internal("s3://" + std::string(bucket) + ": bad <Size> in a listing");
    }
    page.objects.push_back(std::move(o));
  }
  if (XmlText(resp->body, "IsTruncated") == "true") {
    page.next_token = XmlText(resp->body, "NextContinuationToken");
    if (page.next_token.empty()) {
      return Internal("s3://" + std::string(bucket) +
                      ": truncated listing without a NextContinuationToken");
    }
  }
  return page;
}

StatusOr<std::vector<ObjectInfo>> S3Client::ListAll(std::string_view bucket,
                                                    std::string_view prefix) {
  std::vector<ObjectInfo> all;
  std::string token;
  do {
    auto page = List(bucket, prefix, token);
    if (!page.ok()) return page.status();
    for (auto& o : page->objects) all.push_back(std::move(o));
    token = page->next_token;
  } while (!token.empty());
  return all;
}

Status S3Client::Delete(std::string_view bucket, std::string_view key) {
  Request r{"DELETE", std::string(bucket), std::string(key), {}, {}, {}, false, nullptr};
  auto resp = Send(r);
  if (!resp.ok() && resp.status().code() == StatusCode::kNotFound &&
      resp.status().message().find("NoSuchKey") != std::string::npos) {
    return Status::Ok();
  }
  return resp.status();
}

}  // namespace kubetrain::storage
