#pragma once
/// \file
/// Run-time identity of message types: a small id and a readable name per C++ type.

#include <cstdint>
#include <string>
#include <typeinfo>

namespace strata {

/// Identity of one message type. One instance per type for the whole process; compare by
/// address or by `id`.
struct type_meta {
  std::uint32_t id;  ///< Dense, assigned at first use, starting at 1.
  std::string name;  ///< Demangled C++ name, e.g. "app::ping".
};

namespace detail {
/// Registers a type (thread-safe, once per type) and returns its identity.
const type_meta* register_type(const std::type_info& info);
}  // namespace detail

/// The identity of `T` (cv and references stripped).
template <class T>
const type_meta* type_of() {
  static const type_meta* meta = detail::register_type(typeid(T));
  return meta;
}

/// Name of the type with id `id`, or "?" when unknown. Thread-safe.
std::string type_name(std::uint32_t id);

}  // namespace strata
