// libFuzzer target: a request body as any client of kubetrain-serve may send it (the
// server is reachable from every pod and any Service user), through the KServe v2 and
// TF Serving parsers for a Wide & Deep and an MLP layout, and, when it parses, back out
// through the renderers. The first byte picks the parser and layout; the rest is the body.
// With bit 4 of the first byte, a v2 body in the binary tensor data extension: the next two
// bytes (little-endian) are its Inference-Header-Content-Length, the rest the body.
// For v2 it also checks that the hand-written reader (ParseV2Infer) and the nlohmann one
// (ParseV2InferReference) agree: same outcome, same examples, same message on errors.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/serve/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubetrain::trainer::serve;
  if (size < 1) return 0;
  const uint8_t pick = data[0];
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (pick & 4) {
    if (body.size() < 2) return 0;
    const size_t json_length = static_cast<uint8_t>(body[0]) | static_cast<uint8_t>(body[1]) << 8;
    body.remove_prefix(2);
    TensorLayout layout;
    auto parsed = ParseV2Infer(body, layout, 64, json_length);
    if (!parsed.ok()) return 0;
    const std::vector<float> probs(static_cast<size_t>(parsed->examples.size), 0.5f);
    size_t rendered_json = 0;
    const std::string out = RenderV2Binary(*parsed, layout, "ctr", "1", probs, &rendered_json);
    if (out.size() != rendered_json + 4 * probs.size()) std::abort();
    return 0;
  }
  TensorLayout layout;
  if (pick & 2) {
    layout.wide_deep = false;
    layout.num_features = 4;
    layout.num_outputs = 3;
    layout.output_name = "probabilities";
  }
  auto parsed = (pick & 1) ? ParseTfPredict(body, layout, 64) : ParseV2Infer(body, layout, 64);
  if (!(pick & 1)) {
    const auto reference = ParseV2InferReference(body, layout, 64);
    if (reference.ok() != parsed.ok()) std::abort();
    if (parsed.ok()) {
      const kubetrain::trainer::Batch& a = parsed->examples;
      const kubetrain::trainer::Batch& b = reference->examples;
      if (parsed->id != reference->id || a.size != b.size || a.cat != b.cat ||
          a.dense.size() != b.dense.size() || parsed->binary_output != reference->binary_output)
        std::abort();
      for (size_t i = 0; i < a.dense.size(); ++i) {  // bitwise: NaN never parses
        if (a.dense[i] != b.dense[i]) std::abort();
      }
    } else if (parsed.status().message() != reference.status().message()) {
      std::abort();
    }
  }
  if (!parsed.ok()) {
    (void)RenderError(parsed.status().message());
    return 0;
  }
  const std::vector<float> probs(
      static_cast<size_t>(parsed->examples.size) * static_cast<size_t>(layout.num_outputs), 0.5f);
  (void)RenderV2(*parsed, layout, "ctr", "1", probs);
  (void)RenderTf(*parsed, layout, probs);
  return 0;
}
