// Sequential reading of a local file or an S3 object through a std::istream, so line
// parsers work unchanged on both.
//
// S3: the object is read in ranged GETs of `chunk_bytes`, each pinned to the version Open
// found (If-Match: its ETag; a replaced object ends the read with Unavailable, so the reader
// starts again on the new one); a background thread keeps up to
// `read_ahead` chunks fetched ahead of the reader, so parsing and network overlap and the
// object is never held whole. With `cache_dir`, a complete read also leaves a copy in
// <cache_dir>/<bucket>/<key> (written atomically), which later opens read instead of S3
// when its size still matches the object's.
// Errors: Open returns NotFound/PermissionDenied/... naming the object; an error during
// the read ends the stream (failbit) and status() tells why.
// Not thread-safe (one reader); the prefetch thread is internal and joined on destruction.
#pragma once

#include <istream>
#include <memory>
#include <string>

#include "common/status.h"

namespace kubetrain::storage {

struct StreamOptions {
  size_t chunk_bytes = 8u << 20;
  int read_ahead = 2;
  std::string cache_dir;  // S3 only; empty: no cache
};

class ObjectInputStream : public std::istream {
 public:
  static StatusOr<std::unique_ptr<ObjectInputStream>> Open(const std::string& path,
                                                           const StreamOptions& options = {});
  ~ObjectInputStream() override;
  // OK, or the error that ended the stream before the end of the object.
  Status status() const;

 private:
  class Buffer;
  explicit ObjectInputStream(std::unique_ptr<std::streambuf> buf);
  std::unique_ptr<std::streambuf> buf_;
};

}  // namespace kubetrain::storage
