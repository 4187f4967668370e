// For fuzz targets that go through files: one scratch directory per process,
// on tmpfs where there is one (atomic writes fsync, ~100 ms each on a disk),
// removed when the process exits normally.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace kubetrain::storage {

inline const std::string& FuzzTempDir() {
  // Never destroyed, so the exit handler can still read it.
  static const std::string* const dir = [] {
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    auto* path = new std::string((base / "kubetrain-fuzz-XXXXXX").string());
    if (mkdtemp(path->data()) == nullptr) std::abort();
    return path;
  }();
  static const bool cleanup = [] {
    return std::atexit([] {
             std::error_code ec;
             std::filesystem::remove_all(*dir, ec);
           }) == 0;
  }();
  (void)cleanup;
  return *dir;
}

}  // namespace kubetrain::storage
