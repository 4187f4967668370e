#include "trainer/data/generator.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "trainer/data/eval_metrics.h"
#include "trainer/data/reader.h"

namespace kubetrain::trainer {
namespace {

uint64_t Next(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
double Uniform(uint64_t& s) {
  return static_cast<double>(Next(s) >> 11) * 0x1.0p-53;
}
double Normal(uint64_t& s) {
  const double u1 = std::max(Uniform(s), 1e-300), u2 = Uniform(s);
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
}

struct Truth {
  std::vector<std::vector<double>> cat_w;  // [field][value]
  std::vector<double> dense_w;
  std::vector<double> inter;  // [v0 % 8][v1 % 8]
  double bias = -1.0;
};

Truth MakeTruth(const GeneratorOptions& o) {
  uint64_t seed_state = o.model_seed ^ 0x2545f4914f6cdd1dULL;
  uint64_t s = Next(seed_state);
  Truth t;
  t.cat_w.resize(kCriteoCat);
  for (int f = 0; f < kCriteoCat; ++f) {
    // A third of the fields carry signal; the rest are noise the model must learn to ignore.
    const double scale = f % 3 == 0 ? 0.8 : 0.05;
    for (int v = 0; v < o.vocab_size; ++v) t.cat_w[f].push_back(scale * Normal(s));
  }
  for (int i = 0; i < kCriteoDense; ++i) t.dense_w.push_back(i < 4 ? 0.4 * Normal(s) : 0.0);
  for (int i = 0; i < 64; ++i) t.inter.push_back(1.0 * Normal(s));
  return t;
}

// The default profile, unchanged (its files are byte-identical to earlier versions').
bool WriteSmallLines(FILE* f, int64_t n, const GeneratorOptions& o, uint64_t& s,
                     std::vector<float>* probs, std::vector<float>* labels) {
  const Truth t = MakeTruth(o);
  std::string line;
  for (int64_t r = 0; r < n; ++r) {
    double logit = t.bias;
    line.clear();
    std::string fields;
    for (int i = 0; i < kCriteoDense; ++i) {
      fields += '\t';
      if (Uniform(s) < o.missing_rate) continue;
      const long x = std::lround(std::exp(1.5 * Uniform(s) * 3.0)) - 1;  // 0 .. ~90, skewed
      logit += t.dense_w[i] * (std::log1p(static_cast<double>(x)) - 2.0);
      fields += std::to_string(x);
    }
    int v01[2] = {0, 0};
    for (int fi = 0; fi < kCriteoCat; ++fi) {
      fields += '\t';
      if (Uniform(s) < o.missing_rate) continue;
      // Skewed toward small value indices: v = vocab * u^2.
      const double u = Uniform(s);
      const int v = std::min(o.vocab_size - 1, static_cast<int>(o.vocab_size * u * u));
      if (fi < 2) v01[fi] = v;
      logit += t.cat_w[fi][v];
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%08x",
                    static_cast<unsigned>(HashFeature(fi, std::to_string(v)) & 0xffffffffu));
      fields += hex;
    }
    logit += t.inter[(v01[0] % 8) * 8 + v01[1] % 8];
    const double p = 1.0 / (1.0 + std::exp(-logit));
    const int label = Uniform(s) < p ? 1 : 0;
    probs->push_back(static_cast<float>(p));
    labels->push_back(static_cast<float>(label));
    line = std::to_string(label) + fields + '\n';
    if (std::fwrite(line.data(), 1, line.size(), f) != line.size()) return false;
  }
  return true;
}

// A bijection of 32-bit values (xor, odd multiplies, xor-shifts are each invertible): a
// field's distinct value indices print as distinct hex strings, so a field has exactly as
// many distinct strings as indices drawn.
uint32_t Permute32(uint32_t x) {
  x *= 0x9e3779b1u;
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}

// The criteo-kaggle profile: Kaggle's cardinalities, Zipf-like values, weights hashed.
// Written into one reused buffer with no allocation per line, so it runs at millions of
// lines per second (bench/trainer/generator_bench).
bool WriteKaggleLines(FILE* f, int64_t n, const GeneratorOptions& o, uint64_t& s,
                      std::vector<float>* probs, std::vector<float>* labels) {
  GeneratorOptions small = o;
  small.vocab_size = 8;  // the truth's dense weights and interaction table only
  const Truth t = MakeTruth(small);
  const auto& card = CriteoKaggleCardinalities();
  double log_card[kCriteoCat];
  double scale[kCriteoCat];
  uint64_t salt[kCriteoCat];
  uint32_t print_salt[kCriteoCat];
  uint64_t seed_state = o.model_seed ^ 0x7c3a1e5d2b4f6a89ULL;
  for (int fi = 0; fi < kCriteoCat; ++fi) {
    log_card[fi] = std::log(static_cast<double>(card[fi]) + 1.0);
    // A third of the fields carry signal, as in the small profile.
    scale[fi] = (fi % 3 == 0 ? 0.8 : 0.05) * std::sqrt(3.0);  // uniform of this variance
    salt[fi] = Next(seed_state);
    print_salt[fi] = static_cast<uint32_t>(Next(seed_state));
  }
  // log1p(x) - 2 of every dense value x = lround(exp(4.5 u)) - 1 < exp(4.5) (a table: the
  // same doubles as computing it per value, a third of the time saved).
  constexpr long kMaxDense = 90;
  double log1p_of[kMaxDense + 1];
  for (long x = 0; x <= kMaxDense; ++x) log1p_of[x] = std::log1p(static_cast<double>(x)) - 2.0;
  static constexpr char kHex[] = "0123456789abcdef";
  constexpr size_t kFlushBytes = size_t{1} << 20;
  std::string out;
  out.reserve(kFlushBytes + 1024);
  for (int64_t r = 0; r < n; ++r) {
    char line[512];
    char* w = line + 1;  // line[0]: the label, known last
    double logit = t.bias;
    for (int i = 0; i < kCriteoDense; ++i) {
      *w++ = '\t';
      if (Uniform(s) < o.missing_rate) continue;
      const long x = std::lround(std::exp(1.5 * Uniform(s) * 3.0)) - 1;  // 0 .. 89, skewed
      logit += t.dense_w[i] * log1p_of[std::min<long>(x, kMaxDense)];
      w = std::to_chars(w, line + sizeof(line), x).ptr;
    }
    uint64_t v01[2] = {0, 0};
    for (int fi = 0; fi < kCriteoCat; ++fi) {
      *w++ = '\t';
      if (Uniform(s) < o.missing_rate) continue;
      // Log-uniform over [1, card + 1): P(v) ~ 1 / (v + 1.5), v in [0, card - 1].
      const double e = std::exp(Uniform(s) * log_card[fi]);
      const uint64_t v =
          std::min(static_cast<uint64_t>(card[fi] - 1), static_cast<uint64_t>(e) - 1);
      if (fi < 2) v01[fi] = v;
      uint64_t h = salt[fi] ^ v;
      const double u = static_cast<double>(Next(h) >> 11) * 0x1.0p-53;
      logit += scale[fi] * (2.0 * u - 1.0);
      const uint32_t id = Permute32(static_cast<uint32_t>(v) ^ print_salt[fi]);
      for (int k = 7; k >= 0; --k) w[7 - k] = kHex[(id >> (4 * k)) & 0xf];
      w += 8;
    }
    logit += t.inter[(v01[0] % 8) * 8 + v01[1] % 8];
    const double p = 1.0 / (1.0 + std::exp(-logit));
    const int label = Uniform(s) < p ? 1 : 0;
    probs->push_back(static_cast<float>(p));
    labels->push_back(static_cast<float>(label));
    line[0] = static_cast<char>('0' + label);
    *w++ = '\n';
    out.append(line, static_cast<size_t>(w - line));
    if (out.size() >= kFlushBytes) {
      if (std::fwrite(out.data(), 1, out.size(), f) != out.size()) return false;
      out.clear();
    }
  }
  return std::fwrite(out.data(), 1, out.size(), f) == out.size();
}

}  // namespace

StatusOr<GeneratorProfile> ParseGeneratorProfile(std::string_view name) {
  if (name == "small") return GeneratorProfile::kSmall;
  if (name == "criteo-kaggle") return GeneratorProfile::kCriteoKaggle;
  return InvalidArgument("--generate-profile must be small or criteo-kaggle, not " +
                         std::string(name));
}

const std::array<int64_t, kCriteoCat>& CriteoKaggleCardinalities() {
  static constexpr std::array<int64_t, kCriteoCat> kCards = {
      1460,  583,  10131227, 2202608, 305, 24,     12517,   633,   3,
      93145, 5683, 8351593,  3194,    27,  14992,  5461306, 10,    5652,
      2173,  4,    7046547,  18,      15,  286181, 105,     142572};
  return kCards;
}

StatusOr<double> WriteSyntheticCriteo(const std::string& path, int64_t n,
                                      const GeneratorOptions& o) {
  if (n <= 0 || o.vocab_size <= 0) return InvalidArgument("generator needs n > 0 and vocab > 0");
  // A hidden temp name: readers listing the directory skip dot files, so a concurrent
  // generator's half-written file is never mistaken for data. The name is made unique by
  // mkstemp (O_EXCL), not by the PID: containers sharing a volume are each PID 1.
  const std::filesystem::path final_path(path);
  std::string tmp_name = ".";  // built step by step: GCC 12 warns (-Wrestrict) on a + chain
  tmp_name += final_path.filename().string();
  tmp_name += ".tmp.XXXXXX";
  std::string tmp = (final_path.parent_path() / tmp_name).string();
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return NotFound("cannot write " + tmp + ": " + std::strerror(errno));
  // mkstemp creates 0600; the data is for every replica, whichever user it runs as.
  ::fchmod(fd, 0644);
  FILE* f = ::fdopen(fd, "w");
  if (f == nullptr) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return Internal("cannot write " + tmp + ": " + std::strerror(errno));
  }
  // Start the sample stream at a hashed position: seeds k and k+1 used plainly would give
  // streams one draw apart, i.e. evaluation data that overlaps the training data.
  uint64_t seed_state = o.sample_seed ^ 0x5bd1e9955bd1e995ULL;
  uint64_t s = Next(seed_state);
  std::vector<float> probs, labels;
  probs.reserve(n);
  labels.reserve(n);
  const bool written = o.profile == GeneratorProfile::kCriteoKaggle
                           ? WriteKaggleLines(f, n, o, s, &probs, &labels)
                           : WriteSmallLines(f, n, o, s, &probs, &labels);
  if (!written) {
    std::fclose(f);
    std::remove(tmp.c_str());
    return Internal("short write to " + tmp);
  }
  if (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0) {
    std::fclose(f);
    std::remove(tmp.c_str());
    return Internal("cannot flush " + tmp);
  }
  std::fclose(f);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return Internal("cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
  return Auc(probs.data(), labels.data(), labels.size());
}

}  // namespace kubetrain::trainer
