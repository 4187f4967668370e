// tfjob_v1_render FILE NAMESPACE [CUSTOM_CLUSTER_DOMAIN]: the Pods and Services
// training-operator v1.9.3 would create for each TFJob of FILE, by
// operator/planner/tfjob_v1.h, as one JSON array on stdout. Test tooling for
// tests/tfjob/v1_fidelity.sh, which compares it with what v1.9.3 itself creates.
#include <fstream>
#include <iostream>
#include <sstream>

#include "operator/api/json.h"
#include "operator/api/tfjob.h"
#include "operator/api/yaml.h"
#include "operator/planner/tfjob_v1.h"

int main(int argc, char** argv) {
  using namespace kubetrain;
  using nlohmann::json;
  if (argc < 3) {
    std::cerr << "usage: tfjob_v1_render FILE NAMESPACE [CUSTOM_CLUSTER_DOMAIN]\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  auto docs = api::ParseYamlDocuments(text.str());
  if (!docs.ok()) {
    std::cerr << docs.status().ToString() << "\n";
    return 2;
  }
  const std::string domain = argc > 3 ? argv[3] : "";
  json out = json::array();
  for (const auto& doc : *docs) {
    if (!api::IsTFJob(doc.value)) continue;
    json tf = doc.value;
    tf["metadata"]["namespace"] = argv[2];
    auto c = api::ConvertTFJob(tf);
    if (!c.ok()) {
      std::cerr << argv[1] << ": " << c.status().ToString() << "\n";
      return 1;
    }
    auto job = api::ParseTrainingJob(c->job);
    if (!job.ok()) {
      std::cerr << argv[1] << ": " << job.status().ToString() << "\n";
      return 1;
    }
    const auto shape = planner::tfjob_v1::ShapeOf(*c, *job);
    for (const auto& [key, written] : c->role_keys) {
      const std::string type = c->v1_types.at(key);
      const json& spec = tf["spec"]["tfReplicaSpecs"][written];
      const json tmpl = spec.value("template", json::object());
      std::string restart = spec.value("restartPolicy", std::string());
      if (restart.empty()) restart = "Never";
      const int32_t replicas = spec.value("replicas", 1);
      for (int32_t i = 0; i < replicas; ++i) {
        json pod = planner::tfjob_v1::Pod(shape, type, i, tmpl, restart, domain);
        out.push_back(planner::tfjob_v1::Service(shape, type, i, pod));
        out.push_back(std::move(pod));
      }
    }
  }
  std::cout << out.dump(1) << "\n";
  return 0;
}
