#include "trainer/model/layers.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "trainer/model/parallel.h"
#include "trainer/simd.h"

namespace kubetrain::trainer {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

namespace {

// A buffer for `md`'s data, as floats so it is aligned for any data type.
std::vector<float> BufferFor(const memory::desc& md) {
  return std::vector<float>((md.get_size() + sizeof(float) - 1) / sizeof(float));
}

// ReLU's backward pass and the bias gradient in one pass over columns [begin, end) of a
// [batch x n] gradient: diff_pre = diff_act * (out > 0 ? 1 : 0) and diff_bias = the column
// sums of diff_pre, added from the first sample to the last. These are the operations and the
// order of oneDNN's ReLU backward (eltwise_relu_use_dst_for_bwd, alpha 0) and of its GEMM
// inner product's bias gradient, so the results are theirs bit for bit (checked by
// DenseLayerTest); the file is built without FP contraction.
KT_SIMD_CLONES void ReluBackwardAndBiasColumns(const float* __restrict out,
                                               const float* __restrict diff_act,
                                               float* __restrict diff_pre,
                                               float* __restrict diff_bias, int batch, size_t n,
                                               size_t begin, size_t end) {
  for (size_t j = begin; j < end; ++j) {
    const float d = diff_act[j] * (out[j] > 0.f ? 1.f : 0.f);
    diff_pre[j] = d;
    diff_bias[j] = d;
  }
  for (int s = 1; s < batch; ++s) {
    const size_t row = static_cast<size_t>(s) * n;
    for (size_t j = begin; j < end; ++j) {
      const float d = diff_act[row + j] * (out[row + j] > 0.f ? 1.f : 0.f);
      diff_pre[row + j] = d;
      diff_bias[j] += d;
    }
  }
}

// The same in place: diff holds diff_act and receives diff_pre (for a caller whose gradient
// buffer is scratch: no second buffer to write, and so none to bring into cache).
KT_SIMD_CLONES void ReluBackwardAndBiasColumnsInPlace(const float* __restrict out,
                                                      float* __restrict diff,
                                                      float* __restrict diff_bias, int batch,
                                                      size_t n, size_t begin, size_t end) {
  for (size_t j = begin; j < end; ++j) {
    const float d = diff[j] * (out[j] > 0.f ? 1.f : 0.f);
    diff[j] = d;
    diff_bias[j] = d;
  }
  for (int s = 1; s < batch; ++s) {
    const size_t row = static_cast<size_t>(s) * n;
    for (size_t j = begin; j < end; ++j) {
      const float d = diff[row + j] * (out[row + j] > 0.f ? 1.f : 0.f);
      diff[row + j] = d;
      diff_bias[j] += d;
    }
  }
}

#undef KT_SIMD_CLONES

const char* IsaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "SSE4.1";
    case dnnl::cpu_isa::avx:
      return "AVX";
    case dnnl::cpu_isa::avx2:
      return "AVX2";
    case dnnl::cpu_isa::avx2_vnni:
      return "AVX2 VNNI";
    case dnnl::cpu_isa::avx512_core:
      return "AVX-512";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "AVX-512 VNNI";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "AVX-512 BF16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "AMX";
    default:
      return "baseline x86-64";
  }
}

}  // namespace

StatusOr<Precision> ParsePrecision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  return InvalidArgument("unknown precision \"" + std::string(name) + "\" (expected fp32 or bf16)");
}

const char* PrecisionName(Precision p) {
  return p == Precision::kBf16 ? "bf16" : "fp32";
}

