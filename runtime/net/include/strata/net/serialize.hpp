#pragma once
/// \file
/// How message types cross ranks: `serialize(Archive&, T&)`, the built-in wire types, and
/// `STRATA_NET_DECLARE` for types that travel outside a protocol the endpoint knows.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/actor_ref.hpp"
#include "strata/device/tensor.hpp"
#include "strata/error.hpp"
#include "strata/message.hpp"
#include "strata/type_meta.hpp"

namespace strata::net {

class writer;
class reader;

/// Elements [`offset`, `offset` + numel(`shape`)) of a cpu tensor, sent across ranks straight from
/// `base`'s buffer (no copy); the receiver reads it as a tensor of `shape` of its own (`base` that
/// tensor, `offset` 0). For senders that cut one tensor into parts for several ranks.
/// A slice that does not fit in `base`, or a `base` of another device, fails the send with one
/// sentence; a slice of no tensor (`base` invalid) travels as `tensor()` does.
struct tensor_slice {
  tensor base;
  std::int64_t offset = 0;
  std::vector<std::int64_t> shape;
};

namespace detail {
struct endpoint_state;
/// The bytes of the `i`-th tensor a writer collected that travel: from `offset`, `size` bytes.
struct tensor_bytes {
  std::size_t offset = 0;
  std::size_t size = 0;
};
template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_array : std::false_type {};
template <class T, std::size_t N>
struct is_array<std::array<T, N>> : std::true_type {};
template <class T>
struct is_pair : std::false_type {};
template <class A, class B>
struct is_pair<std::pair<A, B>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class T>
concept adl_serializable = requires(writer& w, reader& r, T& v) {
  serialize(w, v);
  serialize(r, v);
};

template <class T>
constexpr bool is_wire() {
  if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) return true;
  else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, actor_ref> ||
                     std::is_same_v<T, strata::error> || std::is_same_v<T, tensor> ||
                     std::is_same_v<T, tensor_slice> || std::is_same_v<T, unit_t> || std::is_same_v<T, down_msg> || std::is_same_v<T, exit_msg>)
    return true;
  else if constexpr (strata::detail::is_typed_actor<T>::value) return true;
  else if constexpr (is_vector<T>::value || is_array<T>::value || is_optional<T>::value)
    return is_wire<typename T::value_type>();
  else if constexpr (is_pair<T>::value) return is_wire<typename T::first_type>() && is_wire<typename T::second_type>();
  else return adl_serializable<T>;
}
}  // namespace detail

/// A type that may cross ranks: arithmetic and enum types, `std::string`, `std::vector`,
/// `std::array`, `std::pair`, `std::optional` of wire types, actor handles, `error`, `tensor`
/// (cpu), `tensor_slice`, `down_msg`, `exit_msg`, `unit_t`, and every default-constructible type with a free
/// function `serialize(Archive& a, T& v)` found by argument-dependent lookup, which lists the
/// members once for both directions:
/// \code
///   struct ping { int round; std::string text; strata::tensor data; };
///   template <class Archive> void serialize(Archive& a, ping& p) { a(p.round, p.text, p.data); }
/// \endcode
template <class T>
concept wire_type = detail::is_wire<std::remove_cvref_t<T>>() && std::default_initializable<std::remove_cvref_t<T>>;

