// SIGTERM for the trainer: Kubernetes' request to stop (pod deleted with a grace period,
// eviction, preemption, node drain, Kueue eviction, `suspend: true`).
//
// Flow: InstallStopHandler() installs a SIGTERM handler that does only async-signal-safe
//   work: it sets a lock-free atomic flag and writes one byte to a self-pipe. The role loops
//   poll StopRequested() between steps (the training loop, the PS's accept loop, the
//   coordinator's wait for the other workers) and save a committed checkpoint before they
//   return kExitStopped. A watchdog thread reads the pipe and, if the process is still
//   running `stop_timeout` after the signal (a save that hangs, a blocking connect), ends it
//   with _exit(kExitStopped) before the kubelet's SIGKILL.
// Guarantees: the handler never allocates, locks or logs; a second SIGTERM changes nothing;
//   a process that never installs the handler keeps the default action (the evaluator and
//   the one-shot tools stop at once: they have nothing to save).
// Assumptions: `stop_timeout` is below the pod's terminationGracePeriodSeconds (default 30 s;
//   the flag's default of 25 s leaves 5 s).
#pragma once

#include <chrono>

namespace kubetrain::trainer {

// 128 + SIGTERM: "stopped by SIGTERM after saving"; the operator treats it as a disruption
// when the pod was deleted or evicted.
inline constexpr int kExitStopped = 143;

// Installs the handler and starts the watchdog (once; later calls change nothing).
void InstallStopHandler(std::chrono::milliseconds stop_timeout);
// True once SIGTERM arrived (or RequestStop was called). Lock-free; any thread.
bool StopRequested();
// What the handler does, without a signal (tests).
void RequestStop();
// Clears the flag (tests only; not while a watchdog is armed).
void ResetStopForTest();

}  // namespace kubetrain::trainer