bool CpuHasNativeBf16() {
  // cpu_isa values are bit sets: each ISA includes the bits of those it extends, and AMX
  // includes AVX-512 BF16.
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

PrecisionChoice ResolvePrecision(Precision wanted) {
  PrecisionChoice c;
  c.precision = wanted;
  if (wanted == Precision::kBf16 && !CpuHasNativeBf16()) {
    c.precision = Precision::kFp32;
    c.fallback =
        std::string("--precision bf16: this CPU has no BF16 instructions oneDNN can use ") +
        "(it runs " + IsaName(dnnl::get_effective_cpu_isa()) +
        "; BF16 needs AVX-512 BF16 or AMX), so training runs in FP32";
  }
  return c;
}

DenseLayer::DenseLayer(DnnlContext* ctx, int batch, int in, int out, bool relu, LayerTypes types,
                       bool inference)
    : ctx_(ctx),
      batch_(batch),
      in_(in),
      out_(out),
      relu_(relu),
      types_(types),
      inference_(inference),
      low_precision_(types.src != dt::f32),
      fused_relu_bwd_(relu && types.src == dt::f32 && types.dst == dt::f32) {}

StatusOr<std::unique_ptr<DenseLayer>> DenseLayer::Create(DnnlContext* ctx, int batch, int in,
                                                         int out, bool relu, LayerTypes types,
                                                         bool inference) {
  if (batch <= 0 || in <= 0 || out <= 0) {
    return InvalidArgument("dense layer sizes must be positive (batch " + std::to_string(batch) +
                           ", in " + std::to_string(in) + ", out " + std::to_string(out) + ")");
  }
  std::unique_ptr<DenseLayer> layer(new DenseLayer(ctx, batch, in, out, relu, types, inference));
  try {
    layer->Build();
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN refused dense layer: ") + e.what());
  }
  return layer;
}

void DenseLayer::Build() {
  const dnnl::engine& eng = ctx_->engine;
  // Memory descriptors: plain row-major layouts, so parameters can be shipped as flat
  // arrays without reorders; oneDNN's GEMM-based inner product handles these directly.
  // FP32 parameters and gradients (w_md, b_md); under low precision the primitives read a
  // converted copy of the weights (low_w_md) and the activations are of the layer's types.
  const memory::desc src_md({batch_, in_}, types_.src, tag::nc);
  const memory::desc w_md({out_, in_}, dt::f32, tag::oi);
  const memory::desc low_w_md({out_, in_}, types_.src, tag::oi);
  const memory::desc& mul_w_md = low_precision_ ? low_w_md : w_md;
  const memory::desc b_md({out_}, dt::f32, tag::x);
  const memory::desc dst_md({batch_, out_}, types_.dst, tag::nc);
  // The gradient flowing back into this layer has the type of its input (BF16 under BF16).
  const memory::desc diff_dst_md({batch_, out_}, types_.src, tag::nc);
  const memory::desc diff_src_md({batch_, in_}, types_.diff_src, tag::nc);

  out_buf_ = BufferFor(dst_md);
  if (relu_) diff_pre_ = BufferFor(diff_dst_md);

  // Primitive descriptors. ReLU runs as a post-op of the inner product, in the same pass over the
  // output, and its backward pass reads that output (relu'(x) = [x > 0] = [relu(x) > 0]), so the
  // pre-activation is never stored.
  dnnl::primitive_attr fwd_attr;
  if (relu_) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    fwd_attr.set_post_ops(ops);
  }
  if (inference_) {
    // Forward only, with the weights in the layout (and type) the primitive asks for.
    const dnnl::inner_product_forward::primitive_desc fwd_pd(
        dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference, src_md,
                                          memory::desc({out_, in_}, types_.src, tag::any), b_md,
                                          dst_md),
        fwd_attr, eng);
    fwd_ = dnnl::inner_product_forward(fwd_pd);
    src_m_ = memory(src_md, eng, DNNL_MEMORY_NONE);
    w_m_ = memory(w_md, eng, DNNL_MEMORY_NONE);
    b_m_ = memory(b_md, eng, DNNL_MEMORY_NONE);
    out_m_ = memory(dst_md, eng, out_buf_.data());
    w_low_ = BufferFor(fwd_pd.weights_desc());
    w_low_m_ = memory(fwd_pd.weights_desc(), eng, w_low_.data());
    to_low_w_ = dnnl::reorder(w_m_, w_low_m_);
    fwd_args_ = {{DNNL_ARG_SRC, src_m_},
                 {DNNL_ARG_WEIGHTS, w_low_m_},
                 {DNNL_ARG_BIAS, b_m_},
                 {DNNL_ARG_DST, out_m_}};
    return;
  }
  const dnnl::inner_product_forward::desc fwd_desc(dnnl::prop_kind::forward_training, src_md,
                                                   mul_w_md, b_md, dst_md);
  const dnnl::inner_product_forward::primitive_desc fwd_pd(fwd_desc, fwd_attr, eng);
  // The backward primitives' hint is the forward without post-ops, as oneDNN expects.
  const dnnl::inner_product_forward::primitive_desc hint_pd(fwd_desc, eng);
  const dnnl::inner_product_backward_data::primitive_desc bwd_data_pd(
      dnnl::inner_product_backward_data::desc(diff_src_md, mul_w_md, diff_dst_md), eng, hint_pd);
  // With fused_relu_bwd_ the bias gradient comes from Backward's own pass (with ReLU's).
  const dnnl::inner_product_backward_weights::primitive_desc bwd_w_pd(
      fused_relu_bwd_ ? dnnl::inner_product_backward_weights::desc(src_md, w_md, diff_dst_md)
                      : dnnl::inner_product_backward_weights::desc(src_md, w_md, b_md, diff_dst_md),
      eng, hint_pd);

  // Primitives, created once.
  fwd_ = dnnl::inner_product_forward(fwd_pd);
  bwd_data_ = dnnl::inner_product_backward_data(bwd_data_pd);
  bwd_weights_ = dnnl::inner_product_backward_weights(bwd_w_pd);

  // Memories: handles to external buffers are set in Bind()/Forward()/Backward().
  src_m_ = memory(src_md, eng, DNNL_MEMORY_NONE);
  w_m_ = memory(w_md, eng, DNNL_MEMORY_NONE);
  b_m_ = memory(b_md, eng, DNNL_MEMORY_NONE);
  diff_w_m_ = memory(w_md, eng, DNNL_MEMORY_NONE);
  diff_b_m_ = memory(b_md, eng, DNNL_MEMORY_NONE);
  diff_src_m_ = memory(diff_src_md, eng, DNNL_MEMORY_NONE);
  out_m_ = memory(dst_md, eng, out_buf_.data());
  diff_pre_m_ = memory(diff_dst_md, eng, relu_ ? diff_pre_.data() : DNNL_MEMORY_NONE);
  diff_act_m_ = memory(diff_dst_md, eng, DNNL_MEMORY_NONE);
  if (low_precision_) {
    w_low_ = BufferFor(low_w_md);
    w_low_m_ = memory(low_w_md, eng, w_low_.data());
    to_low_w_ = dnnl::reorder(w_m_, w_low_m_);
  }

  if (relu_ && !fused_relu_bwd_) {
    const dnnl::eltwise_forward::primitive_desc relu_hint_pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training,
                                    dnnl::algorithm::eltwise_relu_use_dst_for_bwd, dst_md, 0.f,
                                    0.f),
        eng);
    const dnnl::eltwise_backward::primitive_desc relu_bwd_pd(
        dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_relu_use_dst_for_bwd, diff_dst_md,
                                     dst_md, 0.f, 0.f),
        eng, relu_hint_pd);
    relu_bwd_ = dnnl::eltwise_backward(relu_bwd_pd);
  }

  // Argument maps, built once: they hold handles to the memories above, so the data
  // handles set later are seen through them.
  dnnl::memory& diff_pre = relu_ ? diff_pre_m_ : diff_act_m_;
  dnnl::memory& mul_w = low_precision_ ? w_low_m_ : w_m_;
  fwd_args_ = {{DNNL_ARG_SRC, src_m_},
               {DNNL_ARG_WEIGHTS, mul_w},
               {DNNL_ARG_BIAS, b_m_},
               {DNNL_ARG_DST, out_m_}};
  relu_bwd_args_ = {
      {DNNL_ARG_DST, out_m_}, {DNNL_ARG_DIFF_DST, diff_act_m_}, {DNNL_ARG_DIFF_SRC, diff_pre_m_}};
  bwd_weights_args_ = {
      {DNNL_ARG_SRC, src_m_}, {DNNL_ARG_DIFF_DST, diff_pre}, {DNNL_ARG_DIFF_WEIGHTS, diff_w_m_}};
  if (!fused_relu_bwd_) bwd_weights_args_.emplace(DNNL_ARG_DIFF_BIAS, diff_b_m_);
  bwd_data_args_ = {
      {DNNL_ARG_DIFF_DST, diff_pre}, {DNNL_ARG_WEIGHTS, mul_w}, {DNNL_ARG_DIFF_SRC, diff_src_m_}};
}

