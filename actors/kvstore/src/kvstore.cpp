#include "strata/kvstore/kvstore.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include "strata/device/device_manager.hpp"
#include "strata/device_messages.hpp"
#include "strata/kernels/elementwise.hpp"
#include "strata/kernels/optimizers.hpp"
#ifdef STRATA_HAS_CUDA
#include "strata/kernels/cuda.hpp"
#endif

namespace strata::kvstore {

std::string key::to_string() const {
  if (is_int()) return std::to_string(std::get<0>(value_));
  return "\"" + std::get<1>(value_) + "\"";
}

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

error bad(std::string text) { return error(errc::invalid_argument, std::move(text)); }

/// What runs when a key's version completes: assign, a user function, SGD or Adam.
using update_rule = std::variant<std::monostate, kvstore::updater, kernels::sgd_options, kernels::adam_options>;

/// Failure text of a request's work items; the first failure is kept. Written by the work items
/// (cpu: on the store's stream; cuda: when the device layer issues them, on the actor's thread or
/// its dispatcher thread; a cuda store's user updater: on the actor's thread) and read by the
/// completion callback that follows them on the same stream, hence the lock.
class work_status {
public:
  void fail(std::string text) {
    std::lock_guard lock(mu_);
    if (failure_.empty()) failure_ = std::move(text);
  }
  bool failed() const {
    std::lock_guard lock(mu_);
    return !failure_.empty();
  }
  std::string failure() const {
    std::lock_guard lock(mu_);
    return failure_;
  }

private:
  mutable std::mutex mu_;
  std::string failure_;
};

/// Names a work item in its failure text: "kvstore <action> of key <key> failed: <why>".
struct work_label {
  const char* action;  // e.g. "push: the update"
  kvstore::key key;
};

/// Runs the body of a work item. Its exception becomes the request's failure instead of the
/// stream's sticky error, which would fail every later request of the store.
template <class F>
void run_guarded(work_status& status, const work_label& label, F&& body) noexcept {
  auto what = [&] { return std::string("kvstore ") + label.action + " of key " + label.key.to_string() + " failed"; };
  try {
    body();
  } catch (const std::exception& e) {
    status.fail(what() + ": " + e.what());
  } catch (...) {
    status.fail(what() + ".");
  }
}

float* floats(const tensor& t) { return static_cast<float*>(t.raw_data()); }

// ---- the math of a merge, per backend -----------------------------------------------------------
// One merge body (merge_work::run) serves both implementations of the work item; these say how
// each step runs.

/// On the host, inside the cpu stream's work item.
struct host_math {
  /// User updaters are host code: on cpu stores they run inside the work item.
  static constexpr bool runs_updaters = true;
  void sum(std::span<const float* const> inputs, std::size_t n, float* out) const {
    kernels::cpu::sum_arrays(inputs, n, out);
  }
  void zero(std::size_t n, float* x) const { std::memset(x, 0, n * sizeof(float)); }
  void sgd(std::size_t n, float* param, const float* grad, float* momentum, const kernels::sgd_options& o) const {
    kernels::cpu::sgd_step(n, param, grad, momentum, o);
  }
  void adam(std::size_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t step,
            const kernels::adam_options& o) const {
    kernels::cpu::adam_step(n, param, grad, exp_avg, exp_avg_sq, step, o);
  }
};

#ifdef STRATA_HAS_CUDA
kernels::cuda::cuda_context cuda_context_of(const cuda_launch_context& launch) {
  return kernels::cuda::cuda_context{.stream = static_cast<kernels::cuda::cuda_stream>(launch.stream),
                                     .blas = static_cast<kernels::cuda::cublas_handle>(launch.cublas)};
}

/// Enqueued on the cuda stream of the work item (kernels::cuda only enqueue).
struct gpu_math {
  /// The store calls user updaters itself, after the work item (kvstore_actor::run_user_updater).
  static constexpr bool runs_updaters = false;
  kernels::cuda::cuda_context ctx;
  void sum(std::span<const float* const> inputs, std::size_t n, float* out) const {
    kernels::cuda::sum_arrays(ctx, inputs, n, out);
  }
  void zero(std::size_t n, float* x) const { kernels::cuda::fill(ctx, n, 0.0f, x); }
  void sgd(std::size_t n, float* param, const float* grad, float* momentum, const kernels::sgd_options& o) const {
    kernels::cuda::sgd_step(ctx, n, param, grad, momentum, o);
  }
  void adam(std::size_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t step,
            const kernels::adam_options& o) const {
    kernels::cuda::adam_step(ctx, n, param, grad, exp_avg, exp_avg_sq, step, o);
  }
};
#endif

// ---- checkpoint format ------------------------------------------------------------------------
// "STRKV001", u64 key count, then per key: u8 kind (0 int, 1 string), the key (i64, or u64 length
// + bytes), u64 version, i64 optimizer step, u64 rank, rank x i64 dims, u64 state count, then the
// value and each state tensor as numel floats; then u64 FNV-1a of everything before, "STRKVEND".
// Native byte order (little-endian on every platform strata targets).

constexpr char checkpoint_magic[9] = "STRKV001";
constexpr char checkpoint_end[9] = "STRKVEND";

struct checkpoint_entry {
  kvstore::key key = 0;
  std::uint64_t version = 0;
  std::int64_t step = 0;
  std::vector<std::int64_t> shape;
  std::vector<std::vector<float>> arrays;  // value, then optimizer state
};

std::uint64_t fnv1a(const std::string& bytes, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(bytes[i]);
    h *= 1099511628211ull;
  }
  return h;
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

/// A checkpoint read and checked whole: its keys are of one kind (`int_keys`, empty for no keys).
struct checkpoint {
  std::vector<checkpoint_entry> entries;
  std::optional<bool> int_keys;
};

/// Reads `path` on the calling thread (a checkpoint load is a program edge) and checks all of it.
expected<checkpoint> read_checkpoint(const std::string& path) {
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

/// Writes `bytes` to `path` atomically: `path`.tmp, fsync, rename, fsync of the directory.
void write_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  auto fail = [&](const std::string& what) {
    return std::runtime_error("kvstore save: cannot " + what + " \"" + tmp + "\": " + std::strerror(errno) + ".");
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw fail("create");
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      throw fail("write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    throw fail("fsync");
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw fail("rename");
  auto slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);  // makes the rename durable; a failure here leaves a valid file either way
    ::close(dfd);
  }
}

/// Writes a checkpoint of `entries` (in key order, as a store holds them) to `path`, atomically.
expected<void> write_checkpoint(const std::string& path, const std::vector<checkpoint_entry>& entries) {
  try {
    write_atomically(path, checkpoint_bytes(entries));
  } catch (const std::exception& e) {
    return error(errc::runtime_failure, e.what());
  }
  return {};
}

// ---- validation, shared by the store and the sharded store's router ---------------------------
// Every request is checked whole before anything changes, so a failed request leaves the store
// as it was.

/// Where a store keeps its values, for tensor checks and their error texts.
struct store_place {
  device_kind kind = device_kind::cpu;
  std::string name;
};

/// Stored shape of a key, or null when the key is not initialised.
using shape_lookup = std::function<const std::vector<std::int64_t>*(const kvstore::key&)>;

expected<void> check_kind(const char* op, const kvstore::key& key, std::optional<bool> int_keys) {
  if (!int_keys || *int_keys == key.is_int()) return {};
  return bad(std::string("kvstore ") + op + ": key " + key.to_string() + " is " +
             (key.is_int() ? "an integer" : "a string") + " but this store holds " +
             (*int_keys ? "integer" : "string") + " keys; one store cannot mix key kinds.");
}

expected<void> check_tensor(const char* op, const char* role, const kvstore::key& key, const tensor& t,
                            const std::vector<std::int64_t>* shape, const store_place& place) {
  std::string where = std::string("kvstore ") + op + ": the " + role + " for key " + key.to_string();
  if (!t.valid()) return bad(where + " is an empty tensor; expected a float32 tensor.");
  if (t.dtype() != dtype::float32)
    return bad(where + " has dtype " + std::string(to_string(t.dtype())) + ", expected float32.");
  if (shape && t.shape() != *shape)
    return bad(where + " has shape " + shape_text(t.shape()) + ", expected " + shape_text(*shape) +
               " (the stored shape).");
  if (t.storage().kind() != place.kind)
    return bad(where + " is on " + t.get_device().name() + ", which a store on " + place.name +
               " cannot read; expected a " + std::string(to_string(place.kind)) + " tensor.");
  return {};
}

expected<void> check_pairs(const char* op, const char* role, std::size_t keys, std::size_t values) {
  if (keys == values && keys > 0) return {};
  if (keys == 0) return bad(std::string("kvstore ") + op + ": no keys given; expected at least one.");
  return bad(std::string("kvstore ") + op + ": " + std::to_string(keys) + " keys and " + std::to_string(values) +
             " " + role + "s; expected one " + role + " per key.");
}

/// Keys and tensors against existing keys: kind, presence, dtype, shape, device.
expected<void> check_existing(const char* op, const char* role, const std::vector<kvstore::key>& keys,
                              const std::vector<tensor>& tensors, std::optional<bool> int_keys,
                              const shape_lookup& shape_of, const store_place& place) {
  if (auto r = check_pairs(op, role, keys.size(), tensors.size()); !r) return r;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (auto r = check_kind(op, keys[i], int_keys); !r) return r;
    const auto* shape = shape_of(keys[i]);
    if (!shape)
      return bad(std::string("kvstore ") + op + ": key " + keys[i].to_string() + " is not initialised; call init first.");
    if (auto r = check_tensor(op, role, keys[i], tensors[i], shape, place); !r) return r;
  }
  return {};
}

