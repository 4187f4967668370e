// Memory per embedding row on a PS: a ParamShard (EmbeddingStore behind it) given
// R rows by pushes of 4096 distinct ids, Wide & Deep's rows (16 values + 16 Adagrad slots +
// an update count), against the rows' payload (values + optimizer state: 128 bytes). Two
// measures: the store's own count of the bytes it holds, and the growth of the process's
// resident set (what the kernel charges); beside them the previous layout (an
// unordered_map from id to offset into one growing std::vector arena) measured the same way.
// The goal is at most 1.3 x payload + 16 bytes. Also: the time to save the shard (streamed
// to a local file) and its rate. The last lines are the figures, with their units.
// Run: embedding_store_bench [dir] [rows...]   (default: /tmp 1000000 10000000)
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainer/model/model.h"
#include "trainer/ps/shard.h"

namespace kubetrain::trainer {
namespace {

constexpr int kDim = 16;
constexpr size_t kRowFloats = kDim * 2 + 1;
constexpr double kPayload = kDim * 2 * sizeof(float);
constexpr size_t kBatch = 4096;

// Resident bytes of this process now.
double RssBytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

// Ids spread like HashFeature's (a multiplicative hash of the row number).
uint64_t IdOf(size_t r) {
  return (static_cast<uint64_t>(r) + 1) * 0x9e3779b97f4a7c15ULL;
}

struct Figures {
  double store_bytes_per_row = 0, rss_bytes_per_row = 0, old_rss_bytes_per_row = 0;
  double save_seconds = 0, save_mb_per_s = 0;
};

// Each layout is measured in a child process of its own (fork), so that memory one freed
// and the allocator kept does not hide the other's growth.
template <typename Fn>
void InChild(Figures* f, Fn fn) {
  int fds[2];
  if (::pipe(fds) != 0) std::exit(1);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    Figures child = *f;
    fn(child);
    if (::write(fds[1], &child, sizeof(child)) != sizeof(child)) ::_exit(1);
    ::_exit(0);
  }
  ::close(fds[1]);
  if (::read(fds[0], f, sizeof(*f)) != sizeof(*f)) std::exit(1);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

Figures Measure(const std::string& dir, size_t rows) {
  Figures figures;
  InChild(&figures, [&](Figures& f) {
    ShardConfig c;
    c.sparse_dim = kDim;
    c.optimizer.kind = OptimizerKind::kAdagrad;
    const double before = RssBytes();
    ParamShard shard(c, nullptr);
    std::vector<uint64_t> ids(kBatch);
    const std::vector<float> grads(kBatch * kDim, 0.01f);
    for (size_t r = 0; r < rows; r += kBatch) {
      const size_t n = std::min(kBatch, rows - r);
      for (size_t i = 0; i < n; ++i) ids[i] = IdOf(r + i);
      shard.Apply(nullptr, ids.data(), n, grads.data());
    }
    f.rss_bytes_per_row = (RssBytes() - before) / static_cast<double>(rows);
    f.store_bytes_per_row =
        static_cast<double>(shard.embedding_bytes()) / static_cast<double>(shard.num_rows());
    const std::string path = dir + "/embedding_store_bench.shard";
    const auto t0 = std::chrono::steady_clock::now();
    auto digest = shard.Save(path);
    f.save_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!digest.ok()) {
      std::fprintf(stderr, "%s\n", digest.status().ToString().c_str());
      std::exit(1);
    }
    f.save_mb_per_s = static_cast<double>(digest->bytes) / 1e6 / f.save_seconds;
    std::filesystem::remove(path);
  });
  InChild(&figures, [&](Figures& f) {
    // The layout before the store, as ParamShard had it.
    const double before = RssBytes();
    std::unordered_map<uint64_t, size_t> row_of;
    std::vector<float> arena;
    for (size_t r = 0; r < rows; ++r) {
      auto [it, inserted] = row_of.emplace(IdOf(r), arena.size());
      if (inserted) arena.resize(arena.size() + kRowFloats, 0.f);
    }
    f.old_rss_bytes_per_row = (RssBytes() - before) / static_cast<double>(rows);
  });
  return figures;
}

}  // namespace
}  // namespace kubetrain::trainer

int main(int argc, char** argv) {
  using namespace kubetrain::trainer;
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  std::vector<size_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {1000000, 10000000};
  const double goal = 1.3 * kPayload + 16;
  std::vector<std::pair<size_t, Figures>> all;
  for (const size_t rows : sizes) all.emplace_back(rows, Measure(dir, rows));
  std::printf("payload %.0f bytes/row (dim %d, Adagrad); goal <= %.1f bytes/row\n", kPayload, kDim,
              goal);
  for (const auto& [rows, f] : all) {
    std::printf(
        "%zu rows: save %.2f s (%.0f MB/s, streamed); previous layout %.1f bytes/row RSS "
        "(%.2fx payload)\n",
        rows, f.save_seconds, f.save_mb_per_s, f.old_rss_bytes_per_row,
        f.old_rss_bytes_per_row / kPayload);
  }
  for (const auto& [rows, f] : all) {
    std::printf("%zu rows: %.1f bytes/row held by the store, %.1f bytes/row RSS (%.2fx payload)\n",
                rows, f.store_bytes_per_row, f.rss_bytes_per_row, f.rss_bytes_per_row / kPayload);
  }
  return 0;
}
