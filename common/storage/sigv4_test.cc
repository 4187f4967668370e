// SigV4 against AWS's published vectors.
//
// Two sources:
//  * the "AWS Signature Version 4 Test Suite" (formerly in the AWS General Reference,
//    docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite.html; today kept in
//    awslabs/aws-c-auth under tests/aws-signing-test-suite/v4/<case>/): credentials
//    AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, region us-east-1, service
//    "service", time 2015-08-30T12:36:00Z. Each case gives the canonical request, the
//    string to sign and the signature; all three are checked.
//  * the S3 API reference's worked examples ("Signature Calculations for the Authorization
//    Header: Transferring Payload in a Single Chunk", docs.aws.amazon.com/AmazonS3/latest/
//    API/sig-v4-header-based-auth.html): AKIAIOSFODNN7EXAMPLE /
//    wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, 2013-05-24T00:00:00Z, bucket examplebucket.
#include "common/storage/sigv4.h"

#include <gtest/gtest.h>

namespace kubetrain::storage {
namespace {

using std::chrono::sys_days;
using namespace std::chrono;

const Credentials kSuite{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
const auto kSuiteTime = sys_days{year{2015} / 8 / 30} + hours{12} + minutes{36};
const std::string kEmptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct SuiteCase {
  const char* name;
  SigningRequest request;
  Credentials credentials;
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;
};

class SigV4Suite : public ::testing::TestWithParam<SuiteCase> {};

TEST_P(SigV4Suite, MatchesCanonicalRequestStringToSignAndSignature) {
  const SuiteCase& c = GetParam();
  const Signature s = SignV4(c.request, c.credentials, "us-east-1", "service", kSuiteTime);
  EXPECT_EQ(s.canonical_request, c.canonical_request);
  EXPECT_EQ(s.string_to_sign, c.string_to_sign);
  EXPECT_EQ(s.signature, c.signature);
}

std::vector<SuiteCase> SuiteCases() {
  const HeaderList host = {{"Host", "example.amazonaws.com"}};
  return {
      {"get_vanilla",
       {"GET", "/", {}, host, kEmptyHash},
       kSuite,
       "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" +
           kEmptyHash,
       "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
       "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
       "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
      {"get_vanilla_query_order_key_case",
       {"GET", "/", {{"Param2", "value2"}, {"Param1", "value1"}}, host, kEmptyHash},
       kSuite,
       "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\n"
       "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" +
           kEmptyHash,
       "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
       "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
       "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
      {"get_unreserved",
       {"GET",
        std::string("/").append(
            UriEncode("-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", true)),
        {},
        host,
        kEmptyHash},
       kSuite,
       "GET\n/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n\n"
       "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" +
           kEmptyHash,
       "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
       "6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9",
       "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"},
      {"post_header_key_sort",
       {"POST", "/", {}, {{"Host", "example.amazonaws.com"}, {"My-Header1", "value1"}}, kEmptyHash},
       kSuite,
       "POST\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nx-amz-date:20150830T123600Z\n\n"
       "host;my-header1;x-amz-date\n" +
           kEmptyHash,
       "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
       "9368318c2967cf6de74404b30c65a91e8f6253e0a8659d6d5319f1a812f87d65",
       "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"},
      {"post_x_www_form_urlencoded",
       {"POST",
        "/",
        {},
        {{"Content-Type", "application/x-www-form-urlencoded"},
         {"Host", "example.amazonaws.com"},
         {"Content-Length", "13"},
         {"X-Amz-Content-Sha256", Sha256Hex("Param1=value1")}},
        Sha256Hex("Param1=value1")},
       kSuite,
       "POST\n/\n\ncontent-length:13\ncontent-type:application/x-www-form-urlencoded\n"
       "host:example.amazonaws.com\n"
       "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\n"
       "x-amz-date:20150830T123600Z\n\n"
       "content-length;content-type;host;x-amz-content-sha256;x-amz-date\n"
       "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
       "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
       "b1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb",
       "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b"},
      {"get_vanilla_with_session_token",
       {"GET", "/", {}, host, kEmptyHash},
       {kSuite.access_key_id, kSuite.secret_access_key,
        "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"},
       "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n"
       "x-amz-security-token:6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267\n\n"
       "host;x-amz-date;x-amz-security-token\n" +
           kEmptyHash,
       "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
       "067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b",
       "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"},
  };
}

INSTANTIATE_TEST_SUITE_P(AwsSigV4TestSuite, SigV4Suite, ::testing::ValuesIn(SuiteCases()),
                         [](const auto& p) { return std::string(p.param.name); });

const Credentials kS3Docs{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
const auto kS3DocsTime = sys_days{year{2013} / 5 / 24};

TEST(SigV4S3Examples, GetObjectWithRange) {
  SigningRequest r{"GET",
                   "/test.txt",
                   {},
                   {{"Host", "examplebucket.s3.amazonaws.com"},
                    {"Range", "bytes=0-9"},
                    {"x-amz-content-sha256", kEmptyHash}},
                   kEmptyHash};
  const Signature s = SignV4(r, kS3Docs, "us-east-1", "s3", kS3DocsTime);
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4S3Examples, PutObjectWithKeyNeedingEncoding) {
  const std::string body = "Welcome to Amazon S3.";
  ASSERT_EQ(Sha256Hex(body), "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SigningRequest r{"PUT",
                   std::string("/").append(UriEncode("test$file.text", true)),
                   {},
                   {{"Host", "examplebucket.s3.amazonaws.com"},
                    {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                    {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                    {"x-amz-content-sha256", Sha256Hex(body)}},
                   Sha256Hex(body)};
  EXPECT_EQ(r.canonical_uri, "/test%24file.text");
  EXPECT_EQ(SignV4(r, kS3Docs, "us-east-1", "s3", kS3DocsTime).signature,
            "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4S3Examples, ListObjectsSortsTheQuery) {
  SigningRequest r{
      "GET",
      "/",
      {{"prefix", "J"}, {"max-keys", "2"}},
      {{"Host", "examplebucket.s3.amazonaws.com"}, {"x-amz-content-sha256", kEmptyHash}},
      kEmptyHash};
  EXPECT_EQ(SignV4(r, kS3Docs, "us-east-1", "s3", kS3DocsTime).signature,
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4S3Examples, SubresourceWithoutValue) {
  SigningRequest r{
      "GET",
      "/",
      {{"lifecycle", ""}},
      {{"Host", "examplebucket.s3.amazonaws.com"}, {"x-amz-content-sha256", kEmptyHash}},
      kEmptyHash};
  EXPECT_EQ(SignV4(r, kS3Docs, "us-east-1", "s3", kS3DocsTime).signature,
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4, HeaderValuesAreTrimmedAndInnerSpacesCollapsed) {
  SigningRequest r{"GET", "/", {}, {{"Host", "h"}, {"My-Header1", "  a   b  c  "}}, kEmptyHash};
  const Signature s = SignV4(r, kSuite, "us-east-1", "service", kSuiteTime);
  EXPECT_NE(s.canonical_request.find("\nmy-header1:a b c\n"), std::string::npos)
      << s.canonical_request;
}

TEST(SigV4, UriEncodeKeepsOnlyUnreservedAndOptionallySlash) {
  EXPECT_EQ(UriEncode("a b/c+d=é", true), "a%20b/c%2Bd%3D%C3%A9");
  EXPECT_EQ(UriEncode("a b/c", false), "a%20b%2Fc");
}

TEST(SigV4, DigestsAndEncodings) {
  EXPECT_EQ(Sha256Hex(""), kEmptyHash);
  EXPECT_EQ(Hex(Md5("")), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(Base64(Md5("")), "1B2M2Y8AsgTpgAmY7PhCfg==");
  EXPECT_EQ(Base64("ab"), "YWI=");
}

}  // namespace
}  // namespace kubetrain::storage