/// An init: new, distinct keys of the store's kind, float32 values. `int_keys` becomes the kind
/// the store holds afterwards.
expected<void> check_init(const kvstore::init& m, std::optional<bool>& int_keys, const shape_lookup& shape_of,
                          const store_place& place) {
  if (auto r = check_pairs("init", "value", m.keys.size(), m.values.size()); !r) return r;
  std::optional<bool> kind = int_keys;
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    const auto& key = m.keys[i];
    if (auto r = check_kind("init", key, kind); !r) return r;
    kind = key.is_int();
    if (shape_of(key)) return bad("kvstore init: key " + key.to_string() + " already exists.");
    for (std::size_t j = 0; j < i; ++j)
      if (m.keys[j] == key) return bad("kvstore init: key " + key.to_string() + " is given twice.");
    if (auto r = check_tensor("init", "value", key, m.values[i], nullptr, place); !r) return r;
  }
  int_keys = kind;
  return {};
}

template <class F>
expected<void> guarded(const char* op, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return error(errc::runtime_failure, std::string("kvstore ") + op + ": " + e.what());
  }
}

// ---- what a store reads and writes --------------------------------------------------------------

/// A value or an output as a store uses it: elements [offset, offset + n) of `t`, n being the
/// key's element count. Callers' messages give whole tensors (offset 0); a sharded store's router
/// gives slices of the caller's tensors, so splitting a key into chunks copies no bytes.
struct slice_ref {
  tensor t;
  std::size_t offset = 0;
};

std::vector<slice_ref> whole(const std::vector<tensor>& ts) {
  std::vector<slice_ref> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(slice_ref{t, 0});
  return out;
}

/// One merge: sums the values (after `accumulated`, when valid) into `merged` from element
/// `merged_offset`, unless `in_place` (the one value is the sum), then, when `complete`, applies
/// the update rule to `stored`. The body of both implementations of the merge work item.
struct merge_work {
  kvstore::key key;  // the caller's key: failure texts and user updaters
  std::vector<slice_ref> values;
  tensor accumulated;  // earlier values of this version, or empty
  tensor merged;
  std::size_t merged_offset = 0;
  bool in_place = false;
  bool complete = false;
  tensor stored;
  update_rule rule;
  std::vector<tensor> opt_state;  // sgd: momentum; adam: exp_avg, exp_avg_sq
  bool fresh_state = false;       // opt_state was just created: zeroed first
  std::int64_t step = 0;
  std::size_t n = 0;

  template <class Math>
  void run(const Math& math) {
    float* sum = floats(merged) + merged_offset;
    if (!in_place) {
      std::vector<const float*> inputs;
      if (accumulated.valid()) inputs.push_back(floats(accumulated));
      for (const auto& v : values) inputs.push_back(floats(v.t) + v.offset);
      math.sum(inputs, n, sum);
    }
    if (!complete) return;
    for (auto& t : opt_state)
      if (fresh_state) math.zero(n, floats(t));
    std::visit(
        [&](const auto& r) {
          using rule_type = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<rule_type, std::monostate>) {
            // assign: the sum was written into the stored value
          } else if constexpr (std::is_same_v<rule_type, kvstore::updater>) {
            if constexpr (Math::runs_updaters) r(key, merged, stored);
          } else if constexpr (std::is_same_v<rule_type, kernels::sgd_options>) {
            math.sgd(n, floats(stored), sum, opt_state.empty() ? nullptr : floats(opt_state[0]), r);
          } else {
            math.adam(n, floats(stored), sum, floats(opt_state[0]), floats(opt_state[1]), step, r);
          }
        },
        rule);
  }
};

// Messages from a sharded store's router to its shards (keys are the router's chunk numbers).
// Replies: unit once the work is done.

/// New chunk keys: `values[i]` holds `lengths[i]` elements of `labels[i]`, the caller's key
/// (named in error texts and passed to user updaters).
struct shard_init {
  std::vector<kvstore::key> keys;
  std::vector<slice_ref> values;
  std::vector<std::int64_t> lengths;
  std::vector<kvstore::key> labels;
};
/// A push, a pull or both (a pushpull), for the caller `origin` (its actor id, for ordering).
struct shard_request {
  std::vector<kvstore::key> push_keys;
  std::vector<slice_ref> values;
  std::vector<kvstore::key> pull_keys;
  std::vector<slice_ref> outs;
  std::uint64_t min_version = 0;
  int priority = 0;
  std::uint64_t origin = 0;
};

/// A snapshot of every chunk key (value, version, optimizer state), taken after the work queued
/// before it (a barrier). Reply: `std::vector<checkpoint_entry>`.
struct shard_save {};
/// What a store loads as `key` (the caller's key `label`): elements [offset, offset + numel(shape))
/// of each array of entry `entry` of a checkpoint.
struct checkpoint_piece {
  kvstore::key key = 0;
  kvstore::key label = 0;
  std::size_t entry = 0;
  std::size_t offset = 0;
  std::vector<std::int64_t> shape;
};
/// Stages a shard's part of a checkpoint (a barrier); its keys change only with `shard_commit`.
struct shard_load {
  std::shared_ptr<const std::vector<checkpoint_entry>> file;
  std::vector<checkpoint_piece> pieces;
};
/// Swaps the staged keys in (`keep`) or drops them. No reply.
struct shard_commit {
  bool keep = false;
};

/// A store's snapshot for a `kvstore::save`, posted from the stream's completion thread so that
/// the file is written on the actor's thread.
struct checkpoint_taken {
  std::string path;
  expected<std::vector<checkpoint_entry>> entries;
  response_promise<unit_t> promise;
};

/// A store's stream finished the work of one request (posted by `send_on_complete`).
struct request_done {};

class kvstore_actor final : public actor {
public:
  explicit kvstore_actor(kvstore::options options) : options_(std::move(options)) {
    if (options_.kind == kvstore::kind::local) {
      owned_devices_ = std::make_unique<device_manager>(device_options{.cpu_threads_per_device = 1});
      device_ = owned_devices_->create("cpu:1").at(0);
    } else {
      device_ = options_.merge_device;
    }
    stream_ = device_.create_stream();
    place_ = store_place{device_.kind(), device_.name()};
  }

