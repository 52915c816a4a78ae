// Status and Result<T>: how every core component (storage, indexing,
// postings, analyzers) reports errors. Errors are values, never exceptions;
// the server maps a Status code to an HTTP status at the boundary.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace corvid {

enum class StatusCode {
  kOk = 0,
  kNotFound,
  kInvalidArgument,
  kPreconditionFailed,  // If-Match / If-None-Match did not hold
  kCorruption,
  kIOError,
  kBusy,
  kTooLarge,
  kShuttingDown,
  kNoSpace,  // the disk (or the store's map) is full: nothing was made durable
  kUnavailable,    // cluster: the write never reached the log (it is never applied)
  kCommitUnknown,  // cluster: no confirmation by the deadline; applied everywhere or nowhere
  kInternal,
};

// A code plus a human-readable message. Cheap to copy when ok (no message).
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status InvalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status PreconditionFailed(std::string msg) { return {StatusCode::kPreconditionFailed, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status IOError(std::string msg) { return {StatusCode::kIOError, std::move(msg)}; }
  static Status Busy(std::string msg) { return {StatusCode::kBusy, std::move(msg)}; }
  static Status TooLarge(std::string msg) { return {StatusCode::kTooLarge, std::move(msg)}; }
  static Status ShuttingDown(std::string msg) { return {StatusCode::kShuttingDown, std::move(msg)}; }
  static Status NoSpace(std::string msg) { return {StatusCode::kNoSpace, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status CommitUnknown(std::string msg) { return {StatusCode::kCommitUnknown, std::move(msg)}; }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
  // Bad input at byte `offset` of a text (a query, an expression, a JSON
  // body): the message is "<what> at offset N", and offset() carries N for
  // the server's `error.offset` (API.md), so nothing parses it back out.
  static Status InvalidArgumentAt(std::string_view what, size_t offset) {
    Status s(StatusCode::kInvalidArgument, std::string(what) + " at offset " + std::to_string(offset));
    s.offset_ = offset;
    return s;
  }

  // Bad input in one request parameter the caller names (a literal, e.g.
  // "searchAfter"), as opposed to the text a parser read: the server then
  // answers invalid_argument, not the parser's own code.
  static Status InvalidParameter(const char* parameter, std::string msg) {
    Status s(StatusCode::kInvalidArgument, std::move(msg));
    s.parameter_ = parameter;
    return s;
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The input's byte the error is about (InvalidArgumentAt), if any.
  std::optional<size_t> offset() const { return offset_; }
  // The parameter the error is about (InvalidParameter), or nullptr.
  const char* parameter() const { return parameter_; }
  // The same error with `prefix` before its message (the field or the
  // parameter it came from); its code and offset stay.
  Status Prefixed(std::string_view prefix) const {
    Status s = *this;
    s.message_.insert(0, prefix);
    return s;
  }
  std::string ToString() const;

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::optional<size_t> offset_;
  const char* parameter_ = nullptr;  // a literal
};

// Either a value or a non-ok Status. Accessing value() of an error is a
// programmer error (asserted), never a user-input path.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}             // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {       // NOLINT: implicit by design
    assert(!status_.ok());
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

inline std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kPreconditionFailed: return "precondition_failed";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kIOError: return "io_error";
    case StatusCode::kBusy: return "busy";
    case StatusCode::kTooLarge: return "too_large";
    case StatusCode::kShuttingDown: return "shutting_down";
    case StatusCode::kNoSpace: return "no_space";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kCommitUnknown: return "commit_unknown";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

// True for a failure of this process or its disk (I/O, a full disk, a
// fault, shutting down), not an outcome the request itself decides (a
// precondition, a missing document, bad input): the same request could
// succeed elsewhere or later. A cluster node must not apply the log past one.
inline bool IsLocalFailure(StatusCode c) {
  return c == StatusCode::kIOError || c == StatusCode::kNoSpace || c == StatusCode::kInternal ||
         c == StatusCode::kShuttingDown || c == StatusCode::kUnavailable || c == StatusCode::kCorruption;
}

inline std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

}  // namespace corvid
