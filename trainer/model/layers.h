// oneDNN building blocks: a fully connected layer (inner product) with optional ReLU.
//
// Each layer builds its primitives once, for a fixed batch size, in the order oneDNN's
// examples use (engine -> stream -> memory descriptors -> primitive descriptors ->
// primitives) and then only executes them. Parameters and gradients live in buffers the
// caller owns (one flat vector per model, so a whole model's parameters can be pulled
// from / pushed to parameter servers as one array); Bind() points the layer at them.
//
// Not thread-safe: one layer object per training thread.
#pragma once

#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace kubetrain::trainer {

// The arithmetic of the inner products. Parameters, their gradients and the optimizer stay
// FP32 everywhere (the PS keeps FP32 master weights); under kBf16 the layers multiply BF16
// copies of the weights and activations and accumulate in FP32, which CPUs with AVX-512
// BF16 or AMX do at twice the FP32 rate or more.
enum class Precision { kFp32, kBf16 };
StatusOr<Precision> ParsePrecision(std::string_view name);  // "fp32" | "bf16"
const char* PrecisionName(Precision p);

// Whether oneDNN can run BF16 inner products on this CPU natively (AVX-512 BF16 or AMX), at
// the ISA oneDNN uses (DNNL_MAX_CPU_ISA or dnnl::set_max_cpu_isa can lower it). Without
// them oneDNN would emulate BF16, slower than FP32.
bool CpuHasNativeBf16();

struct PrecisionChoice {
  Precision precision = Precision::kFp32;
  std::string fallback;  // non-empty: why the wanted precision is not used
};
// The precision to train in when `wanted` is asked for: kBf16 falls back to kFp32, with
// the reason, where the CPU has no native BF16.
PrecisionChoice ResolvePrecision(Precision wanted);

// The CPU engine and an in-order stream shared by all layers of a model.
struct DnnlContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

// The data types of a layer's activations. Weights are multiplied in `src`'s type (a BF16
// copy of the FP32 weights is made in each Forward); weight and bias gradients are FP32.
struct LayerTypes {
  dnnl::memory::data_type src = dnnl::memory::data_type::f32;       // and diff_dst
  dnnl::memory::data_type dst = dnnl::memory::data_type::f32;       // output()
  dnnl::memory::data_type diff_src = dnnl::memory::data_type::f32;  // Backward's diff_src
};

class DenseLayer {
 public:
  // in -> out, with ReLU after the affine map when `relu`. Errors: InvalidArgument for
  // non-positive sizes, Internal when oneDNN refuses the configuration.
  //
  // An `inference` layer has a forward pass only (forward_inference; Backward must not be
  // called) and multiplies a copy of the weights in the layout oneDNN prefers for this
  // shape (blocked), made once per Bind: the bound weights must not change after Bind
  // (Bind again after they do).
  static StatusOr<std::unique_ptr<DenseLayer>> Create(DnnlContext* ctx, int batch, int in, int out,
                                                      bool relu, LayerTypes types = {},
                                                      bool inference = false);

  int in() const { return in_; }
  int out() const { return out_; }
  // Weights [out x in] row-major, then bias [out].
  size_t NumParams() const { return static_cast<size_t>(out_) * in_ + out_; }

  // Points the layer at its slice of the model's parameters and gradients.
  void Bind(float* params, float* grads);

  // src [batch x in] (of types.src) must stay valid until Backward. Result in output().
  void Forward(const void* src);
  // The layer's output (of types.dst): after ReLU when `relu` (the pre-activation is not
  // kept). output() is for FP32 outputs.
  const void* output_data() const { return out_buf_.data(); }
  const float* output() const { return out_buf_.data(); }

  // diff_dst [batch x out] (of types.src). Overwrites the weight/bias gradients; writes
  // diff_src [batch x in] (of types.diff_src) unless it is null (the first layer needs no
  // input gradient). With `diff_dst_scratch` the caller's diff_dst may be overwritten (an
  // FP32 ReLU layer then does ReLU's backward pass in place).
  void Backward(const void* diff_dst, void* diff_src, bool diff_dst_scratch = false);

