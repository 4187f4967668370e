#include "common/storage/stream.h"

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/mutex.h"
#include "common/storage/files.h"

namespace kubetrain::storage {

namespace fs = std::filesystem;

// Holds a file (local or cached) or streams an S3 object with read-ahead.
class ObjectInputStream::Buffer : public std::streambuf {
 public:
  // Local file.
  explicit Buffer(std::unique_ptr<std::filebuf> file) : file_(std::move(file)) {}

  // S3 object of `size` bytes whose HEAD returned `etag`; `cache_path` empty: no cache.
  Buffer(S3Client* client, std::string bucket, std::string key, int64_t size, std::string etag,
         const StreamOptions& o, std::string cache_path)
      : client_(client),
        bucket_(std::move(bucket)),
        key_(std::move(key)),
        size_(size),
        etag_(std::move(etag)),
        o_(o),
        cache_path_(std::move(cache_path)) {
    if (!cache_path_.empty()) {
      std::error_code ec;
      fs::create_directories(fs::path(cache_path_).parent_path(), ec);
      // A name of our own: readers in other containers sharing the cache may all be PID 1.
      StatusOr<int> fd = CreateTempBeside(cache_path_, &cache_tmp_);
      if (fd.ok()) {
        ::close(*fd);
        cache_.open(cache_tmp_, std::ios::binary | std::ios::trunc);
      }
      if (!cache_.is_open()) {  // no cache, still read
        if (!cache_tmp_.empty()) fs::remove(cache_tmp_, ec);
        cache_path_.clear();
      }
    }
    thread_ = std::thread([this] { Fetch(); });
  }

  ~Buffer() override {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (cache_.is_open()) {
      cache_.close();
      std::error_code ec;
      fs::remove(cache_tmp_, ec);
    }
  }

  Status status() const {
    MutexLock lock(mu_);
    return error_;
  }

 protected:
  int_type underflow() override {
    if (file_) {
      // Delegate to the file buffer through its public interface.
      const std::streamsize n = file_->sgetn(local_, sizeof(local_));
      if (n <= 0) return traits_type::eof();
      setg(local_, local_, local_ + n);
      return traits_type::to_int_type(*gptr());
    }
    MutexLock lock(mu_);
    cv_.wait(lock.native(),
             [&]() REQUIRES(mu_) { return !ready_.empty() || finished_ || !error_.ok(); });
    if (ready_.empty()) {
      if (error_.ok() && cache_.is_open()) FinishCache();
      return traits_type::eof();
    }
    current_ = std::move(ready_.front());
    ready_.pop_front();
    lock.Unlock();
    cv_.notify_all();  // room for one more chunk
    if (cache_.is_open())
      cache_.write(current_.data(), static_cast<std::streamsize>(current_.size()));
    setg(current_.data(), current_.data(), current_.data() + current_.size());
    return traits_type::to_int_type(*gptr());
  }

 private:
  void Fetch() {
    for (int64_t off = 0; off < size_;) {
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(o_.chunk_bytes), size_ - off);
      std::string chunk;
      chunk.reserve(static_cast<size_t>(n));
      // Every chunk from the version whose size was taken (If-Match: its ETag): a replaced
      // object ends the stream, retryably, instead of splicing two versions together.
      Status s = client_->GetRange(
          bucket_, key_, off, n,
          [&](std::string_view d) {
            {
              MutexLock lock(mu_);
              if (stop_) return Status(StatusCode::kUnavailable, "cancelled");
            }
            chunk.append(d);
            return Status::Ok();
          },
          etag_);
      if (s.code() == StatusCode::kConflict) s = Unavailable(s.message() + "; read it again");
      MutexLock lock(mu_);
      if (stop_) return;
      if (!s.ok()) {
        error_ = s;
        cv_.notify_all();
        return;
      }
      cv_.wait(lock.native(), [&]() REQUIRES(mu_) {
        return stop_ || static_cast<int>(ready_.size()) < o_.read_ahead;
      });
      if (stop_) return;
      ready_.push_back(std::move(chunk));
      off += n;
      cv_.notify_all();
    }
    MutexLock lock(mu_);
    finished_ = true;
    cv_.notify_all();
  }

  void FinishCache() {
    cache_.close();
    std::error_code ec;
    if (!cache_.fail() && fs::file_size(cache_tmp_, ec) == static_cast<uintmax_t>(size_)) {
      fs::rename(cache_tmp_, cache_path_, ec);
    }
    fs::remove(cache_tmp_, ec);
  }

  // Local file: constant after construction.
  std::unique_ptr<std::filebuf> file_;
  char local_[1 << 16];

  // S3: constant after construction.
  S3Client* client_ = nullptr;
  std::string bucket_, key_;
  int64_t size_ = 0;
  std::string etag_;
  StreamOptions o_;
  std::string cache_path_, cache_tmp_;
  std::ofstream cache_;  // reader thread only
  std::string current_;  // reader thread only: the chunk being parsed

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> ready_ GUARDED_BY(mu_);
  bool finished_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  Status error_ GUARDED_BY(mu_);
  std::thread thread_;
};

ObjectInputStream::ObjectInputStream(std::unique_ptr<std::streambuf> buf)
    : std::istream(buf.get()), buf_(std::move(buf)) {}

ObjectInputStream::~ObjectInputStream() = default;

Status ObjectInputStream::status() const {
  return static_cast<const Buffer*>(buf_.get())->status();
}

StatusOr<std::unique_ptr<ObjectInputStream>> ObjectInputStream::Open(const std::string& path,
                                                                     const StreamOptions& o) {
  const auto open_file = [](const std::string& p) -> StatusOr<std::unique_ptr<ObjectInputStream>> {
    auto fb = std::make_unique<std::filebuf>();
    if (fb->open(p, std::ios::in | std::ios::binary) == nullptr) {
      return NotFound("cannot open data file " + p);
    }
    return std::unique_ptr<ObjectInputStream>(
        new ObjectInputStream(std::make_unique<Buffer>(std::move(fb))));
  };
  if (!IsS3Path(path)) return open_file(path);
  auto p = ParseS3Path(path);
  if (!p.ok()) return p.status();
  auto client = DefaultS3Client();
  if (!client.ok()) return client.status();
  auto head = (*client)->Head(p->bucket, p->key);
  if (!head.ok()) return head.status();
  std::string cache_path;
  if (!o.cache_dir.empty()) {
    cache_path = (fs::path(o.cache_dir) / p->bucket / p->key).string();
    std::error_code ec;
    if (fs::file_size(cache_path, ec) == static_cast<uintmax_t>(head->size) && !ec) {
      return open_file(cache_path);
    }
  }
  return std::unique_ptr<ObjectInputStream>(new ObjectInputStream(std::make_unique<Buffer>(
      *client, p->bucket, p->key, head->size, head->etag, o, std::move(cache_path))));
}

}  // namespace kubetrain::storage
