// The trainer's role drivers: what one process of `kubetrain-trainer` does as a
// parameter server, a worker (or chief), an evaluator or a single process, from
// its flags and the cluster in its environment (CLUSTER_CONFIG + POD_NAME, or
// TF_CONFIG; neither: one process).
//
// The cluster shapes it runs: PS replicas with one or more workers (and at most one
// chief), or one training replica (one Worker, or one Chief) with no PS, which trains
// in-process exactly as a single process does; an evaluator beside either. Several
// training replicas with no PS exit 1 (permanent) with the reason in the termination
// message: only a PS shares parameters between processes.
//
// Exit codes follow the workload contract (common/workload_contract.h): 0 success, 1-127 permanent
// failure (bad flags/config/data, target metric missed), 128-255 retryable (a
// peer unreachable after the startup timeout, a lost parameter server); 143: stopped by
// SIGTERM after saving (a committed checkpoint at the step reached, when there is a
// --checkpoint-dir; see trainer/stop/stop.h).
//
// SIGTERM, by role: the coordinator (chief, else worker 0) and a lone process finish their
// step, save and commit a checkpoint at it, and exit 143; another worker hands in its last
// push and exits 143; a PS keeps serving and flags its push replies until the coordinator's
// checkpoint request (at most --stop-timeout / 2), then exits 143. A PS that alone got
// SIGTERM (kubectl delete pod ps-0) so makes the running coordinator save at its current
// step; when every pod got it at once (suspend, drain) the coordinator's own save serves all.
// The evaluator and --predict/--export keep SIGTERM's default action.
//
// What outlives the process (common/workload_contract.h): every role keeps the last 1 MiB of
// its log and writes it to <--output>/logs/<role>-<index>.log (one process: local-0.log)
// when Run returns, whatever the outcome; training replicas and the evaluator write
// TensorBoard event files (trainer/observe/summaries.h).
#pragma once

#include "trainer/config.h"

namespace kubetrain::trainer {

// Runs this process's role to the end and returns its exit code.
int Run(const Config& config);

}  // namespace kubetrain::trainer