  behavior make_behavior() override {
    return {
        [this](kvstore::init& m) -> expected<unit_t> {
          auto p = make_response_promise<unit_t>();
          auto keys = m.keys;  // before the capture below moves m
          admit(0, true, std::move(keys), [this, m = std::move(m), p](const error* stopped) mutable {
            if (stopped) return p.deliver(*stopped);
            fail_on_error(p, guarded("init", [&] { return on_init(m, p); }));
          });
          return unit;
        },
        [this](kvstore::push& m) -> expected<unit_t> {
          auto p = make_response_promise<unit_t>();
          const int priority = m.priority;
          auto keys = m.keys;  // before the capture below moves m
          admit(priority, false, std::move(keys), [this, m = std::move(m), p](const error* stopped) mutable {
            if (stopped) return p.deliver(*stopped);
            fail_on_error(p, guarded("push", [&] { return on_push(m, p); }));
          });
          return unit;
        },
        [this](kvstore::pull& m) -> expected<std::vector<tensor>> {
          auto p = make_response_promise<std::vector<tensor>>();
          const int priority = m.priority;
          auto keys = m.keys;  // before the capture below moves m
          admit(priority, false, std::move(keys), [this, m = std::move(m), p](const error* stopped) mutable {
            if (stopped) return p.deliver(*stopped);
            fail_on_error(p, guarded("pull", [&] { return on_pull(m, p); }));
          });
          return std::vector<tensor>{};
        },
        [this](kvstore::pushpull& m) -> expected<std::vector<tensor>> {
          auto p = make_response_promise<std::vector<tensor>>();
          auto keys = m.push.keys;
          keys.insert(keys.end(), m.pull.keys.begin(), m.pull.keys.end());
          const int priority = m.priority;
          admit(priority, false, std::move(keys), [this, m = std::move(m), p](const error* stopped) mutable {
            if (stopped) return p.deliver(*stopped);
            fail_on_error(p, guarded("pushpull", [&] { return on_pushpull(m, p); }));
          });
          return std::vector<tensor>{};
        },
        [this](kvstore::set_updater& m) {
          return barrier<unit_t>([this, m = std::move(m)](response_promise<unit_t>& p) mutable {
            if (m.updater) rule_ = std::move(m.updater);
            else rule_ = std::monostate{};
            p.deliver(unit);
          });
        },
        [this](kvstore::set_optimizer& m) {
          return barrier<unit_t>([this, m = std::move(m)](response_promise<unit_t>& p) {
            std::visit([this](const auto& o) { rule_ = o; }, m.options);
            for (auto& [key, state] : keys_) state.optimizer_state.clear();  // a new optimizer starts fresh
            p.deliver(unit);
          });
        },
        [this](kvstore::save& m) {
          return barrier<unit_t>([this, path = m.path](response_promise<unit_t>& p) {
            snapshot(p, [sys = &system(), me = self(), path, p](expected<std::vector<checkpoint_entry>> taken) mutable {
              (void)sys->send(me, checkpoint_taken{path, std::move(taken), p});
            });
          });
        },
        [](checkpoint_taken& m) {
          auto written = m.entries ? write_checkpoint(m.path, *m.entries) : expected<void>(m.entries.error());
          written ? m.promise.deliver(unit) : m.promise.deliver(written.error());
        },
        [this](kvstore::load& m) {
          return barrier<unit_t>([this, path = m.path](response_promise<unit_t>& p) {
            auto file = read_checkpoint(path);
            if (!file) return p.deliver(file.error());
            std::vector<checkpoint_piece> pieces;
            for (std::size_t i = 0; i < file->entries.size(); ++i)
              pieces.push_back({file->entries[i].key, file->entries[i].key, i, 0, file->entries[i].shape});
            stage(p, file->entries, pieces, [this, kind = file->int_keys](auto& staged) {
              keys_ = std::move(staged);
              int_keys_ = kind;
              reconcile_parked();
            });
          });
        },
        [this](kvstore::version& m) -> expected<std::uint64_t> {
          auto p = make_response_promise<std::uint64_t>();
          admit(0, false, {m.key}, [this, key = m.key, p](const error* stopped) mutable {
            if (stopped) return p.deliver(*stopped);
            auto it = keys_.find(key);
            if (it == keys_.end()) return p.deliver(bad("kvstore version: key " + key.to_string() + " is not initialised."));
            p.deliver(it->second.version);
          });
          return std::uint64_t{0};
        },
        // From a sharded store's router.
        [this](shard_init& m) -> expected<unit_t> {
          auto p = make_response_promise<unit_t>();
          auto keys = m.keys;  // before the capture below moves m
          admit(0, true, std::move(keys), [this, m = std::move(m), p](const error* stopped) mutable {
            if (stopped) return p.deliver(*stopped);
            fail_on_error(p, guarded("init", [&] {
                            auto status = std::make_shared<work_status>();
                            for (std::size_t i = 0; i < m.keys.size(); ++i)
                              add_key(m.keys[i], m.labels[i], {m.lengths[i]}, m.values[i], status);
                            int_keys_ = true;
                            reply_when_done(p, status);
                            return expected<void>{};
                          }));
          });
          return unit;
        },
        [this](shard_request& m) -> expected<unit_t> {
          auto p = make_response_promise<unit_t>();
          auto keys = m.push_keys;
          keys.insert(keys.end(), m.pull_keys.begin(), m.pull_keys.end());
          const int priority = m.priority;
          const std::uint64_t origin = m.origin;
          admit_from(origin, priority, false, std::move(keys), [this, m = std::move(m), p](const error* stopped) mutable {
            if (stopped) return p.deliver(*stopped);
            fail_on_error(p, guarded(m.push_keys.empty() ? "pull" : (m.pull_keys.empty() ? "push" : "pushpull"),
                                     [&] { return on_shard_request(m, p); }));
          });
          return unit;
        },
        [this](shard_save&) {
          return barrier<std::vector<checkpoint_entry>>([this](response_promise<std::vector<checkpoint_entry>>& p) {
            snapshot(p, [p](expected<std::vector<checkpoint_entry>> taken) mutable {
              taken ? p.deliver(std::move(*taken)) : p.deliver(taken.error());
            });
          });
        },
        [this](shard_load& m) {
          return barrier<unit_t>([this, m = std::move(m)](response_promise<unit_t>& p) {
            stage(p, *m.file, m.pieces, [this](auto& staged) { staged_ = std::move(staged); });
          });
        },
        [this](const shard_commit& m) {
          if (m.keep && staged_) {
            keys_ = std::move(*staged_);
            int_keys_ = true;
            reconcile_parked();
          }
          staged_.reset();
        },
        [this](const request_done&) { finished_one(); },
        [this](const device_failure&) { finished_one(); },  // the replies carry the failure
    };
  }

  void on_exit(const error&) override {
    // Parked pulls and queued requests can never be answered now.
    const error parked(errc::stopped, "kvstore pull: the store stopped before the requested version existed.");
    for (auto& p : parked_) p.serve(&parked);
    parked_.clear();
    const error queued(errc::stopped, "kvstore: the store stopped before it served this request.");
    for (auto& q : queue_) q.run(&queued);
    queue_.clear();
  }

private:
  struct key_state {
    tensor value;
    tensor accumulator;                 // merge target (sums of several values, sync rounds)
    std::size_t received = 0;           // values accumulated towards the next version (sync mode)
    std::uint64_t version = 0;          // updates applied
    std::vector<tensor> optimizer_state;  // sgd: momentum; adam: exp_avg, exp_avg_sq
    std::int64_t step = 0;
    kvstore::key label = 0;              // the caller's key (a shard's chunk keys differ from it)
  };
  /// Runs a request (null) or fails it because the store stops (the reason).
  using request_run = std::function<void(const error* stopped)>;
  struct pending {
    int priority = 0;
    std::uint64_t seq = 0;     // arrival order
    std::uint64_t sender = 0;  // actor id of the caller (0: anonymous)
    bool barrier = false;      // nothing overtakes it and it overtakes nothing
    std::vector<kvstore::key> keys;  // sorted, unique
    request_run run;
  };
  struct parked_pull {
    std::vector<kvstore::key> keys;
    std::uint64_t min_version = 0;
    request_run serve;
  };

  template <class R>
  static void fail_on_error(response_promise<R>& p, const expected<void>& r) {
    if (!r) p.deliver(r.error());
  }

  shape_lookup shape_of() const {
    return [this](const kvstore::key& key) -> const std::vector<std::int64_t>* {
      auto it = keys_.find(key);
      return it == keys_.end() ? nullptr : &it->second.value.shape();
    };
  }

  // ---- the ready queue ---------------------------------------------------------------------

  /// Queues a barrier (nothing overtakes it, it overtakes nothing); `body(p)` runs when served.
  template <class R, class F>
  expected<R> barrier(F body) {
    auto p = make_response_promise<R>();
    admit(0, true, {}, [p, body = std::move(body)](const error* stopped) mutable {
      if (stopped) return p.deliver(*stopped);
      body(p);
    });
    return R{};
  }

  void admit(int priority, bool barrier, std::vector<kvstore::key> keys, request_run run) {
    admit_from(current_sender().id(), priority, barrier, std::move(keys), std::move(run));
  }
  void admit_from(std::uint64_t sender, int priority, bool barrier, std::vector<kvstore::key> keys, request_run run) {
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    queue_.push_back(pending{priority, next_seq_++, sender, barrier, std::move(keys), std::move(run)});
    pump();
  }

