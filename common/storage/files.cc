#include "common/storage/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>

namespace kubetrain::storage {

namespace fs = std::filesystem;

bool IsS3Path(std::string_view path) {
  return path.rfind("s3://", 0) == 0;
}

StatusOr<S3Path> ParseS3Path(std::string_view path) {
  if (!IsS3Path(path)) return InvalidArgument("not an s3:// path: " + std::string(path));
  std::string_view rest = path.substr(5);
  const size_t slash = rest.find('/');
  S3Path p;
  p.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) p.key = std::string(rest.substr(slash + 1));
  if (p.bucket.empty()) return InvalidArgument("no bucket in " + std::string(path));
  return p;
}

std::string JoinPath(std::string_view root, std::string_view name) {
  std::string out(root);
  while (out.size() > 1 && out.back() == '/' && !out.ends_with("://")) out.pop_back();
  while (!name.empty() && name.front() == '/') name.remove_prefix(1);
  if (!out.empty() && out.back() != '/') out.push_back('/');
  out.append(name);
  return out;
}

StatusOr<S3Client*> DefaultS3Client() {
  static std::once_flag once;
  static std::unique_ptr<S3Client> client;
  static Status error;
  std::call_once(once, [] {
    auto c = S3ConfigFromEnv([](const char* n) { return std::getenv(n); });
    if (!c.ok()) {
      error = c.status();
      return;
    }
    client = std::make_unique<S3Client>(*c);
  });
  if (!error.ok()) return error;
  return client.get();
}

StatusOr<std::string> ReadObject(const std::string& path) {
  if (IsS3Path(path)) {
    auto p = ParseS3Path(path);
    if (!p.ok()) return p.status();
    auto c = DefaultS3Client();
    if (!c.ok()) return c.status();
    return (*c)->Get(p->bucket, p->key);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Internal("cannot read " + path);
  return ss.str();
}

Status WriteObject(const std::string& path, std::string_view data, WriteMode mode,
                   std::string_view content_type) {
  if (IsS3Path(path)) {
    auto p = ParseS3Path(path);
    if (!p.ok()) return p.status();
    auto c = DefaultS3Client();
    if (!c.ok()) return c.status();
    PutOptions o{std::string(content_type), mode == WriteMode::kCreateOnly};
    return (*c)->Upload(p->bucket, p->key, data, o);
  }
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) return Internal("cannot create " + parent.string() + ": " + ec.message());
  return WriteFileAtomic(path, data, mode);
}

StatusOr<bool> ObjectExists(const std::string& path) {
  if (IsS3Path(path)) {
    auto p = ParseS3Path(path);
    if (!p.ok()) return p.status();
    auto c = DefaultS3Client();
    if (!c.ok()) return c.status();
    auto h = (*c)->Head(p->bucket, p->key);
    if (h.ok()) return true;
    if (h.status().code() == StatusCode::kNotFound) return false;
    return h.status();
  }
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

Status DeleteObject(const std::string& path) {
  if (IsS3Path(path)) {
    KT_ASSIGN_OR_RETURN(S3Path p, ParseS3Path(path));
    KT_ASSIGN_OR_RETURN(S3Client * c, DefaultS3Client());
    return c->Delete(p.bucket, p.key);  // NoSuchKey is OK
  }
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) return Internal("cannot delete " + path + ": " + ec.message());
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty() && fs::is_empty(dir, ec) && !ec) fs::remove(dir, ec);  // best effort
  return Status::Ok();
}

StatusOr<std::vector<std::string>> ListObjects(const std::string& dir) {
  std::vector<std::string> names;
  if (IsS3Path(dir)) {
    auto p = ParseS3Path(dir);
    if (!p.ok()) return p.status();
    auto c = DefaultS3Client();
    if (!c.ok()) return c.status();
    std::string prefix = p->key;
    if (!prefix.empty() && prefix.back() != '/') prefix.push_back('/');
    auto all = (*c)->ListAll(p->bucket, prefix);
    if (!all.ok()) return all.status();
    for (const auto& o : *all) names.push_back(o.key.substr(prefix.size()));
  } else {
    std::error_code ec;
    if (!fs::exists(dir, ec)) return names;
    fs::recursive_directory_iterator it(dir, ec), end;
    if (ec) return Internal("cannot list " + dir + ": " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) return Internal("cannot list " + dir + ": " + ec.message());
      if (it->is_regular_file()) names.push_back(fs::relative(it->path(), dir).string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<int> CreateTempBeside(const std::string& path, std::string* tmp) {
  std::string name = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) return Internal("cannot create " + name + ": " + std::strerror(errno));
  ::fchmod(fd, 0644);  // mkostemp makes 0600; readers in other containers may run as others
  *tmp = std::move(name);
  return fd;
}

Status WriteFileAtomic(const std::string& path, std::string_view data, WriteMode mode) {
  std::string tmp;
  KT_ASSIGN_OR_RETURN(const int fd, CreateTempBeside(path, &tmp));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return Internal("cannot write " + tmp + ": " + err);
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return Internal("cannot fsync " + tmp + ": " + err);
  }
  ::close(fd);
  if (mode == WriteMode::kCreateOnly) {
    const int rc = ::link(tmp.c_str(), path.c_str());
    const int err = errno;
    ::unlink(tmp.c_str());
    if (rc != 0 && err == EEXIST) {
      return Status(StatusCode::kAlreadyExists, path + " already exists");
    }
    if (rc != 0) return Internal("cannot create " + path + ": " + std::strerror(err));
  } else if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Internal("cannot rename " + tmp + " to " + path + ": " + err);
  }
  // The new name is durable only once the directory entry is.
  const std::string dir = fs::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

}  // namespace kubetrain::storage
