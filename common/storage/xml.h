// Just enough XML for S3's responses: flat elements found by tag name. S3 replies are
// machine-written, with no CDATA or attributes on the elements read here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kubetrain::storage {

// The raw contents of every <tag>...</tag> in `xml`, in order (not unescaped).
std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag);
// The unescaped text of the first <tag>...</tag>, or "" when there is none.
std::string XmlText(std::string_view xml, std::string_view tag);
// Replaces &amp; &lt; &gt; &quot; &apos; and numeric character references.
std::string XmlUnescape(std::string_view s);

}  // namespace kubetrain::storage
