#include "operator/cli/manifest_files.h"

#include <algorithm>
#include <filesystem>

namespace kubetrain::cli {

StatusOr<std::vector<std::string>> ManifestFiles(const std::string& path, bool recursive) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path == "-" || !fs::is_directory(path, ec)) return std::vector<std::string>{path};
  std::vector<std::string> files;
  auto add = [&](const fs::directory_entry& e) {
    const std::string ext = e.path().extension().string();
    std::error_code type_ec;
    if (e.is_regular_file(type_ec) && (ext == ".yaml" || ext == ".yml" || ext == ".json")) {
      files.push_back(e.path().string());
    }
  };
  if (recursive) {
    for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      add(*it);
    }
  } else {
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) add(*it);
  }
  if (ec) return NotFound(path + ": " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace kubetrain::cli
