#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>

#include "trainer/roles/role.h"
#include "trainer/worker/evaluator.h"

namespace kubetrain::trainer::roles {

// --predict / --export: one-shot tools on the model in --checkpoint-dir.
RoleResult RunModelTool(const Config& c, Model& model) {
  if (c.checkpoint_dir.empty())
    return InvalidArgument("--predict and --export read the model from --checkpoint-dir");
  if (!c.export_dir.empty()) {
    std::string unexportable;
    Status s = ExportOnnx(c, c.checkpoint_dir, c.export_dir, &unexportable);
    if (s.ok() && !unexportable.empty()) s = InvalidArgument(unexportable);
    if (!s.ok()) return s.WithContext("export");
  }
  if (c.predict.empty()) return Ending::kDone;
  auto m = ReadTrainedModel(SpecFrom(c), c.Optimizer(), c.checkpoint_dir);
  auto ro = Reader(c, c.EvalDir(), c.eval_match, 0, 1, /*loop=*/false);
  if (!m.ok() || !ro.ok()) {
    const Status& s = !m.ok() ? m.status() : ro.status();
    return s.WithContext("predict");
  }
  StripeReader reader(*ro, Source(c, c.EvalDir()));
  std::ofstream file;
  if (c.predict != "-") {
    file.open(c.predict, std::ios::trunc);
    if (!file) return InvalidArgument("predict: cannot write " + c.predict);
  }
  auto n =
      WritePredictions(model, *m, reader, c.eval_examples, c.predict == "-" ? std::cout : file);
  if (n.ok()) file.close();
  if (!n.ok()) return n.status().WithContext("predict");
  if (c.predict != "-" && !file) return Internal("predict: writing " + c.predict + " failed");
  spdlog::info("wrote predictions for {} examples (model step {}) to {}", *n, m->step, c.predict);
  return Ending::kDone;
}

}  // namespace kubetrain::trainer::roles