  static bool share_a_key(const std::vector<kvstore::key>& a, const std::vector<kvstore::key>& b) {
    auto i = a.begin();
    auto j = b.begin();
    while (i != a.end() && j != b.end()) {
      if (*i < *j) ++i;
      else if (*j < *i) ++j;
      else return true;
    }
    return false;
  }
  /// True when `later` may not be served before `earlier` (both queued, `earlier` first).
  static bool must_follow(const pending& earlier, const pending& later) {
    if (earlier.barrier || later.barrier) return true;
    return earlier.sender == later.sender && share_a_key(earlier.keys, later.keys);
  }

  /// The request to serve next: the highest priority (earliest among equals); if an earlier
  /// request must come before it, that one instead (it inherits the priority), recursively.
  std::size_t next_index() const {
    std::size_t best = 0;
    for (std::size_t i = 1; i < queue_.size(); ++i)
      if (queue_[i].priority > queue_[best].priority) best = i;
    for (;;) {
      std::size_t blocker = best;
      for (std::size_t j = 0; j < best; ++j)
        if (must_follow(queue_[j], queue_[best])) {
          blocker = j;
          break;
        }
      if (blocker == best) return best;
      best = blocker;
    }
  }

  /// Hands requests to the stream while fewer than `max_in_flight` are running there.
  void pump() {
    while (in_flight_ < options_.max_in_flight && !queue_.empty()) {
      const std::size_t i = next_index();
      pending next = std::move(queue_[i]);
      queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
      ++in_flight_;
      next.run(nullptr);
      send_on_complete(stream_, self(), request_done{});
    }
  }
  void finished_one() {
    --in_flight_;
    pump();
  }

  // ---- handlers (run when the ready queue serves the request) -------------------------------

  expected<void> on_init(kvstore::init& m, response_promise<unit_t>& p) {
    std::optional<bool> kind = int_keys_;
    if (auto r = check_init(m, kind, shape_of(), place_); !r) return r;
    int_keys_ = kind;
    auto status = std::make_shared<work_status>();
    for (std::size_t i = 0; i < m.keys.size(); ++i)
      add_key(m.keys[i], m.keys[i], m.values[i].shape(), slice_ref{m.values[i], 0}, status);
    reply_when_done(p, status);
    return {};
  }

  void add_key(const kvstore::key& key, const kvstore::key& label, std::vector<std::int64_t> shape,
               const slice_ref& from, const std::shared_ptr<work_status>& status) {
    key_state state;
    state.label = label;
    state.value = tensor::empty(std::move(shape), dtype::float32, device_, stream_);
    stream_.wait(from.t.ready_event());
    copy_elements(state.value, 0, from.t, from.offset, static_cast<std::size_t>(state.value.numel()), status,
                  {"init: the copy", label});
    keys_.emplace(key, std::move(state));
  }

  expected<void> on_push(kvstore::push& m, response_promise<unit_t>& p) {
    if (auto r = check_existing("push", "value", m.keys, m.values, int_keys_, shape_of(), place_); !r) return r;
    auto status = std::make_shared<work_status>();
    enqueue_push(m.keys, whole(m.values), status);
    reply_when_done(p, status);
    serve_parked();
    return {};
  }

  expected<void> on_pull(kvstore::pull& m, response_promise<std::vector<tensor>>& p) {
    if (auto r = check_existing("pull", "output", m.keys, m.outs, int_keys_, shape_of(), place_); !r) return r;
    auto serve = [this, keys = m.keys, outs = m.outs, p](const error* stopped) mutable {
      if (stopped) return p.deliver(*stopped);
      auto status = std::make_shared<work_status>();
      event done = enqueue_pull(keys, whole(outs), status);
      for (auto& out : outs) out.set_ready_event(done);
      reply_when_done(p, std::move(outs), status);
    };
    if (!version_reached(m.keys, m.min_version)) parked_.push_back(parked_pull{m.keys, m.min_version, std::move(serve)});
    else serve(nullptr);
    return {};
  }

  expected<void> on_pushpull(kvstore::pushpull& m, response_promise<std::vector<tensor>>& p) {
    if (auto r = check_existing("pushpull", "value", m.push.keys, m.push.values, int_keys_, shape_of(), place_); !r)
      return r;
    if (auto r = check_existing("pushpull", "output", m.pull.keys, m.pull.outs, int_keys_, shape_of(), place_); !r)
      return r;
    auto status = std::make_shared<work_status>();
    enqueue_push(m.push.keys, whole(m.push.values), status);
    event done = enqueue_pull(m.pull.keys, whole(m.pull.outs), status);
    for (auto& out : m.pull.outs) out.set_ready_event(done);
    reply_when_done(p, std::move(m.pull.outs), status);
    serve_parked();
    return {};
  }

  /// The router checked the request against the caller's keys; chunk keys exist by construction.
  expected<void> on_shard_request(shard_request& m, response_promise<unit_t>& p) {
    for (const auto& key : m.push_keys) (void)keys_.at(key);
    for (const auto& key : m.pull_keys) (void)keys_.at(key);
    auto status = std::make_shared<work_status>();
    if (!m.push_keys.empty()) enqueue_push(m.push_keys, m.values, status);
    if (!m.pull_keys.empty()) {
      auto serve = [this, keys = m.pull_keys, outs = m.outs, p, status](const error* stopped) mutable {
        if (stopped) return p.deliver(*stopped);
        (void)enqueue_pull(keys, outs, status);
        reply_when_done(p, status);
      };
      if (m.push_keys.empty() && !version_reached(m.pull_keys, m.min_version))
        parked_.push_back(parked_pull{m.pull_keys, m.min_version, std::move(serve)});
      else serve(nullptr);
    } else {
      reply_when_done(p, status);
    }
    if (!m.push_keys.empty()) serve_parked();
    return {};
  }

  // ---- checkpoints -------------------------------------------------------------------------

  /// Copies every key's value and optimizer state to the host after the work queued before (a
  /// cuda store: device-to-host copies on its stream), then calls `done` with them, or with the
  /// stream's error, on the stream's completion thread: `done` must be quick. The keys are this
  /// store's (a shard's chunk keys). A save that cannot start fails `p`.
  template <class R>
  void snapshot(response_promise<R>& p, std::function<void(expected<std::vector<checkpoint_entry>>)> done) {
    fail_on_error(p, guarded("save", [&]() -> expected<void> {
      if (device_.kind() == device_kind::sim)
        return bad("kvstore save: the store is on " + device_.name() +
                   ", whose tensors hold no data; expected a cpu or cuda store.");
      auto entries = std::make_shared<std::vector<checkpoint_entry>>();
      for (const auto& [key, state] : keys_) {
        auto& e = entries->emplace_back(checkpoint_entry{key, state.version, state.step, state.value.shape(), {}});
        std::vector<tensor> arrays{state.value};
        arrays.insert(arrays.end(), state.optimizer_state.begin(), state.optimizer_state.end());
        for (const auto& t : arrays) {  // the copies write into buffers that stay put when vectors move
          e.arrays.emplace_back(static_cast<std::size_t>(t.numel()));
          (void)t.copy_to_host(e.arrays.back().data(), stream_);
        }
      }
      stream_.on_complete([entries, done = std::move(done)](std::exception_ptr e) {
        if (e) done(error(errc::runtime_failure, "kvstore save: device work failed: " + stream_failure(e)));
        else done(std::move(*entries));
      });
      return {};
    }));
  }

  /// Makes tensors of this store for `pieces` of a checkpoint (copies on its stream, so ordered
  /// before any later work), hands them to `keep`, and answers `p` once the copies are done.
  void stage(response_promise<unit_t>& p, const std::vector<checkpoint_entry>& file,
             const std::vector<checkpoint_piece>& pieces,
             const std::function<void(std::map<kvstore::key, key_state>&)>& keep) {
    fail_on_error(p, guarded("load", [&] {
      std::map<kvstore::key, key_state> staged;
      for (const auto& piece : pieces) {
        const checkpoint_entry& e = file[piece.entry];
        key_state state{.version = e.version, .step = e.step, .label = piece.label};
        std::size_t n = 1;
        for (auto d : piece.shape) n *= static_cast<std::size_t>(d);
        for (const auto& a : e.arrays) {
          auto values = std::span<const float>(a).subspan(piece.offset, n);
          auto t = tensor::from_host<float>(values, piece.shape, device_, stream_);
          if (!state.value.valid()) state.value = std::move(t);
          else state.optimizer_state.push_back(std::move(t));
        }
        staged.emplace(piece.key, std::move(state));
      }
      keep(staged);
      reply_when_done(p, nullptr);
      return expected<void>{};
    }));
  }

  // ---- device work -------------------------------------------------------------------------

