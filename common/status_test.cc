#include "common/status.h"

#include <gtest/gtest.h>

namespace kubetrain {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ErrorCarriesCodeAndMessageWithContext) {
  Status s = NotFound("pod ps-0").WithContext("reconcile job a");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NotFound: reconcile job a: pod ps-0");
}

// Every code has a factory that makes it and a predicate true for it alone.
TEST(StatusTest, EveryCodeHasAFactoryAndAPredicate) {
  struct Row {
    StatusCode code;
    Status (*make)(std::string);
    bool (*is)(const Status&);
  };
  const Row rows[] = {
      {StatusCode::kInvalidArgument, InvalidArgument, IsInvalidArgument},
      {StatusCode::kNotFound, NotFound, IsNotFound},
      {StatusCode::kAlreadyExists, AlreadyExists, IsAlreadyExists},
      {StatusCode::kConflict, Conflict, IsConflict},
      {StatusCode::kPermissionDenied, PermissionDenied, IsPermissionDenied},
      {StatusCode::kUnauthenticated, Unauthenticated, IsUnauthenticated},
      {StatusCode::kResourceExhausted, ResourceExhausted, IsResourceExhausted},
      {StatusCode::kFailedPrecondition, FailedPrecondition, IsFailedPrecondition},
      {StatusCode::kGone, Gone, IsGone},
      {StatusCode::kUnavailable, Unavailable, IsUnavailable},
      {StatusCode::kDeadlineExceeded, DeadlineExceeded, IsDeadlineExceeded},
      {StatusCode::kInternal, Internal, IsInternal},
      {StatusCode::kDataLoss, DataLoss, IsDataLoss},
  };
  // kOk is 0 and kDataLoss the last: every other code is in the table.
  ASSERT_EQ(std::size(rows), static_cast<size_t>(StatusCode::kDataLoss));
  for (const Row& row : rows) {
    const Status s = row.make("m");
    EXPECT_EQ(s.code(), row.code) << StatusCodeName(row.code);
    EXPECT_EQ(s.message(), "m");
    for (const Row& other : rows) {
      EXPECT_EQ(other.is(s), other.code == row.code)
          << StatusCodeName(row.code) << " tested as " << StatusCodeName(other.code);
    }
    EXPECT_FALSE(row.is(Status::Ok()));
  }
}

TEST(StatusOrTest, HoldsValueOrError) {
  StatusOr<int> v = 7;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  StatusOr<int> e = InvalidArgument("bad");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
}

Status FailsWhen(bool fail) {
  KT_RETURN_IF_ERROR(fail ? Internal("boom") : Status::Ok());
  return Status::Ok();
}

TEST(StatusTest, ReturnIfErrorPropagates) {
  EXPECT_TRUE(FailsWhen(false).ok());
  EXPECT_EQ(FailsWhen(true).code(), StatusCode::kInternal);
}

StatusOr<std::string> Named(bool fail) {
  if (fail) return NotFound("no name");
  return std::string("kubetrain");
}

StatusOr<size_t> NameLength(bool fail) {
  KT_ASSIGN_OR_RETURN(std::string name, Named(fail));
  size_t total = 0;
  KT_ASSIGN_OR_RETURN(total, StatusOr<size_t>(name.size()));  // into an existing variable
  return total;
}

TEST(StatusTest, AssignOrReturnPropagatesTheErrorOrMovesTheValue) {
  StatusOr<size_t> ok = NameLength(false);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 9u);
  StatusOr<size_t> failed = NameLength(true);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(failed.status().message(), "no name");
}

}  // namespace
}  // namespace kubetrain
