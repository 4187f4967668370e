#include "trainer/serve/fold.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "trainer/data/reader.h"
#include "trainer/model/model.h"

namespace kubetrain::trainer::serve {
namespace {

// A Wide & Deep with random parameters and `rows` trained ids; id_of[f] lists the ids of
// field f (ids are hashes of (field, value), so each belongs to one field in real data).
struct Fixture {
  TrainedModel m;
  std::vector<std::vector<uint64_t>> id_of;
};

Fixture RandomWideDeep(int rows, std::vector<int> hidden = {64, 8}) {
  Fixture x;
  x.m.spec.kind = "wide_deep";
  x.m.spec.embedding_dim = 16;
  x.m.spec.hidden = std::move(hidden);
  x.m.step = 3;
  uint64_t state = 42;
  x.m.dense.resize(x.m.spec.NumDenseParams());
  for (float& v : x.m.dense) v = 0.1f * UniformSym(state);
  std::set<uint64_t> ids;
  while (static_cast<int>(ids.size()) < rows) ids.insert(SplitMix64(state));
  x.m.ids.assign(ids.begin(), ids.end());
  const int dim = x.m.spec.SparseRowDim();
  x.m.rows.resize(x.m.ids.size() * static_cast<size_t>(dim));
  for (float& v : x.m.rows) v = 0.5f * UniformSym(state);
  x.id_of.resize(kCriteoCat);
  for (size_t i = 0; i < x.m.ids.size(); ++i) x.id_of[i % kCriteoCat].push_back(x.m.ids[i]);
  return x;
}

// Examples whose ids are: known ids of their own fields; ids without a trained row (0, the
// largest id, others); known ids of another field; the same id in two fields of one example.
Batch Examples(const Fixture& x, int size) {
  Batch b;
  b.size = size;
  b.num_dense = kCriteoDense;
  b.num_cat = kCriteoCat;
  uint64_t state = 7;
  for (int s = 0; s < size; ++s) {
    for (int k = 0; k < kCriteoDense; ++k) b.dense.push_back(2.f * UniformSym(state));
    for (int f = 0; f < kCriteoCat; ++f) {
      const auto& own = x.id_of[static_cast<size_t>(f)];
      const uint64_t r = SplitMix64(state);
      uint64_t id = own[r % own.size()];
      switch (s % 4) {
        case 1:  // unknown ids in every other field
          if (f % 2 == 0) id = f == 0 ? 0 : f == 2 ? std::numeric_limits<uint64_t>::max() : r;
          break;
        case 2:  // another field's ids
          if (f % 3 == 0) id = x.id_of[static_cast<size_t>((f + 5) % kCriteoCat)][r % 3];
          break;
        case 3:  // one id in fields 1, 2 and 9
          if (f == 1 || f == 2 || f == 9) id = x.id_of[1][0];
          break;
        default:
          break;
      }
      b.cat.push_back(id);
    }
  }
  b.label.assign(static_cast<size_t>(size), 0.f);
  return b;
}

// The unfolded forward pass as the Predictor runs it without the fold: the trainer's
// inference model on the trained rows, the zero row for an id without one.
std::vector<float> Unfolded(const TrainedModel& m, const Batch& b) {
  WideDeepConfig c;
  c.batch_size = b.size;
  c.embedding_dim = m.spec.embedding_dim;
  c.hidden = m.spec.hidden;
  c.inference_only = true;
  auto model = CreateWideDeep(c);
  EXPECT_TRUE(model.ok());
  std::vector<float> dense = m.dense;
  (*model)->UseDenseParams(dense.data());
  const SparseLookup l = SparseLookup::Build(b);
  const int dim = m.spec.SparseRowDim();
  std::vector<float> rows(l.ids.size() * static_cast<size_t>(dim), 0.f);
  for (size_t i = 0; i < l.ids.size(); ++i) {
    if (const float* r = m.Row(l.ids[i])) std::copy_n(r, dim, rows.data() + i * dim);
  }
  std::vector<float> probs(static_cast<size_t>(b.size));
  EXPECT_TRUE((*model)->Predict(b, l, rows.data(), probs.data()).ok());
  return probs;
}

std::vector<float> Folded(EmbeddingFold& fold, const Batch& b) {
  std::vector<float> probs(static_cast<size_t>(b.size));
  const Status st = fold.Predict(b, probs.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return probs;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - double(b[i])));
  return d;
}

TEST(EmbeddingFold, GivesTheUnfoldedPredictionsForKnownUnknownAndOtherFieldsIds) {
  const Fixture x = RandomWideDeep(300);
  const Batch b = Examples(x, 8);
  const std::vector<float> want = Unfolded(x.m, b);
  auto fold = EmbeddingFold::Create(x.m, {8}, size_t{64} << 20);
  ASSERT_TRUE(fold.ok()) << fold.status().ToString();
  const std::vector<float> first = Folded(**fold, b);   // fills the tables
  const std::vector<float> second = Folded(**fold, b);  // reads them
  EXPECT_LE(MaxDiff(first, want), 1e-6);
  EXPECT_EQ(first, second);
  // The probabilities are not all alike (a test of a constant would pass anything).
  EXPECT_GT(
      *std::max_element(want.begin(), want.end()) - *std::min_element(want.begin(), want.end()),
      0.05);
  // One kept row per distinct (field, known id), none for unknown ids.
  std::set<std::pair<int, uint64_t>> pairs;
  for (int s = 0; s < b.size; ++s) {
    for (int f = 0; f < kCriteoCat; ++f) {
      const uint64_t id = b.cat[static_cast<size_t>(s * kCriteoCat + f)];
      if (x.m.Row(id) != nullptr) pairs.emplace(f, id);
    }
  }
  EXPECT_EQ((*fold)->kept_rows(), pairs.size());
  EXPECT_EQ((*fold)->unkept_rows(), 0u);
  EXPECT_EQ((*fold)->kept_bytes(), pairs.size() * 64 * sizeof(float));
}

// A store too small for the rows met (or none at all) folds the rest for each batch, by the
// same code: the numbers are the same bits as with everything kept.
TEST(EmbeddingFold, AFullStoreFoldsTheRestPerBatchToTheSameBits) {
  const Fixture x = RandomWideDeep(300);
  const Batch b = Examples(x, 8);
  auto all = EmbeddingFold::Create(x.m, {8}, size_t{64} << 20);
  ASSERT_TRUE(all.ok());
  const std::vector<float> want = Folded(**all, b);
  for (const size_t rows : {size_t{0}, size_t{3}}) {
    auto small = EmbeddingFold::Create(x.m, {8}, rows * 64 * sizeof(float));
    ASSERT_TRUE(small.ok());
    EXPECT_EQ(Folded(**small, b), want) << rows << " rows kept";
    EXPECT_EQ(Folded(**small, b), want) << rows << " rows kept, second batch";
    EXPECT_EQ((*small)->kept_rows(), rows);
    EXPECT_GT((*small)->unkept_rows(), 0u);
  }
}

// Over two compute threads (each with scratch of its own for rows it folds per batch),
// a larger batch, the widths of the benchmark's model, and a first layer whose width is not
// a multiple of the chunk the additions run in.
TEST(EmbeddingFold, SplitsABatchOverTheComputeThreadsWithTheSameNumbers) {
  for (const std::vector<int>& hidden : {std::vector<int>{1024, 512, 256}, {100, 3}}) {
    const Fixture x = RandomWideDeep(2000, hidden);
    const Batch b = Examples(x, 64);
    const size_t some = 200 * static_cast<size_t>(hidden[0]) * sizeof(float);  // of 1,664
    SetComputeThreads(1);
    auto one = EmbeddingFold::Create(x.m, {64}, some);
    ASSERT_TRUE(one.ok());
    const std::vector<float> want = Folded(**one, b);
    EXPECT_GT((*one)->unkept_rows(), 0u);
    EXPECT_LE(MaxDiff(want, Unfolded(x.m, b)), 1e-6) << hidden[0];
    SetComputeThreads(2);
    auto two = EmbeddingFold::Create(x.m, {64}, some);
    ASSERT_TRUE(two.ok());
    const std::vector<float> got = Folded(**two, b);
    SetComputeThreads(1);
    // The first layer's sums are the same per example; oneDNN may split the later layers'
    // sums differently on two threads.
    EXPECT_LE(MaxDiff(got, want), 1e-6) << hidden[0];
  }
}

TEST(EmbeddingFold, RefusesOtherModelsAndOtherBatchSizes) {
  TrainedModel mlp;
  mlp.spec.kind = "mlp";
  mlp.spec.num_features = 3;
  mlp.spec.hidden = {4};
  EXPECT_EQ(EmbeddingFold::Create(mlp, {1}, 1 << 20).status().code(), StatusCode::kInvalidArgument);
  const Fixture x = RandomWideDeep(30);
  auto fold = EmbeddingFold::Create(x.m, {4}, 1 << 20);
  ASSERT_TRUE(fold.ok());
  const Batch b = Examples(x, 2);
  std::vector<float> probs(2);
  EXPECT_EQ((*fold)->Predict(b, probs.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EmbeddingFold::BytesFor(x.m), 30 * 64 * sizeof(float));
}

}  // namespace
}  // namespace kubetrain::trainer::serve