void DenseLayer::Bind(float* params, float* grads) {
  const size_t nw = static_cast<size_t>(out_) * in_;
  w_m_.set_data_handle(params);
  b_m_.set_data_handle(params + nw);
  if (inference_) {  // no gradients; the weights in the primitive's layout, once
    to_low_w_.execute(ctx_->stream, w_m_, w_low_m_);
    ctx_->stream.wait();
    return;
  }
  diff_w_m_.set_data_handle(grads);
  diff_b_m_.set_data_handle(grads + nw);
  diff_bias_ = grads + nw;
}

void DenseLayer::Forward(const void* src) {
  // The weights may have changed since the last step (a pull, an update): convert them.
  if (low_precision_ && !inference_) to_low_w_.execute(ctx_->stream, w_m_, w_low_m_);
  // oneDNN takes non-const handles; the forward pass only reads src.
  src_m_.set_data_handle(const_cast<void*>(src));
  fwd_.execute(ctx_->stream, fwd_args_);
  ctx_->stream.wait();
}

void DenseLayer::Backward(const void* diff_dst, void* diff_src, bool diff_dst_scratch) {
  diff_act_m_.set_data_handle(const_cast<void*>(diff_dst));
  if (fused_relu_bwd_) {
    // Split by blocks of 16 columns (one AVX-512 vector), each column done by one thread.
    constexpr size_t kBlock = 16;
    const size_t n = static_cast<size_t>(out_);
    const size_t elements = static_cast<size_t>(batch_) * n;
    float* const in_place =
        diff_dst_scratch ? static_cast<float*>(const_cast<void*>(diff_dst)) : nullptr;
    diff_pre_m_.set_data_handle(in_place != nullptr ? in_place : diff_pre_.data());
    ParallelRanges((n + kBlock - 1) / kBlock, elements >= (size_t{1} << 15) ? 2 : ~size_t{0},
                   [&](size_t b, size_t e) {
                     const size_t begin = b * kBlock, end = std::min(e * kBlock, n);
                     if (in_place != nullptr) {
                       ReluBackwardAndBiasColumnsInPlace(out_buf_.data(), in_place, diff_bias_,
                                                         batch_, n, begin, end);
                     } else {
                       ReluBackwardAndBiasColumns(
                           out_buf_.data(), static_cast<const float*>(diff_dst), diff_pre_.data(),
                           diff_bias_, batch_, n, begin, end);
                     }
                   });
  } else if (relu_) {
    relu_bwd_.execute(ctx_->stream, relu_bwd_args_);
  }
  // The input gradient first: the weight gradient, written last, is then the freshest in
  // cache for an optimizer update right after this pass (Mlp::Backward's layer_done).
  if (diff_src != nullptr) {
    diff_src_m_.set_data_handle(diff_src);
    bwd_data_.execute(ctx_->stream, bwd_data_args_);
  }
  bwd_weights_.execute(ctx_->stream, bwd_weights_args_);
  ctx_->stream.wait();
}

