// Little helpers to build and parse frame payloads (fixed-width little-endian fields and
// float/id arrays). Parsing is bounds-checked: a short payload is an error, not a crash.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

namespace kubetrain::trainer {

class WireWriter {
 public:
  WireWriter() = default;
  // Writes into `buffer`'s storage, discarding its content, so a caller can reuse one
  // allocation across messages.
  explicit WireWriter(std::string buffer) : out_(std::move(buffer)) { out_.clear(); }

  template <typename T>
  WireWriter& Put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return *this;
  }
  template <typename T>
  WireWriter& PutArray(const T* p, size_t n) {
    out_.append(reinterpret_cast<const char*>(p), n * sizeof(T));
    return *this;
  }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

class WireReader {
 public:
  explicit WireReader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > in_.size()) return false;
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // Points `*p` into the payload (no copy); the payload must outlive the use. The data
  // may be unaligned, so callers copy with memcpy.
  bool GetArray(size_t n, size_t elem, const char** p) {
    if (n > (in_.size() - pos_) / elem) return false;
    *p = in_.data() + pos_;
    pos_ += n * elem;
    return true;
  }
  bool AtEnd() const { return pos_ == in_.size(); }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace kubetrain::trainer
