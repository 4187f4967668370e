#include "trainer/observe/tfevents.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/storage/files.h"
#include "trainer/export/protobuf.h"
#include "trainer/observe/crc32c.h"

namespace kubetrain::trainer::observe {
namespace {

static_assert(std::endian::native == std::endian::little, "records are little-endian");

template <typename T>
void AppendLe(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

template <typename T>
T ReadLe(std::string_view data, size_t at) {
  T v;
  std::memcpy(&v, data.data() + at, sizeof(T));
  return v;
}

double DefaultWallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

}  // namespace

std::string FrameRecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLe<uint64_t>(out, data.size());
  AppendLe<uint32_t>(out, MaskCrc(Crc32c(std::string_view(out.data(), 8))));
  out.append(data);
  AppendLe<uint32_t>(out, MaskCrc(Crc32c(data)));
  return out;
}

StatusOr<std::vector<std::string>> ParseRecords(std::string_view file) {
  std::vector<std::string> out;
  size_t at = 0;
  while (file.size() - at >= 12) {
    const auto length = ReadLe<uint64_t>(file, at);
    if (MaskCrc(Crc32c(file.substr(at, 8))) != ReadLe<uint32_t>(file, at + 8)) {
      return DataLoss("event record at byte " + std::to_string(at) + ": length CRC mismatch");
    }
    if (length > file.size() - at - 12 || file.size() - at - 12 - length < 4) break;  // truncated
    const std::string_view data = file.substr(at + 12, length);
    if (MaskCrc(Crc32c(data)) != ReadLe<uint32_t>(file, at + 12 + length)) {
      return DataLoss("event record at byte " + std::to_string(at) + ": data CRC mismatch");
    }
    out.emplace_back(data);
    at += 12 + length + 4;
  }
  return out;
}

std::string FileVersionEvent(double wall_time) {
  proto::Writer e;
  e.Double(1, wall_time);
  e.Bytes(3, kFileVersion);
  return e.Take();
}

std::string ScalarEvent(double wall_time, int64_t step, std::span<const Scalar> values) {
  proto::Writer summary;
  for (const Scalar& s : values) {
    proto::Writer v;
    v.Bytes(1, s.tag);
    v.Float(2, s.value);
    summary.Message(1, v);
  }
  proto::Writer e;
  e.Double(1, wall_time);
  e.Int64(2, step);
  e.Message(5, summary);
  return e.Take();
}

StatusOr<DecodedEvent> DecodeEvent(std::string_view data) {
  DecodedEvent out;
  proto::Reader r(data);
  while (!r.AtEnd()) {
    KT_ASSIGN_OR_RETURN(const proto::Field f, r.Next());
    if (f.number == 1 && f.type == proto::WireType::kFixed64) {
      out.wall_time = std::bit_cast<double>(f.varint);
    } else if (f.number == 2 && f.type == proto::WireType::kVarint) {
      out.step = static_cast<int64_t>(f.varint);
    } else if (f.number == 3 && f.type == proto::WireType::kLengthDelimited) {
      out.file_version = std::string(f.data);
    } else if (f.number == 5 && f.type == proto::WireType::kLengthDelimited) {
      proto::Reader summary(f.data);
      while (!summary.AtEnd()) {
        KT_ASSIGN_OR_RETURN(const proto::Field value, summary.Next());
        if (value.number != 1 || value.type != proto::WireType::kLengthDelimited) continue;
        std::pair<std::string, float> scalar;
        proto::Reader v(value.data);
        while (!v.AtEnd()) {
          KT_ASSIGN_OR_RETURN(const proto::Field field, v.Next());
          if (field.number == 1 && field.type == proto::WireType::kLengthDelimited) {
            scalar.first = std::string(field.data);
          } else if (field.number == 2 && field.type == proto::WireType::kFixed32) {
            scalar.second = std::bit_cast<float>(static_cast<uint32_t>(field.varint));
          }
        }
        out.scalars.push_back(std::move(scalar));
      }
    }
  }
  return out;
}

std::string EventFileName(int64_t unix_seconds, std::string_view host, int pid) {
  return "events.out.tfevents." + std::to_string(unix_seconds) + "." + std::string(host) + "." +
         std::to_string(pid);
}

StatusOr<std::unique_ptr<EventWriter>> EventWriter::Open(Options o) {
  if (!o.now) o.now = [] { return Clock::now(); };
  if (!o.wall_time) o.wall_time = DefaultWallTime;
  if (o.host.empty()) o.host = HostName();
  if (o.pid == 0) o.pid = static_cast<int>(::getpid());
  const double wall = o.wall_time();
  const std::string path =
      storage::JoinPath(o.dir, EventFileName(static_cast<int64_t>(wall), o.host, o.pid));
  int fd = -1;
  if (!storage::IsS3Path(o.dir)) {
    std::error_code ec;
    std::filesystem::create_directories(o.dir, ec);
    if (ec) return Internal("cannot create --logdir " + o.dir + ": " + ec.message());
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return Internal("cannot create " + path + ": " + std::strerror(errno));
  }
  std::unique_ptr<EventWriter> w(new EventWriter(std::move(o), path, fd));
  w->pending_ = FrameRecord(FileVersionEvent(wall));
  KT_RETURN_IF_ERROR(w->Flush());
  return w;
}

EventWriter::EventWriter(Options options, std::string path, int fd)
    : options_(std::move(options)), path_(std::move(path)), fd_(fd), last_flush_(options_.now()) {}

EventWriter::~EventWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventWriter::Add(int64_t step, std::span<const Scalar> values) {
  pending_ += FrameRecord(ScalarEvent(options_.wall_time(), step, values));
  ++pending_events_;
}

Status EventWriter::MaybeFlush() {
  if (pending_.empty() || options_.now() - last_flush_ < options_.flush_interval) {
    return Status::Ok();
  }
  return Flush();
}

Status EventWriter::Flush() {
  last_flush_ = options_.now();
  if (pending_.empty()) return Status::Ok();
  ++flushes_;
  if (fd_ < 0) {
    if (s3_object_.size() + pending_.size() > options_.max_s3_bytes) {
      dropped_ += pending_events_;
      pending_events_ = 0;
      pending_.clear();
      return Status(StatusCode::kResourceExhausted,
                    path_ + " reached " + std::to_string(options_.max_s3_bytes) +
                        " bytes: later TensorBoard events are dropped");
    }
    s3_object_ += pending_;
    pending_.clear();
    pending_events_ = 0;
    return storage::WriteObject(path_, s3_object_);
  }
  size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      pending_.erase(0, done);
      return Internal("writing " + path_ + ": " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  pending_.clear();
  pending_events_ = 0;
  return Status::Ok();
}

}  // namespace kubetrain::trainer::observe
