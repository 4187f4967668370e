#include "trainer/rpc/protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace kubetrain::trainer {
namespace {

template <typename T>
std::vector<T> Copy(const char* p, size_t n) {
  std::vector<T> out(n);
  std::memcpy(out.data(), p, n * sizeof(T));
  return out;
}

TEST(PsProtocolTest, HelloRoundTrips) {
  HelloRequest in{
      3, 1234567890123ull, 16, kPsProtocolVersion, 0xfeedface12345678ull, WireFloat::kBf16},
      out;
  ASSERT_TRUE(DecodeHello(EncodeHello(in), &out));
  EXPECT_EQ(out.rank, 3);
  EXPECT_EQ(out.total_dense, 1234567890123ull);
  EXPECT_EQ(out.row_dim, 16);
  EXPECT_EQ(out.version, kPsProtocolVersion);
  EXPECT_EQ(out.incarnation, 0xfeedface12345678ull);
  EXPECT_EQ(out.wire, WireFloat::kBf16);
  EXPECT_FALSE(DecodeHello(EncodeHello(in).substr(0, 15), &out));
  EXPECT_FALSE(DecodeHello(EncodeHello(in).substr(0, 20), &out));  // a cut version 2 hello
  std::string unknown_wire = EncodeHello(in);
  unknown_wire.back() = 7;
  EXPECT_FALSE(DecodeHello(unknown_wire, &out));
  // A version 2 worker's hello ends after the incarnation: version 2, FP32 on the wire.
  HelloRequest v2 = in;
  v2.version = 2;
  ASSERT_TRUE(DecodeHello(EncodeHello(v2).substr(0, 28), &out));
  EXPECT_EQ(out.version, 2u);
  EXPECT_EQ(out.wire, WireFloat::kF32);
  // A version 1 worker's hello ends after the row dim: it decodes as version 1, so the PS
  // can say so.
  ASSERT_TRUE(DecodeHello(EncodeHello(in).substr(0, 16), &out));
  EXPECT_EQ(out.version, 1u);
  EXPECT_EQ(out.incarnation, 0u);
  auto reply = DecodeHelloReply(EncodeHelloReply(41));
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->last_step, 41);
  EXPECT_EQ(reply->version, kPsProtocolVersion);
  reply = DecodeHelloReply(EncodeHelloReply(41).substr(0, 8));  // a version 1 PS
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->version, 1u);
  EXPECT_EQ(DecodeHelloReply(""), std::nullopt);  // a PS that sends no step
  EXPECT_EQ(DecodeHelloReply(EncodeHelloReply(41).substr(0, 10)), std::nullopt);
}

TEST(PsProtocolTest, PullRoundTripsReusingTheBuffer) {
  std::string buffer = "left over from the last step";
  const std::vector<uint64_t> ids = {7, 1ull << 40, 0};
  EncodePull(ids, /*want_dense=*/true, &buffer);
  PullRequest pull;
  ASSERT_TRUE(DecodePull(buffer, &pull));
  EXPECT_EQ(Copy<uint64_t>(pull.ids, pull.n), ids);
  EXPECT_TRUE(pull.want_dense);

  EncodePull({}, /*want_dense=*/false, &buffer);
  ASSERT_TRUE(DecodePull(buffer, &pull));
  EXPECT_EQ(pull.n, 0u);
  EXPECT_FALSE(pull.want_dense);
  EXPECT_FALSE(DecodePull(buffer + "x", &pull));  // must end with the request
}

