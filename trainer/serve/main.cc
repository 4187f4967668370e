// `kubetrain-serve`: serves a model a kubetrain job trained (its --output: model.json and
// the committed checkpoint in model/, local or s3://) over KServe's Open Inference
// Protocol v2 and TensorFlow Serving's REST API, with the trainer's own oneDNN forward
// pass. See trainer/serve/server.h for the endpoints and docs/user-guide.md for use.
//
// Flow: block SIGTERM/SIGINT (before any thread), start HTTP (not ready), load the model
//   (retrying every --poll-interval until a checkpoint is committed), then wait for a
//   signal with the poll interval as timeout: each timeout looks for a newer committed
//   checkpoint (one listing) and, if there is one, loads it beside the current model and
//   swaps it in (requests keep being served meanwhile). On SIGTERM: not ready, answer
//   what is queued, exit 0.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <string>

#include "kubetrain/version.h"
#include "trainer/export/export.h"
#include "trainer/model/model.h"
#include "trainer/ps/checkpoint.h"
#include "trainer/serve/server.h"

namespace {

using namespace kubetrain;
using namespace kubetrain::trainer;

// Waits for SIGTERM or SIGINT up to `seconds`; true when one came.
bool WaitForSignal(const sigset_t& set, double seconds) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>((seconds - std::floor(seconds)) * 1e9);
  for (;;) {
    const int sig = ::sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return true;
    if (errno == EINTR) continue;
    return false;  // EAGAIN: the timeout
  }
}

}  // namespace

