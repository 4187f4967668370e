#include "operator/cli/cluster.h"

#include <gtest/gtest.h>

namespace kubetrain::cli {
namespace {

using std::chrono::milliseconds;

TEST(ParseDurationTest, AcceptsGoUnitsAndPlainSeconds) {
  EXPECT_EQ(*ParseDuration("90s"), milliseconds(90'000));
  EXPECT_EQ(*ParseDuration("2m"), milliseconds(120'000));
  EXPECT_EQ(*ParseDuration("1h30m"), milliseconds(5'400'000));
  EXPECT_EQ(*ParseDuration("500ms"), milliseconds(500));
  EXPECT_EQ(*ParseDuration("1.5h"), milliseconds(5'400'000));
  EXPECT_EQ(*ParseDuration("2m3s"), milliseconds(123'000));
  EXPECT_EQ(*ParseDuration("45"), milliseconds(45'000));
  EXPECT_EQ(*ParseDuration("0"), milliseconds(0));
}

TEST(ParseDurationTest, RefusesWhatIsNotADuration) {
  for (const char* bad : {"", "s", "10x", "-5s", "-3", "1d", "5 s", "m5"}) {
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace kubetrain::cli