TEST(PsProtocolTest, PushRoundTripsWithTheDenseSliceAsSecondPart) {
  const int dim = 2;
  const std::vector<float> grads = {0.f, 0.5f, 1.f, 1.5f, 2.f, 2.5f};  // rows 0, 1, 2
  const std::vector<uint64_t> ids = {30, 10};
  const std::vector<int> positions = {2, 0};
  std::string payload;
  EncodePush(9, 77, ids, positions, grads.data(), dim, WireFloat::kF32, &payload);
  const std::vector<float> dense = {-1.f, -2.f, -3.f};
  payload.append(reinterpret_cast<const char*>(dense.data()), dense.size() * 4);

  PushRequest push;
  EXPECT_FALSE(DecodePush(payload, dim, dense.size(), WireFloat::kBf16, &push));
  ASSERT_TRUE(DecodePush(payload, dim, dense.size(), WireFloat::kF32, &push));
  EXPECT_EQ(push.step, 9);
  EXPECT_EQ(push.seq, 77u);
  EXPECT_EQ(Copy<uint64_t>(push.ids, push.n), ids);
  EXPECT_EQ(Copy<float>(push.rows, push.n * dim), (std::vector<float>{2.f, 2.5f, 0.f, 0.5f}));
  ASSERT_NE(push.dense, nullptr);
  EXPECT_EQ(Copy<float>(push.dense, dense.size()), dense);
  // The wrong model's sizes or a cut payload are refused, not read past the end.
  EXPECT_FALSE(DecodePush(payload, dim, dense.size() + 1, WireFloat::kF32, &push));
  EXPECT_FALSE(DecodePush(payload, dim + 1, dense.size(), WireFloat::kF32, &push));
  EXPECT_FALSE(
      DecodePush(payload.substr(0, payload.size() - 1), dim, dense.size(), WireFloat::kF32, &push));
}

TEST(PsProtocolTest, Bf16PushHasHalfTheFloatBytesAndRoundsToNearestEven) {
  const int dim = 2;
  // Exact in BF16, then values between two BF16 numbers: 1 + 2^-8 is halfway between 1 and
  // 1 + 2^-7 (ties to the even 1), 1 + 3 * 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6
  // (ties to the even 1 + 2^-6), 1 + 2^-8 + 2^-20 just above halfway (rounds up).
  const std::vector<float> grads = {0.5f, -2.f, 1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f};
  const std::vector<uint64_t> ids = {5, 6};
  const std::vector<int> positions = {0, 1};
  std::string f32, bf16;
  EncodePush(1, 1, ids, positions, grads.data(), dim, WireFloat::kF32, &f32);
  EncodePush(1, 1, ids, positions, grads.data(), dim, WireFloat::kBf16, &bf16);
  const std::vector<float> dense = {1.f + 0x1p-8f + 0x1p-20f, -0.f, 3e38f, 1e-30f};
  PutWireFloats(dense.data(), dense.size(), WireFloat::kF32, &f32);
  PutWireFloats(dense.data(), dense.size(), WireFloat::kBf16, &bf16);
  EXPECT_EQ(f32.size() - bf16.size(), (grads.size() + dense.size()) * 2);

  PushRequest push;
  EXPECT_FALSE(DecodePush(bf16, dim, dense.size(), WireFloat::kF32, &push));
  ASSERT_TRUE(DecodePush(bf16, dim, dense.size(), WireFloat::kBf16, &push));
  EXPECT_EQ(Copy<uint64_t>(push.ids, push.n), ids);
  std::vector<float> rows(grads.size()), got(dense.size());
  GetWireFloats(push.rows, rows.size(), WireFloat::kBf16, rows.data());
  EXPECT_EQ(rows, (std::vector<float>{0.5f, -2.f, 1.f, 1.f + 0x1p-6f}));
  GetWireFloats(push.dense, got.size(), WireFloat::kBf16, got.data());
  EXPECT_EQ(got[0], 1.f + 0x1p-7f);
  EXPECT_TRUE(std::signbit(got[1]) && got[1] == 0.f);
  EXPECT_NEAR(got[2], 3e38f, 3e38f * 0x1p-8f);  // within half a BF16 step
  EXPECT_NEAR(got[3], 1e-30f, 1e-30f * 0x1p-8f);
}

