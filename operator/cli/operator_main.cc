// `kubetrain-operator`: the TrainingJob controller process.
//
// Flow: load the client config -> (optionally) win the leader Lease -> start
// the informers -> run the reconcile workers until SIGTERM/SIGINT or lost
// leadership. /metrics, /healthz and /readyz are served the whole time.
// /readyz reports this replica's own state (runtime::Readiness): a standby
// waiting for the Lease is ready, a leader once its caches synced; only the
// work is gated by the Lease. Exit codes: 0 after a graceful shutdown, 1 on a
// configuration error or caches that never synced, 2 when leadership was lost.
#include <sodium.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "common/http_server.h"
#include "kubetrain/version.h"
#include "operator/controller/job_controller.h"
#include "operator/controller/metrics.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"
#include "operator/runtime/events.h"
#include "operator/runtime/leader_election.h"
#include "operator/runtime/memory.h"
#include "operator/runtime/metrics.h"
#include "operator/runtime/readiness.h"
#include "operator/runtime/shutdown.h"
#include "operator/sweep/sweep_controller.h"

namespace {

struct Flags {
  std::string kubeconfig;
  std::string context;
  std::vector<std::string> namespaces;
  int workers = 4;
  int create_parallelism = 4;
  double qps = 50;
  int burst = 100;
  bool leader_elect = false;
  std::string lease_namespace = "kubetrain-system";
  std::string lease_name = "kubetrain-operator";
  std::string lease_identity;
  int lease_duration_s = 15;
  int renew_deadline_s = 10;
  int retry_period_s = 2;
  std::string cluster_domain = "cluster.local";
  bool network_policy = true;
  std::string operator_namespace;  // empty: $POD_NAMESPACE, else kubetrain-system
  std::string operator_pod_labels = "app.kubernetes.io/name=kubetrain-operator";
  std::vector<std::string> metrics_from;
  bool kueue = false;
  std::string gang_scheduler_name;
  std::string metrics_addr = "0.0.0.0:8080";
  std::string health_addr = "0.0.0.0:8081";
  std::string log_format = "text";
  std::string log_level = "info";
  int sync_timeout_s = 120;
  double status_coalesce_s = 30;
  int64_t lost_pod_grace_s = 60;
  // status.progress (issue 17): reads of trainers' /metrics, for the whole operator.
  double progress_qps = 10;
  int progress_burst = 10;
  double progress_interval_s = 15;
  double progress_backoff_s = 30;
  double progress_backoff_max_s = 600;
};

// Parses "host:port"; port 0 disables the server.
bool SplitAddr(const std::string& addr, std::string* host, int* port) {
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos) return false;
  *host = addr.substr(0, colon);
  try {
    *port = std::stoi(addr.substr(colon + 1));
  } catch (const std::exception&) {
    return false;
  }
  return *port >= 0 && *port < 65536;
}

// Starts `server` on `addr` ("host:port"; port 0: off). False, logged, on a
// bad address or a port that cannot be bound.
bool StartServer(kubetrain::HttpServer& server, const std::string& addr, const char* what) {
  std::string host;
  int port = 0;
  if (!SplitAddr(addr, &host, &port)) {
    spdlog::error("invalid {} address '{}': want host:port", what, addr);
    return false;
  }
  if (port == 0) return true;
  if (auto bound = server.Start(host, port); !bound.ok()) {
    spdlog::error("cannot serve {} on {}: {}", what, addr, bound.status().message());
    return false;
  }
  spdlog::info("serving {} on {}", what, addr);
  return true;
}

