#include "operator/progress/prometheus_text.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace kubetrain::progress {
namespace {

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool IsNameChar(char c) {
  return IsNameStart(c) || (c >= '0' && c <= '9');
}

// A cursor over one line.
class LineParser {
 public:
  explicit LineParser(std::string_view line) : s_(line) {}

  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  bool AtEnd() const { return i_ >= s_.size(); }
  bool Peek(char c) const { return i_ < s_.size() && s_[i_] == c; }
  bool Consume(char c) {
    if (!Peek(c)) return false;
    ++i_;
    return true;
  }

  std::optional<std::string> Name(bool allow_colon) {
    const size_t start = i_;
    if (i_ >= s_.size() || !IsNameStart(s_[i_]) || (!allow_colon && s_[i_] == ':')) {
      return std::nullopt;
    }
    ++i_;
    while (i_ < s_.size() && IsNameChar(s_[i_]) && (allow_colon || s_[i_] != ':')) ++i_;
    return std::string(s_.substr(start, i_ - start));
  }

  std::optional<std::string> QuotedValue() {
    if (!Peek('"')) return std::nullopt;
    ++i_;
    std::string out;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (i_ >= s_.size()) return std::nullopt;
      const char e = s_[i_++];
      if (e == 'n') {
        out.push_back('\n');
      } else if (e == '\\' || e == '"') {
        out.push_back(e);
      } else {
        return std::nullopt;
      }
    }
    return std::nullopt;  // unterminated
  }

  std::optional<double> Number() {
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ' ' && s_[i_] != '\t') ++i_;
    std::string_view tok = s_.substr(start, i_ - start);
    if (tok.empty()) return std::nullopt;
    if (tok == "+Inf" || tok == "Inf") return std::numeric_limits<double>::infinity();
    if (tok == "-Inf") return -std::numeric_limits<double>::infinity();
    if (tok == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (tok.front() == '+') tok.remove_prefix(1);
    double v = 0;
    auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec != std::errc() || end != tok.data() + tok.size()) return std::nullopt;
    if (std::isnan(v) || std::isinf(v)) return std::nullopt;  // only the spellings above
    return v;
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

StatusOr<Sample> ParseLine(std::string_view line) {
  LineParser p(line);
  Sample sample;
  auto name = p.Name(/*allow_colon=*/true);
  if (!name) return InvalidArgument("expected a metric name");
  sample.name = std::move(*name);
  p.SkipSpace();
  if (p.Consume('{')) {
    // name="value" pairs separated by commas; a trailing comma is allowed.
    for (;;) {
      p.SkipSpace();
      if (p.Consume('}')) break;
      auto label = p.Name(/*allow_colon=*/false);
      if (!label) return InvalidArgument("expected a label name in " + sample.name);
      p.SkipSpace();
      if (!p.Consume('=')) return InvalidArgument("expected '=' after label " + *label);
      p.SkipSpace();
      auto value = p.QuotedValue();
      if (!value) return InvalidArgument("bad quoted value of label " + *label);
      sample.labels.emplace_back(std::move(*label), std::move(*value));
      p.SkipSpace();
      if (p.Consume(',')) continue;
      if (p.Consume('}')) break;
      return InvalidArgument("expected ',' or '}' in the labels of " + sample.name);
    }
    p.SkipSpace();
  }
  auto value = p.Number();
  if (!value) return InvalidArgument("bad value of " + sample.name);
  sample.value = *value;
  p.SkipSpace();
  if (!p.AtEnd()) {
    auto ts = p.Number();  // a timestamp in milliseconds; not used
    if (!ts) return InvalidArgument("bad timestamp of " + sample.name);
    p.SkipSpace();
    if (!p.AtEnd()) return InvalidArgument("unexpected text after the sample " + sample.name);
  }
  return sample;
}

}  // namespace

StatusOr<std::vector<Sample>> ParsePrometheusText(std::string_view text) {
  std::vector<Sample> out;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    auto sample = ParseLine(line.substr(first));
    if (!sample.ok()) {
      return InvalidArgument("line " + std::to_string(line_no) + ": " +
                             std::string(sample.status().message()));
    }
    out.push_back(std::move(*sample));
  }
  return out;
}

std::optional<double> FindValue(const std::vector<Sample>& samples, std::string_view name) {
  for (const Sample& s : samples) {
    if (s.labels.empty() && s.name == name) return s.value;
  }
  return std::nullopt;
}

}  // namespace kubetrain::progress