  /// Copies `n` floats from `src` (from element `src_offset`) to `dst` (from `dst_offset`) on the
  /// store's stream: a plain stream copy for whole tensors (on cuda also between GPUs), a work item
  /// for slices. A failure of the cuda work item goes to `status`, named by `label`.
  void copy_elements(const tensor& dst, std::size_t dst_offset, const tensor& src, std::size_t src_offset,
                     std::size_t n, [[maybe_unused]] const std::shared_ptr<work_status>& status,
                     [[maybe_unused]] const work_label& label) {  // used by the cuda item only
    if (dst_offset == 0 && src_offset == 0 && dst.bytes() == n * sizeof(float) && src.bytes() == n * sizeof(float)) {
      stream_.copy(dst.storage(), src.storage(), n * sizeof(float));
      return;
    }
    keep_until_done(dst);
    keep_until_done(src);
    kernel_work item{.name = "kvstore_copy_slice",
                     .kind = work_kind::copy,
                     .bytes = 2.0 * sizeof(float) * static_cast<double>(n),
                     .cpu = [dst, dst_offset, src, src_offset, n] {
                       if (n > 0) std::memcpy(floats(dst) + dst_offset, floats(src) + src_offset, n * sizeof(float));
                     }};
#ifdef STRATA_HAS_CUDA
    item.cuda = [dst, dst_offset, src, src_offset, n, status, label](const cuda_launch_context& launch) {
      run_guarded(*status, label, [&] {
        kernels::cuda::copy(cuda_context_of(launch), n, floats(src) + src_offset, floats(dst) + dst_offset);
      });
    };
#endif
    stream_.launch(std::move(item));
  }

  /// cuda stores: work items only enqueue, so the tensors they capture may be dropped before the
  /// GPU reads them; a tensor the store did not allocate on its own stream is freed only after
  /// the store's stream has passed this point. cpu and sim items hold their tensors while they run.
  void keep_until_done(const tensor& t) const {
    if (device_.kind() == device_kind::cuda) t.storage().record_stream(stream_);
  }

  /// A pushed value as the merge reads it. On a cuda store a value on another GPU is first copied
  /// into a staging tensor on the merge device (freed in stream order after the merge); the others
  /// are read where they are.
  slice_ref readable(const slice_ref& v, const key_state& state, const std::shared_ptr<work_status>& status) {
    if (device_.kind() != device_kind::cuda) return v;
    if (v.t.get_device().properties().gpu_ordinal == device_.properties().gpu_ordinal) {
      keep_until_done(v.t);
      return v;
    }
    const auto n = static_cast<std::size_t>(state.value.numel());
    const bool whole_value = v.offset == 0 && static_cast<std::size_t>(v.t.numel()) == n;
    tensor staging = tensor::empty(whole_value ? v.t.shape() : std::vector<std::int64_t>{state.value.numel()},
                                   dtype::float32, device_, stream_);
    copy_elements(staging, 0, v.t, v.offset, n, status, {"push: the copy of a value", state.label});
    return slice_ref{staging, 0};
  }

  /// Groups the values by key (first-appearance order) and merges each group.
  void enqueue_push(const std::vector<kvstore::key>& keys, const std::vector<slice_ref>& values,
                    const std::shared_ptr<work_status>& status) {
    std::vector<std::pair<kvstore::key, std::vector<slice_ref>>> groups;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == keys[i]; });
      if (it == groups.end()) groups.emplace_back(keys[i], std::vector<slice_ref>{values[i]});
      else it->second.push_back(values[i]);
    }
    for (auto& [key, group] : groups) {
      key_state& state = keys_.at(key);
      for (const auto& v : group) stream_.wait(v.t.ready_event());
      for (auto& v : group) v = readable(v, state, status);
      const std::size_t need = options_.contributions_per_version;
      if (need == 0) {  // asynchronous: this call's values make one update
        merge(state, group, false, true, status);
        continue;
      }
      std::size_t next = 0;
      while (next < group.size()) {  // synchronous: fill the current version, maybe the next ones
        std::size_t take = std::min(need - state.received, group.size() - next);
        std::vector<slice_ref> part(group.begin() + static_cast<std::ptrdiff_t>(next),
                                    group.begin() + static_cast<std::ptrdiff_t>(next + take));
        bool first = state.received == 0;
        state.received += take;
        bool complete = state.received == need;
        merge(state, part, !first, complete, status);
        if (complete) state.received = 0;
        next += take;
      }
    }
  }

  tensor& accumulator_of(key_state& state) {
    if (!state.accumulator.valid())
      state.accumulator = tensor::empty(state.value.shape(), dtype::float32, device_, stream_);
    return state.accumulator;
  }

  /// Sums `values` (plus the accumulator when `with_accumulator`) and, when `complete`, applies
  /// the update rule and counts a version.
  void merge(key_state& state, const std::vector<slice_ref>& values, bool with_accumulator, bool complete,
             const std::shared_ptr<work_status>& status) {
    const auto n = static_cast<std::size_t>(state.value.numel());
    update_rule rule = complete ? rule_ : update_rule{};
    const bool assign = complete && std::holds_alternative<std::monostate>(rule);
    const bool user = std::holds_alternative<kvstore::updater>(rule);
    // Where the sum goes. Assign (the default rule) sums straight into the stored value: k reads
    // and one write, nothing more. One value read in place when no sum is needed (a user updater
    // gets it as a tensor, so only a whole one). Otherwise the key's accumulator.
    tensor merged;
    std::size_t merged_offset = 0;
    bool in_place = false;
    if (assign) {
      merged = state.value;
    } else if (!with_accumulator && values.size() == 1 && complete &&
               (!user || (values[0].offset == 0 && static_cast<std::size_t>(values[0].t.numel()) == n))) {
      merged = values[0].t;
      merged_offset = values[0].offset;
      in_place = true;
    } else {
      merged = accumulator_of(state);
    }
    merge_work work{.key = state.label,
                    .values = values,
                    .accumulated = with_accumulator ? accumulator_of(state) : tensor{},
                    .merged = merged,
                    .merged_offset = merged_offset,
                    .in_place = in_place,
                    .complete = complete,
                    .stored = state.value,
                    .rule = rule,
                    .n = n};
    if (complete) {
      if (std::holds_alternative<kernels::sgd_options>(rule) &&
          std::get<kernels::sgd_options>(rule).momentum != 0.0 && state.optimizer_state.empty()) {
        state.optimizer_state = {tensor::empty(state.value.shape(), dtype::float32, device_, stream_)};
        work.fresh_state = true;
      }
      if (std::holds_alternative<kernels::adam_options>(rule) && state.optimizer_state.size() != 2) {
        state.optimizer_state = {tensor::empty(state.value.shape(), dtype::float32, device_, stream_),
                                 tensor::empty(state.value.shape(), dtype::float32, device_, stream_)};
        state.step = 0;
        work.fresh_state = true;
      }
      if (std::holds_alternative<kernels::adam_options>(rule)) work.step = ++state.step;
      work.opt_state = state.optimizer_state;
      ++state.version;
    }
    const double k = static_cast<double>(values.size() + (with_accumulator ? 1 : 0));
    const work_label label{"push: the update", state.label};
    kernel_work item{
        .name = complete ? "kvstore_update" : "kvstore_accumulate",
        .kind = work_kind::pointwise,
        .flops = (k + 4.0) * static_cast<double>(n),
        .bytes = (assign ? k + 1.0 : k + 4.0) * 4.0 * static_cast<double>(n),
        .cpu =
            [work, label, status]() mutable {
              if (status->failed()) return;  // an earlier part of this request failed
              run_guarded(*status, label, [&] { work.run(host_math{}); });
            },
    };
#ifdef STRATA_HAS_CUDA
    item.cuda = [work, label, status](const cuda_launch_context& launch) mutable {
      if (status->failed()) return;
      run_guarded(*status, label, [&] { work.run(gpu_math{cuda_context_of(launch)}); });
    };
#endif
    stream_.launch(std::move(item));
    if (user && complete && device_.kind() == device_kind::cuda) run_user_updater(work, *status);
  }

  /// cuda stores: a user updater is host code that must launch its own device work, so the store
  /// calls it here, on the actor's thread, right after enqueueing the sum, with `merged` and
  /// `stored` carrying the sum's event as their ready event. The updater may set `stored`'s ready
  /// event to the end of its own work; the store's stream waits for it before anything later.
  void run_user_updater(merge_work& work, work_status& status) {
    event summed = stream_.record();
    tensor merged = work.merged;
    tensor stored = work.stored;
    merged.set_ready_event(summed);
    stored.set_ready_event(summed);
    if (!status.failed())
      run_guarded(status, {"push: the update", work.key},
                  [&] { std::get<kvstore::updater>(work.rule)(work.key, merged, stored); });
    stream_.wait(stored.ready_event());
  }

  /// Copies each key's value into its output; returns the event that marks the copies done.
  event enqueue_pull(const std::vector<kvstore::key>& keys, const std::vector<slice_ref>& outs,
                     const std::shared_ptr<work_status>& status) {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      stream_.wait(outs[i].t.ready_event());  // whatever the caller queued on the output comes first
      const key_state& state = keys_.at(keys[i]);
      copy_elements(outs[i].t, outs[i].offset, state.value, 0, static_cast<std::size_t>(state.value.numel()), status,
                    {"pull: the copy", state.label});
    }
    return stream_.record();
  }

  bool version_reached(const std::vector<kvstore::key>& keys, std::uint64_t min_version) const {
    if (min_version == 0) return true;
    for (const auto& key : keys)
      if (keys_.at(key).version < min_version) return false;
    return true;
  }

  /// After a load replaced the keys: a parked pull of a key the checkpoint lacks fails, the others
  /// are served once the loaded versions reach theirs.
  void reconcile_parked() {
    static const error gone(errc::invalid_argument,
                            "kvstore pull: a load replaced the store's keys and a pulled key is no longer there.");
    std::erase_if(parked_, [this](parked_pull& p) {
      const bool lost = std::any_of(p.keys.begin(), p.keys.end(), [this](const kvstore::key& k) { return !keys_.contains(k); });
      if (lost) p.serve(&gone);
      return lost;
    });
    serve_parked();
  }

  /// Answers parked pulls whose version now exists (their copies follow the updates on the stream).
  void serve_parked() {
    for (std::size_t i = 0; i < parked_.size();) {
      if (!version_reached(parked_[i].keys, parked_[i].min_version)) {
        ++i;
        continue;
      }
      parked_pull p = std::move(parked_[i]);
      parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(i));
      p.serve(nullptr);
    }
  }

  static std::string stream_failure(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      return ex.what();
    } catch (...) {
      return "device work failed";
    }
  }

  void reply_when_done(response_promise<unit_t> promise, std::shared_ptr<work_status> status) {
    stream_.on_complete([promise, status](std::exception_ptr e) mutable {
      if (e) promise.deliver(error(errc::runtime_failure, "kvstore: device work failed: " + stream_failure(e)));
      else if (status && status->failed()) promise.deliver(error(errc::runtime_failure, status->failure()));
      else promise.deliver(unit);
    });
  }
  void reply_when_done(response_promise<std::vector<tensor>> promise, std::vector<tensor> outs,
                       std::shared_ptr<work_status> status = nullptr) {
    stream_.on_complete([promise, outs = std::move(outs), status](std::exception_ptr e) mutable {
      if (e) promise.deliver(error(errc::runtime_failure, "kvstore: device work failed: " + stream_failure(e)));
      else if (status && status->failed()) promise.deliver(error(errc::runtime_failure, status->failure()));
      else promise.deliver(std::move(outs));
    });
  }

  kvstore::options options_;
  std::unique_ptr<device_manager> owned_devices_;
  device device_;
  stream stream_;
  store_place place_;
  std::map<kvstore::key, key_state> keys_;
  std::optional<std::map<kvstore::key, key_state>> staged_;  // a shard's part of a load, until shard_commit
  std::optional<bool> int_keys_;  // kind of the keys held, once the first key is stored
  update_rule rule_;
  std::vector<parked_pull> parked_;
  std::vector<pending> queue_;  // the ready queue, in arrival order
  std::uint64_t next_seq_ = 0;
  std::size_t in_flight_ = 0;  // requests handed to the stream whose work has not completed
};

