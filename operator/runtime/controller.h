// RunController: the worker half of a controller, with graceful shutdown.
//
// Typical main(), putting the runtime pieces together:
//
//   std::stop_token stop = runtime::InstallShutdownHandler();      // SIGTERM/SIGINT
//   auto client = kube::Client::Create(*kube::LoadDefaultConfig(flags.kubeconfig));
//   runtime::LeaderElector elector(client->get(), le_config);
//   Status s = elector.Run(stop, [&](std::stop_token leading) {
//     runtime::Informer<runtime::GenericObject> jobs(
//         runtime::NewKubeListerWatcher(client->get(), kTrainingJobs, ""),
//         runtime::ToGenericObject);
//     runtime::WorkQueue queue;
//     jobs.AddHandlers({.on_add = ..., .on_update = ..., .on_delete = ...});  // enqueue keys only
//     jobs.Start();
//     if (!jobs.WaitForSync(std::chrono::minutes(2))) return;
//     runtime::RunController(leading, queue, /*workers=*/4, reconcile);
//   });  // returns after the lease is released (graceful) or lost (then exit non-zero)
#pragma once

#include <stop_token>

#include "operator/runtime/workqueue.h"

namespace kubetrain::runtime {

// Runs `workers` reconcile threads over `queue` (see RunWorkers for how a
// result is turned into forget / requeue / backoff) until `stop` is
// requested. Then it stops taking new work at once: the queue is shut down
// (Adds, delayed and queued keys are dropped; they are recomputed from the
// caches by whoever leads next), reconciles already in flight finish, and
// RunController returns. Blocks the caller.
inline void RunController(std::stop_token stop, WorkQueue& queue, int workers,
                          const Reconciler& reconcile) {
  std::stop_callback on_stop(stop, [&queue] { queue.ShutDownNow(); });
  RunWorkers(queue, workers, reconcile);
}

}  // namespace kubetrain::runtime
