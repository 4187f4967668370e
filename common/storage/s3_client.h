// A small S3 client: libcurl for HTTP(S), OpenSSL for SigV4 and checksums; no AWS SDK.
//
// Operations: GetObject (whole, or a byte range streamed to a callback), PutObject
// (optionally conditional: If-None-Match: *), multipart upload with parallel parts (aborted
// on failure), ListObjectsV2 with pagination, HeadObject, DeleteObject, CreateBucket.
// Path-style or virtual-hosted addressing; any endpoint (AWS, MinIO, versitygw, ...).
//
// Retries: transport errors (connect, reset, timeout, short body), HTTP 500/502/503/504
// (503 SlowDown included) and 400 RequestTimeout are retried with capped exponential
// backoff and full jitter, up to max_attempts in all. A streamed GET resumes at the byte it
// stopped at.
// Checksums: every body is sent with its SHA-256 in x-amz-content-sha256 (the server checks
// it against the signature) and, for single PUTs, Content-MD5. Uploads record the object's
// checksum in the metadata x-amz-meta-kubetrain-sha256 (its SHA-256; for a multipart
// upload the SHA-256 of its parts' SHA-256s, "-<parts>-<part size>"); a whole-object Get
// checks it (or, for objects written by other tools, a plain-MD5 ETag) and the length, so
// a truncated or altered object is an error, not data.
// Reads are pinned: a whole-object Get sends the ETag its HEAD returned as If-Match on the
// GET, so an object replaced in between is read again from the start instead of mixing two
// versions (GetRange does the same for a caller that passes the ETag).
// Corrupt versus transient (the checkpoint code falls back past corrupt objects only):
// a checksum or length that does not match what was recorded at upload is DataLoss, after
// one more read of the whole object; everything transient above stays Unavailable.
// Bounds (the endpoint is another party's server): a request's total time (S3Config::
// request_timeout plus its bytes at min_transfer_rate), response headers (kMaxHeaderBytes in
// all) and a response body held in memory (kMaxBufferedBody: listings, errors, multipart
// replies; an object's bytes go to its reader, never more than the range asked for). A
// response past a size bound is ResourceExhausted, not retried.
// Errors name the object as s3://bucket/key and map to Status codes: 403 PermissionDenied,
// 404 NotFound, 412 (conditional PUT lost) AlreadyExists, other 4xx InvalidArgument,
// 5xx / transport errors after the last retry Unavailable, checksum or length mismatch
// DataLoss.
//
// Thread-safe: one client may serve any number of threads; it keeps a pool of curl
// handles so connections are reused.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/storage/sigv4.h"

namespace kubetrain::storage {

struct S3Config {
  // scheme://host[:port]; empty means AWS: https://s3.<region>.amazonaws.com.
  std::string endpoint;
  std::string region = "us-east-1";
  Credentials credentials;
  bool path_style = false;  // false: virtual-hosted (https://bucket.host/key)
  int max_attempts = 5;
  std::chrono::milliseconds retry_base{100};
  std::chrono::milliseconds retry_cap{5000};
  std::chrono::milliseconds connect_timeout{10000};
  // A transfer slower than 1 KiB/s for this long is aborted (and retried).
  std::chrono::seconds stall_timeout{60};
  // A request's total time, connect to last byte: request_timeout plus its body's (sent or
  // asked for) bytes at min_transfer_rate bytes/s; past it the request is aborted (and
  // retried), so a server that trickles just above the stall rate cannot hold it forever.
  std::chrono::milliseconds request_timeout{120000};
  int64_t min_transfer_rate = 256 << 10;
  size_t part_size = 16u << 20;  // multipart upload above this size, in parts of this size
  int upload_parallelism = 4;
  std::string ca_bundle;  // PEM file; empty: the system's
};

// The configuration from the standard AWS variables:
//   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (credentials; required),
//   AWS_REGION or AWS_DEFAULT_REGION (default us-east-1),
//   AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL (default AWS),
//   AWS_MAX_ATTEMPTS, AWS_CA_BUNDLE,
//   KUBETRAIN_S3_ADDRESSING_STYLE=path|virtual (default: path for a custom endpoint,
//   virtual for AWS).
// Web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN) is not supported: with it and
// no keys, the error says so. Errors: InvalidArgument.
StatusOr<S3Config> S3ConfigFromEnv(const std::function<const char*(const char*)>& getenv);

struct ObjectInfo {
  std::string key;
  int64_t size = 0;
  std::string etag;  // without quotes
};

struct PutOptions {
  std::string content_type = "application/octet-stream";
  // If-None-Match: * — fails with AlreadyExists when the key exists (S3 conditional writes).
  bool if_none_match = false;
};

struct ListPage {
  std::vector<ObjectInfo> objects;
  std::string next_token;  // empty: this was the last page
};

// "s3://bucket/key" for messages.
std::string S3Name(std::string_view bucket, std::string_view key);

class S3Client {
 public:
  // Response bounds (see the header comment).
  static constexpr size_t kMaxHeaderBytes = 64 << 10;
  static constexpr size_t kMaxBufferedBody = 8 << 20;

