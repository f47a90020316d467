#include "checkpoint_file.hpp"

#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <utility>

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include "strata/checksum.hpp"
#include "strata/files.hpp"
#include "validation.hpp"

namespace strata::kvstore::internal {

namespace {

constexpr char checkpoint_magic[9] = "STRKV001";
constexpr char checkpoint_end[9] = "STRKVEND";

/// The checkpoint's checksum: FNV-1a over the first `n` bytes, with the basis kvstore files have
/// always used (strata/checksum.hpp), so files written before stay loadable.
std::uint64_t fnv1a(const std::string& bytes, std::size_t n) {
  return fnv1a64(std::string_view(bytes.data(), n), fnv1a64_kvstore_basis);
}

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

/// Reads the checkpoint's fields in order; any read past the end throws the "truncated" sentence.
class checkpoint_reader {
public:
  checkpoint_reader(const std::string& bytes, std::size_t end, std::string path)
      : bytes_(bytes), end_(end), path_(std::move(path)) {}
  template <class T>
  T get() {
    T v;
    need(sizeof v);
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  void read(void* dst, std::size_t n) {
    need(n);
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }
  std::size_t position() const noexcept { return pos_; }
  void require(std::size_t n) const { need(n); }

private:
  void need(std::size_t n) const {
    if (n > end_ - pos_)
      throw std::runtime_error("kvstore load: checkpoint \"" + path_ + "\" is truncated or corrupt: its contents end early.");
  }
  const std::string& bytes_;
  std::size_t end_;
  std::string path_;
  std::size_t pos_ = 0;
};

std::vector<checkpoint_entry> parse_checkpoint(const std::string& bytes, const std::string& path) {
  auto corrupt = [&](const std::string& why) {
    return std::runtime_error("kvstore load: checkpoint \"" + path + "\" is truncated or corrupt: " + why + ".");
  };
  const std::size_t trailer = sizeof(std::uint64_t) + 8;
  if (bytes.size() < 8 + sizeof(std::uint64_t) + trailer) throw corrupt("it is too short to be a checkpoint");
  if (bytes.compare(0, 8, checkpoint_magic) != 0) throw corrupt("it does not start with \"STRKV001\"");
  const std::size_t body = bytes.size() - trailer;
  if (bytes.compare(bytes.size() - 8, 8, checkpoint_end) != 0) throw corrupt("its end marker is missing");
  std::uint64_t stored_sum;
  std::memcpy(&stored_sum, bytes.data() + body, sizeof stored_sum);
  if (stored_sum != fnv1a(bytes, body)) throw corrupt("its checksum does not match its contents");
  checkpoint_reader in(bytes, body, path);
  in.get<std::uint64_t>();  // magic, 8 bytes
  const auto count = in.get<std::uint64_t>();
  std::vector<checkpoint_entry> entries;
  for (std::uint64_t k = 0; k < count; ++k) {
    checkpoint_entry e;
    const auto kind = in.get<std::uint8_t>();
    if (kind == 0) {
      e.key = in.get<std::int64_t>();
    } else if (kind == 1) {
      const auto len = in.get<std::uint64_t>();
      if (len > body) throw corrupt("a key length is out of range");
      std::string name(len, '\0');
      in.read(name.data(), len);
      e.key = std::move(name);
    } else {
      throw corrupt("a key kind is neither integer nor string");
    }
    e.version = in.get<std::uint64_t>();
    e.step = in.get<std::int64_t>();
    const auto rank = in.get<std::uint64_t>();
    if (rank > 64) throw corrupt("a rank is out of range");
    std::uint64_t numel = 1;
    for (std::uint64_t d = 0; d < rank; ++d) {
      const auto dim = in.get<std::int64_t>();
      if (dim < 0 || (dim > 0 && numel > body / static_cast<std::uint64_t>(dim))) throw corrupt("a dimension is out of range");
      e.shape.push_back(dim);
      numel *= static_cast<std::uint64_t>(dim);
    }
    const auto arrays = 1 + in.get<std::uint64_t>();
    if (arrays > 3) throw corrupt("an optimizer state count is out of range");
    for (std::uint64_t a = 0; a < arrays; ++a) {
      in.require(numel * sizeof(float));  // before allocating: a corrupt size must not allocate
      std::vector<float> v(numel);
      in.read(v.data(), numel * sizeof(float));
      e.arrays.push_back(std::move(v));
    }
    entries.push_back(std::move(e));
  }
  if (in.position() != body) throw corrupt("it has bytes after its last key");
  return entries;
}

}  // namespace

expected<checkpoint> read_checkpoint_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return bad("kvstore load: cannot open checkpoint \"" + path + "\": " + std::strerror(errno) + ".");
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  checkpoint c;
  try {
    c.entries = parse_checkpoint(bytes, path);
  } catch (const std::exception& e) {
    return bad(e.what());
  }
  for (const auto& e : c.entries) {
    if (c.int_keys && *c.int_keys != e.key.is_int())
      return bad("kvstore load: checkpoint \"" + path + "\" mixes integer and string keys; expected one kind.");
    c.int_keys = e.key.is_int();
  }
  return c;
}

namespace {

std::string checkpoint_bytes(const std::vector<checkpoint_entry>& entries) {
  std::string out(checkpoint_magic, 8);
  put<std::uint64_t>(out, entries.size());
  for (const auto& e : entries) {
    if (e.key.is_int()) {
      put<std::uint8_t>(out, 0);
      put<std::int64_t>(out, std::get<0>(e.key.value()));
    } else {
      const auto& name = std::get<1>(e.key.value());
      put<std::uint8_t>(out, 1);
      put<std::uint64_t>(out, name.size());
      out += name;
    }
    put<std::uint64_t>(out, e.version);
    put<std::int64_t>(out, e.step);
    put<std::uint64_t>(out, e.shape.size());
    for (auto d : e.shape) put<std::int64_t>(out, d);
    put<std::uint64_t>(out, e.arrays.size() - 1);
    for (const auto& a : e.arrays) out.append(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(float));
  }
  put<std::uint64_t>(out, fnv1a(out, out.size()));
  out.append(checkpoint_end, 8);
  return out;
}

}  // namespace

expected<void> write_checkpoint_file(const std::string& path, const std::vector<checkpoint_entry>& entries) {
  std::string bytes;
  try {
    bytes = checkpoint_bytes(entries);
  } catch (const std::exception& e) {
    return error(errc::runtime_failure, e.what());
  }
  auto written = write_file_atomically(path, bytes);
  if (!written) return error(errc::runtime_failure, "kvstore save: " + written.error().message());
  return {};
}

}  // namespace strata::kvstore::internal

namespace strata::kvstore {

expected<checkpoint> read_checkpoint(const std::string& path) { return internal::read_checkpoint_file(path); }

expected<void> write_checkpoint(const std::string& path, const std::vector<checkpoint_entry>& entries) {
  return internal::write_checkpoint_file(path, entries);
}

}  // namespace strata::kvstore