 private:
  DenseLayer(DnnlContext* ctx, int batch, int in, int out, bool relu, LayerTypes types,
             bool inference);
  void Build();

  // Constant after construction.
  DnnlContext* ctx_;
  const int batch_, in_, out_;
  const bool relu_;
  const LayerTypes types_;
  const bool inference_;      // forward only, weights reordered at Bind into w_low_
  const bool low_precision_;  // types_.src is not f32: weights are converted per Forward
  // An FP32 ReLU layer: Backward does ReLU's backward pass and the bias gradient in one pass
  // of its own (one pass over the gradient and one parallel section instead of two each).
  const bool fused_relu_bwd_;
  float* diff_bias_ = nullptr;  // the bias gradient's place in the model's gradients (Bind)

  // Buffers of any data type, as floats for alignment.
  std::vector<float> out_buf_, diff_pre_, w_low_;
  dnnl::memory src_m_, w_m_, b_m_, out_m_, diff_w_m_, diff_b_m_, diff_act_m_, diff_pre_m_,
      diff_src_m_, w_low_m_;
  // FP32 weights -> w_low_, when low_precision_ (per Forward) or inference_ (per Bind: the
  // primitive's own layout and type).
  dnnl::reorder to_low_w_;
  dnnl::inner_product_forward fwd_;  // with ReLU as a post-op when relu_
  dnnl::inner_product_backward_data bwd_data_;
  dnnl::inner_product_backward_weights bwd_weights_;
  dnnl::eltwise_backward relu_bwd_;  // from the output, not the pre-activation; unless fused
  std::unordered_map<int, dnnl::memory> fwd_args_, relu_bwd_args_, bwd_weights_args_,
      bwd_data_args_;
};

// A stack of DenseLayers: ReLU on every layer except the last. Parameters of all layers
// are laid out one after the other in the order of the layers.
//
// Under Precision::kBf16 the activations between layers and their gradients are BF16; the
// MLP's input, output and input gradient stay FP32 (converted at the edges).
class Mlp {
 public:
  // `inference`: forward only, see DenseLayer::Create.
  static StatusOr<std::unique_ptr<Mlp>> Create(DnnlContext* ctx, int batch,
                                               const std::vector<int>& sizes,
                                               Precision precision = Precision::kFp32,
                                               bool inference = false);
  size_t NumParams() const { return num_params_; }
  void Bind(float* params, float* grads);
  const float* Forward(const float* src);
  // With `layer_done`, calls (*layer_done)(begin, end) with each layer's parameter range
  // (offsets into the bound parameters) once that layer's backward pass is done: its
  // gradient is final and this pass reads its parameters no more.
  void Backward(const float* diff_out, float* diff_src,
                const std::function<void(size_t, size_t)>* layer_done = nullptr);
  // Deterministic He-uniform weights, zero biases, from `seed` alone.
  void Init(uint64_t seed, float* params) const;
  // Flops of one forward + backward pass, for GFLOPS figures; `input_grad`: Backward is
  // given a diff_src (the first layer's backward-data pass runs too).
  double FlopsPerStep(bool input_grad) const;
  const std::vector<std::unique_ptr<DenseLayer>>& layers() const { return layers_; }

 private:
  std::vector<std::unique_ptr<DenseLayer>> layers_;
  std::vector<std::vector<float>> diff_buf_;  // gradient w.r.t. each hidden activation
  size_t num_params_ = 0;
  int batch_ = 0;
  Precision precision_ = Precision::kFp32;
  // kBf16: the input and the output's gradient converted to BF16.
  DnnlContext* ctx_ = nullptr;
  std::vector<float> in_low_, diff_out_low_;
  dnnl::memory in_f32_m_, in_low_m_, diff_out_f32_m_, diff_out_low_m_;
  dnnl::reorder to_low_in_, to_low_diff_out_;
};

// splitmix64: a tiny, portable, seedable generator so that parameter initialisation is
// identical on every process (workers, PS and the single-process run).
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
// Uniform in [-1, 1).
inline float UniformSym(uint64_t& state) {
  return static_cast<float>(static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-52 - 1.0);
}

}  // namespace kubetrain::trainer
