// Status / Result<T>: errors as values. No exception crosses a module, thread, rank or HTTP
// handler boundary; messages name the file, tensor or field and say expected vs found.
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace g4 {

// Concatenates anything streamable into one string: Str("tensor ", name, " has ", n, " dims").
template <class... Args>
std::string Str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Error(std::string message) { return Status(std::move(message)); }
  template <class... Args>
  static Status Errorf(const Args&... args) {
    return Status(Str(args...));
  }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }
  // Prepends context ("loading model/: " + message).
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(context + ": " + message_);
  }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

inline Status OkStatus() { return Status(); }

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {
    if (status_.ok()) status_ = Status::Error("internal: Result built from an OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace g4

#define G4_CONCAT_INNER(a, b) a##b
#define G4_CONCAT(a, b) G4_CONCAT_INNER(a, b)

#define G4_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::g4::Status g4_status_tmp = (expr);      \
    if (!g4_status_tmp.ok()) return g4_status_tmp; \
  } while (0)

#define G4_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define G4_ASSIGN_OR_RETURN(lhs, expr) \
  G4_ASSIGN_OR_RETURN_IMPL(G4_CONCAT(g4_result_, __LINE__), lhs, expr)
