#include "common/utf8.h"

namespace kubetrain {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed sequence starting at s[i] (Unicode table 3-7), or 0.
size_t ValidSequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const size_t left = s.size() - i;
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  auto cont = [&](size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return k < left && b(k) >= lo && b(k) <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;  // no surrogates
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

}  // namespace

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = ValidSequenceLength(s, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string TruncateUtf8(std::string_view s, size_t max_bytes) {
  std::string out = SanitizeUtf8(s);
  if (out.size() <= max_bytes) return out;
  size_t cut = max_bytes;
  // Back up over continuation bytes to the first byte of the cut character.
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
  out.resize(cut);
  return out;
}

std::string CleanText(std::string_view s, size_t max_bytes) {
  const std::string valid = SanitizeUtf8(s);
  std::string out;
  out.reserve(valid.size());
  for (size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<unsigned char>(valid[i]);
    const bool c0 = c < 0x20 && c != '\n' && c != '\t';
    // U+0080-U+009F is 0xC2 0x80-0x9F in UTF-8 (valid here, so i + 1 exists).
    const bool c1 = c == 0xC2 && static_cast<unsigned char>(valid[i + 1]) <= 0x9F;
    if (c == '\r') continue;  // CRLF reads as LF; a lone CR cannot overwrite a line
    if (c0 || c == 0x7F) {
      out += kReplacement;
    } else if (c1) {
      out += kReplacement;
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return TruncateUtf8(out, max_bytes);
}

}  // namespace kubetrain
