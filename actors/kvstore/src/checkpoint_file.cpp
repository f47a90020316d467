#include "checkpoint_file.hpp"

#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <string_view>
#include <stdexcept>
#include <utility>

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include "strata/checksum.hpp"
#include "strata/files.hpp"
#include "strata/kernels/half.hpp"
#include "validation.hpp"

namespace strata::kvstore::internal {

namespace {

constexpr char checkpoint_end[9] = "STRKVEND";

/// The two files of this format: a store's checkpoint (values, then optimizer state) and its
/// optimizer states alone (`save_optimizer_states`), whose header carries the optimizer.
struct file_kind {
  const char* magic;        // 8 bytes, written
  const char* legacy_magic;  // read too: a file whose entries carry no dtype and no master copy
  std::uint64_t value_arrays;  // arrays before the optimizer state: 1 (the value) or 0
  const char* request;      // "kvstore load" / "kvstore load_optimizer_states"
  const char* noun;         // "checkpoint" / "optimizer states file"
  const char* a_noun;       // with its article
  const char* other_magic;  // the other kind's magic, for a precise sentence
  const char* other_hint;
};
constexpr file_kind values_file{"STRKV002", "STRKV001", 1, "kvstore load", "checkpoint", "a checkpoint", "STRKVOP",
                                "it holds optimizer states only; load it with load_optimizer_states"};
constexpr file_kind states_file{"STRKVOP2", "STRKVOPT", 0, "kvstore load_optimizer_states", "optimizer states file",
                                "an optimizer states file", "STRKV00",
                                "it is a values checkpoint; load it with load"};

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
  checkpoint_reader(const std::string& bytes, std::size_t end, std::string path, const file_kind& kind)
      : bytes_(bytes), end_(end), path_(std::move(path)), kind_(kind) {}
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
      throw std::runtime_error(std::string(kind_.request) + ": " + kind_.noun + " \"" + path_ +
                               "\" is truncated or corrupt: its contents end early.");
  }
  const std::string& bytes_;
  std::size_t end_;
  std::string path_;
  const file_kind& kind_;
  std::size_t pos_ = 0;
};

/// The entries of a file of `kind`; its header blob (optimizer states files) into `header`, and
/// whether it is of the current format (entries with dtype and master copy) into `typed_out`.
std::vector<checkpoint_entry> parse_file(const std::string& bytes, const std::string& path, const file_kind& kind,
                                         std::string* header, bool* typed_out) {
  auto corrupt = [&](const std::string& why) {
    return std::runtime_error(std::string(kind.request) + ": " + kind.noun + " \"" + path +
                              "\" is truncated or corrupt: " + why + ".");
  };
  const std::size_t trailer = sizeof(std::uint64_t) + 8;
  const std::string_view other(kind.other_magic);  // a prefix of the other kind's magics
  if (bytes.size() >= 8 && bytes.compare(0, other.size(), other) == 0)
    throw std::runtime_error(std::string(kind.request) + ": \"" + path + "\" is not " + kind.a_noun + ": " +
                             kind.other_hint + ".");
  if (bytes.size() < 8 + sizeof(std::uint64_t) + trailer) throw corrupt(std::string("it is too short to be ") + kind.a_noun);
  // "STRKV002" and "STRKVOP2" carry each key's dtype and multi_precision master copy; "STRKV001"
  // and "STRKVOPT" (written before 16-bit keys) neither.
  const bool typed = bytes.compare(0, 8, kind.magic) == 0;
  if (!typed && bytes.compare(0, 8, kind.legacy_magic) != 0)
    throw corrupt(std::string("it does not start with \"") + kind.magic + "\"");
  if (typed_out != nullptr) *typed_out = typed;
  const std::size_t body = bytes.size() - trailer;
  if (bytes.compare(bytes.size() - 8, 8, checkpoint_end) != 0) throw corrupt("its end marker is missing");
  std::uint64_t stored_sum;
  std::memcpy(&stored_sum, bytes.data() + body, sizeof stored_sum);
  if (stored_sum != fnv1a(bytes, body)) throw corrupt("its checksum does not match its contents");
  checkpoint_reader in(bytes, body, path, kind);
  in.get<std::uint64_t>();  // magic, 8 bytes
  if (header != nullptr) {
    const auto len = in.get<std::uint64_t>();
    if (len > body) throw corrupt("its header length is out of range");
    header->assign(len, '\0');
    in.read(header->data(), len);
  }
  const auto count = in.get<std::uint64_t>();
  std::vector<checkpoint_entry> entries;
  for (std::uint64_t k = 0; k < count; ++k) {
    checkpoint_entry e;
    const auto key_kind = in.get<std::uint8_t>();
    if (key_kind == 0) {
      e.key = in.get<std::int64_t>();
    } else if (key_kind == 1) {
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
    const auto states = in.get<std::uint64_t>();
    if (states > 2) throw corrupt("an optimizer state count is out of range");
    bool has_master = false;
    if (typed) {
      const auto type = in.get<std::uint8_t>();
      if (type != static_cast<std::uint8_t>(dtype::float32) && type != static_cast<std::uint8_t>(dtype::float16) &&
          type != static_cast<std::uint8_t>(dtype::bfloat16))
        throw corrupt("a dtype is not float32, float16 or bfloat16");
      e.type = static_cast<dtype>(type);
      const auto master = in.get<std::uint8_t>();
      if (master > 1) throw corrupt("a master copy flag is neither 0 nor 1");
      has_master = master == 1;
      if (has_master && !kernels::is_half(e.type)) throw corrupt("a float32 key carries a multi_precision master copy");
    }
    auto read_array = [&](dtype type) {
      in.require(numel * size_of(type));  // before allocating: a corrupt size must not allocate
      std::vector<float> v(numel);
      if (type == dtype::float32) {
        in.read(v.data(), numel * sizeof(float));
      } else {
        std::vector<std::uint16_t> bits(numel);
        in.read(bits.data(), numel * sizeof(std::uint16_t));
        kernels::cpu::widen(type, numel, bits.data(), v.data());
      }
      return v;
    };
    const auto arrays = kind.value_arrays + states;
    for (std::uint64_t a = 0; a < arrays; ++a) e.arrays.push_back(read_array(a < kind.value_arrays ? e.type : dtype::float32));
    if (has_master) e.master = read_array(dtype::float32);
    entries.push_back(std::move(e));
  }
  if (in.position() != body) throw corrupt("it has bytes after its last key");
  return entries;
}

}  // namespace

