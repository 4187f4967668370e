#include "operator/runtime/health_server.h"

#include <httplib.h>

#include <cmath>
#include <sstream>

namespace kubetrain::runtime {

void Metrics::Add(std::string_view name, std::string_view labels, double delta) {
  std::lock_guard lock(mu_);
  auto& f = families_[std::string(name)];
  if (f.type == "untyped") f.type = "counter";
  f.series[std::string(labels)] += delta;
}

void Metrics::Set(std::string_view name, std::string_view labels, double value) {
  std::lock_guard lock(mu_);
  auto& f = families_[std::string(name)];
  if (f.type == "untyped") f.type = "gauge";
  f.series[std::string(labels)] = value;
}

void Metrics::Help(std::string_view name, std::string_view type, std::string_view help) {
  std::lock_guard lock(mu_);
  auto& f = families_[std::string(name)];
  f.type = type;
  f.help = help;
}

double Metrics::Get(std::string_view name, std::string_view labels) const {
  std::lock_guard lock(mu_);
  auto f = families_.find(name);
  if (f == families_.end()) return 0;
  auto s = f->second.series.find(std::string(labels));
  return s == f->second.series.end() ? 0 : s->second;
}

std::string Metrics::Render() const {
  std::lock_guard lock(mu_);
  std::ostringstream out;
  for (const auto& [name, f] : families_) {
    if (!f.help.empty()) out << "# HELP " << name << " " << f.help << "\n";
    out << "# TYPE " << name << " " << f.type << "\n";
    for (const auto& [labels, v] : f.series) {
      out << name;
      if (!labels.empty()) out << "{" << labels << "}";
      out << " " << v << "\n";
    }
  }
  return out.str();
}

Metrics& DefaultMetrics() {
  static Metrics* m = new Metrics();  // never destroyed: used from detached threads
  return *m;
}

struct HealthServer::Impl {
  Metrics* metrics;
  std::function<bool()> ready;
  httplib::Server server;
  std::thread thread;
};

HealthServer::HealthServer(Metrics* metrics, std::function<bool()> ready)
    : impl_(std::make_unique<Impl>()) {
  impl_->metrics = metrics;
  impl_->ready = std::move(ready);
  impl_->server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  impl_->server.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    bool ok = !impl_->ready || impl_->ready();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "ok\n" : "not ready\n", "text/plain");
  });
  impl_->server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(impl_->metrics->Render(), "text/plain; version=0.0.4");
  });
}

HealthServer::~HealthServer() {
  Stop();
}

StatusOr<int> HealthServer::Start(const std::string& host, int port) {
  int bound = port == 0 ? impl_->server.bind_to_any_port(host.c_str())
                        : (impl_->server.bind_to_port(host.c_str(), port) ? port : -1);
  if (bound < 0)
    return Unavailable("health server: cannot bind " + host + ":" + std::to_string(port));
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
  return bound;
}

void HealthServer::Stop() {
  if (impl_->thread.joinable()) {
    impl_->server.stop();
    impl_->thread.join();
  }
}

}  // namespace kubetrain::runtime