// ---- a sharded store: the router in front of the shards ------------------------------------------

/// Takes the public messages, checks each request whole against the caller's keys, and sends its
/// parts to the shards (one message per shard and request), answering once all have answered.
/// Keys are spread round robin over the shards in init order; a key of more than `chunk_bytes`
/// becomes contiguous chunks on consecutive shards. Each chunk is a key of its own on its shard
/// (an integer the router assigns), read and written in place through `slice_ref`s.
///
/// Checkpoints: a save gathers every shard's snapshot (a barrier on each shard) and writes the
/// caller's keys, chunks joined, in one store's format; a load checks the whole file, then stages
/// each shard's part and commits on every shard only when all have staged it. While a save or
/// load is in progress the router holds the requests that arrive and serves them afterwards.
class kvstore_router final : public actor {
public:
  kvstore_router(kvstore::options options, std::vector<actor_ref> shards, store_place place)
      : options_(std::move(options)), shards_(std::move(shards)), place_(std::move(place)) {}

private:
  /// A handler of a public request: `body(m, p, sender id)` runs now or, during a checkpoint,
  /// once it is over (in arrival order).
  template <class R, class M>
  auto serve(void (kvstore_router::*body)(M&, response_promise<R>&, std::uint64_t)) {
    return [this, body](M& m) -> expected<R> {
      auto p = make_response_promise<R>();
      const auto origin = current_sender().id();
      if (!checkpointing_) (this->*body)(m, p, origin);
      else held_.push_back([this, body, m = std::move(m), p, origin]() mutable { (this->*body)(m, p, origin); });
      return R{};
    };
  }
  /// Ends a checkpoint: serves the requests held meanwhile, until one starts another checkpoint.
  void resume() {
    checkpointing_ = false;
    while (!checkpointing_ && !held_.empty()) {
      auto next = std::move(held_.front());
      held_.pop_front();
      next();
    }
  }

public:
  behavior make_behavior() override {
    return {
        serve(&kvstore_router::on_init),
        serve(&kvstore_router::on_push),
        serve(&kvstore_router::on_pull),
        serve(&kvstore_router::on_pushpull),
        serve(&kvstore_router::on_broadcast<kvstore::set_updater>),
        serve(&kvstore_router::on_broadcast<kvstore::set_optimizer>),
        serve(&kvstore_router::on_version),
        serve(&kvstore_router::on_save),
        serve(&kvstore_router::on_load),
    };
  }

  void on_exit(const error&) override {
    for (const auto& s : shards_) system().stop(s);
  }

private:
  /// Shard requests may wait for a version (synchronous mode) as long as the caller's own timeout.
  static constexpr std::chrono::hours shard_timeout{24};

  struct chunk {
    std::size_t shard = 0;
    std::int64_t sub_key = 0;
    std::size_t offset = 0;  // first element of the caller's tensor
    std::size_t length = 0;
  };
  struct placement {
    std::vector<std::int64_t> shape;
    std::vector<chunk> chunks;
  };
  using placements = std::map<kvstore::key, placement>;

