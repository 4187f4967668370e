#include "common/storage/xml.h"

#include <gtest/gtest.h>

namespace kubetrain::storage {
namespace {

TEST(Xml, FindsEveryElementAndSkipsLongerTagNames) {
  const std::string xml =
      "<ListBucketResult><KeyCount>2</KeyCount><Contents><Key>a&amp;b</Key><Size>3</Size>"
      "</Contents><Contents><Key>c</Key><Size>4</Size></Contents>"
      "<IsTruncated>false</IsTruncated></ListBucketResult>";
  const auto contents = XmlElements(xml, "Contents");
  ASSERT_EQ(contents.size(), 2u);
  EXPECT_EQ(XmlText(contents[0], "Key"), "a&b");
  EXPECT_EQ(XmlText(contents[1], "Size"), "4");
  EXPECT_EQ(XmlText(xml, "Key"), "a&b");
  EXPECT_EQ(XmlText(xml, "KeyCount"), "2");
  EXPECT_EQ(XmlText(xml, "Missing"), "");
}

TEST(Xml, UnescapesEntitiesAndCharacterReferences) {
  EXPECT_EQ(XmlUnescape("&lt;a&gt; &quot;q&quot; &apos;s&apos; &#38; &#x41;&#xe9;"),
            "<a> \"q\" 's' & A\xc3\xa9");
  EXPECT_EQ(XmlUnescape("&bogus; &#xZZ; & tail"), "&bogus; &#xZZ; & tail");
}

// Each '&' searched the rest of the text for its ';': a 4 MB body of '&' ending in one ';'
// took minutes. Now an entity is looked for in the next 32 bytes only (linear).
TEST(Xml, ManyAmpersandsAreLinearAndKeptLiterally) {
  std::string text(4'000'000, '&');
  text += "amp;";
  const std::string out = XmlUnescape(text);
  EXPECT_EQ(out, std::string(4'000'000, '&'));  // the last '&' begins "&amp;"
  EXPECT_EQ(XmlUnescape("a &unknownentity; b &#65; &#x10FFFF; &#x110000;"),
            "a &unknownentity; b A \xF4\x8F\xBF\xBF &#x110000;");
}

TEST(Xml, EmptyElement) {
  const auto e = XmlElements("<R><Prefix/><Prefix>p</Prefix></R>", "Prefix");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0], "");
  EXPECT_EQ(e[1], "p");
}

}  // namespace
}  // namespace kubetrain::storage
