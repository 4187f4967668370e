#include "common/storage/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <ctime>
#include <map>

namespace kubetrain::storage {

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

namespace {

std::string Digest(const EVP_MD* md, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out, &len, md, nullptr);
  return std::string(reinterpret_cast<const char*>(out), len);
}

// Header values are trimmed and inner runs of spaces become one space.
std::string TrimValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

std::string Sha256(std::string_view data) {
  return Digest(EVP_sha256(), data);
}
std::string Sha256Hex(std::string_view data) {
  return Hex(Sha256(data));
}
std::string Md5(std::string_view data) {
  return Digest(EVP_md5(), data);
}

std::string Base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string UriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                            c == '~' || (keep_slash && c == '/');
    if (unreserved) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

std::string AmzDate(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(UriEncode(k, false), UriEncode(v, false));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out.push_back('&');
    out += k + "=" + v;
  }
  return out;
}

Signature SignV4(const SigningRequest& request, const Credentials& credentials,
                 std::string_view region, std::string_view service,
                 std::chrono::system_clock::time_point now) {
  Signature sig;
  const std::string amz_date = AmzDate(now);
  const std::string date = amz_date.substr(0, 8);
  sig.added_headers.emplace_back("x-amz-date", amz_date);
  if (!credentials.session_token.empty()) {
    sig.added_headers.emplace_back("x-amz-security-token", credentials.session_token);
  }
  // Lower-cased names, sorted; repeated names join their values with ','.
  std::map<std::string, std::string> headers;
  const auto add = [&](const std::string& name, const std::string& value) {
    std::string& slot = headers[Lower(name)];
    if (!slot.empty()) slot.push_back(',');
    slot += TrimValue(value);
  };
  for (const auto& [k, v] : request.headers) add(k, v);
  for (const auto& [k, v] : sig.added_headers) add(k, v);
  std::string canonical_headers, signed_headers;
  for (const auto& [k, v] : headers) {
    canonical_headers += k + ":" + v + "\n";
    if (!signed_headers.empty()) signed_headers.push_back(';');
    signed_headers += k;
  }
  sig.canonical_request = request.method + "\n" + request.canonical_uri + "\n" +
                          CanonicalQuery(request.query) + "\n" + canonical_headers + "\n" +
                          signed_headers + "\n" + request.payload_hash;
  const std::string scope =
      date + "/" + std::string(region) + "/" + std::string(service) + "/aws4_request";
  sig.string_to_sign =
      "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + Sha256Hex(sig.canonical_request);
  std::string key = HmacSha256("AWS4" + credentials.secret_access_key, date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  key = HmacSha256(key, "aws4_request");
  sig.signature = Hex(HmacSha256(key, sig.string_to_sign));
  sig.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                      ", SignedHeaders=" + signed_headers + ", Signature=" + sig.signature;
  return sig;
}

}  // namespace kubetrain::storage