  void on_init(kvstore::init& m, response_promise<unit_t>& p, std::uint64_t) {
    std::optional<bool> kind = int_keys_;
    if (auto r = check_init(m, kind, shape_of(), place_); !r) return p.deliver(r.error());
    int_keys_ = kind;
    std::vector<shard_init> parts(shards_.size());
    for (std::size_t i = 0; i < m.keys.size(); ++i) {
      const placement& pl = place_key(keys_, m.keys[i], m.values[i].shape());
      for (const auto& c : pl.chunks) {
        auto& part = parts[c.shard];
        part.keys.emplace_back(c.sub_key);
        part.values.push_back(slice_ref{m.values[i], c.offset});
        part.lengths.push_back(static_cast<std::int64_t>(c.length));
        part.labels.push_back(m.keys[i]);
      }
    }
    auto g = gather(answer(p));
    for (std::size_t s = 0; s < parts.size(); ++s)
      if (!parts[s].keys.empty()) ask(s, std::move(parts[s]), g);
    g->start();
  }
  void on_push(kvstore::push& m, response_promise<unit_t>& p, std::uint64_t origin) {
    if (auto r = check_existing("push", "value", m.keys, m.values, int_keys_, shape_of(), place_); !r)
      return p.deliver(r.error());
    auto parts = requests(m.priority, origin);
    add_values(parts, m.keys, m.values);
    send_parts(std::move(parts), answer(p));
  }
  void on_pull(kvstore::pull& m, response_promise<std::vector<tensor>>& p, std::uint64_t origin) {
    if (auto r = check_existing("pull", "output", m.keys, m.outs, int_keys_, shape_of(), place_); !r)
      return p.deliver(r.error());
    auto parts = requests(m.priority, origin);
    for (auto& part : parts) part.min_version = m.min_version;
    add_outs(parts, m.keys, m.outs);
    send_parts(std::move(parts), answer_with(p, std::move(m.outs)));
  }
  void on_pushpull(kvstore::pushpull& m, response_promise<std::vector<tensor>>& p, std::uint64_t origin) {
    if (auto r = check_existing("pushpull", "value", m.push.keys, m.push.values, int_keys_, shape_of(), place_); !r)
      return p.deliver(r.error());
    if (auto r = check_existing("pushpull", "output", m.pull.keys, m.pull.outs, int_keys_, shape_of(), place_); !r)
      return p.deliver(r.error());
    auto parts = requests(m.priority, origin);
    add_values(parts, m.push.keys, m.push.values);
    add_outs(parts, m.pull.keys, m.pull.outs);
    send_parts(std::move(parts), answer_with(p, std::move(m.pull.outs)));
  }
  template <class M>
  void on_broadcast(M& m, response_promise<unit_t>& p, std::uint64_t) {
    auto g = gather(answer(p));
    for (std::size_t s = 0; s < shards_.size(); ++s) ask(s, m, g);
    g->start();
  }
  void on_version(kvstore::version& m, response_promise<std::uint64_t>& p, std::uint64_t) {
    auto it = keys_.find(m.key);
    if (it == keys_.end()) return p.deliver(bad("kvstore version: key " + m.key.to_string() + " is not initialised."));
    const chunk& c = it->second.chunks.front();  // every push updates every chunk of a key
    request<std::uint64_t>(shards_[c.shard], shard_timeout, kvstore::version{c.sub_key})
        .then([p](std::uint64_t v) mutable { p.deliver(v); }, [p](const error& e) mutable { p.deliver(e); });
  }

  /// Every shard's snapshot (chunk keys), joined into the caller's keys and written as one store would.
  void on_save(kvstore::save& m, response_promise<unit_t>& p, std::uint64_t) {
    checkpointing_ = true;
    auto taken = std::make_shared<std::map<std::int64_t, checkpoint_entry>>();  // by chunk key
    auto g = gather([this, p, taken, path = m.path](const error* e) mutable {
      auto written = e ? expected<void>(*e) : guarded("save", [&] { return write_checkpoint(path, join(*taken)); });
      written ? p.deliver(unit) : p.deliver(written.error());
      resume();
    });
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      ++g->waiting;
      request<std::vector<checkpoint_entry>>(shards_[s], shard_timeout, shard_save{})
          .then(
              [g, taken](std::vector<checkpoint_entry>& part) {
                for (auto& e : part) taken->emplace(std::get<0>(e.key.value()), std::move(e));
                g->arrive(nullptr);
              },
              [g](const error& e) { g->arrive(&e); });
    }
    g->start();
  }
  std::vector<checkpoint_entry> join(const std::map<std::int64_t, checkpoint_entry>& taken) const {
    std::vector<checkpoint_entry> entries;
    for (const auto& [key, pl] : keys_) {
      const checkpoint_entry& first = taken.at(pl.chunks.front().sub_key);
      auto& e = entries.emplace_back(checkpoint_entry{key, first.version, first.step, pl.shape, {}});
      e.arrays.resize(first.arrays.size());
      for (const auto& c : pl.chunks)
        for (std::size_t a = 0; a < e.arrays.size(); ++a) {
          const auto& part = taken.at(c.sub_key).arrays.at(a);
          e.arrays[a].insert(e.arrays[a].end(), part.begin(), part.end());
        }
    }
    return entries;
  }

  /// Checks the whole file, places its keys afresh over the shards, has every shard stage its
  /// part, then commits on all of them, or, when one failed, drops the staged parts everywhere.
  void on_load(kvstore::load& m, response_promise<unit_t>& p, std::uint64_t) {
    auto file = read_checkpoint(m.path);
    if (!file) return p.deliver(file.error());
    auto entries = std::make_shared<const std::vector<checkpoint_entry>>(std::move(file->entries));
    placements loaded;
    std::vector<shard_load> parts(shards_.size(), shard_load{entries, {}});
    for (std::size_t i = 0; i < entries->size(); ++i) {
      const auto& e = (*entries)[i];
      for (const auto& c : place_key(loaded, e.key, e.shape).chunks)
        parts[c.shard].pieces.push_back({c.sub_key, e.key, i, c.offset, {static_cast<std::int64_t>(c.length)}});
    }
    checkpointing_ = true;
    auto g = gather([this, p, loaded = std::move(loaded), kind = file->int_keys](const error* e) mutable {
      for (const auto& s : shards_) send(s, shard_commit{.keep = e == nullptr});
      if (!e) {
        keys_ = std::move(loaded);
        int_keys_ = kind;
      }
      e ? p.deliver(*e) : p.deliver(unit);
      resume();
    });
    for (std::size_t s = 0; s < shards_.size(); ++s) ask(s, std::move(parts[s]), g);
    g->start();
  }

  /// Counts the shards' answers; `done` runs once with the first failure (or null).
  struct gathering {
    std::size_t waiting = 1;  // 1 until start(), so that answers cannot finish it early
    std::optional<error> failure;
    std::function<void(const error*)> done;
    void arrive(const error* e) {
      if (e && !failure) failure = *e;
      if (--waiting == 0) done(failure ? &*failure : nullptr);
    }
    void start() { arrive(nullptr); }
  };
  static std::shared_ptr<gathering> gather(std::function<void(const error*)> done) {
    auto g = std::make_shared<gathering>();
    g->done = std::move(done);
    return g;
  }
  template <class M>
  void ask(std::size_t shard, M msg, const std::shared_ptr<gathering>& g) {
    ++g->waiting;
    request<void>(shards_[shard], shard_timeout, std::move(msg))
        .then([g] { g->arrive(nullptr); }, [g](const error& e) { g->arrive(&e); });
  }

  static std::function<void(const error*)> answer(response_promise<unit_t> p) {
    return [p](const error* e) mutable { e ? p.deliver(*e) : p.deliver(unit); };
  }
  static std::function<void(const error*)> answer_with(response_promise<std::vector<tensor>> p,
                                                       std::vector<tensor> outs) {
    return [p, outs = std::move(outs)](const error* e) mutable {
      if (e) return p.deliver(*e);
      for (auto& out : outs) out.set_ready_event(event{});  // every shard's copy has completed
      p.deliver(std::move(outs));
    };
  }

  shape_lookup shape_of() const {
    return [this](const kvstore::key& key) -> const std::vector<std::int64_t>* {
      auto it = keys_.find(key);
      return it == keys_.end() ? nullptr : &it->second.shape;
    };
  }

  /// Places `key` in `into`: its chunks on the next shards, under new chunk keys.
  const placement& place_key(placements& into, const kvstore::key& key, const std::vector<std::int64_t>& shape) {
    std::size_t numel = 1;
    for (auto d : shape) numel *= static_cast<std::size_t>(d);
    const std::size_t bytes = numel * sizeof(float);
    std::size_t pieces = 1;
    if (options_.chunk_bytes > 0 && bytes > options_.chunk_bytes)
      pieces = std::min(numel, (bytes + options_.chunk_bytes - 1) / options_.chunk_bytes);
    placement pl{shape, {}};
    std::size_t offset = 0;
    for (std::size_t c = 0; c < pieces; ++c) {
      const std::size_t length = numel / pieces + (c < numel % pieces ? 1 : 0);
      pl.chunks.push_back(chunk{next_shard_ % shards_.size(), next_sub_key_++, offset, length});
      ++next_shard_;
      offset += length;
    }
    return into.emplace(key, std::move(pl)).first->second;
  }

  std::vector<shard_request> requests(int priority, std::uint64_t origin) const {
    std::vector<shard_request> parts(shards_.size());
    for (auto& part : parts) {
      part.priority = priority;
      part.origin = origin;
    }
    return parts;
  }
  void add_values(std::vector<shard_request>& parts, const std::vector<kvstore::key>& keys,
                  const std::vector<tensor>& values) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
      for (const auto& c : keys_.at(keys[i]).chunks) {
        parts[c.shard].push_keys.emplace_back(c.sub_key);
        parts[c.shard].values.push_back(slice_ref{values[i], c.offset});
      }
  }
  void add_outs(std::vector<shard_request>& parts, const std::vector<kvstore::key>& keys,
                const std::vector<tensor>& outs) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
      for (const auto& c : keys_.at(keys[i]).chunks) {
        parts[c.shard].pull_keys.emplace_back(c.sub_key);
        parts[c.shard].outs.push_back(slice_ref{outs[i], c.offset});
      }
  }
  void send_parts(std::vector<shard_request> parts, std::function<void(const error*)> done) {
    auto g = gather(std::move(done));
    for (std::size_t s = 0; s < parts.size(); ++s)
      if (!parts[s].push_keys.empty() || !parts[s].pull_keys.empty()) ask(s, std::move(parts[s]), g);
    g->start();
  }
  kvstore::options options_;
  std::vector<actor_ref> shards_;
  store_place place_;
  placements keys_;
  std::optional<bool> int_keys_;
  bool checkpointing_ = false;              // a save or load is in progress
  std::deque<std::function<void()>> held_;  // requests that arrived meanwhile
  std::int64_t next_sub_key_ = 0;
  std::size_t next_shard_ = 0;
};

