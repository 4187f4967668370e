// The forward pass kubetrain-serve runs, alone (no HTTP, no JSON): Predictor::Run on batches
// of the given size from a --predict JSONL file, timed per call; prints the median over
// repeats of examples/s and the p50/p99 of one call.
//
//   predictor_bench --model DIR --inputs inputs.jsonl [--threads N] [--batch 256]
//                   [--calls 200] [--repeats 3] [--training-primitives 1]
//                   [--fold-max-mb 256 (0: the embeddings unfolded)]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainer/model/model.h"
#include "trainer/serve/predictor.h"
#include "trainer/serve/protocol.h"

namespace kt = kubetrain::trainer;

int main(int argc, char** argv) {
  std::string model, inputs;
  int threads = 1, batch = 256, calls = 200, repeats = 3, training = 0, fold_mb = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      model = v;
    else if (k == "--inputs")
      inputs = v;
    else if (k == "--threads")
      threads = std::atoi(v.c_str());
    else if (k == "--batch")
      batch = std::atoi(v.c_str());
    else if (k == "--calls")
      calls = std::atoi(v.c_str());
    else if (k == "--repeats")
      repeats = std::atoi(v.c_str());
    else if (k == "--training-primitives")
      training = std::atoi(v.c_str());
    else if (k == "--fold-max-mb")
      fold_mb = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  kt::SetComputeThreads(threads);
  kt::serve::PredictorOptions o;
  o.model_dir = model;
  o.max_batch = 256;
  o.inference_primitives = training == 0;
  o.fold_max_bytes = static_cast<size_t>(fold_mb) << 20;
  auto p = kt::serve::Predictor::Load(o);
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", p.status().ToString().c_str());
    return 1;
  }
  std::vector<nlohmann::json> rows;
  std::ifstream in(inputs);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  if (rows.empty()) return 1;
  kt::Batch b;
  b.size = batch;
  b.num_dense = kt::kCriteoDense;
  b.num_cat = kt::kCriteoCat;
  for (int s = 0; s < batch; ++s) {
    const auto& r = rows[s % rows.size()];
    for (const auto& v : r["dense"]) b.dense.push_back(v.get<float>());
    for (const auto& v : r["cat_ids"]) b.cat.push_back(static_cast<uint64_t>(v.get<int64_t>()));
  }
  b.label.assign(batch, 0.f);
  std::printf("%s\n", (*p)->fold_path().c_str());
  std::vector<float> probs;
  double max_diff = 0;
  for (int i = 0; i < 10; ++i) (void)(*p)->Run(b, &probs);
  for (int s = 0; s < batch && s < static_cast<int>(rows.size()); ++s) {
    max_diff = std::max(max_diff, std::abs(double(probs[s]) - rows[s]["probs"][0].get<double>()));
  }
  // This process's CPU seconds (every thread's), which a loaded machine disturbs less than
  // the wall clock.
  const auto cpu_seconds = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  std::vector<double> rates, p50s, p99s, cpu_rates;
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> lat;
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) {
      const auto a = std::chrono::steady_clock::now();
      (void)(*p)->Run(b, &probs);
      lat.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::sort(lat.begin(), lat.end());
    rates.push_back(calls * double(batch) / s);
    cpu_rates.push_back(calls * double(batch) / (cpu_seconds() - c0));
    p50s.push_back(lat[lat.size() / 2]);
    p99s.push_back(lat[static_cast<size_t>(0.99 * lat.size())]);
  }
  std::sort(rates.begin(), rates.end());
  std::sort(cpu_rates.begin(), cpu_rates.end());
  std::sort(p50s.begin(), p50s.end());
  std::sort(p99s.begin(), p99s.end());
  // The HTTP side's own work for this batch: its v2 JSON body parsed, the response rendered.
  nlohmann::json dense = nlohmann::json::array(), cat = nlohmann::json::array();
  for (float v : b.dense) dense.push_back(v);
  for (uint64_t v : b.cat) cat.push_back(static_cast<int64_t>(v));
  const std::string body = nlohmann::json{
      {"inputs",
       {{{"name", "dense"}, {"datatype", "FP32"}, {"shape", {batch, b.num_dense}}, {"data", dense}},
        {{"name", "cat_ids"},
         {"datatype", "INT64"},
         {"shape", {batch, b.num_cat}},
         {"data", cat}}}}}.dump();
  // The same batch in the binary tensor data extension: JSON header, then the raw columns.
  const std::string header =
      nlohmann::json{
          {"inputs",
           {{{"name", "dense"},
             {"datatype", "FP32"},
             {"shape", {batch, b.num_dense}},
             {"parameters", {{"binary_data_size", b.dense.size() * 4}}}},
            {{"name", "cat_ids"},
             {"datatype", "INT64"},
             {"shape", {batch, b.num_cat}},
             {"parameters", {{"binary_data_size", b.cat.size() * 8}}}}}},
          {"outputs", {{{"name", "probability"}, {"parameters", {{"binary_data", true}}}}}}}
          .dump();
  const std::string binary_body =
      header + std::string(reinterpret_cast<const char*>(b.dense.data()), b.dense.size() * 4) +
      std::string(reinterpret_cast<const char*>(b.cat.data()), b.cat.size() * 8);
  std::vector<double> parse_ms, render_ms, reference_ms, binary_parse_ms, binary_render_ms;
  for (int i = 0; i < 50; ++i) {
    const auto b0 = std::chrono::steady_clock::now();
    auto bin = kt::serve::ParseV2Infer(binary_body, (*p)->layout(), 1024, header.size());
    const auto b1 = std::chrono::steady_clock::now();
    size_t json_length = 0;
    if (!bin.ok() || bin->examples.dense != b.dense || bin->examples.cat != b.cat ||
        kt::serve::RenderV2Binary(*bin, (*p)->layout(), "m", "1", probs, &json_length).empty()) {
      std::fprintf(stderr, "the binary request does not read back as the batch\n");
      return 1;
    }
    const auto b2 = std::chrono::steady_clock::now();
    binary_parse_ms.push_back(std::chrono::duration<double, std::milli>(b1 - b0).count());
    binary_render_ms.push_back(std::chrono::duration<double, std::milli>(b2 - b1).count());
    const auto r = std::chrono::steady_clock::now();
    auto ref = kt::serve::ParseV2InferReference(body, (*p)->layout(), 1024);
    const auto a = std::chrono::steady_clock::now();
    auto req = kt::serve::ParseV2Infer(body, (*p)->layout(), 1024);
    const auto m = std::chrono::steady_clock::now();
    if (!ref.ok() || !req.ok() || ref->examples.dense != req->examples.dense ||
        ref->examples.cat != req->examples.cat) {
      std::fprintf(stderr, "the v2 readers disagree\n");
      return 1;
    }
    reference_ms.push_back(std::chrono::duration<double, std::milli>(a - r).count());
    const std::string out = kt::serve::RenderV2(*req, (*p)->layout(), "m", "1", probs);
    const auto e = std::chrono::steady_clock::now();
    parse_ms.push_back(std::chrono::duration<double, std::milli>(m - a).count());
    render_ms.push_back(std::chrono::duration<double, std::milli>(e - m).count());
  }
  std::sort(parse_ms.begin(), parse_ms.end());
  std::sort(render_ms.begin(), render_ms.end());
  std::sort(reference_ms.begin(), reference_ms.end());
  std::sort(binary_parse_ms.begin(), binary_parse_ms.end());
  std::sort(binary_render_ms.begin(), binary_render_ms.end());
  std::printf("v2 binary tensors of batch %d (%zu bytes): parse p50 %.3f ms, render p50 %.3f ms\n",
              batch, binary_body.size(), binary_parse_ms[binary_parse_ms.size() / 2],
              binary_render_ms[binary_render_ms.size() / 2]);
  std::printf(
      "v2 JSON of batch %d (%zu bytes): parse p50 %.3f ms (nlohmann reference reader %.3f ms), "
      "render p50 %.3f ms\n",
      batch, body.size(), parse_ms[parse_ms.size() / 2], reference_ms[reference_ms.size() / 2],
      render_ms[render_ms.size() / 2]);
  std::printf(
      "%s primitives, batch %d, %d threads: %.0f examples/s, %.0f examples per CPU-second, call "
      "p50 %.3f ms p99 %.3f ms (medians of %d), max |diff| vs --predict %.2g\n",
      training != 0 ? "training" : "inference", batch, threads, rates[rates.size() / 2],
      cpu_rates[cpu_rates.size() / 2], p50s[p50s.size() / 2], p99s[p99s.size() / 2], repeats,
      max_diff);
  return 0;
}
