#include "operator/runtime/api_client.h"

namespace kubetrain::runtime {
namespace {

class KubeApiClient final : public ApiClient {
 public:
  explicit KubeApiClient(kube::Client* client) : client_(client) {}

  Status Create(const kube::ResourceRef& r, const std::string& ns,
                const nlohmann::json& object) override {
    return client_->CreateUnread(r, ns, object);
  }
  StatusOr<nlohmann::json> GetObject(const kube::ResourceRef& r, const std::string& ns,
                                     const std::string& name) override {
    return client_->Get(r, ns, name);
  }
  StatusOr<nlohmann::json> Update(const kube::ResourceRef& r, const std::string& ns,
                                  const nlohmann::json& object) override {
    return client_->Update(r, ns, object);
  }
  StatusOr<nlohmann::json> UpdateStatus(const kube::ResourceRef& r, const std::string& ns,
                                        const nlohmann::json& object) override {
    return client_->UpdateStatus(r, ns, object);
  }
  StatusOr<nlohmann::json> Patch(const kube::ResourceRef& r, const std::string& ns,
                                 const std::string& name, kube::PatchType type,
                                 const nlohmann::json& patch) override {
    return client_->Patch(r, ns, name, type, patch);
  }
  Status Delete(const kube::ResourceRef& r, const std::string& ns, const std::string& name,
                const kube::DeleteOptions& options) override {
    return client_->Delete(r, ns, name, options);
  }
  std::unique_ptr<ListerWatcher> ListWatch(
      const kube::ResourceRef& r, const std::string& ns, const std::string& selector,
      std::shared_ptr<const kube::FieldFilter> fields) override {
    return NewKubeListerWatcher(client_, r, ns, selector, "", 500, std::move(fields));
  }

 private:
  kube::Client* const client_;
};

}  // namespace

std::unique_ptr<ApiClient> NewKubeApiClient(kube::Client* client) {
  return std::make_unique<KubeApiClient>(client);
}

}  // namespace kubetrain::runtime
