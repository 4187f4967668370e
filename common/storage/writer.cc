#include "common/storage/writer.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <vector>

#include "common/storage/files.h"
#include "common/storage/sigv4.h"

namespace kubetrain::storage {
namespace {

namespace fs = std::filesystem;

// SHA-256 over bytes given in pieces.
class Sha256Stream {
 public:
  Sha256Stream() : ctx_(EVP_MD_CTX_new()) {
    ok_ = ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1;
  }
  ~Sha256Stream() { EVP_MD_CTX_free(ctx_); }
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;

  void Update(std::string_view data) {
    ok_ = ok_ && EVP_DigestUpdate(ctx_, data.data(), data.size()) == 1;
  }
  StatusOr<std::string> FinalHex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!ok_ || EVP_DigestFinal_ex(ctx_, md, &len) != 1) return Internal("SHA-256 failed");
    static constexpr char kHex[] = "0123456789abcdef";
    std::string hex;
    for (unsigned int i = 0; i < len; ++i) {
      hex += kHex[md[i] >> 4];
      hex += kHex[md[i] & 0xf];
    }
    return hex;
  }

 private:
  EVP_MD_CTX* ctx_;
  bool ok_ = false;
};

class LocalWriter final : public ObjectWriter {
 public:
  static constexpr size_t kBufferBytes = size_t{1} << 20;

  LocalWriter(std::string path, int fd, std::string tmp)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {
    buffer_.reserve(kBufferBytes);
  }
  ~LocalWriter() override {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(tmp_.c_str());
    }
  }

  Status Append(std::string_view data) override {
    if (!error_.ok()) return error_;
    sha_.Update(data);
    bytes_ += data.size();
    if (buffer_.size() + data.size() > kBufferBytes) Flush();
    if (data.size() >= kBufferBytes) {
      Write(data);
    } else {
      buffer_.append(data);
    }
    return error_;
  }

  StatusOr<WrittenObject> Commit() override {
    if (fd_ < 0) return FailedPrecondition(path_ + ": committed already");
    Flush();
    if (!error_.ok()) return error_;
    KT_ASSIGN_OR_RETURN(std::string sha, sha_.FinalHex());
    if (::fsync(fd_) != 0) return Internal("cannot fsync " + tmp_ + ": " + std::strerror(errno));
    ::close(fd_);
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp_.c_str());
      return Internal("cannot rename " + tmp_ + " to " + path_ + ": " + std::strerror(err));
    }
    const std::string dir = fs::path(path_).parent_path().string();
    if (const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
    return WrittenObject{bytes_, std::move(sha)};
  }

  uint64_t bytes() const override { return bytes_; }
  uint64_t peak_buffered_bytes() const override { return kBufferBytes; }

 private:
  void Flush() {
    Write(buffer_);
    buffer_.clear();
  }
  void Write(std::string_view data) {
    while (!data.empty() && error_.ok()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = Internal("cannot write " + tmp_ + ": " + std::strerror(errno));
        return;
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
  }

  const std::string path_, tmp_;
  int fd_;
  std::string buffer_;
  Sha256Stream sha_;
  uint64_t bytes_ = 0;
  Status error_;
};

// Flow: Append fills `part_` -> a full part starts the multipart upload (once) and goes to
// an upload thread (std::async) -> at most parts_in_flight futures pending; the oldest is
// waited for before another starts -> Commit sends the last part (or, for an object within
// one part, a single PutObject), waits for every part and completes the upload.
// Guarantees: nothing is visible at the key before CompleteMultipartUpload / PutObject; any
// error aborts the upload. Assumption: part_bytes >= 5 MiB against AWS (its minimum part).
class S3Writer final : public ObjectWriter {
 public:
  S3Writer(S3Client* client, S3Path where, const WriterOptions& o)
      : client_(client),
        where_(std::move(where)),
        part_bytes_(o.part_bytes > 0 ? o.part_bytes : client->config().part_size),
        max_in_flight_(static_cast<size_t>(std::max(
            1, o.parts_in_flight > 0 ? o.parts_in_flight : client->config().upload_parallelism))),
        put_{o.content_type, false} {
    part_.reserve(part_bytes_);
  }
  ~S3Writer() override {
    Drain();
    if (!upload_id_.empty() && !committed_) {
      client_->AbortMultipart(where_.bucket, where_.key, upload_id_);
    }
  }

