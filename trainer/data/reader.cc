#include "trainer/data/reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>

#include "common/storage/files.h"

namespace kubetrain::trainer {
namespace {

// Splits on `sep` into exactly `n` fields; false if the count differs.
bool SplitExact(std::string_view line, char sep, size_t n, std::vector<std::string_view>* out) {
  out->clear();
  size_t start = 0;
  while (true) {
    const size_t pos = line.find(sep, start);
    out->push_back(line.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    if (out->size() > n) return false;
    start = pos + 1;
  }
  return out->size() == n;
}

bool ParseDouble(std::string_view s, double* v) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(*v);
}

}  // namespace

StatusOr<DataFormat> ParseDataFormat(std::string_view name) {
  if (name == "criteo_tsv") return DataFormat::kCriteoTsv;
  if (name == "criteo_csv") return DataFormat::kCriteoCsv;
  if (name == "dense_csv") return DataFormat::kDenseCsv;
  return InvalidArgument("unknown data format \"" + std::string(name) +
                         "\" (expected criteo_tsv, criteo_csv or dense_csv)");
}

uint64_t HashFeature(int field, std::string_view value) {
  uint64_t h = 0xcbf29ce484222325ULL ^ (static_cast<uint64_t>(field + 1) * 0x100000001b3ULL);
  for (unsigned char c : value) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  // Final avalanche so ids spread evenly over PS shards.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

float TransformCount(double x) {
  return static_cast<float>(x >= 0 ? std::log1p(x) : -std::log1p(-x));
}

Status ParseCriteoLine(std::string_view line, char sep, Batch* b, int row) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  thread_local std::vector<std::string_view> f;
  if (!SplitExact(line, sep, 1 + kCriteoDense + kCriteoCat, &f)) {
    return InvalidArgument("expected " + std::to_string(1 + kCriteoDense + kCriteoCat) + " fields");
  }
  double label;
  if (!ParseDouble(f[0], &label) || (label != 0 && label != 1)) {
    return InvalidArgument("label \"" + std::string(f[0]) + "\" is not 0 or 1");
  }
  b->label[row] = static_cast<float>(label);
  float* dense = b->dense.data() + static_cast<size_t>(row) * kCriteoDense;
  for (int i = 0; i < kCriteoDense; ++i) {
    double v = 0;
    if (!f[1 + i].empty() && !ParseDouble(f[1 + i], &v)) {
      return InvalidArgument("integer feature I" + std::to_string(i + 1) + " \"" +
                             std::string(f[1 + i]) + "\" is not a number");
    }
    dense[i] = TransformCount(v);
  }
  uint64_t* cat = b->cat.data() + static_cast<size_t>(row) * kCriteoCat;
  for (int i = 0; i < kCriteoCat; ++i) cat[i] = HashFeature(i, f[1 + kCriteoDense + i]);
  return Status::Ok();
}

Status ParseDenseCsvLine(std::string_view line, int num_features, Batch* b, int row) {
  thread_local std::vector<std::string_view> f;
  if (!SplitExact(line, ',', 1 + num_features, &f)) {
    return InvalidArgument("expected " + std::to_string(1 + num_features) + " fields");
  }
  double label;
  if (!ParseDouble(f[0], &label) || label < 0 || label != std::floor(label)) {
    return InvalidArgument("label \"" + std::string(f[0]) + "\" is not a class index");
  }
  b->label[row] = static_cast<float>(label);
  float* dense = b->dense.data() + static_cast<size_t>(row) * num_features;
  for (int i = 0; i < num_features; ++i) {
    double v;
    if (!ParseDouble(f[1 + i], &v)) {
      return InvalidArgument("feature " + std::to_string(i + 1) + " \"" + std::string(f[1 + i]) +
                             "\" is not a number");
    }
    dense[i] = static_cast<float>(v);
  }
  return Status::Ok();
}

namespace {

ReaderOptions ByFile(ReaderOptions o, bool stripe_by_file) {
  if (!stripe_by_file || o.num_stripes <= 1 ||
      o.files.size() < static_cast<size_t>(o.num_stripes)) {
    return o;
  }
  std::vector<std::string> mine;
  for (size_t i = static_cast<size_t>(o.stripe); i < o.files.size();
       i += static_cast<size_t>(o.num_stripes)) {
    mine.push_back(o.files[i]);
  }
  o.files = std::move(mine);
  o.stripe = 0;
  o.num_stripes = 1;
  return o;
}

}  // namespace

StripeReader::StripeReader(ReaderOptions options, SourceOptions source)
    : o_(ByFile(std::move(options), source.stripe_by_file)), source_(std::move(source)) {}

void StripeReader::Shape(Batch* b, int n) const {
  const bool dense_csv = o_.format == DataFormat::kDenseCsv;
  b->size = n;
  b->num_dense = dense_csv ? o_.num_features : kCriteoDense;
  b->num_cat = dense_csv ? 0 : kCriteoCat;
  b->dense.resize(static_cast<size_t>(n) * b->num_dense);
  b->cat.resize(static_cast<size_t>(n) * b->num_cat);
  b->label.resize(n);
}

StatusOr<bool> StripeReader::NextLine(std::string* line) {
  if (o_.files.empty()) return NotFound("no data files");
  while (true) {
    if (!opened_) {
      if (file_ >= o_.files.size()) {
        if (!o_.loop) return false;
        if (good_in_pass_ == 0) {
          return InvalidArgument("stripe " + std::to_string(o_.stripe) + "/" +
                                 std::to_string(o_.num_stripes) + " of the data has no valid line");
        }
        file_ = 0;
        first_pass_ = false;
        global_line_ = 0;
        good_in_pass_ = 0;
      }
      in_.reset();
      auto in = storage::ObjectInputStream::Open(o_.files[file_], source_.stream);
      if (!in.ok()) return in.status();
      in_ = std::move(*in);
      opened_ = true;
      file_line_ = 0;
    }
    if (std::getline(*in_, *line)) {
      ++file_line_;
      const int64_t i = global_line_++;
      if (line->empty() || i % o_.num_stripes != o_.stripe) continue;
      ++lines_in_stripe_;
      return true;
    }
    // The end of the file, or a read error (an S3 transfer that failed for good).
    if (Status s = in_->status(); !s.ok()) return s;
    opened_ = false;
    ++file_;
  }
}

StatusOr<int> StripeReader::Next(int batch_size, Batch* b) {
  Shape(b, batch_size);
  int n = 0;
  std::string line;
  while (n < batch_size) {
    KT_ASSIGN_OR_RETURN(const bool more, NextLine(&line));
    if (!more) break;
    Status s = o_.format == DataFormat::kDenseCsv
                   ? ParseDenseCsvLine(line, o_.num_features, b, n)
                   : ParseCriteoLine(line, o_.format == DataFormat::kCriteoTsv ? '\t' : ',', b, n);
    if (!s.ok()) {
      // A header line in CSV is not an error.
      if (o_.format == DataFormat::kDenseCsv && file_line_ == 1) continue;
      if (!first_pass_) continue;
      if (++bad_lines_ > o_.max_bad_lines) {
        return InvalidArgument(o_.files[file_] + ":" + std::to_string(file_line_) + ": " +
                               s.message() + " (" + std::to_string(bad_lines_) +
                               " malformed lines, more than the limit of " +
                               std::to_string(o_.max_bad_lines) + ")");
      }
      continue;
    }
    ++good_in_pass_;
    ++n;
  }
  if (n < batch_size) Shape(b, n);
  return n;
}

StatusOr<std::vector<std::string>> ListDataFiles(const std::string& dir,
                                                 std::string_view contains) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (storage::IsS3Path(dir)) {
    auto names = storage::ListObjects(dir);
    if (!names.ok()) return names.status().WithContext("cannot list data in " + dir);
    for (const std::string& name : *names) {
      // Objects directly under the prefix; "sub/x" is in a sub-"directory".
      if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos) continue;
      if (!contains.empty() && name.find(contains) == std::string::npos) continue;
      files.push_back(storage::JoinPath(dir, name));
    }
  } else {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) return NotFound("cannot list data directory " + dir + ": " + ec.message());
    for (const auto& entry : it) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_regular_file() || name.empty() || name[0] == '.') continue;
      if (!contains.empty() && name.find(contains) == std::string::npos) continue;
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    return NotFound(
        "no data files" +
        (contains.empty() ? std::string() : " matching \"" + std::string(contains) + "\"") +
        " in " + dir);
  }
  return files;
}

}  // namespace kubetrain::trainer
