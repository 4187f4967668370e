#include "trainer/export/protobuf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

namespace kubetrain::trainer::proto {
namespace {

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

// The examples of the protobuf encoding guide.
TEST(ProtoWriter, VarintFieldMatchesTheEncodingGuide) {
  Writer w;
  w.Varint(1, 150);
  EXPECT_EQ(w.data(), Bytes({0x08, 0x96, 0x01}));
}

TEST(ProtoWriter, StringFieldMatchesTheEncodingGuide) {
  Writer w;
  w.Bytes(2, "testing");
  EXPECT_EQ(w.data(), Bytes({0x12, 0x07}) + "testing");
}

TEST(ProtoWriter, EmbeddedMessageIsLengthDelimited) {
  Writer inner;
  inner.Varint(1, 150);
  Writer w;
  w.Message(3, inner);
  EXPECT_EQ(w.data(), Bytes({0x1a, 0x03, 0x08, 0x96, 0x01}));
}

TEST(ProtoWriter, NegativeInt64TakesTenBytes) {
  Writer w;
  w.Int64(1, -1);
  EXPECT_EQ(w.data(), Bytes({0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
}

TEST(ProtoWriter, FloatIsFixed32LittleEndian) {
  Writer w;
  w.Float(2, 1.0f);
  EXPECT_EQ(w.data(), Bytes({0x15, 0x00, 0x00, 0x80, 0x3f}));
}

TEST(ProtoWriter, LargeFieldNumbersAndLengths) {
  Writer w;
  w.Varint(20, 7);  // tag 160 needs two bytes
  w.Bytes(9, std::string(300, 'x'));
  EXPECT_EQ(w.data().substr(0, 3), Bytes({0xa0, 0x01, 0x07}));
  EXPECT_EQ(w.data().substr(3, 3), Bytes({0x4a, 0xac, 0x02}));
  EXPECT_EQ(w.size(), 6u + 300u);
}

TEST(ProtoReader, ReadsBackWhatTheWriterWrote) {
  Writer inner;
  inner.Int64(1, std::numeric_limits<int64_t>::min());
  Writer w;
  w.Varint(1, 0);
  w.Varint(2, std::numeric_limits<uint64_t>::max());
  w.Float(3, -2.5f);
  w.Message(4, inner);
  w.Bytes(536870911, "last");  // the largest field number

  Reader r(w.data());
  auto f = r.Next();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->number, 1);
  EXPECT_EQ(f->type, WireType::kVarint);
  EXPECT_EQ(f->varint, 0u);
  f = r.Next();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->varint, std::numeric_limits<uint64_t>::max());
  f = r.Next();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->type, WireType::kFixed32);
  float v;
  const auto bits = static_cast<uint32_t>(f->varint);
  std::memcpy(&v, &bits, 4);
  EXPECT_EQ(v, -2.5f);
  f = r.Next();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->type, WireType::kLengthDelimited);
  Reader ir(f->data);
  auto g = ir.Next();
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(static_cast<int64_t>(g->varint), std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(ir.AtEnd());
  f = r.Next();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->number, 536870911);
  EXPECT_EQ(f->data, "last");
  EXPECT_TRUE(r.AtEnd());
}

TEST(ProtoReader, RejectsMalformedInput) {
  const std::string cases[] = {
      Bytes({0x08}),                  // varint value missing
      Bytes({0x08, 0x96}),            // varint truncated
      Bytes({0x12, 0x05, 'a', 'b'}),  // length past the end
      Bytes({0x15, 0x00, 0x00}),      // fixed32 truncated
      Bytes({0x0b}),                  // wire type 3 (groups) unsupported
      Bytes({0x00, 0x00}),            // field number 0
      Bytes({0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}),  // > 64 bits
  };
  for (const std::string& c : cases) {
    Reader r(c);
    EXPECT_FALSE(r.Next().ok()) << "accepted " << testing::PrintToString(c);
  }
}

}  // namespace
}  // namespace kubetrain::trainer::proto
