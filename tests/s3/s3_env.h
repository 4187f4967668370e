// For tests against the real S3 server of the `s3` fixture: reads
// $KUBETRAIN_TEST_S3_DIR/s3.env (written by tests/s3/up) into the environment.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

namespace kubetrain::testing {

// The variables of s3.env; also setenv()s them. Fails the test when the fixture is absent.
inline std::map<std::string, std::string> LoadS3Env() {
  std::map<std::string, std::string> env;
  const char* dir = std::getenv("KUBETRAIN_TEST_S3_DIR");
  if (dir == nullptr) {
    ADD_FAILURE() << "KUBETRAIN_TEST_S3_DIR is not set (run under ctest with the s3 fixture)";
    return env;
  }
  std::ifstream in(std::string(dir) + "/s3.env");
  if (!in) ADD_FAILURE() << "no " << dir << "/s3.env: did tests/s3/up run?";
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    env[line.substr(0, eq)] = line.substr(eq + 1);
    ::setenv(line.substr(0, eq).c_str(), line.substr(eq + 1).c_str(), 1);
  }
  env["KUBETRAIN_TEST_S3_DIR"] = dir;
  return env;
}

}  // namespace kubetrain::testing
