// A process that contends for a Lease, for the leader-election tests.
// Usage: kube_lease_contender NAMESPACE LEASE IDENTITY LEASE_MS RENEW_MS RETRY_MS [SERVER]
// Uses the elector client the operator ships (runtime::LeaderElectionClientConfig);
// SERVER replaces the kubeconfig's server URL (to go through a proxy).
// Prints "LEADING <identity> <monotonic ms>" when it becomes leader and
// "STOPPED <identity> <monotonic ms>" when its leader token is stopped; exits
// 0 after a graceful shutdown (SIGTERM), 2 when it loses the lease.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "operator/kube/client.h"
#include "operator/runtime/leader_election.h"
#include "operator/runtime/shutdown.h"

int main(int argc, char** argv) {
  using namespace kubetrain;
  if (argc != 7 && argc != 8) {
    std::fprintf(stderr, "usage: %s NS LEASE IDENTITY LEASE_MS RENEW_MS RETRY_MS [SERVER]\n",
                 argv[0]);
    return 64;
  }
  std::stop_token stop = runtime::InstallShutdownHandler();
  auto cfg = kube::LoadDefaultConfig();
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().ToString().c_str());
    return 1;
  }
  if (argc == 8) cfg->server = argv[7];
  runtime::LeaderElectionConfig le;
  le.lease_namespace = argv[1];
  le.lease_name = argv[2];
  le.identity = argv[3];
  le.lease_duration = std::chrono::milliseconds(std::atol(argv[4]));
  le.renew_deadline = std::chrono::milliseconds(std::atol(argv[5]));
  le.retry_period = std::chrono::milliseconds(std::atol(argv[6]));
  auto client = kube::Client::Create(runtime::LeaderElectionClientConfig(*cfg, le));
  if (!client.ok()) return 1;
  auto now_ms = [] {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::steady_clock::now().time_since_epoch())
                                      .count());
  };
  runtime::LeaderElector elector(client->get(), le);
  Status s = elector.Run(stop, [&](std::stop_token leading) {
    std::printf("LEADING %s %lld\n", le.identity.c_str(), now_ms());
    std::fflush(stdout);
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait(lock, leading, [] { return false; });
    std::printf("STOPPED %s %lld\n", le.identity.c_str(), now_ms());
    std::fflush(stdout);
  });
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  return 0;
}
