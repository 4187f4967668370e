#include "operator/progress/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kubetrain::progress {
namespace {

TEST(PrometheusTextTest, ParsesSamplesSkippingCommentsAndBlankLines) {
  auto s = ParsePrometheusText(
      "# HELP kubetrain_trainer_step Last completed step.\n"
      "# TYPE kubetrain_trainer_step gauge\n"
      "kubetrain_trainer_step 120\n"
      "\n"
      "  kubetrain_trainer_loss\t0.4375\n"
      "http_requests_total{method=\"GET\",code=\"200\"} 1027 1395066363000\n"
      "ns:rule_total{} 3\r\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[0].name, "kubetrain_trainer_step");
  EXPECT_EQ((*s)[0].value, 120);
  EXPECT_EQ((*s)[1].value, 0.4375);
  EXPECT_EQ((*s)[2].labels.size(), 2u);
  EXPECT_EQ((*s)[2].labels[1].first, "code");
  EXPECT_EQ((*s)[2].labels[1].second, "200");
  EXPECT_EQ((*s)[2].value, 1027);
  EXPECT_EQ((*s)[3].name, "ns:rule_total");
  EXPECT_EQ(FindValue(*s, "kubetrain_trainer_step"), 120);
  EXPECT_EQ(FindValue(*s, "http_requests_total"), std::nullopt);  // only with labels
  EXPECT_EQ(FindValue(*s, "absent"), std::nullopt);
}

TEST(PrometheusTextTest, ReadsEscapesInLabelValuesAndSpecialValues) {
  auto s = ParsePrometheusText(
      "m{path=\"C:\\\\dir\\\\file \\\"x\\\"\",msg=\"a\\nb\",} +Inf\n"
      "n -Inf\n"
      "o NaN\n"
      "p 1.5e3\n"
      "q +2\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)[0].labels[0].second, "C:\\dir\\file \"x\"");
  EXPECT_EQ((*s)[0].labels[1].second, "a\nb");
  EXPECT_TRUE(std::isinf((*s)[0].value) && (*s)[0].value > 0);
  EXPECT_TRUE(std::isinf((*s)[1].value) && (*s)[1].value < 0);
  EXPECT_TRUE(std::isnan((*s)[2].value));
  EXPECT_EQ((*s)[3].value, 1500);
  EXPECT_EQ((*s)[4].value, 2);
}

TEST(PrometheusTextTest, RejectsMalformedLinesNamingTheLine) {
  const char* bad[] = {
      "m\n",                     // no value
      "m abc\n",                 // not a number
      "m 1 2 3\n",               // junk after the timestamp
      "m{a=\"1\" 2\n",           // unterminated labels
      "m{a=1} 2\n",              // unquoted label value
      "m{a=\"1} 2\n",            // unterminated quote
      "m{a=\"\\x\"} 2\n",        // unknown escape
      "m{1a=\"x\"} 2\n",         // bad label name
      "1m 2\n",                  // bad metric name
      "m{a:b=\"x\"} 2\n",        // colon in a label name
      "m inf\n",                 // only NaN, +Inf, -Inf spell the specials
      "<html><body>hi</body>\n"  // another server
  };
  for (const char* text : bad) {
    auto s = ParsePrometheusText(std::string("# ok\nfine 1\n") + text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(s.status().message().find("line 3:"), std::string::npos) << s.status().message();
  }
}

TEST(PrometheusTextTest, EmptyTextHasNoSamples) {
  auto s = ParsePrometheusText("");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->empty());
}

}  // namespace
}  // namespace kubetrain::progress