StatusOr<std::unique_ptr<Mlp>> Mlp::Create(DnnlContext* ctx, int batch,
                                           const std::vector<int>& sizes, Precision precision,
                                           bool inference) {
  if (sizes.size() < 2) return InvalidArgument("an MLP needs an input and an output size");
  if (batch <= 0) return InvalidArgument("the batch size must be positive");
  auto mlp = std::make_unique<Mlp>();
  mlp->batch_ = batch;
  mlp->precision_ = precision;
  mlp->ctx_ = ctx;
  const dt low = precision == Precision::kBf16 ? dt::bf16 : dt::f32;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const bool last = i + 2 == sizes.size();
    // Between layers everything is in the low type; the output and the input's gradient
    // are FP32.
    LayerTypes types{low, last ? dt::f32 : low, i == 0 ? dt::f32 : low};
    KT_ASSIGN_OR_RETURN(auto layer, DenseLayer::Create(ctx, batch, sizes[i], sizes[i + 1],
                                                       /*relu=*/!last, types, inference));
    mlp->num_params_ += layer->NumParams();
    if (!last) {
      mlp->diff_buf_.push_back(BufferFor(memory::desc({batch, sizes[i + 1]}, low, tag::nc)));
    }
    mlp->layers_.push_back(std::move(layer));
  }
  if (low != dt::f32) {
    try {
      const dnnl::engine& eng = ctx->engine;
      const memory::desc in_md({batch, sizes.front()}, dt::f32, tag::nc);
      const memory::desc in_low_md({batch, sizes.front()}, low, tag::nc);
      const memory::desc out_md({batch, sizes.back()}, dt::f32, tag::nc);
      const memory::desc out_low_md({batch, sizes.back()}, low, tag::nc);
      mlp->in_low_ = BufferFor(in_low_md);
      mlp->diff_out_low_ = BufferFor(out_low_md);
      mlp->in_f32_m_ = memory(in_md, eng, DNNL_MEMORY_NONE);
      mlp->in_low_m_ = memory(in_low_md, eng, mlp->in_low_.data());
      mlp->diff_out_f32_m_ = memory(out_md, eng, DNNL_MEMORY_NONE);
      mlp->diff_out_low_m_ = memory(out_low_md, eng, mlp->diff_out_low_.data());
      mlp->to_low_in_ = dnnl::reorder(mlp->in_f32_m_, mlp->in_low_m_);
      mlp->to_low_diff_out_ = dnnl::reorder(mlp->diff_out_f32_m_, mlp->diff_out_low_m_);
    } catch (const dnnl::error& e) {
      return Internal(std::string("oneDNN refused the BF16 conversions: ") + e.what());
    }
  }
  return mlp;
}

