#include <gtest/gtest.h>

#include "common/workload_contract.h"
#include "trainer/roles/role.h"
#include "trainer/stop/stop.h"

namespace kubetrain::trainer::roles {
namespace {

TEST(RoleExitCodeTest, EndingsHaveTheirOwnCodes) {
  EXPECT_EQ(ExitCode(Ending::kDone), 0);
  EXPECT_EQ(ExitCode(Ending::kStopped), 143);
  EXPECT_EQ(ExitCode(Ending::kStopped), kExitStopped);
  EXPECT_EQ(ExitCode(Ending::kTargetMissed), 3);
}

TEST(RoleExitCodeTest, TransientErrorsAreRetryableAndTheRestPermanent) {
  EXPECT_EQ(ExitCode(Unavailable("ps-0 unreachable")), contract::kExitRetryable);
  EXPECT_EQ(ExitCode(DeadlineExceeded("--finish-timeout")), contract::kExitRetryable);
  for (const Status& s : {InvalidArgument("x"), FailedPrecondition("x"), NotFound("x"),
                          DataLoss("x"), Internal("x"), PermissionDenied("x")}) {
    EXPECT_EQ(ExitCode(s), contract::kExitPermanent) << s.ToString();
  }
}

TEST(RoleExitCodeTest, EveryCodeFallsInTheClassItsResultNames) {
  EXPECT_EQ(contract::ClassifyExit(ExitCode(Ending::kDone)), contract::ExitClass::kSuccess);
  EXPECT_EQ(contract::ClassifyExit(ExitCode(Ending::kStopped)), contract::ExitClass::kRetryable);
  EXPECT_EQ(contract::ClassifyExit(ExitCode(Ending::kTargetMissed)),
            contract::ExitClass::kPermanent);
  EXPECT_EQ(contract::ClassifyExit(ExitCode(Unavailable("x"))), contract::ExitClass::kRetryable);
  EXPECT_EQ(contract::ClassifyExit(ExitCode(InvalidArgument("x"))),
            contract::ExitClass::kPermanent);
}

}  // namespace
}  // namespace kubetrain::trainer::roles
