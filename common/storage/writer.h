// Writing a local file or an S3 object front to back without holding it whole: what a
// checkpoint shard or an exported model of many GiB is written with.
//
// Local: the bytes go through a 1 MiB buffer to a temp file beside the path
// (CreateTempBeside); Commit fsyncs it, renames it over the path and fsyncs the directory
// (atomic, as WriteObject).
// S3: the bytes collect in a part buffer of `part_bytes`; a full part is uploaded by a
// thread of its own while the caller goes on filling the next, with at most
// `parts_in_flight` parts uploading (Append waits for the oldest beyond that). Memory is
// bounded by (parts_in_flight + 1) x part_bytes whatever the object's size. An object that
// ends within its first part is one PutObject (its SHA-256 recorded as WriteObject does);
// a larger one is a multipart upload, begun when the first part fills and completed by
// Commit. The object appears only at Commit, whole; an error or a writer destroyed
// uncommitted aborts the upload (no parts left behind, best effort).
//
// Checksums: each part is signed with its SHA-256 (the server checks the bytes). A
// streamed multipart object carries no x-amz-meta-kubetrain-sha256 (the parts' hashes are
// unknown when the upload starts); Commit returns the SHA-256 of all the bytes, which the
// caller records where its readers check it (the checkpoint MANIFEST, model.json).
//
// Errors: the first error (an I/O error, an upload that failed after the client's retries)
// is returned by that Append or a later one and by Commit; later calls do nothing.
// Not thread-safe (one writer); the upload threads are internal and joined before Commit or
// the destructor returns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kubetrain::storage {

struct WriterOptions {
  size_t part_bytes = 0;    // S3 part size; 0: the client's part_size (16 MiB)
  int parts_in_flight = 0;  // 0: the client's upload_parallelism (4)
  std::string content_type = "application/octet-stream";
};

struct WrittenObject {
  uint64_t bytes = 0;
  std::string sha256;  // hex, of all the bytes
};

class ObjectWriter {
 public:
  // A writer of `path` (local, its directory created if needed, or s3://bucket/key).
  // Errors: InvalidArgument for a bad S3 path or configuration; Internal when the temp
  // file cannot be created.
  static StatusOr<std::unique_ptr<ObjectWriter>> Open(const std::string& path,
                                                      const WriterOptions& options = {});
  virtual ~ObjectWriter() = default;
  ObjectWriter(const ObjectWriter&) = delete;
  ObjectWriter& operator=(const ObjectWriter&) = delete;

  virtual Status Append(std::string_view data) = 0;
  // Makes the object appear with every byte appended; the writer is done after it.
  virtual StatusOr<WrittenObject> Commit() = 0;
  virtual uint64_t bytes() const = 0;
  // The most bytes this writer held in memory at once (part buffers, in flight or not).
  virtual uint64_t peak_buffered_bytes() const = 0;

 protected:
  ObjectWriter() = default;
};

}  // namespace kubetrain::storage
