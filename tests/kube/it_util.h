// Helpers shared by the kube/runtime integration tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "operator/kube/client.h"
#include "operator/kube/config.h"

namespace kubetrain::testing {

using json = nlohmann::json;

inline kube::Config ClusterConfig() {
  auto cfg = kube::LoadDefaultConfig();
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  if (!cfg.ok()) return {};
  cfg->qps = 0;  // tests create hundreds of objects quickly
  return *cfg;
}

inline std::unique_ptr<kube::Client> NewClient(kube::Config cfg) {
  auto c = kube::Client::Create(std::move(cfg));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

inline int ServerPort(const kube::Config& cfg) {
  auto colon = cfg.server.rfind(':');
  return std::stoi(cfg.server.substr(colon + 1));
}

inline std::string RandomName(const std::string& prefix) {
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  return prefix + "-" + std::to_string(rng() % 1000000);
}

// Polls `pred` every 20 ms until it holds or `timeout` passes.
inline bool Eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// A namespace for one test, deleted at the end.
class ScopedNamespace {
 public:
  explicit ScopedNamespace(kube::Client* client) : client_(client), name_(RandomName("kt-it")) {
    auto r = client_->Create(
        kube::kNamespaces, "",
        {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name_}}}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
  }
  ~ScopedNamespace() { (void)client_->Delete(kube::kNamespaces, "", name_); }
  const std::string& name() const { return name_; }

 private:
  kube::Client* client_;
  std::string name_;
};

inline json ConfigMap(const std::string& name, const std::string& value = "v",
                      json labels = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", labels}}},
          {"data", {{"k", value}}}};
}

}  // namespace kubetrain::testing
