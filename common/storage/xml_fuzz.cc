// libFuzzer target: an S3 response body (an object store's listing or error
// XML) as the S3 client reads it: elements found by tag, their text unescaped.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/storage/xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubetrain::storage;
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  // As S3Client::List reads a ListObjectsV2 page, and ResponseError an error.
  for (std::string_view c : XmlElements(xml, "Contents")) {
    (void)XmlText(c, "Key");
    (void)XmlText(c, "ETag");
    (void)XmlText(c, "Size");
  }
  (void)XmlText(xml, "IsTruncated");
  (void)XmlText(xml, "NextContinuationToken");
  (void)XmlText(xml, "Code");
  (void)XmlText(xml, "Message");
  (void)XmlText(xml, "UploadId");
  (void)XmlUnescape(xml);
  return 0;
}
