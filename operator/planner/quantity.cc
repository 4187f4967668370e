#include "operator/planner/quantity.h"

#include <array>
#include <limits>
#include <utility>

namespace kubetrain::planner {

namespace {

__extension__ using U128 = unsigned __int128;
constexpr U128 kMaxU128 = ~U128(0);

Status Bad(std::string_view text, std::string_view why) {
  return InvalidArgument("quantity '" + std::string(text) + "': " + std::string(why));
}

}  // namespace

StatusOr<Quantity> ParseQuantity(std::string_view text) {
  std::string_view s = text;
  if (s.empty()) return Bad(text, "empty");
  if (s.front() == '+') s.remove_prefix(1);
  if (!s.empty() && s.front() == '-') return Bad(text, "must not be negative");
  // Mantissa: digits, optional '.', digits; at least one digit.
  U128 digits = 0;
  int fraction = 0, count = 0;
  bool dot = false;
  size_t i = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.' && !dot) {
      dot = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    if (count == 0 && c == '0') {  // leading zeros carry no value
      if (dot) ++fraction;
      continue;
    }
    if (++count > 36) return Bad(text, "too many digits");
    digits = digits * 10 + U128(c - '0');
    if (dot) ++fraction;
  }
  const bool any_digit = s.find_first_of("0123456789") < i;
  if (!any_digit) return Bad(text, "expected a number");
  const std::string_view suffix = s.substr(i);

  // Value in milli-units = digits * 10^(decimal_exp + 3 - fraction) * 2^binary_exp.
  int decimal_exp = 0, binary_exp = 0;
  static constexpr std::array<std::pair<std::string_view, int>, 6> kBinary = {
      {{"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}, {"Pi", 50}, {"Ei", 60}}};
  static constexpr std::array<std::pair<std::string_view, int>, 9> kDecimal = {{{"n", -9},
                                                                                {"u", -6},
                                                                                {"m", -3},
                                                                                {"", 0},
                                                                                {"k", 3},
                                                                                {"M", 6},
                                                                                {"G", 9},
                                                                                {"T", 12},
                                                                                {"P", 15}}};
  bool known = false;
  for (const auto& [name, exp] : kBinary) {
    if (suffix == name) known = true, binary_exp = exp;
  }
  for (const auto& [name, exp] : kDecimal) {
    if (suffix == name) known = true, decimal_exp = exp;
  }
  if (!known && suffix == "E") known = true, decimal_exp = 18;
  if (!known && suffix.size() > 1 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    std::string_view e = suffix.substr(1);
    bool negative = false;
    if (e.front() == '+' || e.front() == '-') {
      negative = e.front() == '-';
      e.remove_prefix(1);
    }
    if (e.empty() || e.size() > 3 || e.find_first_not_of("0123456789") != std::string_view::npos) {
      return Bad(text, "malformed exponent");
    }
    decimal_exp = std::stoi(std::string(e)) * (negative ? -1 : 1);
    known = true;
  }
  if (!known) return Bad(text, "unknown suffix '" + std::string(suffix) + "'");

  U128 v = digits;
  auto multiply = [&v](U128 factor) {
    if (v != 0 && v > kMaxU128 / factor) return false;
    v *= factor;
    return true;
  };
  for (int b = 0; b < binary_exp; ++b) {
    if (!multiply(2)) return Bad(text, "too large");
  }
  int scale = decimal_exp + 3 - fraction;
  for (; scale > 0; --scale) {
    if (!multiply(10)) return Bad(text, "too large");
  }
  if (scale < 0) {
    // Round up to the next milli-unit: a request is never understated.
    U128 divisor = 1;
    bool tiny = false;
    for (; scale < 0; ++scale) {
      if (divisor > kMaxU128 / 10) {
        tiny = true;
        break;
      }
      divisor *= 10;
    }
    v = tiny ? (v != 0 ? 1 : 0) : v / divisor + (v % divisor != 0 ? 1 : 0);
  }
  if (v > U128(std::numeric_limits<int64_t>::max())) return Bad(text, "too large");
  return Quantity{static_cast<int64_t>(v)};
}

std::string FormatQuantity(Quantity q) {
  if (q.milli % 1000 == 0) return std::to_string(q.milli / 1000);
  return std::to_string(q.milli) + "m";
}

StatusOr<Quantity> AddQuantity(Quantity a, Quantity b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a.milli, b.milli, &sum)) {
    return InvalidArgument("resource sum too large");
  }
  return Quantity{sum};
}

StatusOr<Quantity> ScaleQuantity(Quantity a, int64_t n) {
  int64_t product = 0;
  if (n < 0 || __builtin_mul_overflow(a.milli, n, &product)) {
    return InvalidArgument("resource sum too large");
  }
  return Quantity{product};
}

}  // namespace kubetrain::planner
