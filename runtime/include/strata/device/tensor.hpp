#pragma once
/// \file
/// tensor: a shape, an element type and a buffer on one device, with the event that makes it ready.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "strata/device/buffer.hpp"
#include "strata/device/device.hpp"
#include "strata/device/event.hpp"
#include "strata/device/stream.hpp"

namespace strata {

/// Element types. float32 for activations and parameters, int32/int64 for token ids.
enum class dtype : std::uint8_t { float32, float16, bfloat16, int32, int64, uint8 };

/// Bytes per element.
constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::float32: case dtype::int32: return 4;
    case dtype::float16: case dtype::bfloat16: return 2;
    case dtype::int64: return 8;
    case dtype::uint8: return 1;
  }
  return 0;
}

/// "float32", "int64", ...
constexpr std::string_view to_string(dtype t) noexcept {
  switch (t) {
    case dtype::float32: return "float32";
    case dtype::float16: return "float16";
    case dtype::bfloat16: return "bfloat16";
    case dtype::int32: return "int32";
    case dtype::int64: return "int64";
    case dtype::uint8: return "uint8";
  }
  return "unknown";
}

/// The dtype of a C++ element type (float, std::int32_t, std::int64_t, std::uint8_t).
template <class T>
constexpr dtype dtype_of() noexcept {
  using U = std::remove_cv_t<T>;
  static_assert(std::is_same_v<U, float> || std::is_same_v<U, std::int32_t> ||
                    std::is_same_v<U, std::int64_t> || std::is_same_v<U, std::uint8_t>,
                "strata::dtype_of: no dtype for this C++ type");
  if constexpr (std::is_same_v<U, float>) return dtype::float32;
  else if constexpr (std::is_same_v<U, std::int32_t>) return dtype::int32;
  else if constexpr (std::is_same_v<U, std::int64_t>) return dtype::int64;
  else return dtype::uint8;
}

/// A dense, contiguous (row-major) array on one device.
///
/// - Value semantics with shared ownership of the buffer: copies alias the same memory (like
///   torch.Tensor). Copying the handle is thread-safe; writing the data is the streams' business.
/// - ready_event(): the event after which the contents are valid. Whoever enqueues work that
///   writes the tensor sets it (set_ready_event(s.record())). It travels with the tensor when the
///   tensor is sent in a message; **the receiver's stream must `wait(t.ready_event())` before
///   using the data** (no host blocking; on CUDA this is cudaStreamWaitEvent).
/// - The buffer is released in stream order (see buffer); a receiver using it on another stream
///   should call `t.storage().record_stream(s)` if the sender may drop its copy first.
///
///     auto t = strata::tensor::from_host<float>(values, {batch, hidden}, dev, s);  // async copy
///     consumer_stream.wait(t.ready_event());
///     std::vector<float> back = t.to_host<float>(consumer_stream);             // blocking edge helper
class tensor {
 public:
  tensor() noexcept = default;

  /// Wraps `storage` (at least numel * size_of(type) bytes).
  /// \throws device_error (invalid_argument) on a negative dimension or a too small buffer.
  tensor(std::vector<std::int64_t> shape, strata::dtype type, buffer storage, event ready = {});

  /// Allocates an uninitialised tensor on `dev`, ordered on `s`.
  static tensor empty(std::vector<std::int64_t> shape, strata::dtype type, device& dev, const stream& s);

  /// Allocates a tensor on `dev` and enqueues a copy of `values` on `s`; the values are read before
  /// this returns. The tensor's ready_event is recorded on `s` after the copy.
  /// \throws device_error (invalid_argument) if `values.size()` differs from the shape's numel.
  template <class T>
  static tensor from_host(std::span<const T> values, std::vector<std::int64_t> shape, device& dev,
                          const stream& s) {
    return from_host_bytes(values.data(), values.size_bytes(), std::move(shape), dtype_of<T>(), dev, s);
  }
  /// One-dimensional overload: shape {values.size()}.
  template <class T>
  static tensor from_host(std::span<const T> values, device& dev, const stream& s) {
    return from_host(values, {static_cast<std::int64_t>(values.size())}, dev, s);
  }

