// AWS Signature Version 4 (header-based), as S3 checks it.
//
// Pure functions: no I/O, no clock reads (the caller passes the time), so the unit test
// checks them against AWS's published test vectors. The S3 client adds x-amz-date and,
// with a session token, x-amz-security-token through SignV4's result; the caller sends
// every header it signed.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kubetrain::storage {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty: none
};

// Lower-case hex of `bytes`.
std::string Hex(std::string_view bytes);
std::string Sha256(std::string_view data);  // raw 32 bytes
std::string Sha256Hex(std::string_view data);
std::string Md5(std::string_view data);  // raw 16 bytes
std::string Base64(std::string_view bytes);
std::string HmacSha256(std::string_view key, std::string_view data);  // raw 32 bytes

// RFC 3986 percent-encoding as SigV4 wants it: everything but A-Z a-z 0-9 - . _ ~ is
// encoded (upper-case hex); '/' too unless `keep_slash` (object keys in paths).
std::string UriEncode(std::string_view s, bool keep_slash);

// "20150830T123600Z" and "20150830" for a time.
std::string AmzDate(std::chrono::system_clock::time_point t);

struct SigningRequest {
  std::string method;         // "GET", "PUT", ...
  std::string canonical_uri;  // the request path, already URI-encoded ("/bucket/a%20b")
  // Query parameters, not encoded: they are encoded and sorted here.
  std::vector<std::pair<std::string, std::string>> query;
  HeaderList headers;        // must include host; names in any case
  std::string payload_hash;  // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

struct Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // hex
  std::string authorization;  // the Authorization header's value
  HeaderList added_headers;   // x-amz-date (and x-amz-security-token): send these too
};

Signature SignV4(const SigningRequest& request, const Credentials& credentials,
                 std::string_view region, std::string_view service,
                 std::chrono::system_clock::time_point now);

// The canonical query string of `query` (encoded, sorted by name then value).
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

}  // namespace kubetrain::storage
