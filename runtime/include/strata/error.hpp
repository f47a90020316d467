#pragma once
/// \file
/// Errors that travel with results: `strata::error` and `strata::expected<T>`.

#include <cstdint>
#include <exception>
#include <iosfwd>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace strata {

/// What went wrong, in categories a caller can branch on.
enum class errc : std::uint8_t {
  none = 0,
  normal_exit,          ///< The actor quit on its own (not a failure).
  stopped,              ///< The actor was stopped from outside or by shutdown.
  unhandled_exception,  ///< A handler threw; the message is in the error text.
  linked_exit,          ///< A linked actor exited with a failure.
  request_timeout,      ///< No response arrived within the request's timeout.
  unhandled_message,    ///< The receiver has no handler for the message type.
  target_terminated,    ///< The receiver had terminated; the message was not delivered.
  mailbox_full,         ///< A bounded mailbox refused the message.
  type_mismatch,        ///< A response had another type than the request expected.
  restart_limit,        ///< A supervisor gave up restarting a child.
  invalid_argument,     ///< A caller passed a bad value.
  runtime_failure,      ///< Anything else, described by the text.
  rank_down,            ///< The receiver's process (MPI rank) has left the job (strata::net).
  not_found,            ///< No such name (e.g. `actor_system::lookup` of a name nobody registered).
  stash_full,           ///< An actor stashed more messages than its stash holds (`spawn_options::stash_capacity`).
};

/// Short name of an error category ("request_timeout", ...).
const char* to_string(errc code) noexcept;
std::ostream& operator<<(std::ostream& os, errc code);

/// An error: a category plus one sentence for people.
///
/// Cheap to move; copying copies the text. A default-constructed error means "no error".
class error {
public:
  error() = default;
  error(errc code, std::string message) : code_(code), message_(std::move(message)) {}

  errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  explicit operator bool() const noexcept { return code_ != errc::none; }

  /// True for the reasons that are not failures (`none`, `normal_exit`).
  bool is_normal() const noexcept { return code_ == errc::none || code_ == errc::normal_exit; }

  /// "category: message", for logs.
  std::string to_string() const;

  friend bool operator==(const error& a, const error& b) noexcept {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

private:
  errc code_ = errc::none;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const error& err);

/// Thrown by the throwing conveniences at the edge of the API (`expected::value()`).
class error_exception : public std::runtime_error {
public:
  explicit error_exception(strata::error err)
      : std::runtime_error(err.message()), error_(std::move(err)) {}
  const strata::error& error() const noexcept { return error_; }

private:
  strata::error error_;
};

/// Either a value or an error; the error travels with the result (C++23 `std::expected` in
/// miniature, since g++ 12 in C++20 mode lacks it).
template <class T>
class expected {
public:
  using value_type = T;

  expected(const T& value) : has_(true) { new (&storage_.value) T(value); }
  expected(T&& value) : has_(true) { new (&storage_.value) T(std::move(value)); }
  expected(strata::error err) : has_(false) { new (&storage_.err) strata::error(std::move(err)); }
  expected(const expected& other) : has_(other.has_) {
    if (has_) new (&storage_.value) T(other.storage_.value);
    else new (&storage_.err) strata::error(other.storage_.err);
  }
  expected(expected&& other) noexcept(std::is_nothrow_move_constructible_v<T>) : has_(other.has_) {
    if (has_) new (&storage_.value) T(std::move(other.storage_.value));
    else new (&storage_.err) strata::error(std::move(other.storage_.err));
  }
  expected& operator=(expected other) {
    destroy();
    has_ = other.has_;
    if (has_) new (&storage_.value) T(std::move(other.storage_.value));
    else new (&storage_.err) strata::error(std::move(other.storage_.err));
    return *this;
  }
  ~expected() { destroy(); }

  bool has_value() const noexcept { return has_; }
  explicit operator bool() const noexcept { return has_; }

  /// The value; throws `error_exception` when this holds an error.
  T& value() & {
    if (!has_) throw error_exception(storage_.err);
    return storage_.value;
  }
  const T& value() const& {
    if (!has_) throw error_exception(storage_.err);
    return storage_.value;
  }
  T&& value() && {
    if (!has_) throw error_exception(storage_.err);
    return std::move(storage_.value);
  }
  T& operator*() & noexcept { return storage_.value; }
  const T& operator*() const& noexcept { return storage_.value; }
  T* operator->() noexcept { return &storage_.value; }
  const T* operator->() const noexcept { return &storage_.value; }

  /// The error; requires `!has_value()`.
  const strata::error& error() const& noexcept { return storage_.err; }

private:
  void destroy() noexcept {
    if (has_) storage_.value.~T();
    else storage_.err.~error();
  }
  union storage {
    storage() {}
    ~storage() {}
    T value;
    strata::error err;
  } storage_;
  bool has_;
};

/// `expected<void>`: success or an error.
template <>
class expected<void> {
public:
  using value_type = void;
  expected() = default;
  expected(strata::error err) : err_(std::move(err)) {}
  bool has_value() const noexcept { return !err_; }
  explicit operator bool() const noexcept { return !err_; }
  void value() const {
    if (err_) throw error_exception(err_);
  }
  const strata::error& error() const noexcept { return err_; }

private:
  strata::error err_;
};

}  // namespace strata