  /// A float16 or bfloat16 tensor (`type`) from its 16-bit words, as `from_host` (the words of a
  /// float are `kernels::half_bits` or, for an array, `kernels::narrow` in strata/kernels/half.hpp).
  /// \throws device_error (invalid_argument) if `type` is not float16 or bfloat16, or the count
  ///   does not match the shape.
  static tensor from_host_words(std::span<const std::uint16_t> words, std::vector<std::int64_t> shape,
                                strata::dtype type, device& dev, const stream& s);

  const std::vector<std::int64_t>& shape() const noexcept { return shape_; }
  std::size_t rank() const noexcept { return shape_.size(); }
  std::int64_t dim(std::size_t i) const { return shape_.at(i); }
  strata::dtype dtype() const noexcept { return type_; }
  std::int64_t numel() const noexcept;
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(numel()) * size_of(type_); }
  const buffer& storage() const noexcept { return storage_; }
  device get_device() const;
  bool valid() const noexcept { return storage_.valid(); }

  const event& ready_event() const noexcept { return ready_; }
  void set_ready_event(event e) noexcept { ready_ = std::move(e); }

  /// Host pointer to the elements of a cpu tensor. Reading or writing it is only valid once
  /// ready_event() has completed (or from work ordered after it).
  /// \throws device_error (invalid_argument) for non-cpu tensors or if T does not match dtype().
  template <class T>
  T* data() const {
    check_host_access(dtype_of<T>());
    return static_cast<T*>(storage_.data());
  }
  /// Typed pointer to the elements on the tensor's own device (host memory on cpu, device memory
  /// on cuda, null on sim), for kernel calls that run on a stream of that device
  /// (strata/kernels/on_stream.hpp): the same address as raw_data(), with the element type checked.
  /// Only work ordered after ready_event() may read or write through it.
  /// \throws device_error (invalid_argument) if T does not match dtype(), in one sentence naming both.
  ///
  ///     kernels::on_stream(s, work, [x = t.device_data<float>(), n](auto target) { ... });
  template <class T>
  T* device_data() const {
    check_type(dtype_of<T>());
    return static_cast<T*>(storage_.data());
  }
  /// The buffer's pointer, untyped (device pointer on cuda, null on sim). Prefer device_data<T>().
  void* raw_data() const noexcept { return storage_.data(); }

  /// Enqueues on `s`: wait for ready_event(), then copy all bytes to `dst` (which must stay valid
  /// until the returned event completes). Returns an event recorded after the copy.
  event copy_to_host(void* dst, const stream& s) const;

  /// Blocking edge helper: copies to a new vector through `s` and synchronizes `s`.
  /// \throws device_error (invalid_argument) for sim tensors (they hold no data) or a T that does
  ///   not match dtype(); rethrows `s`'s error.
  template <class T>
  std::vector<T> to_host(const stream& s) const {
    check_type(dtype_of<T>());
    std::vector<T> out(static_cast<std::size_t>(numel()));
    to_host_bytes(out.data(), s);
    return out;
  }
  /// `to_host` for a float16 or bfloat16 tensor: its 16-bit words (`kernels::widen` or
  /// `kernels::half_value` make them floats, exactly).
  /// \throws device_error (invalid_argument) for other dtypes, as `to_host`.
  std::vector<std::uint16_t> to_host_words(const stream& s) const;

 private:
  static tensor from_host_bytes(const void* data, std::size_t bytes, std::vector<std::int64_t> shape,
                                strata::dtype type, device& dev, const stream& s);
  void to_host_bytes(void* dst, const stream& s) const;
  void check_type(strata::dtype t) const;
  void check_host_access(strata::dtype t) const;

  std::vector<std::int64_t> shape_;
  strata::dtype type_ = strata::dtype::float32;
  buffer storage_;
  event ready_;
};

}  // namespace strata
