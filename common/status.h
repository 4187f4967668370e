// Status and StatusOr: errors as values, in the LevelDB style.
//
// A Status is a code plus a message. Every function that can fail returns one
// (or a StatusOr<T>); exceptions from third-party libraries are caught at the
// call site and turned into a Status, so none crosses a module boundary.
// Both types are [[nodiscard]]: an ignored error is a compile error.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kubetrain {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kConflict,
  kPermissionDenied,
  kUnauthenticated,
  kResourceExhausted,
  kFailedPrecondition,
  kGone,
  kUnavailable,
  kDeadlineExceeded,
  kInternal,
  // Stored data is unreadable as what it claims to be (a checksum or length that does not
  // match what was recorded when it was written): corrupt, not transient.
  kDataLoss,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "InvalidArgument: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A factory and a predicate for every code: `return NotFound("...")`,
// `if (IsNotFound(s))`. The predicates name what a caller branches on
// instead of comparing codes.
inline Status InvalidArgument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
inline Status NotFound(std::string message) {
  return Status(StatusCode::kNotFound, std::move(message));
}
inline Status AlreadyExists(std::string message) {
  return Status(StatusCode::kAlreadyExists, std::move(message));
}
inline Status Conflict(std::string message) {
  return Status(StatusCode::kConflict, std::move(message));
}
inline Status PermissionDenied(std::string message) {
  return Status(StatusCode::kPermissionDenied, std::move(message));
}
inline Status Unauthenticated(std::string message) {
  return Status(StatusCode::kUnauthenticated, std::move(message));
}
inline Status ResourceExhausted(std::string message) {
  return Status(StatusCode::kResourceExhausted, std::move(message));
}
inline Status FailedPrecondition(std::string message) {
  return Status(StatusCode::kFailedPrecondition, std::move(message));
}
inline Status Gone(std::string message) {
  return Status(StatusCode::kGone, std::move(message));
}
inline Status Unavailable(std::string message) {
  return Status(StatusCode::kUnavailable, std::move(message));
}
inline Status DeadlineExceeded(std::string message) {
  return Status(StatusCode::kDeadlineExceeded, std::move(message));
}
inline Status Internal(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}
inline Status DataLoss(std::string message) {
  return Status(StatusCode::kDataLoss, std::move(message));
}
inline bool IsInvalidArgument(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument;
}
inline bool IsNotFound(const Status& s) {
  return s.code() == StatusCode::kNotFound;
}
inline bool IsAlreadyExists(const Status& s) {
  return s.code() == StatusCode::kAlreadyExists;
}
inline bool IsConflict(const Status& s) {
  return s.code() == StatusCode::kConflict;
}
inline bool IsPermissionDenied(const Status& s) {
  return s.code() == StatusCode::kPermissionDenied;
}
inline bool IsUnauthenticated(const Status& s) {
  return s.code() == StatusCode::kUnauthenticated;
}
inline bool IsResourceExhausted(const Status& s) {
  return s.code() == StatusCode::kResourceExhausted;
}
inline bool IsFailedPrecondition(const Status& s) {
  return s.code() == StatusCode::kFailedPrecondition;
}
inline bool IsGone(const Status& s) {
  return s.code() == StatusCode::kGone;
}
inline bool IsUnavailable(const Status& s) {
  return s.code() == StatusCode::kUnavailable;
}
inline bool IsDeadlineExceeded(const Status& s) {
  return s.code() == StatusCode::kDeadlineExceeded;
}
inline bool IsInternal(const Status& s) {
  return s.code() == StatusCode::kInternal;
}
inline bool IsDataLoss(const Status& s) {
  return s.code() == StatusCode::kDataLoss;
}

// Holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "StatusOr built from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kubetrain

// Returns the Status from the enclosing function if `expr` is not OK.
#define KT_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::kubetrain::Status kt_status_ = (expr); \
    if (!kt_status_.ok()) return kt_status_; \
  } while (false)

// Evaluates `rexpr` (a StatusOr<T>): returns its Status from the enclosing
// function if it is not OK, else moves its value into `lhs`, a declaration
// (`auto x`, `const Foo& y` binds to a moved-from temporary: use a value) or an
// assignable expression. Expands to several statements: not for an unbraced if.
#define KT_ASSIGN_OR_RETURN(lhs, rexpr) \
  KT_ASSIGN_OR_RETURN_IMPL_(KT_STATUS_CONCAT_(kt_statusor_, __LINE__), lhs, rexpr)
#define KT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) return statusor.status();         \
  lhs = std::move(statusor).value()
#define KT_STATUS_CONCAT_(a, b) KT_STATUS_CONCAT_INNER_(a, b)
#define KT_STATUS_CONCAT_INNER_(a, b) a##b
