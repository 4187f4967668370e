#include "trainer/serve/server.h"

#include <spdlog/spdlog.h>

#include <charconv>

#include "kubetrain/version.h"

namespace kubetrain::trainer::serve {
namespace {

using Clock = std::chrono::steady_clock;

// Upper bounds of the request latency histogram, seconds.
constexpr double kLatencyLe[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                 0.05,   0.1,   0.2,   0.5,   1,    5};

}  // namespace

ModelServer::ModelServer(ServerOptions options)
    : o_(std::move(options)),
      http_(o_.http),
      batcher_(o_.batcher, [](Predictor& p, const Batch& b, std::vector<float>* probs) {
        return p.Run(b, probs);
      }) {
  static_assert(sizeof kLatencyLe / sizeof kLatencyLe[0] == kLatencyBuckets);
  const std::string name = o_.model_name;
  auto text = [this](int status, std::string body) { return Json(status, std::move(body)); };
  http_.Handle("/v2/health/live",
               [text](const HttpRequest&) { return text(200, R"({"live":true})"); });
  http_.Handle("/v2/health/ready", [this, text](const HttpRequest&) {
    const bool ready = predictor() != nullptr && !draining_.load();
    return text(ready ? 200 : 503, ready ? R"({"ready":true})" : R"({"ready":false})");
  });
  http_.Handle("/v2", [text](const HttpRequest&) {
    return text(200, nlohmann::json{{"name", "kubetrain-serve"},
                                    {"version", kVersion},
                                    {"extensions", {"binary_tensor_data"}}}
                         .dump());
  });
  http_.Handle("/v2/models/" + name, [this, text, name](const HttpRequest&) {
    auto p = predictor();
    if (!p) return text(503, RenderError("no model loaded yet"));
    return text(200, RenderV2Metadata(p->layout(), name, std::to_string(p->step()),
                                      {{"embedding_fold", p->fold_path()}}));
  });
  http_.Handle("/v2/models/" + name + "/ready", [this, text](const HttpRequest&) {
    const bool ready = predictor() != nullptr && !draining_.load();
    return text(ready ? 200 : 503, ready ? R"({"ready":true})" : R"({"ready":false})");
  });
  http_.HandleAsync("/v2/models/" + name + "/infer", [this](HttpRequest r, HttpResponder respond) {
    Infer(std::move(r), std::move(respond), true);
  });
  // /v2/models/{name}/versions/{v}[/ready|/infer]: the version served now (the model's
  // step), else 404.
  http_.HandlePrefixAsync("/v2/models/" + name + "/versions/", [this, text, name](
                                                                   HttpRequest r,
                                                                   HttpResponder respond) {
    std::string_view rest = r.path;
    rest.remove_prefix(("/v2/models/" + name + "/versions/").size());
    const size_t slash = rest.find('/');
    const std::string version(rest.substr(0, slash));
    const std::string_view what =
        slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
    if (!what.empty() && what != "/ready" && what != "/infer")
      return respond(Json(404, RenderError("no such endpoint: " + r.path)));
    auto p = predictor();
    if (!p) return respond(text(503, RenderError("no model loaded yet")));
    const std::string served = std::to_string(p->step());
    if (version != served) {
      return respond(text(404, RenderError("model " + name + " has no version \"" + version +
                                           "\"; it serves version " + served)));
    }
    if (what == "/infer") return Infer(std::move(r), std::move(respond), true);
    if (what == "/ready") {
      const bool ready = !draining_.load();
      return respond(text(ready ? 200 : 503, ready ? R"({"ready":true})" : R"({"ready":false})"));
    }
    respond(text(
        200, RenderV2Metadata(p->layout(), name, served, {{"embedding_fold", p->fold_path()}})));
  });
  http_.Handle("/v1/models/" + name, [this, text](const HttpRequest&) {
    auto p = predictor();
    const std::string version = p ? std::to_string(p->step()) : "0";
    const char* state = p && !draining_.load() ? "AVAILABLE" : "LOADING";
    return text(p ? 200 : 503,
                nlohmann::json{{"model_version_status",
                                {{{"version", version},
                                  {"state", state},
                                  {"status", {{"error_code", "OK"}, {"error_message", ""}}}}}}}
                    .dump());
  });
  http_.HandleAsync("/v1/models/" + name + ":predict",
                    [this](HttpRequest r, HttpResponder respond) {
                      Infer(std::move(r), std::move(respond), false);
                    });
  http_.Handle("/metrics", [this](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = RenderMetrics();
    return r;
  });
}

ModelServer::~ModelServer() {
  Drain();
}

StatusOr<int> ModelServer::Start(std::string_view host, int port) {
  return http_.Start(host, port);
}

void ModelServer::SetPredictor(std::shared_ptr<Predictor> p) {
  MutexLock lock(mu_);
  predictor_ = std::move(p);
}

std::shared_ptr<Predictor> ModelServer::predictor() const {
  MutexLock lock(mu_);
  return predictor_;
}

void ModelServer::CountReload(bool ok) {
  (ok ? c_.reloads_ok : c_.reloads_failed).fetch_add(1);
}

void ModelServer::Drain() {
  draining_.store(true);
  batcher_.Stop();  // answers what is queued (new requests get 503)
  http_.Stop();     // writes those answers, then closes
}

HttpResponse ModelServer::Json(int status, std::string body) const {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

void ModelServer::ObserveLatency(Clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  c_.latency_count.fetch_add(1, std::memory_order_relaxed);
  c_.latency_us_sum.fetch_add(static_cast<uint64_t>(s * 1e6), std::memory_order_relaxed);
  for (int i = 0; i < kLatencyBuckets; ++i) {
    if (s <= kLatencyLe[i]) c_.latency_le[i].fetch_add(1, std::memory_order_relaxed);
  }
}

void ModelServer::Infer(HttpRequest req, HttpResponder respond, bool v2) {
  const auto start = Clock::now();
  std::shared_ptr<Predictor> p = predictor();
  if (!p || draining_.load()) {
    c_.unavailable.fetch_add(1, std::memory_order_relaxed);
    return respond(Json(503, RenderError(p ? "shutting down" : "no model loaded yet")));
  }
  // The binary tensor data extension: the JSON is the first Inference-Header-Content-Length
  // bytes of the body (ParseV2Infer checks it against the body).
  std::optional<size_t> json_length;
  if (const auto h = req.Header("Inference-Header-Content-Length"); h && v2) {
    size_t n = 0;
    const auto [end, ec] = std::from_chars(h->data(), h->data() + h->size(), n);
    if (h->empty() || ec != std::errc() || end != h->data() + h->size()) {
      c_.bad_v2.fetch_add(1, std::memory_order_relaxed);
      return respond(Json(400, RenderError("Inference-Header-Content-Length must be a byte count, "
                                           "got \"" +
                                           std::string(*h) + "\"")));
    }
    json_length = n;
  }
  auto parsed = v2 ? ParseV2Infer(req.body, p->layout(), o_.max_request_examples, json_length)
                   : ParseTfPredict(req.body, p->layout(), o_.max_request_examples);
  if (!parsed.ok()) {
    (v2 ? c_.bad_v2 : c_.bad_tf).fetch_add(1, std::memory_order_relaxed);
    return respond(Json(400, RenderError(parsed.status().message())));
  }
  // What the answer needs besides the probabilities (the examples go to the batcher).
  ParsedRequest meta;
  meta.form = parsed->form;
  meta.id = std::move(parsed->id);
  meta.examples.size = parsed->examples.size;
  meta.binary_output = parsed->binary_output;
  const TensorLayout layout = p->layout();
  const std::string version = std::to_string(p->step());
  auto finish = [this, respond, meta = std::move(meta), layout, version, v2,
                 start](StatusOr<std::vector<float>> probs) {
    if (!probs.ok()) {
      const bool busy = probs.status().code() == StatusCode::kUnavailable;
      (busy ? c_.unavailable : (v2 ? c_.bad_v2 : c_.bad_tf)).fetch_add(1);
      respond(Json(busy ? 503 : 500, RenderError(probs.status().message())));
      return;
    }
    (v2 ? c_.ok_v2 : c_.ok_tf).fetch_add(1, std::memory_order_relaxed);
    if (meta.binary_output) {
      HttpResponse r;
      size_t header_length = 0;
      r.content_type = "application/octet-stream";
      r.body = RenderV2Binary(meta, layout, o_.model_name, version, *probs, &header_length);
      r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(header_length));
      respond(std::move(r));
    } else {
      respond(Json(200, v2 ? RenderV2(meta, layout, o_.model_name, version, *probs)
                           : RenderTf(meta, layout, *probs)));
    }
    ObserveLatency(Clock::now() - start);
  };
  // A lone small request (nothing queued, no batch running, no other connection ready
  // on the loop): answered here on the loop thread, with no hand-off to the batcher's
  // worker and back. It holds the loop for one small forward pass (~0.1 ms for batch 1
  // of the default Wide & Deep); under concurrent load requests queue and batch as before.
  if (parsed->examples.size <= o_.inline_max_examples && !req.more_ready) {
    if (auto probs = batcher_.RunNowIfIdle(*p, parsed->examples)) {
      return finish(std::move(*probs));
    }
  }
  // Computed by `p`, the model the request was checked against and whose version the
  // answer names, even when a newer one is swapped in while it waits.
  Status s = batcher_.Submit(std::move(p), std::move(parsed->examples), std::move(finish));
  if (!s.ok()) {
    c_.unavailable.fetch_add(1, std::memory_order_relaxed);
    respond(Json(503, RenderError(s.message())));
  }
}

std::string ModelServer::RenderMetrics() const {
  std::string out;
  auto counter = [&](std::string_view name, std::string_view help) {
    out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ");
    out.append(name).append(" counter\n");
  };
  counter("kubetrain_serve_requests_total", "Inference requests by protocol and status code.");
  for (const auto& [proto, code, n] :
       {std::tuple<const char*, const char*, uint64_t>{"v2", "200", c_.ok_v2.load()},
        {"v2", "400", c_.bad_v2.load()},
        {"tf", "200", c_.ok_tf.load()},
        {"tf", "400", c_.bad_tf.load()},
        {"any", "503", c_.unavailable.load()}}) {
    out += "kubetrain_serve_requests_total{protocol=\"" + std::string(proto) + "\",code=\"" + code +
           "\"} " + std::to_string(n) + "\n";
  }
  const BatcherStats b = batcher_.stats();
  counter("kubetrain_serve_batches_total", "Batches run (dynamic batching).");
  out += "kubetrain_serve_batches_total " + std::to_string(b.batches) + "\n";
  counter("kubetrain_serve_inline_requests_total",
          "Lone small requests answered on the HTTP loop thread, without queueing.");
  out += "kubetrain_serve_inline_requests_total " + std::to_string(b.inline_requests) + "\n";
  counter("kubetrain_serve_examples_total", "Examples predicted.");
  out += "kubetrain_serve_examples_total " + std::to_string(b.examples) + "\n";
  counter("kubetrain_serve_compute_seconds_total", "Seconds in the model's forward pass.");
  out += "kubetrain_serve_compute_seconds_total " + std::to_string(b.compute_seconds) + "\n";
  counter("kubetrain_serve_reloads_total", "Model reloads by result.");
  out += "kubetrain_serve_reloads_total{result=\"ok\"} " + std::to_string(c_.reloads_ok.load()) +
         "\nkubetrain_serve_reloads_total{result=\"failed\"} " +
         std::to_string(c_.reloads_failed.load()) + "\n";
  const auto p = predictor();
  out +=
      "# HELP kubetrain_serve_model_step The training step of the model served.\n"
      "# TYPE kubetrain_serve_model_step gauge\nkubetrain_serve_model_step " +
      std::to_string(p ? p->step() : -1) + "\n";
  out +=
      "# HELP kubetrain_serve_embedding_fold 1 when the model runs with its embeddings folded "
      "into its first layer (see /v2/models/{name} parameters.embedding_fold for why not).\n"
      "# TYPE kubetrain_serve_embedding_fold gauge\nkubetrain_serve_embedding_fold " +
      std::string(p && p->folded() ? "1" : "0") + "\n";
  out +=
      "# HELP kubetrain_serve_embedding_fold_rows Folded (field, id) rows kept so far.\n"
      "# TYPE kubetrain_serve_embedding_fold_rows gauge\nkubetrain_serve_embedding_fold_rows " +
      std::to_string(p ? p->folded_rows() : 0) + "\n";
  out +=
      "# HELP kubetrain_serve_request_seconds Inference request latency in this process "
      "(parsed to answered).\n# TYPE kubetrain_serve_request_seconds histogram\n";
  for (int i = 0; i < kLatencyBuckets; ++i) {
    out += "kubetrain_serve_request_seconds_bucket{le=\"" + std::to_string(kLatencyLe[i]) + "\"} " +
           std::to_string(c_.latency_le[i].load()) + "\n";
  }
  const uint64_t count = c_.latency_count.load();
  out += "kubetrain_serve_request_seconds_bucket{le=\"+Inf\"} " + std::to_string(count) + "\n";
  out += "kubetrain_serve_request_seconds_sum " +
         std::to_string(static_cast<double>(c_.latency_us_sum.load()) / 1e6) + "\n";
  out += "kubetrain_serve_request_seconds_count " + std::to_string(count) + "\n";
  AppendHttpStats("kubetrain_serve_http_connections_total", {{"serve", http_.stats()}}, &out);
  return out;
}

}  // namespace kubetrain::trainer::serve