// ---- the client's session actor: keeps one client's calls in order ----------------------------

class kvstore_session final : public actor {
public:
  kvstore_session(actor_ref store, std::chrono::nanoseconds timeout) : store_(std::move(store)), timeout_(timeout) {}

private:
  template <class R, class M>
  auto forward() {
    return [this](detail::call<R, M>& c) {
      using request_type = std::conditional_t<std::is_same_v<R, unit_t>, void, R>;
      ++in_flight_;
      auto promise = c.promise;
      request<request_type>(store_, timeout_, std::move(c.msg))
          .then(
              [this, promise](R& r) {
                promise->set_value(expected<R>(std::move(r)));
                finished();
              },
              [this, promise](const error& e) {
                promise->set_value(expected<R>(e));
                finished();
              });
    };
  }
  void finished() {
    if (--in_flight_ == 0 && closing_) quit();
  }


public:
  behavior make_behavior() override {
    return {
        forward<unit_t, kvstore::init>(),
        forward<unit_t, kvstore::push>(),
        forward<std::vector<tensor>, kvstore::pull>(),
        forward<std::vector<tensor>, kvstore::pushpull>(),
        forward<unit_t, kvstore::set_updater>(),
        forward<unit_t, kvstore::set_optimizer>(),
        forward<std::uint64_t, kvstore::version>(),
        forward<unit_t, kvstore::save>(),
        forward<unit_t, kvstore::load>(),
        [this](const detail::session_close&) {
          closing_ = true;
          if (in_flight_ == 0) quit();
        },
    };
  }

private:
  actor_ref store_;
  std::chrono::nanoseconds timeout_;
  std::size_t in_flight_ = 0;
  bool closing_ = false;
};

}  // namespace

actor_ref spawn(actor_system& system, kvstore::options options) {
  // Any kind merges: cpu, sim, and cuda (a store of that GPU, taking cuda tensors of any GPU).
  auto check_merge_device = [](const device& d, const char* what) {
    if (!d.valid())
      throw std::invalid_argument(std::string("kvstore::spawn: a device store needs ") + what + "; none was given.");
  };
  if (options.kind == kvstore::kind::device && options.shard_devices.empty())
    check_merge_device(options.merge_device, "kvstore::options::merge_device");
  if (options.shards == 0)
    throw std::invalid_argument("kvstore::spawn: kvstore::options::shards is 0; expected at least 1.");
  if (options.max_in_flight == 0)
    throw std::invalid_argument("kvstore::spawn: kvstore::options::max_in_flight is 0; expected at least 1.");
  for (const auto& d : options.shard_devices) {
    check_merge_device(d, "a device in every entry of kvstore::options::shard_devices");
    if (d.kind() != options.shard_devices.front().kind())
      throw std::invalid_argument("kvstore::spawn: kvstore::options::shard_devices mixes " +
                                  options.shard_devices.front().name() + " and " + d.name() +
                                  "; expected devices of one kind.");
  }
  auto name = options.name;
  if (options.shards == 1 && options.shard_devices.empty())
    return system.spawn_with<kvstore_actor>(spawn_options{.name = std::move(name)}, std::move(options));

  std::vector<actor_ref> shards;
  store_place place{device_kind::cpu, "cpu:0"};  // a local shard's own device
  if (options.kind == kvstore::kind::device) place = store_place{options.merge_device.kind(), options.merge_device.name()};
  if (!options.shard_devices.empty())
    place = store_place{options.shard_devices.front().kind(), options.shard_devices.front().name()};
  for (std::size_t i = 0; i < options.shards; ++i) {
    kvstore::options shard = options;
    shard.shards = 1;
    shard.shard_devices.clear();
    shard.name = options.name + "/shard" + std::to_string(i);
    if (!options.shard_devices.empty()) {
      shard.kind = kvstore::kind::device;
      shard.merge_device = options.shard_devices[i % options.shard_devices.size()];
    }
    auto shard_name = shard.name;
    shards.push_back(system.spawn_with<kvstore_actor>(spawn_options{.name = std::move(shard_name)}, std::move(shard)));
  }
  return system.spawn_with<kvstore_router>(spawn_options{.name = std::move(name)}, std::move(options), std::move(shards),
                                           std::move(place));
}

// ---- kvstore::client ---------------------------------------------------------------------------

client::client(actor_system& system, actor_ref store, std::chrono::nanoseconds timeout)
    : system_(&system), store_(std::move(store)), timeout_(timeout) {
  session_ = system.spawn_with<kvstore_session>(spawn_options{.name = "kvstore-client"}, store_, timeout_);
}

client::~client() { (void)system_->send(session_, detail::session_close{}); }

client::done client::init(kvstore::key key, tensor value) {
  return init(std::vector<kvstore::key>{std::move(key)}, std::vector<tensor>{std::move(value)});
}
client::done client::init(std::vector<kvstore::key> keys, std::vector<tensor> values) {
  return call<unit_t>(kvstore::init{std::move(keys), std::move(values)});
}

client::done client::push(kvstore::key key, tensor value) {
  return push(std::vector<kvstore::key>{std::move(key)}, std::vector<tensor>{std::move(value)});
}
client::done client::push(kvstore::key key, std::vector<tensor> values) {
  std::vector<kvstore::key> keys(values.size(), key);
  return push(std::move(keys), std::move(values));
}
client::done client::push(std::vector<kvstore::key> keys, std::vector<tensor> values) {
  return call<unit_t>(kvstore::push{std::move(keys), std::move(values)});
}

client::tensors client::pull(kvstore::key key, tensor out, std::uint64_t min_version) {
  return pull(std::vector<kvstore::key>{std::move(key)}, std::vector<tensor>{std::move(out)}, min_version);
}
client::tensors client::pull(kvstore::key key, std::vector<tensor> outs, std::uint64_t min_version) {
  std::vector<kvstore::key> keys(outs.size(), key);
  return pull(std::move(keys), std::move(outs), min_version);
}
client::tensors client::pull(std::vector<kvstore::key> keys, std::vector<tensor> outs,
                                             std::uint64_t min_version) {
  return call<std::vector<tensor>>(kvstore::pull{std::move(keys), std::move(outs), min_version});
}

client::tensors client::pushpull(kvstore::key key, std::vector<tensor> values,
                                                 std::vector<tensor> outs) {
  std::vector<kvstore::key> push_keys(values.size(), key);
  std::vector<kvstore::key> pull_keys(outs.size(), key);
  return call<std::vector<tensor>>(kvstore::pushpull{kvstore::push{std::move(push_keys), std::move(values)},
                                                    kvstore::pull{std::move(pull_keys), std::move(outs), 0}});
}
client::tensors client::pushpull(std::vector<kvstore::key> keys, std::vector<tensor> values,
                                                 std::vector<tensor> outs) {
  return call<std::vector<tensor>>(
      kvstore::pushpull{kvstore::push{keys, std::move(values)}, kvstore::pull{keys, std::move(outs), 0}});
}

client::done client::set_updater(kvstore::updater updater) {
  return call<unit_t>(kvstore::set_updater{std::move(updater)});
}
client::done client::set_optimizer(kernels::sgd_options options) {
  return call<unit_t>(kvstore::set_optimizer{options});
}
client::done client::set_optimizer(kernels::adam_options options) {
  return call<unit_t>(kvstore::set_optimizer{options});
}
std::future<expected<std::uint64_t>> client::version(kvstore::key key) {
  return call<std::uint64_t>(kvstore::version{std::move(key)});
}
client::done client::save(std::string path) { return call<unit_t>(kvstore::save{std::move(path)}); }
client::done client::load(std::string path) { return call<unit_t>(kvstore::load{std::move(path)}); }

}  // namespace strata::kvstore