void ConfigureLogging(const Flags& f) {
  if (f.log_format == "json") {
    spdlog::set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","logger":"kubetrain-operator","msg":"%v"})",
        spdlog::pattern_time_type::utc);
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %v");
  }
  spdlog::set_level(spdlog::level::from_str(f.log_level));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kubetrain;
  runtime::TuneMalloc();  // before any thread: two malloc arenas (see memory.h)
  Flags f;
  CLI::App app{"kubetrain-operator: reconciles TrainingJobs into pods, services and a secret"};
  app.set_version_flag("--version", std::string("kubetrain-operator ") + kubetrain::kVersion);
  app.add_option("--kubeconfig", f.kubeconfig,
                 "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)");
  app.add_option("--context", f.context, "kubeconfig context (default: the current one)");
  app.add_option("--namespace", f.namespaces,
                 "namespace to watch; repeat for several (default: all namespaces)");
  app.add_option("--workers", f.workers, "reconcile worker threads")->check(CLI::Range(1, 256));
  app.add_option("--create-parallelism", f.create_parallelism,
                 "API calls in flight per reconcile creating a job's Services and Pods")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--qps", f.qps, "client-side API rate limit, requests/s")
      ->check(CLI::PositiveNumber);
  app.add_option("--burst", f.burst, "client-side API burst")->check(CLI::Range(1, 100000));
  app.add_flag("--leader-elect", f.leader_elect, "run leader election (for several replicas)");
  app.add_option("--leader-elect-namespace", f.lease_namespace, "namespace of the Lease");
  app.add_option("--leader-elect-name", f.lease_name, "name of the Lease");
  app.add_option("--leader-elect-identity", f.lease_identity,
                 "this replica's identity in the Lease (default: $POD_NAME, else "
                 "<hostname>_<random>)");
  app.add_option("--leader-elect-lease-duration", f.lease_duration_s, "seconds");
  app.add_option("--leader-elect-renew-deadline", f.renew_deadline_s, "seconds");
  app.add_option("--leader-elect-retry-period", f.retry_period_s, "seconds");
  app.add_option("--cluster-domain", f.cluster_domain,
                 "cluster DNS domain for CLUSTER_CONFIG hosts (a job's spec.clusterDomain wins)");
  app.add_option("--network-policy", f.network_policy,
                 "create a NetworkPolicy per job: only its own pods reach its training port, "
                 "only the operator (and --network-policy-metrics-from) its metrics port")
      ->capture_default_str();
  app.add_option("--operator-namespace", f.operator_namespace,
                 "the operator's namespace, whose pods (--operator-pod-labels) the job's "
                 "NetworkPolicy admits to the metrics port (default: $POD_NAMESPACE, else "
                 "kubetrain-system)");
  app.add_option("--operator-pod-labels", f.operator_pod_labels,
                 "the operator pods' labels, key=value[,key=value]")
      ->capture_default_str();
  app.add_option("--network-policy-metrics-from", f.metrics_from,
                 "a namespace selector, key=value[,key=value], whose pods the job's "
                 "NetworkPolicy also admits to the metrics port (a monitoring stack); repeat "
                 "for several");
  app.add_flag("--kueue", f.kueue,
               "queue jobs labelled kueue.x-k8s.io/queue-name through Kueue's Workloads "
               "(off if the Workload CRD is not installed)");
  app.add_option("--gang-scheduler-name", f.gang_scheduler_name,
                 "gang-schedule every job: a PodGroup per job (scheduling.x-k8s.io/v1alpha1) and "
                 "its pods sent to this scheduler (one with the Coscheduling plugin); empty: only "
                 "jobs that set schedulingPolicy.schedulerName and minAvailable");
  app.add_option("--metrics-addr", f.metrics_addr, "host:port for /metrics (port 0: off)");
  app.add_option("--health-addr", f.health_addr, "host:port for /healthz and /readyz (0: off)");
  app.add_option("--log-format", f.log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_option("--cache-sync-timeout", f.sync_timeout_s, "seconds to wait for caches");
  app.add_option("--status-coalesce", f.status_coalesce_s,
                 "seconds a job's live pod counts may wait to share one status write (0: off)")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  app.add_option("--lost-pod-grace", f.lost_pod_grace_s,
                 "seconds past a job pod's deletionTimestamp (its own grace period) after "
                 "which a pod no kubelet confirmed gone (its node is lost) is force-deleted, "
                 "so its replica can be recreated (0: never)")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}))
      ->capture_default_str();
  app.add_option("--progress-qps", f.progress_qps,
                 "status.progress: reads of trainers' metrics per second, all jobs together "
                 "(0: do not read; status.progress is left alone)")
      ->check(CLI::Range(0.0, 10000.0))
      ->capture_default_str();
  app.add_option("--progress-burst", f.progress_burst, "status.progress: read burst")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--progress-interval", f.progress_interval_s,
                 "status.progress: seconds between reads of one job")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--progress-backoff", f.progress_backoff_s,
                 "status.progress: seconds before reading a pod that failed to answer again, "
                 "doubling per failure in a row")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--progress-backoff-max", f.progress_backoff_max_s,
                 "status.progress: the longest backoff, seconds")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  ConfigureLogging(f);
  if (sodium_init() < 0) {
    spdlog::error("libsodium failed to initialise");
    return 1;
  }
  std::string metrics_host, health_host;
  int metrics_port = 0, health_port = 0;
  if (SplitAddr(f.metrics_addr, &metrics_host, &metrics_port) &&
      SplitAddr(f.health_addr, &health_host, &health_port) && metrics_port != 0 &&
      metrics_port == health_port) {
    spdlog::error(
        "--metrics-addr {} and --health-addr {} share a port: /healthz and /readyz get "
        "a server of their own, so that metrics scrapes cannot starve them",
        f.metrics_addr, f.health_addr);
    return 1;
  }
  if (f.leader_elect && f.renew_deadline_s >= f.lease_duration_s) {
    spdlog::error("--leader-elect-renew-deadline must be shorter than the lease duration");
    return 1;
  }
  if (f.operator_namespace.empty() && std::getenv("POD_NAMESPACE") != nullptr) {
    f.operator_namespace = std::getenv("POD_NAMESPACE");
  }
  auto ingress = controller::MetricsIngressFromFlags(f.operator_namespace, f.operator_pod_labels,
                                                     f.metrics_from);
  if (!ingress.ok()) {
    spdlog::error("{}", ingress.status().message());
    return 1;
  }

  auto config = kube::LoadDefaultConfig(f.kubeconfig, f.context);
  if (!config.ok()) {
    spdlog::error("{}", config.status().ToString());
    return 1;
  }
  config->qps = f.qps;
  config->burst = f.burst;
  // Once the lease is lost, the reconcilers' client refuses every write, also
  // one in the middle of a reconcile; the elector sets this at the deadline.
  auto fenced = std::make_shared<std::atomic<bool>>(false);
  if (f.leader_elect) config->may_write = [fenced] { return !fenced->load(); };
  auto client = kube::Client::Create(*config);
  if (!client.ok()) {
    spdlog::error("{}", client.status().ToString());
    return 1;
  }
  spdlog::info("kubetrain-operator {} talking to {}", kubetrain::kVersion,
               (*client)->config().server);

  const std::stop_token shutdown = runtime::InstallShutdownHandler();
  controller::Metrics metrics;
  runtime::DefaultMetrics().Help("kubetrain_thread_errors_total", "counter",
                                 "Exceptions caught at an operator thread's boundary (by "
                                 "thread); the thread carried on instead of ending the process.");
  runtime::EventRecorder recorder(client->get());
  controller::JobControllerOptions opts;
  opts.namespaces = f.namespaces;
  opts.cluster_domain = f.cluster_domain;
  opts.network_policy = f.network_policy;
  opts.metrics_ingress = *std::move(ingress);
  opts.kueue = f.kueue;
  if (opts.kueue) {
    // Kueue's API must be served, or the workloads cache would never sync.
    auto found = (*client)->Do("GET", "/apis/kueue.x-k8s.io/v1beta1");
    const bool served = found.ok() && found->status == 200 &&
                        found->body.find("\"workloads\"") != std::string::npos;
    if (!served) {
      spdlog::warn(
          "--kueue: kueue.x-k8s.io/v1beta1 workloads are not served ({}); the Kueue "
          "integration is off and jobs asking for a queue run unqueued, with a warning "
          "event",
          found.ok() ? "HTTP " + std::to_string(found->status) : found.status().ToString());
      opts.kueue = false;
    } else {
      spdlog::info("--kueue: jobs labelled kueue.x-k8s.io/queue-name are admitted by Kueue");
    }
  }
  opts.gang_scheduler_name = f.gang_scheduler_name;
  opts.workers = f.workers;
  opts.create_parallelism = f.create_parallelism;
  opts.status_coalesce =
      std::chrono::milliseconds(static_cast<int64_t>(f.status_coalesce_s * 1000));
  opts.lost_pod_grace = std::chrono::seconds(f.lost_pod_grace_s);
  opts.read_progress = f.progress_qps > 0;
  {
    using Dur = progress::ScrapeScheduler::Clock::duration;
    auto secs = [](double s) {
      return std::chrono::duration_cast<Dur>(std::chrono::duration<double>(s));
    };
    opts.progress.schedule = {
        .qps = f.progress_qps,
        .burst = f.progress_burst,
        .interval = secs(f.progress_interval_s),
        .backoff_base = secs(f.progress_backoff_s),
        .backoff_max = secs(std::max(f.progress_backoff_s, f.progress_backoff_max_s))};
  }

  using ReadyState = runtime::Readiness::State;
  runtime::Readiness readiness;
  // Stops the elector (or the lone controller) on SIGTERM/SIGINT, and when the
  // leader cannot start: a leader that does no work must give the Lease up
  // rather than keep renewing it.
  std::stop_source quit;
  std::stop_callback on_shutdown(shutdown, [&] {
    readiness.Set(ReadyState::kStopping);
    quit.request_stop();
  });
  // Two servers, each its own event loop (common/http_server.h: bounded
  // headers, time per request, connections in total and per client): a flood
  // of /metrics scrapes cannot starve the kubelet's liveness probe.
  HttpServer metrics_server, health_server;
  metrics_server.Handle("/metrics", [&](const HttpRequest&) {
    HttpResponse res;
    res.content_type = "text/plain; version=0.0.4";
    res.body = metrics.Render();
    AppendHttpStats("kubetrain_operator_http_connections_total",
                    {{"metrics", metrics_server.stats()}, {"health", health_server.stats()}},
                    &res.body);
    return res;
  });
  health_server.Handle("/healthz", [](const HttpRequest&) {
    HttpResponse res;
    res.body = "ok\n";
    return res;
  });
  health_server.Handle("/readyz", [&](const HttpRequest&) {
    const runtime::Readiness::Report r = readiness.Check();
    HttpResponse res;
    res.status = r.ready ? 200 : 503;
    res.body = std::string(r.message) + "\n";
    return res;
  });
  if (!StartServer(metrics_server, f.metrics_addr, "/metrics") ||
      !StartServer(health_server, f.health_addr, "/healthz and /readyz")) {
    return 1;
  }

  int exit_code = 0;
  auto lead_unsafe = [&](std::stop_token stop) {
    readiness.Set(ReadyState::kSyncing);
    controller::JobController jobs(client->get(), &recorder, &metrics, opts);
    // The first sync sees the stop token: SIGTERM while it keeps failing (bad
    // kubeconfig, RBAC) exits at once instead of after --cache-sync-timeout.
    const Status started = jobs.Start(std::chrono::seconds(f.sync_timeout_s), stop);
    if (!started.ok() && stop.stop_requested()) {
      spdlog::info("stopped before the caches synced");
      readiness.Set(ReadyState::kStopping);
      return;
    }
    if (!started.ok()) {
      spdlog::error("{}", started.ToString());
      exit_code = 1;
      readiness.Set(ReadyState::kStopping);
      quit.request_stop();  // release the Lease so a standby takes over
      return;
    }
    readiness.Set(ReadyState::kSynced);  // caches never unsync once synced
    spdlog::info("caches synced; reconciling with {} workers", f.workers);
    // TrainingSweeps: their own informers and workers beside the jobs'. Not
    // waited for: a cluster may install the TrainingSweep CRD later.
    sweep::SweepController sweeps(client->get(), &recorder, &metrics,
                                  {.namespaces = f.namespaces, .workers = 2});
    sweeps.Start();
    std::jthread sweep_workers([&sweeps, stop] { sweeps.Run(stop); });
    jobs.Run(stop);
    sweep_workers.join();
    // Shutdown or lost leadership: either way this process exits now.
    readiness.Set(ReadyState::kStopping);
    spdlog::info("workers stopped");
  };
  // The leading thread's boundary: nothing may end the process from here
  // without the Lease being released, so an exception stops this replica
  // cleanly (exit 1) and is counted.
  auto lead = [&](std::stop_token stop) {
    try {
      lead_unsafe(stop);
    } catch (const std::exception& e) {
      spdlog::error("controller stopped by an unexpected error: {}", e.what());
      runtime::DefaultMetrics().Add("kubetrain_thread_errors_total", "thread=\"leader\"");
      exit_code = 1;
      readiness.Set(ReadyState::kStopping);
      quit.request_stop();
    }
  };

  if (!f.leader_elect) {
    lead(quit.get_token());
    return exit_code;
  }
  runtime::LeaderElectionConfig le;
  le.lease_namespace = f.lease_namespace;
  le.lease_name = f.lease_name;
  le.identity = f.lease_identity;
  if (le.identity.empty()) {
    if (const char* pod = std::getenv("POD_NAME"); pod != nullptr && *pod != '\0')
      le.identity = pod;
  }
  le.lease_duration = std::chrono::seconds(f.lease_duration_s);
  le.renew_deadline = std::chrono::seconds(f.renew_deadline_s);
  le.retry_period = std::chrono::seconds(f.retry_period_s);
  le.on_lost = [fenced] { fenced->store(true); };
  // Leader election has its own client: a renewal is never queued behind
  // reconciles in the rate limiter, and each attempt ends within the renew
  // deadline (runtime::LeaderElectionClientConfig).
  auto le_client = kube::Client::Create(runtime::LeaderElectionClientConfig(*config, le));
  if (!le_client.ok()) {
    spdlog::error("{}", le_client.status().ToString());
    return 1;
  }
  runtime::LeaderElector elector(le_client->get(), le);
  spdlog::info("waiting to lead {}/{} as {}", le.lease_namespace, le.lease_name,
               elector.identity());
  readiness.Set(ReadyState::kStandby);
  const Status s = elector.Run(quit.get_token(), lead);
  if (!s.ok()) {
    spdlog::error("leader election: {}", s.ToString());
    return 2;
  }
  return exit_code;
}
