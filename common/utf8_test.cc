#include "common/utf8.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kubetrain {
namespace {

const std::string kEuro = "\xE2\x82\xAC";  // 3 bytes
const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8Test, TruncateNeverSplitsAMultiByteCharacter) {
  std::string s = std::string(1023, 'a') + kEuro + kEuro;
  for (size_t max = 1020; max <= s.size() + 1; ++max) {
    std::string t = TruncateUtf8(s, max);
    EXPECT_LE(t.size(), max);
    EXPECT_EQ(s.compare(0, t.size(), t), 0) << "a prefix of the input";
    EXPECT_NO_THROW((void)nlohmann::json(t).dump()) << max;
  }
  EXPECT_EQ(TruncateUtf8(s, 1024), std::string(1023, 'a'));
  EXPECT_EQ(TruncateUtf8(s, 1026), std::string(1023, 'a') + kEuro);
  EXPECT_EQ(TruncateUtf8(s, 1029), s);
}

TEST(Utf8Test, InvalidSequencesAreReplacedNotThrown) {
  EXPECT_EQ(SanitizeUtf8("ok \xFF end"), "ok " + kFffd + " end");
  EXPECT_EQ(SanitizeUtf8("\xE2\x82"), kFffd + kFffd);               // truncated sequence
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), kFffd + kFffd);               // overlong '/'
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);   // surrogate
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80").substr(0, 3), kFffd);  // > U+10FFFF
  const std::string valid = "héllo " + kEuro + " \xF0\x9F\x98\x80";
  EXPECT_EQ(SanitizeUtf8(valid), valid);
  EXPECT_NO_THROW((void)nlohmann::json(SanitizeUtf8("\x80\xBF\xFE")).dump());
}

TEST(Utf8Test, CleanTextReplacesControlCharactersButKeepsLines) {
  // A termination message that would recolour and clear a terminal.
  const std::string hostile =
      "boom\x1b[31m red\x1b]0;title\x07\r\x7f \xC2\x9B"
      "2J";
  EXPECT_EQ(CleanText(hostile, 1024),
            "boom" + kFffd + "[31m red" + kFffd + "]0;title" + kFffd + kFffd + " " + kFffd + "2J");
  EXPECT_EQ(CleanText("a\r\nb", 1024), "a\nb");
  EXPECT_EQ(CleanText("line 1\n\tline 2 " + kEuro, 1024), "line 1\n\tline 2 " + kEuro);
  EXPECT_EQ(CleanText("\xFF", 1024), kFffd);
  EXPECT_EQ(CleanText(std::string(10, '\x1b'), 7), kFffd + kFffd) << "cut after cleaning";
  EXPECT_EQ(CleanText("\xC2\xA0", 8), "\xC2\xA0") << "U+00A0 is not a control";
}

}  // namespace
}  // namespace kubetrain