/// Turns a message into bytes (and a list of tensors that travel as their own MPI messages).
/// Used through `serialize(Archive&, T&)`; not thread-safe, one per message.
class writer {
public:
  writer(std::vector<std::byte>& out, std::vector<tensor>& tensors, detail::endpoint_state* ep) noexcept
      : out_(out), tensors_(tensors), ep_(ep) {}
  template <class... T>
  void operator()(const T&... values) {
    (write(values), ...);
  }
  void bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const std::byte*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  template <class T>
  void write(const T& v) {
    static_assert(detail::is_wire<T>(), "this type declares no serialization: give it serialize(Archive&, T&)");
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      bytes(&v, sizeof v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      write(static_cast<std::uint64_t>(v.size()));
      bytes(v.data(), v.size());
    } else if constexpr (detail::is_vector<T>::value) {
      write(static_cast<std::uint64_t>(v.size()));
      if constexpr (std::is_arithmetic_v<typename T::value_type>) bytes(v.data(), v.size() * sizeof(typename T::value_type));
      else
        for (const auto& x : v) write(x);
    } else if constexpr (detail::is_array<T>::value) {
      for (const auto& x : v) write(x);
    } else if constexpr (detail::is_pair<T>::value) {
      write(v.first);
      write(v.second);
    } else if constexpr (detail::is_optional<T>::value) {
      write(static_cast<std::uint8_t>(v.has_value()));
      if (v) write(*v);
    } else if constexpr (std::is_same_v<T, actor_ref>) {
      write_ref(v);
    } else if constexpr (strata::detail::is_typed_actor<T>::value) {
      write_ref(v.ref());
    } else if constexpr (std::is_same_v<T, strata::error>) {
      write(v.code());
      write(v.message());
    } else if constexpr (std::is_same_v<T, tensor>) {
      write_tensor(v);
    } else if constexpr (std::is_same_v<T, tensor_slice>) {
      write_slice(v);
    } else if constexpr (std::is_same_v<T, unit_t>) {
    } else if constexpr (std::is_same_v<T, down_msg> || std::is_same_v<T, exit_msg>) {
      write(v.source);
      write(v.reason);
    } else {
      serialize(*this, const_cast<T&>(v));  // NOLINT: serialize takes T& for both directions
    }
  }

  /// Which bytes of each collected tensor travel (all of them, but for a `tensor_slice`).
  const std::vector<detail::tensor_bytes>& tensor_ranges() const noexcept { return ranges_; }

private:
  void write_ref(const actor_ref& ref);
  void write_tensor(const tensor& t);
  void write_slice(const tensor_slice& t);
  void write_tensor_bytes(const tensor& t, const std::vector<std::int64_t>& shape, std::size_t offset, std::size_t size);
  std::vector<std::byte>& out_;
  std::vector<tensor>& tensors_;
  std::vector<detail::tensor_bytes> ranges_;
  detail::endpoint_state* ep_;
};

/// Reads what `writer` wrote, in the same order. Throws `error_exception` on truncated input.
class reader {
public:
  reader(const std::byte* data, std::size_t size, detail::endpoint_state* ep, int source_rank) noexcept
      : p_(data), end_(data + size), ep_(ep), source_(source_rank) {}
  template <class... T>
  void operator()(T&... values) {
    (read(values), ...);
  }
  void bytes(void* dst, std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n) truncated();
    if (n != 0) std::memcpy(dst, p_, n);
    p_ += n;
  }
  std::size_t remaining() const noexcept { return static_cast<std::size_t>(end_ - p_); }
  /// Tensors read so far (their data arrives as separate MPI messages).
  const std::vector<tensor>& tensors() const noexcept { return tensors_; }
  template <class T>
  void read(T& v) {
    static_assert(detail::is_wire<T>(), "this type declares no serialization: give it serialize(Archive&, T&)");
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      bytes(&v, sizeof v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      v.resize(read_size(1));
      bytes(v.data(), v.size());
    } else if constexpr (detail::is_vector<T>::value) {
      using E = typename T::value_type;
      v.resize(read_size(std::is_arithmetic_v<E> ? sizeof(E) : 1));
      if constexpr (std::is_arithmetic_v<E>) bytes(v.data(), v.size() * sizeof(E));
      else
        for (auto& x : v) read(x);
    } else if constexpr (detail::is_array<T>::value) {
      for (auto& x : v) read(x);
    } else if constexpr (detail::is_pair<T>::value) {
      read(v.first);
      read(v.second);
    } else if constexpr (detail::is_optional<T>::value) {
      std::uint8_t has = 0;
      read(has);
      if (has) {
        v.emplace();
        read(*v);
      } else {
        v.reset();
      }
    } else if constexpr (std::is_same_v<T, actor_ref>) {
      v = read_ref();
    } else if constexpr (strata::detail::is_typed_actor<T>::value) {
      v = T(read_ref());
    } else if constexpr (std::is_same_v<T, strata::error>) {
      errc code{};
      std::string text;
      read(code);
      read(text);
      v = strata::error(code, std::move(text));
    } else if constexpr (std::is_same_v<T, tensor>) {
      v = read_tensor();
    } else if constexpr (std::is_same_v<T, tensor_slice>) {
      v.base = read_tensor();
      v.offset = 0;
      v.shape = v.base.shape();
    } else if constexpr (std::is_same_v<T, unit_t>) {
    } else if constexpr (std::is_same_v<T, down_msg> || std::is_same_v<T, exit_msg>) {
      read(v.source);
      read(v.reason);
    } else {
      serialize(*this, v);
    }
  }

