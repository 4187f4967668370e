// SIGTERM for the trainer: Kubernetes' request to stop (pod deleted with a grace period,
// eviction, preemption, node drain, Kueue eviction, `suspend: true`).
//
// Flow: InstallStopHandler(), called before the process starts any other thread, blocks
//   SIGTERM (every later thread inherits the mask) and starts a watchdog thread that takes
//   it with sigwait: no signal handler runs at all, so nothing async-signal-unsafe can
//   happen in one. The watchdog sets a lock-free atomic flag, which the role loops poll
//   with StopRequested() between steps (the training loop, the PS's accept loop, the
//   coordinator's wait for the other workers); they save a committed checkpoint and return
//   kExitStopped. If the process is still running `stop_timeout` after the signal (a save
//   that hangs, a blocking connect) the watchdog ends it with _exit(kExitStopped), before
//   the kubelet's SIGKILL.
// Guarantees: a second SIGTERM changes nothing; a process that never calls InstallStopHandler
//   keeps the default action (the evaluator and the one-shot tools stop at once: they have
//   nothing to save). SIGTERM must come to the process (kill(pid), as the kubelet sends it),
//   not to one thread.
// Assumptions: `stop_timeout` is below the pod's terminationGracePeriodSeconds (default 30 s;
//   the flag's default of 25 s leaves 5 s).
#pragma once

#include <chrono>

#include "common/workload_contract.h"

namespace kubetrain::trainer {

// 128 + SIGTERM: "stopped by SIGTERM after saving"; the operator treats it as a disruption
// when the pod was deleted or evicted.
inline constexpr int kExitStopped = contract::kExitStoppedAfterCheckpoint;

// Blocks SIGTERM and starts the watchdog (once; later calls change nothing). Call it
// before starting any thread: a thread started earlier could still take the signal.
void InstallStopHandler(std::chrono::milliseconds stop_timeout);
// True once SIGTERM arrived (or RequestStop was called). Lock-free; any thread.
bool StopRequested();
// What the watchdog does on SIGTERM, without a signal (tests).
void RequestStop();
// Clears the flag (tests only; not while a watchdog is armed).
void ResetStopForTest();

// The exit watchdog: once a role has its outcome `code`, only teardown is left (the
// metrics server's stop, joins, removing the generated data, static destructors); it must
// not keep the pod Running. If the process is still alive `timeout` after this call, a
// detached thread writes one line to stderr and ends it with _exit(code), so the job sees
// the real outcome (a startup error stays a permanent failure, not a hang). The first call
// arms it; later calls change nothing. Any thread.
void ExitWithin(int code, std::chrono::milliseconds timeout);

}  // namespace kubetrain::trainer
