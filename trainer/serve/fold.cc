#include "trainer/serve/fold.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "trainer/data/reader.h"
#include "trainer/model/loss.h"
#include "trainer/model/parallel.h"

namespace kubetrain::trainer::serve {
namespace {

// Examples from which the first layer is split over the compute threads (each is some 40k
// additions at 1024 wide).
constexpr size_t kParallelExamples = 16;
// GCC vector types (a loop over a plain float array here came out as scalar adds).
using Floats16 = float __attribute__((vector_size(64)));
constexpr int kVectors = 4;
constexpr int kChunk = kVectors * 16;
// The same, at any float's alignment, and allowed to alias the floats it is read from.
using UnalignedFloats16 = float __attribute__((vector_size(64), aligned(4), may_alias));

// Asks for the cache lines of kChunk floats at p (a hint: no fault, no effect on results).
inline void PrefetchChunk(const float* p) {
  for (int line = 0; line < kChunk; line += 16) __builtin_prefetch(p + line, 0, 3);
}

// h[j] = max(0, bias[j] + sum_k x[k] * wt[k * n + j] + sum_r rows[r][j]) for j < n, the sums
// in that order for every j. The dense terms are summed kChunk outputs at a time in vector
// registers; then each row is added to h (n floats, in L1) front to back, one row after
// another: sequential reads the hardware prefetcher follows (a chunk of every row at a time,
// 26 streams at once, ran at half the speed under load). The rows are scattered over a store
// larger than L2 (a batch of 256 reads 6,656 rows of 4 KiB at 1024 wide), and a new row's
// first lines would wait for memory each time: so the next row (rows[r + 1], or `next`, the
// next example's first row, after the last) is prefetched while this one is added, a chunk
// of its lines per chunk added, and the first row during the dense terms. Prefetching
// changes no arithmetic.
// Compiled for AVX-512, AVX2 and the baseline (the build targets x86-64 without -march),
// picked by the CPU at load; each gives the same numbers on every call, which is what
// makes a kept row and one folded per batch add alike.
[[gnu::target_clones("avx512f", "avx2", "default")]] void FirstLayerRow(
    float* __restrict h, const float* __restrict bias, const float* __restrict x, int nx,
    const float* __restrict wt, const float* const* __restrict rows, int nrows, const float* next,
    int n) {
  const int whole = n - n % kChunk;
  Floats16 acc[kVectors], v;
  const float* ahead = nrows > 0 ? rows[0] : next;
  for (int j0 = 0; j0 < whole; j0 += kChunk) {
    if (ahead != nullptr) PrefetchChunk(ahead + j0);
    std::memcpy(&acc, bias + j0, sizeof acc);
    for (int k = 0; k < nx; ++k) {
      const float xk = x[k];
      const float* w = wt + static_cast<size_t>(k) * n + j0;
      for (int q = 0; q < kVectors; ++q) {
        std::memcpy(&v, w + 16 * q, sizeof v);
        acc[q] += xk * v;
      }
    }
    std::memcpy(h + j0, &acc, sizeof acc);
  }
  for (int r = 0; r < nrows; ++r) {
    const float* t = rows[r];
    ahead = r + 1 < nrows ? rows[r + 1] : next;
    for (int j0 = 0; j0 < whole; j0 += kChunk) {
      if (ahead != nullptr) PrefetchChunk(ahead + j0);
      // Through unaligned vector loads and stores: the array `acc` here went through the
      // stack on every chunk.
      for (int q = 0; q < kVectors; ++q) {
        auto* hq = reinterpret_cast<UnalignedFloats16*>(h + j0 + 16 * q);
        *hq = *hq + *reinterpret_cast<const UnalignedFloats16*>(t + j0 + 16 * q);
      }
    }
  }
  const Floats16 zero = {};
  for (int j0 = 0; j0 < whole; j0 += kChunk) {
    std::memcpy(&acc, h + j0, sizeof acc);
    for (int q = 0; q < kVectors; ++q) acc[q] = acc[q] > zero ? acc[q] : zero;
    std::memcpy(h + j0, &acc, sizeof acc);
  }
  for (int j = whole; j < n; ++j) {
    float sum = bias[j];
    for (int k = 0; k < nx; ++k) sum += x[k] * wt[static_cast<size_t>(k) * n + j];
    for (int r = 0; r < nrows; ++r) sum += rows[r][j];
    h[j] = sum > 0.f ? sum : 0.f;
  }
}

size_t HashSlot(uint64_t id, size_t mask) {
  return static_cast<size_t>((id * 0x9e3779b97f4a7c15ULL) >> 32) & mask;
}

}  // namespace

void FoldStoreUnmap::operator()(float* p) const {
  if (p != nullptr) ::munmap(p, bytes);
}

size_t EmbeddingFold::BytesFor(const TrainedModel& m) {
  if (m.spec.hidden.empty()) return 0;
  return m.ids.size() * static_cast<size_t>(m.spec.hidden[0]) * sizeof(float);
}

StatusOr<std::unique_ptr<EmbeddingFold>> EmbeddingFold::Create(const TrainedModel& m,
                                                               const std::vector<int>& sizes,
                                                               size_t max_bytes) {
  if (m.spec.kind != "wide_deep" || m.spec.hidden.empty() || m.spec.embedding_dim <= 0)
    return InvalidArgument("only Wide & Deep with a hidden layer folds its embeddings");
  auto f = std::unique_ptr<EmbeddingFold>(new EmbeddingFold());
  f->m_ = &m;
  f->num_dense_ = kCriteoDense;
  f->num_cat_ = kCriteoCat;
  f->edim_ = m.spec.embedding_dim;
  f->width_ = m.spec.hidden[0];
  const size_t nd = static_cast<size_t>(f->num_dense_), nc = static_cast<size_t>(f->num_cat_);
  const size_t edim = static_cast<size_t>(f->edim_), width = static_cast<size_t>(f->width_);
  const size_t in = nd + nc * edim;
  if (m.dense.size() < width * in + width)
    return InvalidArgument("the dense parameters do not fit the architecture");
  // W1 is [width x in] row-major, then b1 (the trainer's layout, layers.h).
  const float* w1 = m.dense.data();
  f->bias_.assign(w1 + width * in, w1 + width * in + width);
  f->dense_weights_.resize(nd * width);
  f->emb_weights_.resize(nc * edim * width);
  for (size_t j = 0; j < width; ++j) {
    const float* row = w1 + j * in;
    for (size_t k = 0; k < nd; ++k) f->dense_weights_[k * width + j] = row[k];
    for (size_t c = 0; c < nc; ++c) {
      for (size_t k = 0; k < edim; ++k)
        f->emb_weights_[(c * width + j) * edim + k] = row[nd + c * edim + k];
    }
  }
  f->capacity_ = max_bytes / (width * sizeof(float));
  // Anonymous memory, resident only as rows are kept. Huge pages where transparent huge
  // pages allow them: an example reads 26 rows scattered over the store, each a TLB miss
  // on 4 KiB pages.
  const size_t bytes = std::max<size_t>(1, f->capacity_ * width * sizeof(float));
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return Internal("cannot map " + std::to_string(bytes) + " bytes");
  (void)::madvise(mem, bytes, MADV_HUGEPAGE);  // a hint: without it, 4 KiB pages
  f->store_ =
      std::unique_ptr<float[], FoldStoreUnmap>(static_cast<float*>(mem), FoldStoreUnmap{bytes});
  f->tables_.resize(nc);
  // Layers 2.. as oneDNN inference primitives, on a copy of their parameters (a bound
  // inference layer keeps reading its bias from them).
  std::vector<int> rest_sizes = m.spec.hidden;
  rest_sizes.push_back(1);
  f->rest_params_.assign(m.dense.begin() + static_cast<std::ptrdiff_t>(width * in + width),
                         m.dense.end());
  try {
    for (const int size : sizes) {
      KT_ASSIGN_OR_RETURN(std::unique_ptr<Mlp> mlp,
                          Mlp::Create(&f->ctx_, size, rest_sizes, Precision::kFp32,
                                      /*inference=*/true));
      if (mlp->NumParams() != f->rest_params_.size())
        return InvalidArgument("the dense parameters do not fit the architecture");
      // An inference layer has no gradients: Bind never writes the second pointer.
      mlp->Bind(f->rest_params_.data(), f->rest_params_.data());
      f->rest_.emplace(size, std::move(mlp));
    }
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN: ") + e.what());
  }
  return f;
}

void EmbeddingFold::FoldRow(int field, const float* e, float* out) const {
  const double* w = emb_weights_.data() + static_cast<size_t>(field) * width_ * edim_;
  for (int j = 0; j < width_; ++j, w += edim_) {
    double acc = 0;
    for (int k = 0; k < edim_; ++k) acc += static_cast<double>(e[k]) * w[k];
    out[j] = static_cast<float>(acc);
  }
}

EmbeddingFold::Ref EmbeddingFold::Resolve(int field, uint64_t id, float* wide) {
  Table& t = tables_[static_cast<size_t>(field)];
  if (t.slots.empty()) t.slots.resize(16);
  size_t mask = t.slots.size() - 1;
  size_t h = HashSlot(id, mask);
  while (t.slots[h].row >= 0 && t.slots[h].id != id) h = (h + 1) & mask;
  if (t.slots[h].row >= 0) {
    *wide += t.slots[h].wide;
    return Ref{store_.get() + static_cast<size_t>(t.slots[h].row) * width_, nullptr, field};
  }
  const float* r = m_->Row(id);
  if (r == nullptr) {
    *wide += 0.f;  // the zero row, as unfolded
    return Ref{};
  }
  *wide += r[edim_];
  if (used_ >= capacity_) {
    unkept_.fetch_add(1, std::memory_order_relaxed);
    return Ref{nullptr, r, field};
  }
  float* out = store_.get() + used_ * width_;
  FoldRow(field, r, out);
  if (2 * (t.size + 1) > t.slots.size()) {  // grow: rehash into twice the slots
    std::vector<Entry> old = std::move(t.slots);
    t.slots.assign(old.size() * 2, Entry{});
    mask = t.slots.size() - 1;
    for (const Entry& e : old) {
      if (e.row < 0) continue;
      size_t g = HashSlot(e.id, mask);
      while (t.slots[g].row >= 0) g = (g + 1) & mask;
      t.slots[g] = e;
    }
    h = HashSlot(id, mask);
    while (t.slots[h].row >= 0) h = (h + 1) & mask;
  }
  t.slots[h] = Entry{id, static_cast<int32_t>(used_), r[edim_]};
  ++t.size;
  ++used_;
  return Ref{out, nullptr, field};
}

Status EmbeddingFold::Predict(const Batch& b, float* probs) {
  const auto it = rest_.find(b.size);
  if (it == rest_.end() || b.num_dense != num_dense_ || b.num_cat != num_cat_) {
    return InvalidArgument("batch shape (" + std::to_string(b.size) + ", " +
                           std::to_string(b.num_dense) + " dense, " + std::to_string(b.num_cat) +
                           " categorical) does not match the model");
  }
  const size_t n = static_cast<size_t>(b.size), nc = static_cast<size_t>(num_cat_);
  const size_t width = static_cast<size_t>(width_);
  refs_.resize(n * nc);
  wide_.assign(n, 0.f);
  for (size_t s = 0; s < n; ++s) {
    for (size_t c = 0; c < nc; ++c)
      refs_[s * nc + c] = Resolve(static_cast<int>(c), b.cat[s * nc + c], &wide_[s]);
  }
  kept_.store(used_, std::memory_order_relaxed);
  first_.resize(n * width);
  scratch_.resize(static_cast<size_t>(ComputeThreads()) * nc * width);
  ParallelRanges(n, kParallelExamples, [&](size_t begin, size_t end) {
    float* mine = scratch_.data() + static_cast<size_t>(omp_get_thread_num()) * nc * width;
    std::vector<const float*> rows(nc);
    for (size_t s = begin; s < end; ++s) {
      int count = 0;
      for (size_t c = 0; c < nc; ++c) {
        const Ref& r = refs_[s * nc + c];
        if (r.folded != nullptr) {
          rows[count++] = r.folded;
        } else if (r.embedding != nullptr) {  // the store is full: fold it for this batch
          FoldRow(r.field, r.embedding, mine + c * width);
          rows[count++] = mine + c * width;
        }
      }
      // The next example's first kept row, to prefetch while this example's last is added.
      const float* next = nullptr;
      for (size_t c = 0; s + 1 < end && c < nc && next == nullptr; ++c)
        next = refs_[(s + 1) * nc + c].folded;
      FirstLayerRow(first_.data() + s * width, bias_.data(), b.dense.data() + s * num_dense_,
                    num_dense_, dense_weights_.data(), rows.data(), count, next, width_);
    }
  });
  const float* deep;
  try {
    deep = it->second->Forward(first_.data());
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN: ") + e.what());
  }
  for (size_t s = 0; s < n; ++s) probs[s] = Sigmoid(wide_[s] + deep[s]);
  return Status::Ok();
}

}  // namespace kubetrain::trainer::serve
