#include "operator/controller/job_client.h"

namespace kubetrain::controller {
namespace {

class KubeJobClient final : public JobClient {
 public:
  explicit KubeJobClient(kube::Client* client) : client_(client) {}

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
  std::unique_ptr<runtime::ListerWatcher> ListWatch(
      const kube::ResourceRef& r, const std::string& ns, const std::string& selector,
      std::shared_ptr<const kube::FieldFilter> fields) override {
    return runtime::NewKubeListerWatcher(client_, r, ns, selector, "", 500, std::move(fields));
  }

 private:
  kube::Client* const client_;
};

}  // namespace

std::unique_ptr<JobClient> NewKubeJobClient(kube::Client* client) {
  return std::make_unique<KubeJobClient>(client);
}

}  // namespace kubetrain::controller
