#include "operator/cli/exit_codes.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace kubetrain::cli {
namespace {

TEST(ExitCodesTest, EveryCodeIsDistinctAndListedInOrder) {
  std::set<int> seen;
  int previous = -1;
  for (const auto& row : kExitCodeTable) {
    EXPECT_TRUE(seen.insert(row.code).second) << row.code;
    EXPECT_GT(row.code, previous);
    EXPECT_LT(row.code, kExitSignalBase) << "below the signal codes";
    previous = row.code;
  }
}

TEST(ExitCodesTest, ClientErrorsMapToNotFoundOrError) {
  EXPECT_EQ(ExitCodeFor(Status::Ok()), kExitOk);
  EXPECT_EQ(ExitCodeFor(NotFound("x")), kExitNotFound);
  EXPECT_EQ(ExitCodeFor(Status(StatusCode::kUnavailable, "x")), kExitError);
  EXPECT_EQ(ExitCodeFor(Status(StatusCode::kPermissionDenied, "x")), kExitError);
  EXPECT_EQ(ExitCodeFor(InvalidArgument("refused by a CEL rule")), kExitError);
}

// docs/user-guide.md's table is this one: a row "| <code> | <name> | ..." per code.
TEST(ExitCodesTest, TheUserGuideListsEveryCode) {
  std::ifstream in(std::string(KT_SOURCE_DIR) + "/docs/user-guide.md");
  ASSERT_TRUE(in) << "docs/user-guide.md";
  std::stringstream text;
  text << in.rdbuf();
  for (const auto& row : kExitCodeTable) {
    const std::string want = "| " + std::to_string(row.code) + " | " + std::string(row.name) + " |";
    EXPECT_NE(text.str().find(want), std::string::npos) << "missing row: " << want;
  }
  EXPECT_NE(text.str().find("| 128+n | signal |"), std::string::npos);
}

}  // namespace
}  // namespace kubetrain::cli
