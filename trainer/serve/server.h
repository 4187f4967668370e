// kubetrain-serve's HTTP face: the KServe v2 and TensorFlow Serving REST endpoints, health,
// Prometheus metrics, in front of a Batcher running the current Predictor.
//
// Endpoints (name = ServerOptions::model_name):
//   GET  /v2/health/live, /v2/health/ready         200, or 503 while not ready
//   GET  /v2, /v2/models/{name}, /v2/models/{name}/ready
//   POST /v2/models/{name}/infer                   Open Inference Protocol v2 (JSON data, or
//                                                  the binary tensor data extension)
//   GET  /v2/models/{name}/versions/{v}[/ready], POST .../versions/{v}/infer: the same for
//        the version served now (the model's step); another version: 404 naming the served one
//   GET  /v1/models/{name}                         TF Serving model status
//   POST /v1/models/{name}:predict                 TF Serving predict (instances / inputs)
//   GET  /metrics                                  Prometheus text
// Status codes: 400 for a request that does not fit the model (with {"error": why}), 404
// for another model's name, 413 for a body over max_body_bytes, 503 while no model is
// loaded, while draining, or when the batch queue is full (the client retries).
//
// Flow: requests are parsed on the HTTP loop thread and queued to the Batcher; its worker
//   answers each through the HTTP server's responder. A lone small request (at most
//   inline_max_examples, nothing queued or running, no other connection ready) runs on the
//   loop thread instead (Batcher::RunNowIfIdle), answered with no thread hand-off. SetPredictor
//   swaps the model for requests that arrive after it (a hot reload); a request accepted
//   before is computed by the model it was checked against, the version its answer names.
// Thread safety: every method from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "common/http_server.h"
#include "common/mutex.h"
#include "trainer/serve/batcher.h"
#include "trainer/serve/predictor.h"

namespace kubetrain::trainer::serve {

struct ServerOptions {
  std::string model_name = "kubetrain";
  BatcherOptions batcher;
  HttpLimits http;
  int max_request_examples = 1024;
  // Requests of at most this many examples run on the HTTP loop thread when the batcher
  // is idle and no other request is ready (0: always through the batcher's queue).
  int inline_max_examples = 8;
};

class ModelServer {
 public:
  explicit ModelServer(ServerOptions options);
  ~ModelServer();

  // Binds and serves (not ready until the first SetPredictor). Returns the port.
  [[nodiscard]] StatusOr<int> Start(std::string_view host, int port);
  // Serves `p` to the requests that arrive from now on; ready from now on.
  void SetPredictor(std::shared_ptr<Predictor> p);
  // The model served now (null before the first).
  std::shared_ptr<Predictor> predictor() const;
  // Counts a failed reload (for the metrics).
  void CountReload(bool ok);
  // Not ready any more; answers what is queued and stops (idempotent).
  void Drain();

  std::string RenderMetrics() const;

 private:
  void Infer(HttpRequest req, HttpResponder respond, bool v2);
  HttpResponse Json(int status, std::string body) const;

  const ServerOptions o_;
  HttpServer http_;
  Batcher<Predictor> batcher_;

  mutable Mutex mu_;
  std::shared_ptr<Predictor> predictor_ GUARDED_BY(mu_);
  std::atomic<bool> draining_{false};

  // Metrics.
  static constexpr int kLatencyBuckets = 12;
  struct Counters {
    std::atomic<uint64_t> ok_v2{0}, ok_tf{0}, bad_v2{0}, bad_tf{0}, unavailable{0};
    std::atomic<uint64_t> reloads_ok{0}, reloads_failed{0};
    std::atomic<uint64_t> latency_count{0}, latency_us_sum{0};
    std::atomic<uint64_t> latency_le[kLatencyBuckets] = {};
  };
  mutable Counters c_;
  void ObserveLatency(std::chrono::steady_clock::duration d);
};

}  // namespace kubetrain::trainer::serve
