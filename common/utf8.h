// UTF-8 hygiene for strings that come from workloads (termination messages,
// names, labels): they are untrusted, and nlohmann::json::dump() throws on
// invalid UTF-8, so every such string is made valid before it is serialised.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kubetrain {

// `s` with every ill-formed sequence (stray continuation bytes, truncated or
// overlong sequences, surrogates, code points above U+10FFFF) replaced by
// U+FFFD, as Go's encoding/json does. Valid input is returned unchanged.
std::string SanitizeUtf8(std::string_view s);

// The longest prefix of `s` of at most `max_bytes` bytes that ends on a code
// point boundary; ill-formed input is sanitised first. Never splits a
// multi-byte character, so the result always serialises.
std::string TruncateUtf8(std::string_view s, size_t max_bytes);

// `s` made safe to show a person: valid UTF-8 (as SanitizeUtf8), carriage
// returns dropped, every other control character but newline and tab (C0, DEL
// and the C1 range U+0080-U+009F, so ESC and CSI and with them terminal escape
// sequences) replaced by U+FFFD, then cut to at most `max_bytes` as TruncateUtf8. For workload
// strings that reach `kubectl describe`, events, conditions and terminals.
std::string CleanText(std::string_view s, size_t max_bytes);

}  // namespace kubetrain
