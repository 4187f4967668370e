#include "trainer/export/protobuf.h"

#include <bit>
#include <cstring>

namespace kubetrain::trainer::proto {

void Writer::RawVarint(uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out_.push_back(static_cast<char>(v));
}

void Writer::Tag(int field, WireType type) {
  RawVarint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(type));
}

void Writer::Varint(int field, uint64_t v) {
  Tag(field, WireType::kVarint);
  RawVarint(v);
}

void Writer::Float(int field, float v) {
  static_assert(std::endian::native == std::endian::little, "fixed32 is little-endian");
  Tag(field, WireType::kFixed32);
  char bytes[4];
  std::memcpy(bytes, &v, 4);
  out_.append(bytes, 4);
}

void Writer::Double(int field, double v) {
  Tag(field, WireType::kFixed64);
  char bytes[8];
  std::memcpy(bytes, &v, 8);
  out_.append(bytes, 8);
}

void Writer::Bytes(int field, std::string_view data) {
  Tag(field, WireType::kLengthDelimited);
  RawVarint(data.size());
  out_.append(data);
}

StatusOr<uint64_t> Reader::RawVarint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size()) return InvalidArgument("protobuf: truncated varint");
    const auto byte = static_cast<uint8_t>(data_[pos_++]);
    // The 10th byte may only carry the top bit of a 64-bit value.
    if (shift == 63 && byte > 1) return InvalidArgument("protobuf: varint longer than 64 bits");
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return v;
  }
  return InvalidArgument("protobuf: varint longer than 10 bytes");
}

StatusOr<Field> Reader::Next() {
  KT_ASSIGN_OR_RETURN(const uint64_t tag, RawVarint());
  Field f;
  if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) {
    return InvalidArgument("protobuf: bad field number " + std::to_string(tag >> 3));
  }
  f.number = static_cast<int>(tag >> 3);
  const auto fixed = [&](size_t n) -> Status {
    if (data_.size() - pos_ < n) return InvalidArgument("protobuf: truncated fixed field");
    uint64_t bits = 0;
    std::memcpy(&bits, data_.data() + pos_, n);  // little-endian host (see Writer::Float)
    f.varint = bits;
    pos_ += n;
    return Status::Ok();
  };
  switch (tag & 7) {
    case 0: {
      f.type = WireType::kVarint;
      KT_ASSIGN_OR_RETURN(f.varint, RawVarint());
      return f;
    }
    case 1:
      f.type = WireType::kFixed64;
      KT_RETURN_IF_ERROR(fixed(8));
      return f;
    case 2: {
      f.type = WireType::kLengthDelimited;
      KT_ASSIGN_OR_RETURN(const uint64_t n, RawVarint());
      if (n > data_.size() - pos_) return InvalidArgument("protobuf: length past the end");
      f.data = data_.substr(pos_, n);
      pos_ += n;
      return f;
    }
    case 5:
      f.type = WireType::kFixed32;
      KT_RETURN_IF_ERROR(fixed(4));
      return f;
    default:
      return InvalidArgument("protobuf: unsupported wire type " + std::to_string(tag & 7));
  }
}

}  // namespace kubetrain::trainer::proto
