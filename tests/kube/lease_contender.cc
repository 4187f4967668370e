// A process that contends for a Lease, for the leader-election tests.
// Usage: kube_lease_contender NAMESPACE LEASE IDENTITY LEASE_MS RENEW_MS RETRY_MS
// Prints "LEADING <identity>" when it becomes leader; exits 0 after a
// graceful shutdown (SIGTERM), 2 when it loses the lease.
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "operator/kube/client.h"
#include "operator/runtime/leader_election.h"
#include "operator/runtime/shutdown.h"

int main(int argc, char** argv) {
  using namespace kubetrain;
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s NS LEASE IDENTITY LEASE_MS RENEW_MS RETRY_MS\n", argv[0]);
    return 64;
  }
  std::stop_token stop = runtime::InstallShutdownHandler();
  auto cfg = kube::LoadDefaultConfig();
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().ToString().c_str());
    return 1;
  }
  auto client = kube::Client::Create(*cfg);
  if (!client.ok()) return 1;
  runtime::LeaderElectionConfig le;
  le.lease_namespace = argv[1];
  le.lease_name = argv[2];
  le.identity = argv[3];
  le.lease_duration = std::chrono::milliseconds(std::atol(argv[4]));
  le.renew_deadline = std::chrono::milliseconds(std::atol(argv[5]));
  le.retry_period = std::chrono::milliseconds(std::atol(argv[6]));
  runtime::LeaderElector elector(client->get(), le);
  Status s = elector.Run(stop, [&](std::stop_token leading) {
    std::printf("LEADING %s\n", le.identity.c_str());
    std::fflush(stdout);
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait(lock, leading, [] { return false; });
  });
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  return 0;
}
