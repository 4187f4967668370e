#include "operator/local/runner.h"

#include <gtest/gtest.h>

#include <deque>
#include <nlohmann/json.hpp>
#include <string>

namespace kubetrain::local {
namespace {

const std::string kEuro = "\xE2\x82\xAC";  // 3 bytes
const std::string kFffd = "\xEF\xBF\xBD";

bool Serialises(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

// The kubelet's 4096-byte cut used to fall inside a multi-byte character, and
// `kubetrain run` then died serialising the status.
TEST(TerminationMessageTest, CutAt4096BytesNeverSplitsACharacter) {
  const std::string log = std::string(4095, 'a') + kEuro + kEuro;
  const std::string msg = TerminationMessage(log, {}, false, 1);
  EXPECT_EQ(msg, std::string(4095, 'a'));
  EXPECT_TRUE(Serialises(msg));
}

TEST(TerminationMessageTest, InvalidBytesFromTheWorkloadBecomeReplacementCharacters) {
  const std::string log = std::string(1023, 'a') + kEuro + "\xFF\xC3" + " end\n";
  const std::string msg = TerminationMessage(log, {}, false, 1);
  EXPECT_EQ(msg, std::string(1023, 'a') + kEuro + kFffd + kFffd + " end");
  EXPECT_TRUE(Serialises(msg));
}

TEST(TerminationMessageTest, LogFallbackKeepsTheTailOnACharacterBoundary) {
  // 700 lines of 3 euros: the 2048-byte tail starts inside a character.
  std::deque<std::string> tail(700, kEuro + kEuro + kEuro);
  tail.push_back("bad \xFE!");
  const std::string msg = TerminationMessage("", tail, true, 2);
  EXPECT_EQ(msg.size(), 2046u);  // 2 continuation bytes skipped at the front
  EXPECT_EQ(msg.substr(0, 7), "\xE2\x82\xAC\xE2\x82\xAC\n");
  EXPECT_TRUE(msg.ends_with("bad " + kFffd + "!\n"));
  EXPECT_TRUE(Serialises(msg));
}

TEST(TerminationMessageTest, NoFallbackForASuccessOrWithoutThePolicy) {
  const std::deque<std::string> tail = {"last line"};
  EXPECT_EQ(TerminationMessage(" \n", tail, true, 0), "");
  EXPECT_EQ(TerminationMessage("", tail, false, 1), "");
  EXPECT_EQ(TerminationMessage("", tail, true, 1), "last line\n");
}

}  // namespace
}  // namespace kubetrain::local