private:
  std::size_t read_size(std::size_t min_element_bytes) {
    std::uint64_t n = 0;
    read(n);
    if (n > remaining() / min_element_bytes + 1) truncated();
    return static_cast<std::size_t>(n);
  }
  [[noreturn]] void truncated() const;
  actor_ref read_ref();
  tensor read_tensor();
  const std::byte* p_;
  const std::byte* end_;
  detail::endpoint_state* ep_;
  int source_;
  std::vector<tensor> tensors_;
};

namespace detail {
/// How one message type crosses ranks (registered once per process, before main).
struct codec {
  std::uint64_t wire_id = 0;  ///< FNV-1a of the demangled type name: equal on every rank of one program.
  const type_meta* type = nullptr;
  void (*encode)(writer&, void* payload) = nullptr;
  strata::detail::envelope* (*decode)(reader&) = nullptr;
};
void register_codec(const codec& c);
const codec* find_codec(const type_meta* type) noexcept;
const codec* find_codec(std::uint64_t wire_id) noexcept;
std::uint64_t wire_id_of(std::string_view type_name) noexcept;

template <class T>
bool register_message() {
  static_assert(wire_type<T>, "a message type that crosses ranks must declare its serialization: "
                              "serialize(Archive&, T&) and a default constructor");
  codec c;
  c.type = type_of<T>();
  c.wire_id = wire_id_of(c.type->name);
  c.encode = [](writer& w, void* payload) { w.write(*static_cast<T*>(payload)); };
  c.decode = [](reader& r) -> strata::detail::envelope* {
    auto* e = new strata::detail::typed_envelope<T>();
    try {
      r.read(e->value);
    } catch (...) {
      delete e;
      throw;
    }
    return e;
  };
  register_codec(c);
  return true;
}
/// Odr-using `declared<T>::value` anywhere in the program registers T on every rank at start-up.
template <class T>
struct declared {
  static inline const bool value = register_message<T>();
};
template <class T>
struct protocol_types;
/// A protocol entry's message, and its declared reply unless that is none or void.
template <class E>
struct entry_types {
  using message = typename strata::detail::protocol_entry<E>::message;
  using reply = typename strata::detail::protocol_entry<E>::reply;
  static constexpr bool reply_crosses = !std::is_same_v<reply, strata::detail::undeclared_reply> && !std::is_void_v<reply>;
  static constexpr bool all_wire = [] {
    if constexpr (reply_crosses) return wire_type<message> && wire_type<reply>;
    else return wire_type<message>;
  }();
  static bool declare() {
    if constexpr (reply_crosses) return declared<message>::value && declared<reply>::value;
    else return declared<message>::value;
  }
};
template <class... E>
struct protocol_types<protocol<E...>> {
  static constexpr bool all_wire = (entry_types<E>::all_wire && ...);
  static bool declare() { return (entry_types<E>::declare() && ...); }
};
}  // namespace detail

/// Declares that messages of types `T...` cross ranks (every rank registers them before main,
/// as the same program runs on every rank). Types in a protocol given to `endpoint::remote<P>` or
/// `endpoint::publish` are declared by that call; declare the others (request responses, types
/// sent through untyped handles) with `STRATA_NET_DECLARE(T)` at namespace scope.
template <class... T>
bool declare() {
  return (detail::declared<std::remove_cvref_t<T>>::value && ...);
}

}  // namespace strata::net

#define STRATA_NET_CAT_(a, b) a##b
#define STRATA_NET_CAT(a, b) STRATA_NET_CAT_(a, b)
/// Declares message types that cross ranks (see strata::net::declare); use at namespace scope.
#define STRATA_NET_DECLARE(...) \
  [[maybe_unused]] static const bool STRATA_NET_CAT(strata_net_declared_, __COUNTER__) = ::strata::net::declare<__VA_ARGS__>()
