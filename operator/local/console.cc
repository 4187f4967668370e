#include "operator/local/console.h"

#include <algorithm>
#include <regex>

namespace kubetrain::local {

bool ParseStepLine(const std::string& line, int64_t& step, double& loss) {
  static const std::regex kStep(R"(\bstep (\d+) loss ([-0-9.eE+naif]+))");
  std::smatch m;
  if (!std::regex_search(line, m, kStep)) return false;
  try {
    step = std::stoll(m[1].str());
    loss = std::stod(m[2].str());
  } catch (const std::exception&) {  // out of range: keep the last values
  }
  return true;
}

Console::Console(std::FILE* out, bool color, bool progress_bar,
                 std::function<std::vector<ReplicaProgress>()> progress)
    : out_(out), color_(color), progress_bar_(progress_bar), progress_(std::move(progress)) {}

void Console::AddReplica(const std::string& short_name) {
  colors_.emplace(short_name, static_cast<int>(colors_.size()));
}

void Console::Line(const std::string& who, const std::string& text) {
  ClearProgress();
  std::string prefix = who;
  prefix.resize(std::max(name_width_, who.size()), ' ');
  if (color_) {
    static constexpr int kPalette[] = {36, 33, 32, 35, 34, 91, 92, 93, 94, 95, 96};
    auto it = colors_.find(who);
    const int color = it == colors_.end() ? 0 : it->second;
    const int code = kPalette[color % (sizeof kPalette / sizeof kPalette[0])];
    std::fprintf(out_, "\033[%dm%s |\033[0m %s\n", code, prefix.c_str(), text.c_str());
  } else {
    std::fprintf(out_, "%s | %s\n", prefix.c_str(), text.c_str());
  }
  DrawProgress();
  std::fflush(out_);
}

void Console::ClearProgress() {
  if (progress_drawn_) std::fputs("\r\033[2K", out_);
  progress_drawn_ = false;
}

void Console::DrawProgress() {
  if (!progress_bar_) return;
  int64_t done = 0, total = 0;
  std::string detail;
  for (const ReplicaProgress& r : progress_()) {
    if (r.total_steps <= 0) continue;
    done += std::min(r.step, r.total_steps);
    total += r.total_steps;
    char buf[96];
    std::snprintf(buf, sizeof buf, "  %s %lld/%lld loss %.4f", r.short_name.c_str(),
                  static_cast<long long>(r.step), static_cast<long long>(r.total_steps), r.loss);
    detail += buf;
  }
  if (total == 0) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / total);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(out_, "[%s] %3d%%%s", bar.c_str(), static_cast<int>(100 * done / total),
               detail.c_str());
  progress_drawn_ = true;
}

}  // namespace kubetrain::local
