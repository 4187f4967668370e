// Readers for training data in local files.
//
// Formats:
//   criteo_tsv  label \t I1..I13 \t C1..C26   (Criteo display-ads; empty fields = missing)
//   criteo_csv  the same 40 fields separated by commas
//   dense_csv   label,f1,...,fn               (label = class index; for the MLP classifier;
//                                               a non-numeric first line is a header)
// Files are local paths or s3://bucket/key objects (streamed with ranged GETs and
// read-ahead, see common/storage/stream.h).
// Each worker reads its own stripe: counting lines over all files in order, line i belongs
// to worker i % num_workers. With stripe_by_file and at least as many files as workers,
// worker w takes whole files instead (file i to worker i % num_workers), so no file is
// read by two workers (used for S3, where every byte read is a transfer). Malformed lines are
// counted and skipped; once more than max_bad_lines are seen, Next() fails with a message naming
// the last bad line.
//
// Not thread-safe; one reader per worker.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/storage/stream.h"
#include "trainer/model/batch.h"

namespace kubetrain::trainer {

enum class DataFormat { kCriteoTsv, kCriteoCsv, kDenseCsv };

StatusOr<DataFormat> ParseDataFormat(std::string_view name);

constexpr int kCriteoDense = 13;
constexpr int kCriteoCat = 26;

// A categorical value's 64-bit id: the field index and the raw string, hashed (FNV-1a),
// so equal strings in different fields are different features. Missing values get a
// per-field id of their own.
uint64_t HashFeature(int field, std::string_view value);
// Criteo integer counts are heavy-tailed: feed the network sign(x) * log(1 + |x|).
float TransformCount(double x);

// Parses one Criteo line into row `row` of `b` (which must be sized for it).
Status ParseCriteoLine(std::string_view line, char sep, Batch* b, int row);
// Parses one dense CSV line with `num_features` features into row `row` of `b`.
Status ParseDenseCsvLine(std::string_view line, int num_features, Batch* b, int row);

struct ReaderOptions {
  std::vector<std::string> files;
  DataFormat format = DataFormat::kCriteoTsv;
  int num_features = 0;  // dense_csv only
  int stripe = 0;
  int num_stripes = 1;
  int64_t max_bad_lines = 1000;
  bool loop = true;  // start over at the end (training); false: one pass (evaluation)
};

// How files are shared out and read (the defaults suit local files).
struct SourceOptions {
  bool stripe_by_file = false;
  storage::StreamOptions stream;  // S3: chunk size, read-ahead, local cache
};

class StripeReader {
 public:
  explicit StripeReader(ReaderOptions options, SourceOptions source = {});

  // Fills `b` with up to batch_size examples (resizing it). Returns the number filled:
  // batch_size, or fewer at the end of a one-pass read, 0 when it is exhausted.
  // Errors: NotFound (no files / cannot open), InvalidArgument (too many bad lines,
  // or a looping reader whose stripe has no valid line).
  StatusOr<int> Next(int batch_size, Batch* b);

  int64_t bad_lines() const { return bad_lines_; }
  int64_t lines_read() const { return lines_in_stripe_; }

 private:
  // Reads the next line of this stripe; false at the end of all files.
  StatusOr<bool> NextLine(std::string* line);
  void Shape(Batch* b, int n) const;

  const ReaderOptions o_;
  const SourceOptions source_;
  std::unique_ptr<storage::ObjectInputStream> in_;
  size_t file_ = 0;
  bool opened_ = false;
  int64_t global_line_ = 0;  // over all files, for striping
  int64_t file_line_ = 0;    // within the current file, for messages
  int64_t lines_in_stripe_ = 0;
  int64_t good_in_pass_ = 0;
  int64_t bad_lines_ = 0;
  bool first_pass_ = true;  // bad lines are counted once, not once per epoch
};

// Lists the data files of a directory or an s3://bucket/prefix/ (files or objects directly
// in it, sorted by name, skipping names starting with '.'), optionally only those whose
// name contains `contains`.
StatusOr<std::vector<std::string>> ListDataFiles(const std::string& dir, std::string_view contains);

}  // namespace kubetrain::trainer