TEST(PsProtocolTest, Bf16KeepsInfinitiesAndNaNs) {
  const float in[4] = {std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), -std::nanf("")};
  std::string wire;
  PutWireFloats(in, 4, WireFloat::kBf16, &wire);
  ASSERT_EQ(wire.size(), 8u);
  float out[4];
  GetWireFloats(wire.data(), 4, WireFloat::kBf16, out);
  EXPECT_EQ(out[0], in[0]);
  EXPECT_EQ(out[1], in[1]);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_TRUE(std::isnan(out[3]));
  // Many floats (several conversion blocks, an odd tail), each within half a BF16 step.
  std::vector<float> many(10001);
  for (size_t i = 0; i < many.size(); ++i) many[i] = std::sin(static_cast<float>(i)) * 1000.f;
  wire.clear();
  PutWireFloats(many.data(), many.size(), WireFloat::kBf16, &wire);
  std::vector<float> back(many.size());
  GetWireFloats(wire.data(), back.size(), WireFloat::kBf16, back.data());
  for (size_t i = 0; i < many.size(); ++i) {
    ASSERT_LE(std::fabs(back[i] - many[i]), std::fabs(many[i]) * 0x1p-8f) << i;
  }
  EXPECT_EQ(ParseWireFloat("bf16").value(), WireFloat::kBf16);
  EXPECT_FALSE(ParseWireFloat("fp16").ok());
}

// Found by ps_protocol_fuzz: no floats and no ranks passed an empty vector's null data()
// to memcpy (undefined even for 0 bytes; UBSan's nonnull-attribute check, so this fails
// under the asan preset on the old code).
TEST(PsProtocolTest, NothingToCopyNeverReachesMemcpyWithNull) {
  for (WireFloat wire : {WireFloat::kF32, WireFloat::kBf16}) {
    std::vector<float> none;
    std::string out;
    PutWireFloats(none.data(), 0, wire, &out);
    EXPECT_TRUE(out.empty());
    GetWireFloats(out.data(), 0, wire, none.data());
  }
  std::string empty_pull;
  EncodePull({}, true, &empty_pull);
  PullRequest pull;
  ASSERT_TRUE(DecodePull(empty_pull, &pull));
  EXPECT_EQ(pull.n, 0u);
  EXPECT_EQ(DecodeDoneReply(EncodeDoneReply({})), std::vector<int32_t>{});
}

TEST(PsProtocolTest, CheckpointAndDoneRoundTrip) {
  int64_t step = 0;
  std::string root = "stale";
  ASSERT_TRUE(DecodeCheckpoint(EncodeCheckpoint(1000, "s3://bucket/run/model"), &step, &root));
  EXPECT_EQ(step, 1000);
  EXPECT_EQ(root, "s3://bucket/run/model");
  ASSERT_TRUE(DecodeCheckpoint(EncodeCheckpoint(7, ""), &step, &root));  // an older coordinator
  EXPECT_EQ(step, 7);
  EXPECT_EQ(root, "");
  EXPECT_FALSE(DecodeCheckpoint("1234", &step, &root));
  const ShardDigest digest{1234, std::string(64, 'a')};
  EXPECT_EQ(DecodeCheckpointReply(EncodeCheckpointReply(digest)), digest);
  EXPECT_EQ(DecodeCheckpointReply(""), std::nullopt);  // an older PS: no checksum
  int32_t rank = 0;
  ASSERT_TRUE(DecodeDone(EncodeDone(-1), &rank));
  EXPECT_EQ(rank, -1);
  EXPECT_FALSE(DecodeDone("", &rank));
  EXPECT_EQ(DecodeDoneReply(EncodeDoneReply({0, 3, 7})), (std::vector<int32_t>{0, 3, 7}));
  EXPECT_EQ(DecodeDoneReply(EncodeDoneReply({})), std::vector<int32_t>{});
  EXPECT_EQ(DecodeDoneReply("abc"), std::nullopt);
  EXPECT_EQ(DecodeDoneReply(EncodeDoneReply({1, 2}).substr(0, 8)), std::nullopt);  // cut
  EXPECT_EQ(DecodeDoneReply(std::string("\xff\xff\xff\xff", 4)), std::nullopt);    // n < 0
}

}  // namespace
}  // namespace kubetrain::trainer
