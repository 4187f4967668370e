// kubetrain-api-check [--old OLD] FILE: applies operator/api's parsing and
// validation to a TrainingJob (or TrainingSweep) file (YAML or JSON, "-" for stdin) and prints
// "OK" or one "<path>: <message>" line per error, exiting 0 or 1. With --old, it
// also applies the update rules (ValidateUpdate) from OLD to FILE.
//
// It exists so crds/crd_test.sh can hold the C++ rules and the CRD to the same
// verdict on every case; the user-facing command is `kubetrain validate`.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "operator/api/json.h"
#include "operator/api/sweep.h"
#include "operator/api/validation.h"
#include "operator/api/yaml.h"

namespace {

using kubetrain::StatusOr;
using kubetrain::api::TrainingJob;

StatusOr<nlohmann::json> LoadJson(const std::string& path) {
  std::stringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(path);
    if (!in) return kubetrain::NotFound("cannot open " + path);
    text << in.rdbuf();
  }
  KT_ASSIGN_OR_RETURN(auto docs, kubetrain::api::ParseYamlDocuments(text.str()));
  // A file may hold other objects beside it (an example's Secret): the one
  // TrainingJob or TrainingSweep is checked, or the only document.
  if (docs.size() == 1) return docs[0].value;
  const nlohmann::json* found = nullptr;
  for (const auto& doc : docs) {
    const std::string kind = kubetrain::api::KindOf(doc.value);
    if (kind != kubetrain::api::kKind && kind != kubetrain::api::kSweepKind) continue;
    if (found != nullptr)
      return kubetrain::InvalidArgument("want one TrainingJob or TrainingSweep");
    found = &doc.value;
  }
  if (found == nullptr) return kubetrain::InvalidArgument("no TrainingJob or TrainingSweep");
  return *found;
}

StatusOr<TrainingJob> Load(const std::string& path) {
  KT_ASSIGN_OR_RETURN(nlohmann::json value, LoadJson(path));
  return kubetrain::api::ParseTrainingJob(value);
}

// A TrainingSweep: parsing, ValidateSweep and, with an old one, ValidateSweepUpdate.
int CheckSweep(const nlohmann::json& value, const std::string& old_path) {
  auto sweep = kubetrain::api::ParseTrainingSweep(value);
  if (!sweep.ok()) {
    std::cout << sweep.status().message() << "\n";
    return 1;
  }
  auto errors = kubetrain::api::ValidateSweep(*sweep);
  if (!old_path.empty()) {
    auto old_json = LoadJson(old_path);
    auto old_sweep = old_json.ok() ? kubetrain::api::ParseTrainingSweep(*old_json)
                                   : StatusOr<kubetrain::api::TrainingSweep>(old_json.status());
    if (!old_sweep.ok()) {
      std::cerr << old_path << ": " << old_sweep.status().message() << "\n";
      return 2;
    }
    for (auto& e : kubetrain::api::ValidateSweepUpdate(*old_sweep, *sweep)) errors.push_back(e);
  }
  if (errors.empty()) {
    std::cout << "OK\n";
    return 0;
  }
  for (const auto& e : errors) std::cout << e.path << ": " << e.message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string old_path, path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--old" && i + 1 < argc) {
      old_path = argv[++i];
    } else {
      path = arg;
    }
  }
  if (path.empty()) {
    std::cerr << "usage: kubetrain-api-check [--old OLD] FILE\n";
    return 2;
  }
  if (auto value = LoadJson(path);
      value.ok() && kubetrain::api::KindOf(*value) == kubetrain::api::kSweepKind) {
    return CheckSweep(*value, old_path);
  }
  StatusOr<TrainingJob> job = Load(path);
  if (!job.ok()) {
    std::cout << job.status().message() << "\n";
    return 1;
  }
  std::vector<kubetrain::api::FieldError> errors = kubetrain::api::Validate(*job);
  if (!old_path.empty()) {
    StatusOr<TrainingJob> old_job = Load(old_path);
    if (!old_job.ok()) {
      std::cerr << old_path << ": " << old_job.status().message() << "\n";
      return 2;
    }
    for (auto& e : kubetrain::api::ValidateUpdate(*old_job, *job)) errors.push_back(e);
  }
  if (errors.empty()) {
    std::cout << "OK\n";
    return 0;
  }
  for (const auto& e : errors) std::cout << e.path << ": " << e.message << "\n";
  return 1;
}
