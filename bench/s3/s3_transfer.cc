// s3_transfer put|get BUCKET KEY FILE: one upload (multipart above 16 MiB, parallel parts)
// or one whole-object download (length and SHA-256 checked) with the kubetrain S3 client,
// configured from the AWS_* variables. For bench/s3/s3_bench.sh, which times it.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "common/storage/s3_client.h"

int main(int argc, char** argv) {
  using namespace kubetrain::storage;
  if (argc != 5) {
    std::cerr << "usage: s3_transfer put|get BUCKET KEY FILE\n";
    return 2;
  }
  const std::string op = argv[1], bucket = argv[2], key = argv[3], file = argv[4];
  auto config = S3ConfigFromEnv([](const char* n) { return std::getenv(n); });
  if (!config.ok()) {
    std::cerr << config.status().ToString() << "\n";
    return 1;
  }
  S3Client client(*config);
  if (op == "put") {
    std::ifstream in(file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    kubetrain::Status s = client.Upload(bucket, key, data);
    if (!s.ok()) {
      std::cerr << s.ToString() << "\n";
      return 1;
    }
    return 0;
  }
  if (op == "get") {
    auto data = client.Get(bucket, key);
    if (!data.ok()) {
      std::cerr << data.status().ToString() << "\n";
      return 1;
    }
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(data->data(), static_cast<std::streamsize>(data->size()));
    return out ? 0 : 1;
  }
  std::cerr << "unknown operation " << op << "\n";
  return 2;
}
