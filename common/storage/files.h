// Paths that name either a local file or an S3 object ("s3://bucket/key"), so the
// trainer's checkpoint, data and output code has one code path for both.
//
// S3 paths use one process-wide S3Client configured from the AWS_* variables on first use
// (see S3ConfigFromEnv); a bad configuration is returned by every S3 call. Local writes are
// atomic (temp file, fsync, rename, fsync directory); S3 writes are atomic by nature (an
// object appears whole or not at all). All functions are thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/storage/s3_client.h"

namespace kubetrain::storage {

bool IsS3Path(std::string_view path);

struct S3Path {
  std::string bucket;
  std::string key;  // may be empty or end in '/' for a prefix
};
// "s3://bucket/key" -> {bucket, key}. Errors: InvalidArgument (no bucket).
StatusOr<S3Path> ParseS3Path(std::string_view path);

// root + "/" + name, with exactly one '/' between them.
std::string JoinPath(std::string_view root, std::string_view name);

// The process's S3 client (created from the environment on the first call).
StatusOr<S3Client*> DefaultS3Client();

// The whole file or object. Errors: NotFound when it does not exist; for S3 see S3Client.
StatusOr<std::string> ReadObject(const std::string& path);

enum class WriteMode {
  kReplace,     // overwrite
  kCreateOnly,  // fail with AlreadyExists if present (S3: If-None-Match: *)
};
Status WriteObject(const std::string& path, std::string_view data,
                   WriteMode mode = WriteMode::kReplace,
                   std::string_view content_type = "application/octet-stream");

StatusOr<bool> ObjectExists(const std::string& path);

// Deletes the file or object; one that is not there is not an error. A local file's
// directory is removed too once it is empty.
Status DeleteObject(const std::string& path);

// Every file/object below `dir`, as names relative to it ("ckpt-5/MANIFEST"), sorted.
// A directory or prefix that does not exist has none.
StatusOr<std::vector<std::string>> ListObjects(const std::string& dir);

// A new, empty file beside `path` ("<path>.tmp.XXXXXX", O_EXCL, mode 0644), opened for
// writing: unique across processes and containers sharing a volume (where every writer may be
// PID 1), and never a file or link that was already there. Returns the descriptor and sets
// *tmp to the name. Errors: Internal with the name and errno.
StatusOr<int> CreateTempBeside(const std::string& path, std::string* tmp);

// Writes a local file atomically (see above); kCreateOnly uses link(2), so exactly one of
// several concurrent creators wins.
Status WriteFileAtomic(const std::string& path, std::string_view data,
                       WriteMode mode = WriteMode::kReplace);

}  // namespace kubetrain::storage
