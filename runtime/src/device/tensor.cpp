#include "strata/device/tensor.hpp"

#include <string>

#include "device/impl.hpp"
#include "strata/device/error.hpp"
#include "strata/device/shape.hpp"

namespace strata {

using detail::throw_invalid;

namespace {
std::int64_t checked_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw_invalid("strata::tensor: dimension " + std::to_string(d) + " is negative; expected sizes >= 0");
    n *= d;
  }
  return n;
}
}  // namespace

tensor::tensor(std::vector<std::int64_t> shape, strata::dtype type, buffer storage, event ready)
    : shape_(std::move(shape)), type_(type), storage_(std::move(storage)), ready_(std::move(ready)) {
  auto need = static_cast<std::size_t>(checked_numel(shape_)) * size_of(type_);
  if (!storage_ || storage_.size() < need)
    throw_invalid("strata::tensor: a " + std::string(to_string(type_)) + " tensor of shape " + shape_text(shape_) +
                  " needs " + std::to_string(need) + " bytes but the buffer has " + std::to_string(storage_.size()));
}

tensor tensor::empty(std::vector<std::int64_t> shape, strata::dtype type, device& dev, const stream& s) {
  auto bytes = static_cast<std::size_t>(checked_numel(shape)) * size_of(type);
  return tensor(std::move(shape), type, dev.allocate(bytes, s));
}

tensor tensor::from_host_bytes(const void* data, std::size_t bytes, std::vector<std::int64_t> shape,
                               strata::dtype type, device& dev, const stream& s) {
  auto need = static_cast<std::size_t>(checked_numel(shape)) * size_of(type);
  if (need != bytes)
    throw_invalid("tensor::from_host: " + std::to_string(bytes / size_of(type)) + " values do not match shape " +
                  shape_text(shape) + " (expected " + std::to_string(need / size_of(type)) + ")");
  tensor t = empty(std::move(shape), type, dev, s);
  stream str = s;
  str.copy_from_host(t.storage_, data, bytes);
  t.ready_ = str.record();
  return t;
}

tensor tensor::from_host_words(std::span<const std::uint16_t> words, std::vector<std::int64_t> shape,
                               strata::dtype type, device& dev, const stream& s) {
  if (type != strata::dtype::float16 && type != strata::dtype::bfloat16)
    throw_invalid("tensor::from_host_words: dtype " + std::string(to_string(type)) +
                  " has no 16-bit words; expected float16 or bfloat16.");
  return from_host_bytes(words.data(), words.size_bytes(), std::move(shape), type, dev, s);
}

std::vector<std::uint16_t> tensor::to_host_words(const stream& s) const {
  if (type_ != strata::dtype::float16 && type_ != strata::dtype::bfloat16)
    throw_invalid("tensor::to_host_words: the tensor's dtype " + std::string(to_string(type_)) +
                  " has no 16-bit words; expected float16 or bfloat16.");
  std::vector<std::uint16_t> out(static_cast<std::size_t>(numel()));
  to_host_bytes(out.data(), s);
  return out;
}

std::int64_t tensor::numel() const noexcept {
  std::int64_t n = 1;
  for (auto d : shape_) n *= d;
  return n;
}

device tensor::get_device() const { return storage_.get_device(); }

event tensor::copy_to_host(void* dst, const stream& s) const {
  stream str = s;
  str.wait(ready_);
  str.copy_to_host(dst, storage_, bytes());
  return str.record();
}

void tensor::to_host_bytes(void* dst, const stream& s) const {
  if (storage_.kind() == device_kind::sim)
    throw_invalid("tensor::to_host: sim tensors hold no data (sim devices only model time)");
  stream str = s;
  copy_to_host(dst, str);
  str.synchronize();
}

void tensor::check_type(strata::dtype t) const {
  if (t != type_)
    throw_invalid("strata::tensor: elements of type " + std::string(to_string(t)) +
                  " were requested from a tensor of type " + std::string(to_string(type_)) + "; expected " +
                  std::string(to_string(type_)) + ".");
}

void tensor::check_host_access(strata::dtype t) const {
  check_type(t);
  if (storage_ && !storage_.host_accessible())
    throw_invalid("tensor::data: the tensor lives on " + get_device().name() +
                  ", not on a cpu device; copy it to the host first (to_host or copy_to_host)");
}

}  // namespace strata
