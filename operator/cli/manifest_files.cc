#include "operator/cli/manifest_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

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

StatusOr<std::string> ReadManifest(const std::string& path, size_t max_bytes) {
  if (path == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return NotFound(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) {
    return Status(StatusCode::kFailedPrecondition, path + ": is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot be read");
  if (max_bytes > 0) {
    in.seekg(0, std::ios::end);
    if (in.tellg() > static_cast<std::streamoff>(max_bytes)) {
      return InvalidArgument(path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    in.seekg(0);
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace kubetrain::cli
