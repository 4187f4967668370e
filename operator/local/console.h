// The terminal side of `kubetrain run`: every replica's output lines behind a
// name column ("worker-0 | ..."), each replica in its own ANSI colour, and a
// progress bar of the training workers' steps kept on the last line.
//
// Contract: single-threaded (the runner's loop). Writes only to `out`; the
// progress bar is redrawn after every line and cleared by ClearProgress.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kubetrain::local {

// A training replica's progress, for the bar.
struct ReplicaProgress {
  std::string short_name;  // "worker-0"
  int64_t step = 0;
  int64_t total_steps = 0;  // > 0
  double loss = 0;
};

// Reads "step <N> loss <X>" (the trainer's progress lines) out of `line` into
// `step` and `loss`. False when the line has none; a number out of range keeps
// the value it would have set (and those after it) as they were.
bool ParseStepLine(const std::string& line, int64_t& step, double& loss);

class Console {
 public:
  // `progress` lists the replicas that train, for the bar (called on every
  // redraw); the bar is drawn only when `progress_bar`.
  Console(std::FILE* out, bool color, bool progress_bar,
          std::function<std::vector<ReplicaProgress>()> progress);

  // The name column is at least this wide.
  void SetNameWidth(size_t width) { name_width_ = width; }
  // Gives `short_name` the next colour, unless it has one.
  void AddReplica(const std::string& short_name);
  // One line of `who`'s output (or of the runner itself: Say).
  void Line(const std::string& who, const std::string& text);
  void Say(const std::string& text) { Line("kubetrain", text); }
  // Removes the progress bar (before the final report) and flushes.
  void ClearProgress();
  void Flush() { std::fflush(out_); }

 private:
  void DrawProgress();

  std::FILE* const out_;
  const bool color_;
  const bool progress_bar_;
  const std::function<std::vector<ReplicaProgress>()> progress_;
  size_t name_width_ = 9;
  bool progress_drawn_ = false;
  std::map<std::string, int> colors_;
};

}  // namespace kubetrain::local
