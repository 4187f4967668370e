#include "trainer/serve/predictor.h"

#include <algorithm>

#include "common/storage/files.h"

namespace kubetrain::trainer::serve {

StatusOr<std::unique_ptr<Predictor>> Predictor::Load(const PredictorOptions& o) {
  if (o.max_batch < 1) return InvalidArgument("max batch size must be at least 1");
  if (o.compute_threads > 0) SetComputeThreads(o.compute_threads);  // before any primitive
  const std::string json_path = storage::JoinPath(o.model_dir, "model.json");
  KT_ASSIGN_OR_RETURN(const std::string text, storage::ReadObject(json_path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(json_path + ": " + e.what());
  }
  KT_ASSIGN_OR_RETURN(const ModelDescription d, ParseModelDescription(j));
  auto p = std::unique_ptr<Predictor>(new Predictor());
  p->root_ = o.checkpoint_dir.empty() ? storage::JoinPath(o.model_dir, "model") : o.checkpoint_dir;
  p->max_batch_ = o.max_batch;
  // A model.json from before "optimizer" was recorded: the shard layout tells (a wrong
  // optimizer's state slots do not fit the shard, and ReadTrainedModel says so).
  std::vector<OptimizerKind> kinds;
  if (d.optimizer) {
    kinds = {*d.optimizer};
  } else {
    kinds = {OptimizerKind::kAdagrad, OptimizerKind::kAdam, OptimizerKind::kSgd};
  }
  Status last;
  bool loaded = false;
  for (const OptimizerKind k : kinds) {
    OptimizerConfig opt;
    opt.kind = k;
    auto m = ReadTrainedModel(d.spec, opt, p->root_);
    if (m.ok()) {
      p->model_ = std::move(*m);
      loaded = true;
      break;
    }
    last = m.status();
    if (last.code() != StatusCode::kInvalidArgument) break;  // I/O, NotFound: not the optimizer
  }
  if (!loaded) return last;

  TensorLayout& l = p->layout_;
  l.wide_deep = d.spec.kind == "wide_deep";
  if (l.wide_deep) {
    l.num_dense = kCriteoDense;
    l.num_cat = kCriteoCat;
    l.num_outputs = 1;
    l.output_name = "probability";
  } else {
    l.num_features = d.spec.num_features;
    l.num_outputs = d.spec.num_classes;
    l.output_name = "probabilities";
  }
  // The batch sizes: the powers of two up to max_batch, and max_batch itself.
  for (int size = 1;; size = std::min(size * 2, o.max_batch)) {
    p->sizes_.push_back(size);
    if (size == o.max_batch) break;
  }
  if (l.wide_deep) {
    const size_t need = EmbeddingFold::BytesFor(p->model_);
    const std::string mib = std::to_string((need + (1 << 20) - 1) >> 20) + " MiB";
    if (o.precision != Precision::kFp32) {
      p->fold_path_ = "unfolded: the fold is FP32 and this model runs " +
                      std::string(PrecisionName(o.precision));
    } else if (!o.inference_primitives) {
      p->fold_path_ = "unfolded: training primitives asked for";
    } else if (o.fold_max_bytes == 0) {
      p->fold_path_ = "unfolded: folding is off";
    } else if (need > o.fold_max_bytes) {
      p->fold_path_ = "unfolded: the folded tables of " + std::to_string(p->model_.ids.size()) +
                      " rows need " + mib + ", over the " + std::to_string(o.fold_max_bytes >> 20) +
                      " MiB allowed";
    } else {
      // Room for each trained row in two fields (ids hashed by model.json's recipe come in
      // one; a client's own ids may not): more pairs are folded per batch, not kept, so
      // memory stays bounded by the model, not by what clients send.
      const size_t store = std::min(o.fold_max_bytes, 2 * need);
      KT_ASSIGN_OR_RETURN(p->fold_, EmbeddingFold::Create(p->model_, p->sizes_, store));
      p->fold_path_ = "folded: " + std::to_string(p->model_.ids.size()) + " rows, " + mib +
                      " once each field's rows are kept (store of " +
                      std::to_string((store + (1 << 20) - 1) >> 20) + " MiB)";
      return p;
    }
  } else {
    p->fold_path_ = "unfolded: only Wide & Deep has embeddings to fold";
  }
  // One oneDNN model per batch size, all computing from the loaded dense parameters in
  // place.
  for (const int size : p->sizes_) {
    std::unique_ptr<Model> model;
    if (l.wide_deep) {
      WideDeepConfig c;
      c.batch_size = size;
      c.embedding_dim = d.spec.embedding_dim;
      c.hidden = d.spec.hidden;
      c.precision = o.precision;
      c.inference_only = o.inference_primitives;
      KT_ASSIGN_OR_RETURN(model, CreateWideDeep(c));
    } else {
      MlpClassifierConfig c;
      c.batch_size = size;
      c.num_features = d.spec.num_features;
      c.num_classes = d.spec.num_classes;
      c.hidden = d.spec.hidden;
      c.precision = o.precision;
      c.inference_only = o.inference_primitives;
      KT_ASSIGN_OR_RETURN(model, CreateMlpClassifier(c));
    }
    if (model->NumDenseParams() != p->model_.dense.size())
      return InvalidArgument("the checkpoint does not fit model.json's architecture");
    model->UseDenseParams(p->model_.dense.data());
    p->by_size_.emplace(size, std::move(model));
  }
  return p;
}

Status Predictor::Run(const Batch& b, std::vector<float>* probs) {
  if (b.size < 1 || b.size > max_batch_)
    return InvalidArgument("batch of " + std::to_string(b.size) + " examples");
  const int size = *std::lower_bound(sizes_.begin(), sizes_.end(), b.size);
  const Batch* in = &b;
  if (size != b.size) {
    padded_ = b;
    PadBatch(padded_, b.size, size);
    in = &padded_;
  }
  if (fold_) {
    out_.resize(static_cast<size_t>(size));
    KT_RETURN_IF_ERROR(fold_->Predict(*in, out_.data()));
    probs->assign(out_.begin(), out_.begin() + b.size);
    return Status::Ok();
  }
  Model& model = *by_size_.at(size);
  const int dim = model.SparseRowDim();
  if (dim > 0) {
    lookup_.Assign(*in);
    rows_.assign(lookup_.ids.size() * dim, 0.f);  // unknown ids: the zero row
    for (size_t i = 0; i < lookup_.ids.size(); ++i) {
      if (const float* r = model_.Row(lookup_.ids[i])) std::copy_n(r, dim, rows_.data() + i * dim);
    }
  } else {
    lookup_ = SparseLookup();
    rows_.clear();
  }
  out_.resize(static_cast<size_t>(size) * model.num_outputs());
  KT_RETURN_IF_ERROR(model.Predict(*in, lookup_, rows_.data(), out_.data()));
  probs->assign(out_.begin(), out_.begin() + static_cast<size_t>(b.size) * model.num_outputs());
  return Status::Ok();
}

}  // namespace kubetrain::trainer::serve
