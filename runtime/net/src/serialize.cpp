#include "strata/net/serialize.hpp"

#include <mutex>
#include <string>
#include <unordered_map>

#include "staging.hpp"
#include "state.hpp"

namespace strata::net {

namespace {
struct codec_table {
  std::mutex m;
  std::unordered_map<const type_meta*, detail::codec> by_type;
  std::unordered_map<std::uint64_t, detail::codec> by_wire;
};
codec_table& codecs() {
  static auto* table = new codec_table;  // never destroyed: registrations run in static init
  return *table;
}
}  // namespace

void detail::register_codec(const codec& c) {
  auto& t = codecs();
  std::lock_guard lock(t.m);
  t.by_type.emplace(c.type, c);
  t.by_wire.emplace(c.wire_id, c);
}

const detail::codec* detail::find_codec(const type_meta* type) noexcept {
  auto& t = codecs();
  std::lock_guard lock(t.m);
  auto it = t.by_type.find(type);
  return it == t.by_type.end() ? nullptr : &it->second;
}

const detail::codec* detail::find_codec(std::uint64_t wire_id) noexcept {
  auto& t = codecs();
  std::lock_guard lock(t.m);
  auto it = t.by_wire.find(wire_id);
  return it == t.by_wire.end() ? nullptr : &it->second;
}

std::uint64_t detail::wire_id_of(std::string_view type_name) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : type_name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::uint64_t detail::name_key(std::string_view name) noexcept { return wire_id_of(name); }

void writer::write_ref(const actor_ref& ref) {
  auto [rank, by_name, key] = ep_ ? ep_->address_of(ref) : std::tuple<int, bool, std::uint64_t>{-1, false, 0};
  write(static_cast<std::int32_t>(rank));
  write(static_cast<std::uint8_t>(by_name));
  write(key);
}

actor_ref reader::read_ref() {
  std::int32_t rank = -1;
  std::uint8_t by_name = 0;
  std::uint64_t key = 0;
  (*this)(rank, by_name, key);
  if (rank < 0 || ep_ == nullptr) return {};
  return ep_->import(rank, by_name != 0, key);
}

void writer::write_tensor(const tensor& t) {
  write_tensor_bytes(t, t.shape(), 0, t.bytes());
}

void writer::write_slice(const tensor_slice& t) {
  if (!t.base.valid()) return write_tensor(t.base);  // no tensor, as a tensor() travels
  std::int64_t n = 1;
  for (auto d : t.shape) n = d < 0 || n < 0 ? -1 : n * d;
  if (n < 0 || t.offset < 0 || t.offset > t.base.numel() - n)
    throw error_exception(strata::error(errc::invalid_argument, "a tensor slice of " + std::to_string(n) +
                                                                    " elements at offset " + std::to_string(t.offset) +
                                                                    " does not fit in its tensor of " +
                                                                    std::to_string(t.base.numel()) +
                                                                    " elements"));
  const std::size_t element = size_of(t.base.dtype());
  write_tensor_bytes(t.base, t.shape, static_cast<std::size_t>(t.offset) * element, static_cast<std::size_t>(n) * element);
}

void writer::write_tensor_bytes(const tensor& t, const std::vector<std::int64_t>& shape, std::size_t offset,
                                std::size_t size) {
  if (t.valid())
    if (auto path = detail::send_staging(t.storage().kind(), t.get_device().name()); !path)
      throw error_exception(path.error());
  std::uint8_t valid = t.valid() ? 1 : 0;
  write(valid);
  if (!valid) return;
  write(t.dtype());
  write(shape);
  tensors_.push_back(t);
  ranges_.push_back(detail::tensor_bytes{offset, size});
}

tensor reader::read_tensor() {
  std::uint8_t valid = 0;
  read(valid);
  if (!valid) return {};
  dtype type{};
  std::vector<std::int64_t> shape;
  read(type);
  read(shape);
  if (size_of(type) == 0) truncated();
  for (auto d : shape)
    if (d < 0) truncated();
  if (ep_ == nullptr) throw error_exception(strata::error(errc::invalid_argument, "a tensor was read without an endpoint"));
  tensor t = ep_->receive_tensor(source_, std::move(shape), type);
  tensors_.push_back(t);
  return t;
}

void reader::truncated() const {
  throw error_exception(strata::error(errc::invalid_argument, "a message from rank " + std::to_string(source_) +
                                                                  " is truncated or malformed"));
}

}  // namespace strata::net
