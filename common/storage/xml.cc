#include "common/storage/xml.h"

#include <cctype>
#include <cstdint>

namespace kubetrain::storage {

std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  // Built with append: GCC 12 misreports "<" + std::string(tag) under -Wrestrict.
  std::string open(1, '<'), close("</");
  open.append(tag);
  close.append(tag).push_back('>');
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    const size_t after = pos + open.size();
    if (after >= xml.size()) break;
    if (xml[after] == '/' && after + 1 < xml.size() && xml[after + 1] == '>') {
      out.emplace_back();  // <Tag/>
      pos = after + 2;
      continue;
    }
    if (xml[after] != '>' && xml[after] != ' ') {  // a longer tag name, e.g. <KeyCount>
      pos = after;
      continue;
    }
    const size_t start = xml.find('>', after);
    if (start == std::string_view::npos) break;
    const size_t end = xml.find(close, start + 1);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(start + 1, end - start - 1));
    pos = end + close.size();
  }
  return out;
}

std::string XmlText(std::string_view xml, std::string_view tag) {
  const auto all = XmlElements(xml, tag);
  return all.empty() ? std::string() : XmlUnescape(all.front());
}

namespace {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

std::string XmlUnescape(std::string_view s) {
  constexpr size_t kMaxEntity = 32;  // "&#x0010FFFF;" and friends, with room for leading zeros
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    // An entity is a short run of letters, digits and '#' ended by ';': looking only
    // that far keeps a run of '&' with one ';' at the end linear (it used to rescan
    // the rest of the text at every '&').
    size_t semi = i + 1;
    while (semi < s.size() && semi - i <= kMaxEntity &&
           (std::isalnum(static_cast<unsigned char>(s[semi])) || s[semi] == '#')) {
      ++semi;
    }
    if (semi >= s.size() || s[semi] != ';') semi = std::string_view::npos;
    if (semi == std::string_view::npos) {
      out.push_back('&');
      continue;
    }
    const std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") {
      out.push_back('&');
    } else if (ent == "lt") {
      out.push_back('<');
    } else if (ent == "gt") {
      out.push_back('>');
    } else if (ent == "quot") {
      out.push_back('"');
    } else if (ent == "apos") {
      out.push_back('\'');
    } else if (!ent.empty() && ent[0] == '#') {
      uint32_t cp = 0;
      const bool hex = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X');
      bool good = ent.size() > (hex ? 2u : 1u);
      for (size_t k = hex ? 2 : 1; k < ent.size() && good; ++k) {
        const char c = ent[k];
        int v = -1;
        if (c >= '0' && c <= '9') v = c - '0';
        if (hex && c >= 'a' && c <= 'f') v = c - 'a' + 10;
        if (hex && c >= 'A' && c <= 'F') v = c - 'A' + 10;
        if (v < 0 || cp > 0x10FFFF) good = false;
        cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(v);
      }
      if (!good || cp > 0x10FFFF) {
        out.append(s.substr(i, semi - i + 1));
      } else {
        AppendUtf8(cp, &out);
      }
    } else {
      out.append(s.substr(i, semi - i + 1));
    }
    i = semi;
  }
  return out;
}

}  // namespace kubetrain::storage
