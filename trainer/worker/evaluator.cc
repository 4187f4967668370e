#include "trainer/worker/evaluator.h"

#include <spdlog/spdlog.h>

#include <map>
#include <thread>

namespace kubetrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

bool Transient(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

std::string Millis(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + "s";
  return std::to_string(d.count()) + "ms";
}

}  // namespace

StatusOr<WatchResult> WatchCheckpoints(const WatchOptions& o, const WatchCallbacks& cb) {
  WatchResult result;
  std::map<int64_t, EvalMetrics> evaluated;  // by step
  std::map<int64_t, std::string> corrupt;    // by step: why
  int64_t newest_seen = -1;                  // the newest committed step handled
  int64_t final_reported = -1;               // the step reported with final = true
  bool stale_final_logged = false;
  auto deadline = Clock::now() + o.wait_timeout;
  for (;;) {
    // FINAL before the listing: its checkpoint was committed before it was written.
    KT_ASSIGN_OR_RETURN(std::optional<int64_t> final_step, ReadFinalMarker(o.checkpoint_dir));
    if (final_step && *final_step < o.final_step_at_least) {
      if (!stale_final_logged) {
        spdlog::info("{}/FINAL names step {}, before step {}: left by an earlier run; waiting",
                     o.checkpoint_dir, *final_step, o.final_step_at_least);
        stale_final_logged = true;
      }
      final_step.reset();
    }
    KT_ASSIGN_OR_RETURN(CheckpointList list, ListCheckpoints(o.checkpoint_dir, o.num_shards));
    for (const Checkpoint& c : list.committed) {
      if (c.step <= newest_seen) continue;
      const bool is_final = final_step && c.step == *final_step;
      auto params = cb.load(c);
      if (!params.ok()) {
        if (Transient(params.status())) return params.status();
        spdlog::warn("checkpoint {} cannot be evaluated ({}); skipping it",
                     CheckpointDir(o.checkpoint_dir, c.step), params.status().message());
        corrupt[c.step] = params.status().message();
        ++result.corrupt;
      } else {
        const auto started = Clock::now();
        KT_ASSIGN_OR_RETURN(EvalMetrics m, cb.evaluate(**params));
        const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
        spdlog::info(
            "checkpoint {}{}: AUC {:.5f} log loss {:.5f} accuracy {:.5f} on {} examples "
            "({:.0f} examples/s)",
            c.step, is_final ? " (final)" : "", m.auc, m.log_loss, m.accuracy, m.examples,
            m.examples / std::max(seconds, 1e-9));
        KT_RETURN_IF_ERROR(cb.report(c.step, m, is_final));
        if (is_final) final_reported = c.step;
        evaluated[c.step] = m;
        ++result.evaluated;
      }
      newest_seen = c.step;
      deadline = Clock::now() + o.wait_timeout;
    }
    if (final_step) {
      const std::string name = CheckpointDir(o.checkpoint_dir, *final_step);
      if (auto it = corrupt.find(*final_step); it != corrupt.end()) {
        return FailedPrecondition("the final checkpoint " + name + " is corrupt: " + it->second);
      }
      auto it = evaluated.find(*final_step);
      if (it == evaluated.end()) {
        return FailedPrecondition(o.checkpoint_dir + "/FINAL names step " +
                                  std::to_string(*final_step) + ", but " + name +
                                  " is not a committed checkpoint (no MANIFEST, or one that "
                                  "does not parse)");
      }
      if (newest_seen > *final_step) {
        spdlog::warn("{}/FINAL names step {}, but checkpoint {} is newer", o.checkpoint_dir,
                     *final_step, newest_seen);
      }
      // Evaluated before FINAL appeared: report it again, as the final one.
      if (final_reported != *final_step) {
        KT_RETURN_IF_ERROR(cb.report(*final_step, it->second, /*final=*/true));
      }
      result.final_step = *final_step;
      result.final_metrics = it->second;
      return result;
    }
    if (Clock::now() >= deadline) {
      if (newest_seen < 0) {
        return FailedPrecondition("no checkpoint appeared in " + o.checkpoint_dir + " within " +
                                  Millis(o.wait_timeout) +
                                  " (is the chief or worker 0 run with the same "
                                  "--checkpoint-dir and --checkpoint-every?)");
      }
      return FailedPrecondition("no checkpoint after step " + std::to_string(newest_seen) +
                                " and no FINAL marker appeared in " + o.checkpoint_dir +
                                " within " + Millis(o.wait_timeout));
    }
    std::this_thread::sleep_for(o.poll_interval);  // the poll interval, not synchronisation
  }
}

}  // namespace kubetrain::trainer