namespace {
expected<checkpoint> read_file(const std::string& path, const file_kind& kind, std::string* header, bool* typed) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return bad(std::string(kind.request) + ": cannot open " + kind.noun + " \"" + path + "\": " + std::strerror(errno) + ".");
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  checkpoint c;
  try {
    c.entries = parse_file(bytes, path, kind, header, typed);
  } catch (const std::exception& e) {
    return bad(e.what());
  }
  for (const auto& e : c.entries) {
    if (c.int_keys && *c.int_keys != e.key.is_int())
      return bad(std::string(kind.request) + ": " + kind.noun + " \"" + path +
                 "\" mixes integer and string keys; expected one kind.");
    c.int_keys = e.key.is_int();
  }
  return c;
}
}  // namespace

expected<checkpoint> read_checkpoint_file(const std::string& path) {
  return read_file(path, values_file, nullptr, nullptr);
}

expected<checkpoint> read_optimizer_states_file(const std::string& path, std::string& header, bool& typed) {
  return read_file(path, states_file, &header, &typed);
}

namespace {

std::string file_bytes(const file_kind& kind, const std::string* header, const std::vector<checkpoint_entry>& entries) {
  std::string out(kind.magic, 8);
  if (header != nullptr) {
    put<std::uint64_t>(out, header->size());
    out += *header;
  }
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
    put<std::uint64_t>(out, e.arrays.size() - kind.value_arrays);
    {  // the dtype and the master copy
      put<std::uint8_t>(out, static_cast<std::uint8_t>(e.type));
      put<std::uint8_t>(out, e.master.empty() ? 0 : 1);
    }
    for (std::size_t a = 0; a < e.arrays.size(); ++a) {
      const auto& v = e.arrays[a];
      if (a < kind.value_arrays && kernels::is_half(e.type)) {  // a 16-bit value: its bits
        std::vector<std::uint16_t> bits(v.size());
        kernels::cpu::narrow(e.type, v.size(), v.data(), bits.data());
        out.append(reinterpret_cast<const char*>(bits.data()), bits.size() * sizeof(std::uint16_t));
      } else {
        out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
      }
    }
    out.append(reinterpret_cast<const char*>(e.master.data()), e.master.size() * sizeof(float));
  }
  put<std::uint64_t>(out, fnv1a(out, out.size()));
  out.append(checkpoint_end, 8);
  return out;
}

}  // namespace

namespace {
expected<void> write_file(const std::string& path, const file_kind& kind, const std::string* header,
                          const std::vector<checkpoint_entry>& entries, const char* request) {
  std::string bytes;
  try {
    bytes = file_bytes(kind, header, entries);
  } catch (const std::exception& e) {
    return error(errc::runtime_failure, e.what());
  }
  auto written = write_file_atomically(path, bytes);
  if (!written) return error(errc::runtime_failure, std::string(request) + ": " + written.error().message());
  return {};
}
}  // namespace

expected<void> write_checkpoint_file(const std::string& path, const std::vector<checkpoint_entry>& entries) {
  return write_file(path, values_file, nullptr, entries, "kvstore save");
}

expected<void> write_optimizer_states_file(const std::string& path, const std::string& header,
                                           const std::vector<checkpoint_entry>& entries) {
  return write_file(path, states_file, &header, entries, "kvstore save_optimizer_states");
}

}  // namespace strata::kvstore::internal

namespace strata::kvstore {

expected<checkpoint> read_checkpoint(const std::string& path) { return internal::read_checkpoint_file(path); }

expected<void> write_checkpoint(const std::string& path, const std::vector<checkpoint_entry>& entries) {
  return internal::write_checkpoint_file(path, entries);
}

}  // namespace strata::kvstore
