#include "trainer/model/layers.h"

#include <cmath>
#include <string>

namespace kubetrain::trainer {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

DenseLayer::DenseLayer(DnnlContext* ctx, int batch, int in, int out, bool relu)
    : ctx_(ctx), batch_(batch), in_(in), out_(out), relu_(relu) {}

StatusOr<std::unique_ptr<DenseLayer>> DenseLayer::Create(DnnlContext* ctx, int batch, int in,
                                                         int out, bool relu) {
  if (batch <= 0 || in <= 0 || out <= 0) {
    return InvalidArgument("dense layer sizes must be positive (batch " + std::to_string(batch) +
                           ", in " + std::to_string(in) + ", out " + std::to_string(out) + ")");
  }
  std::unique_ptr<DenseLayer> layer(new DenseLayer(ctx, batch, in, out, relu));
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
  const memory::desc src_md({batch_, in_}, dt::f32, tag::nc);
  const memory::desc w_md({out_, in_}, dt::f32, tag::oi);
  const memory::desc b_md({out_}, dt::f32, tag::x);
  const memory::desc dst_md({batch_, out_}, dt::f32, tag::nc);

  out_buf_.resize(static_cast<size_t>(batch_) * out_);
  if (relu_) diff_pre_.resize(out_buf_.size());

  // Primitive descriptors. ReLU runs as a post-op of the inner product, in the same pass over the
  // output, and its backward pass reads that output (relu'(x) = [x > 0] = [relu(x) > 0]), so the
  // pre-activation is never stored.
  dnnl::primitive_attr fwd_attr;
  if (relu_) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    fwd_attr.set_post_ops(ops);
  }
  const dnnl::inner_product_forward::desc fwd_desc(dnnl::prop_kind::forward_training, src_md, w_md,
                                                   b_md, dst_md);
  const dnnl::inner_product_forward::primitive_desc fwd_pd(fwd_desc, fwd_attr, eng);
  // The backward primitives' hint is the forward without post-ops, as oneDNN expects.
  const dnnl::inner_product_forward::primitive_desc hint_pd(fwd_desc, eng);
  const dnnl::inner_product_backward_data::primitive_desc bwd_data_pd(
      dnnl::inner_product_backward_data::desc(src_md, w_md, dst_md), eng, hint_pd);
  const dnnl::inner_product_backward_weights::primitive_desc bwd_w_pd(
      dnnl::inner_product_backward_weights::desc(src_md, w_md, b_md, dst_md), eng, hint_pd);

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
  diff_src_m_ = memory(src_md, eng, DNNL_MEMORY_NONE);
  out_m_ = memory(dst_md, eng, out_buf_.data());
  diff_pre_m_ = memory(dst_md, eng, relu_ ? diff_pre_.data() : DNNL_MEMORY_NONE);
  diff_act_m_ = memory(dst_md, eng, DNNL_MEMORY_NONE);

  if (relu_) {
    const dnnl::eltwise_forward::primitive_desc relu_hint_pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training,
                                    dnnl::algorithm::eltwise_relu_use_dst_for_bwd, dst_md, 0.f,
                                    0.f),
        eng);
    const dnnl::eltwise_backward::primitive_desc relu_bwd_pd(
        dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_relu_use_dst_for_bwd, dst_md, dst_md,
                                     0.f, 0.f),
        eng, relu_hint_pd);
    relu_bwd_ = dnnl::eltwise_backward(relu_bwd_pd);
  }

  // Argument maps, built once: they hold handles to the memories above, so the data
  // handles set later are seen through them.
  dnnl::memory& diff_pre = relu_ ? diff_pre_m_ : diff_act_m_;
  fwd_args_ = {{DNNL_ARG_SRC, src_m_},
               {DNNL_ARG_WEIGHTS, w_m_},
               {DNNL_ARG_BIAS, b_m_},
               {DNNL_ARG_DST, out_m_}};
  relu_bwd_args_ = {
      {DNNL_ARG_DST, out_m_}, {DNNL_ARG_DIFF_DST, diff_act_m_}, {DNNL_ARG_DIFF_SRC, diff_pre_m_}};
  bwd_weights_args_ = {{DNNL_ARG_SRC, src_m_},
                       {DNNL_ARG_DIFF_DST, diff_pre},
                       {DNNL_ARG_DIFF_WEIGHTS, diff_w_m_},
                       {DNNL_ARG_DIFF_BIAS, diff_b_m_}};
  bwd_data_args_ = {
      {DNNL_ARG_DIFF_DST, diff_pre}, {DNNL_ARG_WEIGHTS, w_m_}, {DNNL_ARG_DIFF_SRC, diff_src_m_}};
}

void DenseLayer::Bind(float* params, float* grads) {
  const size_t nw = static_cast<size_t>(out_) * in_;
  w_m_.set_data_handle(params);
  b_m_.set_data_handle(params + nw);
  diff_w_m_.set_data_handle(grads);
  diff_b_m_.set_data_handle(grads + nw);
}

void DenseLayer::Forward(const float* src) {
  // oneDNN takes non-const handles; the forward pass only reads src.
  src_m_.set_data_handle(const_cast<float*>(src));
  fwd_.execute(ctx_->stream, fwd_args_);
  ctx_->stream.wait();
}

void DenseLayer::Backward(const float* diff_dst, float* diff_src) {
  diff_act_m_.set_data_handle(const_cast<float*>(diff_dst));
  if (relu_) relu_bwd_.execute(ctx_->stream, relu_bwd_args_);
  bwd_weights_.execute(ctx_->stream, bwd_weights_args_);
  if (diff_src != nullptr) {
    diff_src_m_.set_data_handle(diff_src);
    bwd_data_.execute(ctx_->stream, bwd_data_args_);
  }
  ctx_->stream.wait();
}

StatusOr<std::unique_ptr<Mlp>> Mlp::Create(DnnlContext* ctx, int batch,
                                           const std::vector<int>& sizes) {
  if (sizes.size() < 2) return InvalidArgument("an MLP needs an input and an output size");
  auto mlp = std::make_unique<Mlp>();
  mlp->batch_ = batch;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const bool last = i + 2 == sizes.size();
    KT_ASSIGN_OR_RETURN(auto layer,
                        DenseLayer::Create(ctx, batch, sizes[i], sizes[i + 1], /*relu=*/!last));
    mlp->num_params_ += layer->NumParams();
    if (!last) mlp->diff_buf_.emplace_back(static_cast<size_t>(batch) * sizes[i + 1]);
    mlp->layers_.push_back(std::move(layer));
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
  for (auto& layer : layers_) {
    layer->Forward(src);
    src = layer->output();
  }
  return src;
}

void Mlp::Backward(const float* diff_out, float* diff_src) {
  for (size_t i = layers_.size(); i-- > 0;) {
    float* diff_in = i == 0 ? diff_src : diff_buf_[i - 1].data();
    layers_[i]->Backward(diff_out, diff_in);
    diff_out = diff_in;
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
