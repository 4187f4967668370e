#include "trainer/data/generator.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "trainer/data/metrics.h"
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

}  // namespace

StatusOr<double> WriteSyntheticCriteo(const std::string& path, int64_t n,
                                      const GeneratorOptions& o) {
  if (n <= 0 || o.vocab_size <= 0) return InvalidArgument("generator needs n > 0 and vocab > 0");
  const Truth t = MakeTruth(o);
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
    probs.push_back(static_cast<float>(p));
    labels.push_back(static_cast<float>(label));
    line = std::to_string(label) + fields + '\n';
    if (std::fwrite(line.data(), 1, line.size(), f) != line.size()) {
      std::fclose(f);
      std::remove(tmp.c_str());
      return Internal("short write to " + tmp);
    }
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