void Mlp::Bind(float* params, float* grads) {
  for (auto& layer : layers_) {
    layer->Bind(params, grads);
    params += layer->NumParams();
    grads += layer->NumParams();
  }
}

const float* Mlp::Forward(const float* src) {
  const void* x = src;
  if (precision_ != Precision::kFp32) {
    in_f32_m_.set_data_handle(const_cast<float*>(src));
    to_low_in_.execute(ctx_->stream, in_f32_m_, in_low_m_);
    x = in_low_.data();
  }
  for (auto& layer : layers_) {
    layer->Forward(x);
    x = layer->output_data();
  }
  return layers_.back()->output();  // FP32 in every precision
}

void Mlp::Backward(const float* diff_out, float* diff_src,
                   const std::function<void(size_t, size_t)>* layer_done) {
  const void* d = diff_out;
  if (precision_ != Precision::kFp32) {
    diff_out_f32_m_.set_data_handle(const_cast<float*>(diff_out));
    to_low_diff_out_.execute(ctx_->stream, diff_out_f32_m_, diff_out_low_m_);
    ctx_->stream.wait();
    d = diff_out_low_.data();
  }
  size_t end = num_params_;  // of layer i's parameters
  for (size_t i = layers_.size(); i-- > 0;) {
    void* diff_in = i == 0 ? static_cast<void*>(diff_src) : diff_buf_[i - 1].data();
    // d is this MLP's own buffer below the top layer: scratch, overwritten in place.
    layers_[i]->Backward(d, diff_in, /*diff_dst_scratch=*/i + 1 < layers_.size());
    d = diff_in;
    const size_t begin = end - layers_[i]->NumParams();
    if (layer_done != nullptr) (*layer_done)(begin, end);
    end = begin;
  }
}

void Mlp::Init(uint64_t seed, float* params) const {
  uint64_t state = seed;
  for (const auto& layer : layers_) {
    // He-uniform for ReLU layers: U(-sqrt(6/fan_in), sqrt(6/fan_in)).
    const float bound = std::sqrt(6.0f / static_cast<float>(layer->in()));
    const size_t nw = static_cast<size_t>(layer->out()) * layer->in();
    for (size_t i = 0; i < nw; ++i) params[i] = bound * UniformSym(state);
    for (int i = 0; i < layer->out(); ++i) params[nw + i] = 0.f;
    params += layer->NumParams();
  }
}

double Mlp::FlopsPerStep(bool input_grad) const {
  // forward, backward-data and backward-weights: 3 GEMMs of 2*B*in*out flops each
  // (the first layer skips backward-data unless the input's gradient is wanted).
  double flops = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const double gemm = 2.0 * batch_ * layers_[i]->in() * layers_[i]->out();
    flops += (i == 0 && !input_grad ? 2 : 3) * gemm;
  }
  return flops;
}

}  // namespace kubetrain::trainer
