// libFuzzer target: a job file as `kubetrain validate/run -f` reads it (YAML,
// several documents), through ParseYamlDocuments, ParseTrainingJob /
// ParseTrainingSweep, validation, the planner and back to JSON.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "operator/api/api_fuzz_common.h"
#include "operator/api/yaml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubetrain;
  using namespace kubetrain::api;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  StatusOr<std::vector<YamlDocument>> docs = ParseYamlDocuments(text);
  if (!docs.ok()) return 0;
  for (const YamlDocument& doc : *docs) {
    (void)doc.LineOf("spec.replicaSpecs.Worker.replicas");
    fuzz::ExerciseDocument(doc.value);
  }
  return 0;
}