int main(int argc, char** argv) {
  // As in kubetrain-trainer: OpenMP threads sleep while idle instead of spinning (a server
  // is idle between batches; spinning would burn its CPU quota).
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && ::setenv("OMP_WAIT_POLICY", "passive", 1) == 0) {
    ::execv("/proc/self/exe", argv);
  }
  std::string model_dir, checkpoint_dir, host, precision = "fp32";
  int port = 8080, threads = 0, max_batch = 256, max_request_examples = 1024;
  int keep_alive_requests = 1000;
  double keep_alive_idle_s = 15;
  double max_wait_ms = 0.0, poll_s = 30.0, request_timeout_s = 10.0;
  size_t max_body_bytes = 4 << 20;
  size_t fold_max_mb = serve::PredictorOptions{}.fold_max_bytes >> 20;
  int max_connections = 256, max_connections_per_client = 64;
  serve::ServerOptions o;
  CLI::App app{"kubetrain-serve: serve a kubetrain model (KServe v2 and TF Serving REST)"};
  app.set_version_flag("--version", std::string("kubetrain-serve ") + kVersion);
  app.add_option("--model", model_dir,
                 "a job's --output (directory or s3://bucket/prefix/): model.json and model/")
      ->required();
  app.add_option("--checkpoint-dir", checkpoint_dir,
                 "the checkpoint root, when it is not <--model>/model");
  app.add_option("--model-name", o.model_name, "the name in the URLs")->capture_default_str();
  app.add_option("--host", host, "address to listen on (default: all)");
  app.add_option("--port", port, "HTTP port")->capture_default_str();
  app.add_option("--threads", threads, "compute threads (0: the container's CPU limit)");
  app.add_option("--precision", precision, "fp32, or bf16 where the CPU has it")
      ->capture_default_str();
  app.add_option("--max-batch-size", max_batch, "examples per batch, at most")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--max-batch-wait", max_wait_ms,
                 "milliseconds the oldest waiting request waits for others to batch with")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  app.add_option("--max-request-examples", max_request_examples, "examples per request, at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-body-bytes", max_body_bytes, "request body bytes, at most")
      ->capture_default_str();
  app.add_option("--request-timeout", request_timeout_s,
                 "seconds from connect to the last response byte, at most")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  app.add_option("--max-connections", max_connections, "open connections, at most")
      ->capture_default_str();
  app.add_option("--max-connections-per-client", max_connections_per_client,
                 "open connections per client address, at most")
      ->capture_default_str();
  app.add_option("--keep-alive-requests", keep_alive_requests,
                 "requests per connection, at most (1: no keep-alive)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--keep-alive-idle", keep_alive_idle_s,
                 "seconds a kept-alive connection may wait for its next request")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--inline-max-examples", o.inline_max_examples,
                 "a lone request of at most this many examples runs at once on the HTTP "
                 "thread when no batch is running (0: always queue for the batcher)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--fold-embeddings-max-mb", fold_max_mb,
                 "Wide & Deep (FP32): fold the embeddings into the first layer when the folded "
                 "tables (trained rows x first layer width x 4 bytes) fit this many MiB; they "
                 "fill as ids arrive, into room for twice that within this cap (0: never fold)")
      ->check(CLI::Range(size_t{0}, size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--poll-interval", poll_s,
                 "seconds between looks for a newer committed checkpoint (hot reload)")
      ->check(CLI::Range(0.05, 86400.0))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // Before any thread: every later thread inherits the mask, so only sigtimedwait below
  // takes the signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto prec = ParsePrecision(precision);
  if (!prec.ok()) {
    spdlog::error("{}", prec.status().message());
    return 2;
  }
  if (*prec == Precision::kBf16 && !CpuHasNativeBf16()) {
    spdlog::warn("--precision bf16: this CPU has no native BF16; serving FP32");
    *prec = Precision::kFp32;
  }
  if (threads <= 0) threads = DefaultThreadCount();
  o.batcher.max_batch = max_batch;
  o.batcher.max_wait = std::chrono::microseconds(static_cast<int64_t>(max_wait_ms * 1000));
  // Examples waiting for a batch, at most: a few requests of each client (some 260 bytes
  // each for Wide & Deep), then 503 (the client retries).
  o.batcher.max_queue =
      std::max<int64_t>(16 * int64_t{max_batch}, 4 * int64_t{max_request_examples});
  o.batcher.compute_threads = threads;
  o.max_request_examples = max_request_examples;
  o.http.max_body_bytes = max_body_bytes;
  o.http.max_header_bytes = 8 * 1024;
  o.http.request_deadline =
      std::chrono::milliseconds(static_cast<int64_t>(request_timeout_s * 1000));
  o.http.max_connections = max_connections;
  o.http.max_connections_per_client = max_connections_per_client;
  o.http.max_requests_per_connection = keep_alive_requests;
  o.http.keep_alive_idle =
      std::chrono::milliseconds(static_cast<int64_t>(keep_alive_idle_s * 1000));

  serve::ModelServer server(o);
  auto bound = server.Start(host, port);
  if (!bound.ok()) {
    spdlog::error("{}", bound.status().ToString());
    return 1;
  }
  serve::PredictorOptions po;
  po.model_dir = model_dir;
  po.checkpoint_dir = checkpoint_dir;
  po.precision = *prec;
  po.max_batch = max_batch;
  po.compute_threads = threads;
  po.fold_max_bytes = fold_max_mb << 20;
  spdlog::info(
      "kubetrain-serve {} on port {}: model {} as \"{}\", {} threads, batches of <= {} "
      "(wait <= {} ms)",
      kVersion, *bound, model_dir, o.model_name, threads, max_batch, max_wait_ms);

  int64_t failed_step = -1;  // the newest step that did not load: not retried until a newer one
  for (;;) {
    const auto current = server.predictor();
    const std::string root = checkpoint_dir.empty()
                                 ? model_dir + (model_dir.ends_with('/') ? "" : "/") + "model"
                                 : checkpoint_dir;
    auto newest = NewestCommittedStep(root);
    if (newest.ok() && (!current || *newest > current->step()) && *newest != failed_step) {
      const auto start = std::chrono::steady_clock::now();
      auto loaded = serve::Predictor::Load(po);
      if (loaded.ok() && (!current || (*loaded)->step() > current->step())) {
        spdlog::info("{} model of step {} ({} ms); {}",
                     current ? "reloaded: serving the" : "serving the", (*loaded)->step(),
                     std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - start)
                         .count(),
                     (*loaded)->fold_path());
        server.SetPredictor(std::move(*loaded));
        if (current) server.CountReload(true);
      } else {
        spdlog::warn(
            "cannot load the checkpoint of step {}: {}", *newest,
            loaded.ok() ? "an older one is the newest complete" : loaded.status().ToString());
        failed_step = *newest;
        server.CountReload(false);
      }
    } else if (!newest.ok() && !current) {
      spdlog::info("waiting for a model: {}", newest.status().ToString());
    }
    if (WaitForSignal(signals, poll_s)) break;
  }
  spdlog::info("stopping: draining requests");
  server.Drain();
  spdlog::info("stopped");
  return 0;
}
