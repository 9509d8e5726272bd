// pmhash/status.h — error reporting for the whole library.
//
// Every fallible operation returns a Status (or a Result<T> carrying either a value or a Status).
// No exception crosses the public API and the library never exits or aborts. A Status without a
// message costs one byte plus one null pointer, so the hot-path results (kNotFound, kExists) are
// as cheap as a bool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace pmhash {

class [[nodiscard]] Status {
 public:
  enum class Code : uint8_t {
    kOk = 0,
    kNotFound,         // key absent (Find, Update, Erase)
    kExists,           // key present (Insert)
    kInvalidArgument,  // bad option, wrong kind/parameters for an existing pool
    kCorruption,       // pool contents fail validation (bad magic, checksum, offsets, ...)
    kIOError,          // the OS refused (open, mmap, ftruncate, ...); message carries errno text
    kOutOfSpace,       // the pool (or a structural limit such as max depth) is exhausted
    kBusy,             // the pool is locked by another process / open handle
    kNotSupported,     // operation not offered by this index or platform
    kOutOfMemory,      // a DRAM allocation failed
  };

  Status() noexcept = default;
  Status(Code code, std::string_view msg) : code_(code) {
    if (!msg.empty()) msg_ = std::make_unique<std::string>(msg);
  }
  Status(const Status& o) : code_(o.code_) {
    if (o.msg_) msg_ = std::make_unique<std::string>(*o.msg_);
  }
  Status& operator=(const Status& o) {
    if (this != &o) {
      code_ = o.code_;
      msg_ = o.msg_ ? std::make_unique<std::string>(*o.msg_) : nullptr;
    }
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status OK() { return Status(); }
  static Status NotFound(std::string_view m = {}) { return Status(Code::kNotFound, m); }
  static Status Exists(std::string_view m = {}) { return Status(Code::kExists, m); }
  static Status InvalidArgument(std::string_view m) { return Status(Code::kInvalidArgument, m); }
  static Status Corruption(std::string_view m) { return Status(Code::kCorruption, m); }
  static Status IOError(std::string_view m) { return Status(Code::kIOError, m); }
  static Status OutOfSpace(std::string_view m = {}) { return Status(Code::kOutOfSpace, m); }
  static Status Busy(std::string_view m) { return Status(Code::kBusy, m); }
  static Status NotSupported(std::string_view m) { return Status(Code::kNotSupported, m); }
  static Status OutOfMemory(std::string_view m) { return Status(Code::kOutOfMemory, m); }

  bool ok() const { return code_ == Code::kOk; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsExists() const { return code_ == Code::kExists; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsIOError() const { return code_ == Code::kIOError; }
  bool IsOutOfSpace() const { return code_ == Code::kOutOfSpace; }
  bool IsBusy() const { return code_ == Code::kBusy; }
  bool IsNotSupported() const { return code_ == Code::kNotSupported; }
  Code code() const { return code_; }
  std::string_view message() const { return msg_ ? std::string_view(*msg_) : std::string_view(); }

  // "Corruption: bad magic in /dev/shm/x.pool"
  std::string ToString() const;
  static std::string_view CodeName(Code c);

  friend bool operator==(const Status& a, Code c) { return a.code_ == c; }

 private:
  Code code_ = Code::kOk;
  std::unique_ptr<std::string> msg_;
};

// Result<T>: a T or a non-OK Status. Modelled on absl::StatusOr, without exceptions.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)), has_value_(true) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {             // NOLINT: implicit by design
    if (status_.ok()) status_ = Status(Status::Code::kInvalidArgument, "Result built from OK");
  }

  bool ok() const { return has_value_; }
  const Status& status() const { return status_; }
  // REQUIRES: ok()
  T& value() & { return value_; }
  const T& value() const& { return value_; }
  T&& value() && { return std::move(value_); }
  T* operator->() { return &value_; }
  T& operator*() { return value_; }

 private:
  Status status_;
  T value_{};
  bool has_value_ = false;
};

}  // namespace pmhash

// Propagates a non-OK Status to the caller.
#define PMHASH_RETURN_IF_ERROR(expr)         \
  do {                                       \
    ::pmhash::Status _pmhash_st = (expr);    \
    if (!_pmhash_st.ok()) return _pmhash_st; \
  } while (0)