  explicit S3Client(S3Config config);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3Config& config() const { return config_; }

  // Creates `bucket`; OK if this account already owns it.
  Status CreateBucket(std::string_view bucket);
  StatusOr<ObjectInfo> Head(std::string_view bucket, std::string_view key);
  // The whole object, its length and checksum checked. Errors: DataLoss when two reads
  // both disagree with the object's recorded checksum; Unavailable when it kept changing
  // while being read; as above otherwise.
  StatusOr<std::string> Get(std::string_view bucket, std::string_view key);
  // Streams bytes [offset, offset + length) (length < 0: to the end) to `sink` in order.
  // A sink error stops the transfer and is returned. Checks the length received (DataLoss
  // when the object is shorter than asked for). With `if_match` (an ETag, unquoted), only
  // that version of the object is read: Conflict when the object no longer has it.
  Status GetRange(std::string_view bucket, std::string_view key, int64_t offset, int64_t length,
                  const std::function<Status(std::string_view)>& sink,
                  std::string_view if_match = {});
  // One PutObject request.
  Status Put(std::string_view bucket, std::string_view key, std::string_view body,
             const PutOptions& options = {});
  // PutObject up to part_size, else a multipart upload with parallel parts.
  Status Upload(std::string_view bucket, std::string_view key, std::string_view body,
                const PutOptions& options = {});
  // The steps of a multipart upload, for a writer that streams an object of unknown size
  // (ObjectWriter). CreateMultipart returns the upload id; `checksum` (empty: none) is
  // recorded as the object's x-amz-meta-kubetrain-sha256. UploadPart sends part
  // `part_number` (1-based; every part but the last at least 5 MiB on AWS) signed with its
  // SHA-256 (`sha256_hex`, computed when empty) and returns its ETag. CompleteMultipart
  // joins parts 1..etags.size(). AbortMultipart is best effort (its error is dropped: the
  // caller reports the cause).
  StatusOr<std::string> CreateMultipart(std::string_view bucket, std::string_view key,
                                        const PutOptions& options, std::string_view checksum);
  StatusOr<std::string> UploadPart(std::string_view bucket, std::string_view key,
                                   std::string_view upload_id, int part_number,
                                   std::string_view body, std::string_view sha256_hex = {});
  Status CompleteMultipart(std::string_view bucket, std::string_view key,
                           std::string_view upload_id, const std::vector<std::string>& etags,
                           const PutOptions& options);
  void AbortMultipart(std::string_view bucket, std::string_view key, std::string_view upload_id);
  // One ListObjectsV2 page (max_keys <= 1000).
  StatusOr<ListPage> List(std::string_view bucket, std::string_view prefix,
                          std::string_view continuation_token, int max_keys = 1000);
  // Every object under `prefix`, in key order, following continuation tokens.
  StatusOr<std::vector<ObjectInfo>> ListAll(std::string_view bucket, std::string_view prefix);
  // Deleting a missing key is OK (as in S3).
  Status Delete(std::string_view bucket, std::string_view key);

  struct Request;
  struct Response;

 private:
  class HandlePool;

  StatusOr<std::string> GetOnce(std::string_view bucket, std::string_view key);
  StatusOr<Response> SendOnce(const Request& r);
  StatusOr<Response> Send(const Request& r);  // with retries
  Status Multipart(std::string_view bucket, std::string_view key, std::string_view body,
                   const PutOptions& options);
  void Backoff(int attempt) const;

  const S3Config config_;
  // Parsed endpoint, constant after construction.
  std::string scheme_, host_;
  std::unique_ptr<HandlePool> pool_;
};

}  // namespace kubetrain::storage
