#include "operator/planner/quantity.h"

#include <gtest/gtest.h>

namespace kubetrain::planner {
namespace {

int64_t Milli(std::string_view text) {
  StatusOr<Quantity> q = ParseQuantity(text);
  EXPECT_TRUE(q.ok()) << text << ": " << q.status().ToString();
  return q.ok() ? q->milli : -1;
}

TEST(QuantityTest, ParsesDecimalBinaryAndExponentForms) {
  EXPECT_EQ(Milli("1"), 1000);
  EXPECT_EQ(Milli("+2"), 2000);
  EXPECT_EQ(Milli("500m"), 500);
  EXPECT_EQ(Milli("0.5"), 500);
  EXPECT_EQ(Milli(".25"), 250);
  EXPECT_EQ(Milli("1.5k"), 1'500'000);
  EXPECT_EQ(Milli("1Ki"), 1'024'000);
  EXPECT_EQ(Milli("1Gi"), 1'073'741'824'000);
  EXPECT_EQ(Milli("2M"), 2'000'000'000);
  EXPECT_EQ(Milli("1e3"), 1'000'000);
  EXPECT_EQ(Milli("1E3"), 1'000'000);
  EXPECT_EQ(Milli("5e-1"), 500);
  EXPECT_EQ(Milli("1P"), 1'000'000'000'000'000'000);
  EXPECT_EQ(Milli("0"), 0);
  EXPECT_EQ(Milli("000.000"), 0);
}

TEST(QuantityTest, FinerThanMilliRoundsUp) {
  EXPECT_EQ(Milli("1n"), 1);
  EXPECT_EQ(Milli("1500u"), 2);
  EXPECT_EQ(Milli("0.0001"), 1);
  EXPECT_EQ(Milli("1000u"), 1);
}

TEST(QuantityTest, RejectsWhatIsNotAQuantity) {
  for (std::string_view bad :
       {"", "m", "-1", "1x", "1 Gi", "1Gb", "1e", "e3", "1.2.3", "1e1000", "1.5.Gi", "abc"}) {
    EXPECT_FALSE(ParseQuantity(bad).ok()) << "'" << bad << "'";
  }
}

TEST(QuantityTest, RefusesValuesBeyondInt64MilliUnits) {
  EXPECT_FALSE(ParseQuantity("8Ei").ok());
  EXPECT_FALSE(ParseQuantity("1E").ok());   // exa
  EXPECT_FALSE(ParseQuantity("10P").ok());  // 1e16 units = 1e19 milli
  EXPECT_TRUE(ParseQuantity("9P").ok());
  EXPECT_FALSE(ParseQuantity("1000000000000000000000000000000000000").ok());
}

TEST(QuantityTest, FormatsWholeUnitsOrMilli) {
  EXPECT_EQ(FormatQuantity({4000}), "4");
  EXPECT_EQ(FormatQuantity({1500}), "1500m");
  EXPECT_EQ(FormatQuantity({0}), "0");
  EXPECT_EQ(FormatQuantity({1'073'741'824'000}), "1073741824");
  // What it prints, it reads back.
  for (int64_t m : {int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{123456789},
                    int64_t{4'000'000'000'000'000}}) {
    EXPECT_EQ(Milli(FormatQuantity({m})), m);
  }
}

TEST(QuantityTest, ArithmeticRefusesOverflow) {
  EXPECT_EQ(AddQuantity({1500}, {500})->milli, 2000);
  EXPECT_EQ(ScaleQuantity({1500}, 3)->milli, 4500);
  EXPECT_FALSE(AddQuantity({INT64_MAX}, {1}).ok());
  EXPECT_FALSE(ScaleQuantity({INT64_MAX / 2 + 1}, 2).ok());
  EXPECT_FALSE(ScaleQuantity({1}, -1).ok());
}

}  // namespace
}  // namespace kubetrain::planner
