// Status and StatusOr: how recoverable failures travel as values.
//
// A Status is OK or carries a Code and a message. The code says what the
// caller can do (see docs/errors.md): Unavailable and DeadlineExceeded are
// worth retrying, InvalidArgument and DataLoss are not. Bugs are GD_CHECKs,
// never Statuses. Both types are cheap to move and are not thread-safe.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <variant>

namespace geodesic {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // the input is wrong; retrying the same input fails again
  kNotFound,         // a file, dataset, peer or key does not exist
  kAlreadyExists,
  kFailedPrecondition,  // the system is not in a state to do this (yet)
  kOutOfRange,          // an id or index outside what the receiver owns
  kUnavailable,         // a peer or link is down; retry later
  kDeadlineExceeded,    // a wait ran past its deadline
  kDataLoss,            // stored or received bytes are corrupt
  kCancelled,           // the caller asked to stop
  kInternal,            // a library failed in a way we did not expect
  kUnauthenticated,     // no valid credentials: a missing, forged, expired or misdirected join token
  kPermissionDenied,    // authenticated, but not allowed to do this (e.g. a key not bound to the sender)
};

const char* CodeName(Code code);

// What was wrong with a bad value, where a caller acts on it beyond the code
// (a shard counts non-finite payloads apart from malformed ones). Survives
// Annotate, so callers never classify an error by its text.
//   kJobFatal: the whole job cannot succeed (a diverged model whose updates
//   every shard refuses); the process exits with kExitJobFatal and the
//   launcher stops the job at once instead of going on without it.
enum class Detail { kNone, kNonFinite, kJobFatal };

// A process's exit code when its error is Detail::kJobFatal.
inline constexpr int kExitJobFatal = 3;

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Prefixes the message with context ("loading checkpoint: ...").
  Status Annotate(const std::string& context) const;

  Detail detail() const { return detail_; }
  Status WithDetail(Detail detail) && {
    detail_ = detail;
    return std::move(*this);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
  Detail detail_ = Detail::kNone;
};

std::ostream& operator<<(std::ostream& os, const Status& s);

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
inline Status DataLoss(std::string m) { return {Code::kDataLoss, std::move(m)}; }
inline Status Cancelled(std::string m) { return {Code::kCancelled, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status Unauthenticated(std::string m) { return {Code::kUnauthenticated, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }

// Holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}        // NOLINT(runtime/explicit)
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT(runtime/explicit)
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInternal, "StatusOr built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace geodesic

#define GD_CONCAT_INNER(a, b) a##b
#define GD_CONCAT(a, b) GD_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if it is not OK.
#define GD_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::geodesic::Status gd_status_ = (expr);  \
    if (!gd_status_.ok()) return gd_status_; \
  } while (0)

// `GD_ASSIGN_OR_RETURN(auto x, F());` binds x or returns F's Status.
#define GD_ASSIGN_OR_RETURN(lhs, expr) GD_ASSIGN_OR_RETURN_IMPL(GD_CONCAT(gd_statusor_, __LINE__), lhs, expr)
#define GD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