  Status Append(std::string_view data) override {
    if (!error_.ok()) return error_;
    sha_.Update(data);
    bytes_ += data.size();
    while (!data.empty()) {
      const size_t take = std::min(data.size(), part_bytes_ - part_.size());
      part_.append(data.substr(0, take));
      data.remove_prefix(take);
      if (part_.size() == part_bytes_) KT_RETURN_IF_ERROR(SendPart());
    }
    return Status::Ok();
  }

  StatusOr<WrittenObject> Commit() override {
    if (committed_) return FailedPrecondition(S3Name(where_.bucket, where_.key) + ": committed");
    if (!error_.ok()) return error_;
    KT_ASSIGN_OR_RETURN(std::string sha, sha_.FinalHex());
    if (upload_id_.empty()) {  // within one part: a plain PUT, with its checksum
      KT_RETURN_IF_ERROR(client_->Put(where_.bucket, where_.key, part_, put_));
    } else {
      if (!part_.empty()) KT_RETURN_IF_ERROR(SendPart());
      Drain();
      if (!error_.ok()) return error_;
      error_ = client_->CompleteMultipart(where_.bucket, where_.key, upload_id_, etags_, put_);
      if (!error_.ok()) return error_;  // the destructor aborts
    }
    committed_ = true;
    part_ = std::string();
    return WrittenObject{bytes_, std::move(sha)};
  }

  uint64_t bytes() const override { return bytes_; }
  uint64_t peak_buffered_bytes() const override { return peak_; }

 private:
  // Hands part_ to an upload thread; waits for the oldest one first when enough are running.
  Status SendPart() {
    if (upload_id_.empty()) {
      auto id = client_->CreateMultipart(where_.bucket, where_.key, put_, {});
      if (!id.ok()) return error_ = id.status();
      upload_id_ = std::move(*id);
    }
    while (in_flight_.size() >= max_in_flight_) WaitOldest();
    if (!error_.ok()) return error_;
    const int number = static_cast<int>(etags_.size() + in_flight_.size() + 1);
    peak_ = std::max<uint64_t>(peak_, (in_flight_.size() + 2) * part_bytes_);
    in_flight_.push_back(std::async(std::launch::async, [this, number, body = std::move(part_)] {
      return client_->UploadPart(where_.bucket, where_.key, upload_id_, number, body);
    }));
    part_ = std::string();
    part_.reserve(part_bytes_);
    return Status::Ok();
  }

  // Parts end in any order but are collected in order, so etags_[i] is part i + 1's.
  void WaitOldest() {
    StatusOr<std::string> etag = in_flight_.front().get();
    in_flight_.pop_front();
    if (etag.ok()) {
      etags_.push_back(std::move(*etag));
    } else if (error_.ok()) {
      error_ = etag.status();
    }
  }
  void Drain() {
    while (!in_flight_.empty()) WaitOldest();
  }

  S3Client* const client_;
  const S3Path where_;
  const size_t part_bytes_;
  const size_t max_in_flight_;
  const PutOptions put_;

  std::string part_;
  std::string upload_id_;
  std::vector<std::string> etags_;                            // of the parts uploaded, in order
  std::deque<std::future<StatusOr<std::string>>> in_flight_;  // the parts after those
  Sha256Stream sha_;
  uint64_t bytes_ = 0, peak_ = 0;
  bool committed_ = false;
  Status error_;
};

}  // namespace

StatusOr<std::unique_ptr<ObjectWriter>> ObjectWriter::Open(const std::string& path,
                                                           const WriterOptions& options) {
  if (IsS3Path(path)) {
    KT_ASSIGN_OR_RETURN(S3Path where, ParseS3Path(path));
    if (where.key.empty() || where.key.back() == '/') {
      return InvalidArgument(path + " names no object");
    }
    KT_ASSIGN_OR_RETURN(S3Client * client, DefaultS3Client());
    return std::unique_ptr<ObjectWriter>(new S3Writer(client, std::move(where), options));
  }
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) return Internal("cannot create " + parent.string() + ": " + ec.message());
  std::string tmp;
  KT_ASSIGN_OR_RETURN(const int fd, CreateTempBeside(path, &tmp));
  return std::unique_ptr<ObjectWriter>(new LocalWriter(path, fd, std::move(tmp)));
}

}  // namespace kubetrain::storage
