// What kubetrain-operator runs, built from its validated options: the API
// client (its writes fenced once the Lease is lost), the job and sweep
// controllers' options, and the leader election's config and client.
// BuildManager does the I/O that deciding these takes (the kubeconfig, one
// discovery GET for --kueue); running them is the caller's (operator_main.cc).
#pragma once

#include <atomic>
#include <memory>

#include "common/status.h"
#include "operator/cli/operator_options.h"
#include "operator/controller/job_controller.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"
#include "operator/runtime/leader_election.h"
#include "operator/sweep/sweep_controller.h"

namespace kubetrain::operator_cli {

struct Manager {
  kube::Config config;
  // Set by the elector the moment leadership is lost; `client` then refuses
  // every write, also one in the middle of a reconcile.
  std::shared_ptr<std::atomic<bool>> fenced;
  std::unique_ptr<kube::Client> client;
  controller::JobControllerOptions jobs;
  sweep::SweepControllerOptions sweeps;
  // With --leader-elect only: the Lease, and its own client (a renewal is never
  // queued behind reconciles in the rate limiter; runtime::LeaderElectionClientConfig).
  runtime::LeaderElectionConfig election;
  std::unique_ptr<kube::Client> election_client;
};

// Errors: a bad --operator-namespace / --operator-pod-labels /
// --network-policy-metrics-from (InvalidArgument), a kubeconfig that cannot be
// loaded, a client that cannot be made. A Kueue API that is not served is no
// error: --kueue is then turned off, with a warning.
[[nodiscard]] StatusOr<Manager> BuildManager(const OperatorOptions& options);

}  // namespace kubetrain::operator_cli
