// The protobuf wire format, as far as writing (and, for tests and sanity checks, reading)
// an ONNX model (and a TensorBoard event) needs: varints, 32- and 64-bit floats and
// length-delimited fields.
//
// Why hand-written: ONNX files are protobuf messages, but the whole schema we emit is a
// dozen messages; a generated library would add protoc, a vendored onnx.proto and
// libprotobuf to the build for what is ~100 lines of encoding. The encoding rules are
// those of https://protobuf.dev/programming-guides/encoding/ (little-endian base-128
// varints; int64 written as its two's complement, so negative values take 10 bytes).
//
// Writer and Reader are plain values with no shared state; not thread-safe per object.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kubetrain::trainer::proto {

enum class WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Appends fields to a byte string. Every call writes one complete field (tag + value).
class Writer {
 public:
  void Varint(int field, uint64_t v);
  // int32/int64/enum fields: negative values are sign-extended to 64 bits (10 bytes).
  void Int64(int field, int64_t v) { Varint(field, static_cast<uint64_t>(v)); }
  void Float(int field, float v);
  void Double(int field, double v);
  // A string, bytes or an embedded message's serialization.
  void Bytes(int field, std::string_view data);
  void Message(int field, const Writer& m) { Bytes(field, m.data()); }

  const std::string& data() const { return out_; }
  std::string Take() { return std::move(out_); }
  size_t size() const { return out_.size(); }

 private:
  void Tag(int field, WireType type);
  void RawVarint(uint64_t v);

  std::string out_;
};

// One field as read from the wire.
struct Field {
  int number = 0;
  WireType type = WireType::kVarint;
  uint64_t varint = 0;    // kVarint; kFixed32/kFixed64: the raw bits
  std::string_view data;  // kLengthDelimited: the bytes (a view into the reader's input)
};

// Reads the fields of one message in order. Bounds-checked: malformed input (a truncated
// or over-long varint, a length past the end, an unknown wire type) is InvalidArgument.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool AtEnd() const { return pos_ >= data_.size(); }
  StatusOr<Field> Next();

 private:
  StatusOr<uint64_t> RawVarint();

  std::string_view data_;
  size_t pos_ = 0;
};

}  // namespace kubetrain::trainer::proto
