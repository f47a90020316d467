#include "strata/actors/kvstore.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <exception>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include "strata/device/device_manager.hpp"
#include "strata/kernels/elementwise.hpp"
#include "strata/kernels/optimizers.hpp"

namespace strata {

std::string kvstore_key::to_string() const {
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
using update_rule = std::variant<std::monostate, kvstore_updater, kernels::sgd_options, kernels::adam_options>;

/// Failure text of work items, written on the store's stream and read by the completion callback
/// that follows them on the same stream.
struct work_status {
  std::string failure;
};

float* floats(const tensor& t) { return static_cast<float*>(t.raw_data()); }

// ---- checkpoint format ------------------------------------------------------------------------
// "STRKV001", u64 key count, then per key: u8 kind (0 int, 1 string), the key (i64, or u64 length
// + bytes), u64 version, i64 optimizer step, u64 rank, rank x i64 dims, u64 state count, then the
// value and each state tensor as numel floats; then u64 FNV-1a of everything before, "STRKVEND".
// Native byte order (little-endian on every platform strata targets).

constexpr char checkpoint_magic[9] = "STRKV001";
constexpr char checkpoint_end[9] = "STRKVEND";

struct checkpoint_entry {
  kvstore_key key = 0;
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

class kvstore_actor final : public actor {
public:
  explicit kvstore_actor(kvstore_options options) : options_(std::move(options)) {
    if (options_.kind == kvstore_kind::local) {
      owned_devices_ = std::make_unique<device_manager>(device_options{.cpu_threads_per_device = 1});
      device_ = owned_devices_->create("cpu:1").at(0);
    } else {
      device_ = options_.merge_device;
    }
    stream_ = device_.create_stream();
  }

  behavior make_behavior() override {
    return {
        [this](kvstore_init& m) { return guarded("init", [&] { return on_init(m); }); },
        [this](kvstore_push& m) { return guarded("push", [&] { return on_push(m); }); },
        [this](kvstore_pull& m) { return guarded_tensors("pull", [&] { return on_pull(m); }); },
        [this](kvstore_pushpull& m) { return guarded_tensors("pushpull", [&] { return on_pushpull(m); }); },
        [this](kvstore_set_updater& m) -> expected<unit_t> {
          if (m.updater) rule_ = std::move(m.updater);
          else rule_ = std::monostate{};
          return unit;
        },
        [this](kvstore_set_optimizer& m) -> expected<unit_t> {
          std::visit([this](const auto& o) { rule_ = o; }, m.options);
          for (auto& [key, state] : keys_) state.optimizer_state.clear();  // a new optimizer starts fresh
          return unit;
        },
        [this](kvstore_save& m) { return guarded("save", [&] { return on_save(m); }); },
        [this](kvstore_load& m) -> expected<unit_t> {
          try {
            return on_load(m);
          } catch (const std::exception& e) {
            return error(errc::invalid_argument, e.what());
          }
        },
        [this](const kvstore_version& m) -> expected<std::uint64_t> {
          auto it = keys_.find(m.key);
          if (it == keys_.end()) return bad("kvstore version: key " + m.key.to_string() + " is not initialised.");
          return it->second.version;
        },
    };
  }

  void on_exit(const error&) override {
    // Parked pulls can never be answered now.
    for (auto& p : parked_)
      p.promise.deliver(error(errc::stopped, "kvstore pull: the store stopped before the requested version existed."));
    parked_.clear();
  }

private:
  struct key_state {
    tensor value;
    tensor accumulator;                 // merge target (sums of several values, sync rounds)
    std::size_t received = 0;           // values accumulated towards the next version (sync mode)
    std::uint64_t version = 0;          // updates applied
    std::vector<tensor> optimizer_state;  // sgd: momentum; adam: exp_avg, exp_avg_sq
    std::int64_t step = 0;
  };
  struct parked_pull {
    kvstore_pull msg;
    response_promise<std::vector<tensor>> promise;
  };

  template <class F>
  expected<unit_t> guarded(const char* op, F&& f) {
    try {
      return f();
    } catch (const std::exception& e) {
      return error(errc::runtime_failure, std::string("kvstore ") + op + ": " + e.what());
    }
  }
  template <class F>
  expected<std::vector<tensor>> guarded_tensors(const char* op, F&& f) {
    try {
      return f();
    } catch (const std::exception& e) {
      return error(errc::runtime_failure, std::string("kvstore ") + op + ": " + e.what());
    }
  }

  // ---- validation (nothing is changed before all of a request is checked) ------------------

  expected<void> check_kind(const char* op, const kvstore_key& key) const {
    if (!int_keys_ || *int_keys_ == key.is_int()) return {};
    return bad(std::string("kvstore ") + op + ": key " + key.to_string() + " is " +
               (key.is_int() ? "an integer" : "a string") + " but this store holds " +
               (*int_keys_ ? "integer" : "string") + " keys; one store cannot mix key kinds.");
  }

  expected<void> check_tensor(const char* op, const char* role, const kvstore_key& key, const tensor& t,
                              const std::vector<std::int64_t>* shape) const {
    std::string where = std::string("kvstore ") + op + ": the " + role + " for key " + key.to_string();
    if (!t.valid()) return bad(where + " is an empty tensor; expected a float32 tensor.");
    if (t.dtype() != dtype::float32)
      return bad(where + " has dtype " + std::string(to_string(t.dtype())) + ", expected float32.");
    if (shape && t.shape() != *shape)
      return bad(where + " has shape " + shape_text(t.shape()) + ", expected " + shape_text(*shape) +
                 " (the stored shape).");
    if (t.storage().kind() != device_.kind())
      return bad(where + " is on " + t.get_device().name() + ", which a store on " + device_.name() +
                 " cannot read; expected a " + (device_.kind() == device_kind::cpu ? "cpu" : "sim") + " tensor.");
    return {};
  }

  expected<void> check_pairs(const char* op, const char* role, std::size_t keys, std::size_t values) const {
    if (keys == values && keys > 0) return {};
    if (keys == 0) return bad(std::string("kvstore ") + op + ": no keys given; expected at least one.");
    return bad(std::string("kvstore ") + op + ": " + std::to_string(keys) + " keys and " + std::to_string(values) +
               " " + role + "s; expected one " + role + " per key.");
  }

  /// Checks keys and tensors against existing keys: kind, presence, dtype, shape, device.
  expected<void> check_existing(const char* op, const char* role, const std::vector<kvstore_key>& keys,
                                const std::vector<tensor>& tensors) const {
    if (auto r = check_pairs(op, role, keys.size(), tensors.size()); !r) return r;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (auto r = check_kind(op, keys[i]); !r) return r;
      auto it = keys_.find(keys[i]);
      if (it == keys_.end())
        return bad(std::string("kvstore ") + op + ": key " + keys[i].to_string() +
                   " is not initialised; call init first.");
      if (auto r = check_tensor(op, role, keys[i], tensors[i], &it->second.value.shape()); !r) return r;
    }
    return {};
  }

  // ---- handlers --------------------------------------------------------------------------

  expected<unit_t> on_init(kvstore_init& m) {
    if (auto r = check_pairs("init", "value", m.keys.size(), m.values.size()); !r) return r.error();
    std::optional<bool> kind = int_keys_;
    for (std::size_t i = 0; i < m.keys.size(); ++i) {
      const auto& key = m.keys[i];
      if (kind && *kind != key.is_int())
        return bad("kvstore init: key " + key.to_string() + " is " + (key.is_int() ? "an integer" : "a string") +
                   " but this store holds " + (*kind ? "integer" : "string") +
                   " keys; one store cannot mix key kinds.");
      kind = key.is_int();
      if (keys_.count(key)) return bad("kvstore init: key " + key.to_string() + " already exists.");
      for (std::size_t j = 0; j < i; ++j)
        if (m.keys[j] == key) return bad("kvstore init: key " + key.to_string() + " is given twice.");
      if (auto r = check_tensor("init", "value", key, m.values[i], nullptr); !r) return r.error();
    }
    int_keys_ = kind;
    for (std::size_t i = 0; i < m.keys.size(); ++i) {
      const tensor& v = m.values[i];
      key_state state;
      state.value = tensor::empty(v.shape(), dtype::float32, device_, stream_);
      stream_.wait(v.ready_event());
      stream_.copy(state.value.storage(), v.storage(), v.bytes());
      keys_.emplace(m.keys[i], std::move(state));
    }
    reply_when_done(make_response_promise<unit_t>(), nullptr);
    return unit;
  }

  expected<unit_t> on_push(kvstore_push& m) {
    if (auto r = check_existing("push", "value", m.keys, m.values); !r) return r.error();
    auto status = std::make_shared<work_status>();
    enqueue_push(m.keys, m.values, status);
    reply_when_done(make_response_promise<unit_t>(), status);
    serve_parked();
    return unit;
  }

  expected<std::vector<tensor>> on_pull(kvstore_pull& m) {
    if (auto r = check_existing("pull", "output", m.keys, m.outs); !r) return r.error();
    auto promise = make_response_promise<std::vector<tensor>>();
    if (!version_reached(m)) {
      parked_.push_back(parked_pull{std::move(m), std::move(promise)});
      return std::vector<tensor>{};
    }
    enqueue_pull(m.keys, m.outs);
    reply_when_done(std::move(promise), std::move(m.outs));
    return std::vector<tensor>{};
  }

  expected<std::vector<tensor>> on_pushpull(kvstore_pushpull& m) {
    if (auto r = check_existing("pushpull", "value", m.push.keys, m.push.values); !r) return r.error();
    if (auto r = check_existing("pushpull", "output", m.pull.keys, m.pull.outs); !r) return r.error();
    auto status = std::make_shared<work_status>();
    enqueue_push(m.push.keys, m.push.values, status);
    enqueue_pull(m.pull.keys, m.pull.outs);
    reply_when_done(make_response_promise<std::vector<tensor>>(), std::move(m.pull.outs), status);
    serve_parked();
    return std::vector<tensor>{};
  }

  // ---- checkpoints -------------------------------------------------------------------------

  expected<unit_t> on_save(kvstore_save& m) {
    if (device_.kind() != device_kind::cpu)
      return bad("kvstore save: the store is on " + device_.name() + ", whose tensors hold no data; expected a cpu store.");
    struct snapshot {
      kvstore_key key;
      std::uint64_t version;
      std::int64_t step;
      std::vector<tensor> arrays;
    };
    std::vector<snapshot> snap;
    for (const auto& [key, state] : keys_) {
      snapshot e{key, state.version, state.step, {state.value}};
      for (const auto& t : state.optimizer_state) e.arrays.push_back(t);
      snap.push_back(std::move(e));
    }
    auto status = std::make_shared<work_status>();
    stream_.launch({.name = "kvstore_save", .kind = work_kind::copy, .cpu = [snap, path = m.path, status] {
                      try {
                        std::string out(checkpoint_magic, 8);
                        put<std::uint64_t>(out, snap.size());
                        for (const auto& e : snap) {
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
                          put<std::uint64_t>(out, e.arrays[0].rank());
                          for (auto d : e.arrays[0].shape()) put<std::int64_t>(out, d);
                          put<std::uint64_t>(out, e.arrays.size() - 1);
                          for (const auto& t : e.arrays)
                            out.append(static_cast<const char*>(t.raw_data()), t.bytes());
                        }
                        put<std::uint64_t>(out, fnv1a(out, out.size()));
                        out.append(checkpoint_end, 8);
                        write_atomically(path, out);
                      } catch (const std::exception& e) {
                        status->failure = e.what();
                      }
                    }});
    reply_when_done(make_response_promise<unit_t>(), status);
    return unit;
  }

  /// Reads and checks the whole file first (a checkpoint load is a program edge: the blocking
  /// read on this actor's thread is accepted), then swaps the keys in.
  expected<unit_t> on_load(kvstore_load& m) {
    std::ifstream file(m.path, std::ios::binary);
    if (!file) return bad("kvstore load: cannot open checkpoint \"" + m.path + "\": " + std::strerror(errno) + ".");
    std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    auto entries = parse_checkpoint(bytes, m.path);
    std::optional<bool> kind;
    for (const auto& e : entries) {
      if (kind && *kind != e.key.is_int())
        return bad("kvstore load: checkpoint \"" + m.path + "\" mixes integer and string keys; expected one kind.");
      kind = e.key.is_int();
    }
    std::map<kvstore_key, key_state> loaded;
    for (auto& e : entries) {
      key_state state;
      state.version = e.version;
      state.step = e.step;
      for (std::size_t a = 0; a < e.arrays.size(); ++a) {
        auto t = tensor::from_host<float>(std::span<const float>(e.arrays[a]), e.shape, device_, stream_);
        if (a == 0) state.value = std::move(t);
        else state.optimizer_state.push_back(std::move(t));
      }
      loaded.emplace(std::move(e.key), std::move(state));
    }
    keys_ = std::move(loaded);
    int_keys_ = kind;
    reply_when_done(make_response_promise<unit_t>(), nullptr);
    return unit;
  }

  // ---- device work -------------------------------------------------------------------------

  /// Groups the values by key (first-appearance order) and merges each group.
  void enqueue_push(const std::vector<kvstore_key>& keys, const std::vector<tensor>& values,
                    const std::shared_ptr<work_status>& status) {
    std::vector<std::pair<kvstore_key, std::vector<tensor>>> groups;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == keys[i]; });
      if (it == groups.end()) groups.emplace_back(keys[i], std::vector<tensor>{values[i]});
      else it->second.push_back(values[i]);
    }
    for (auto& [key, group] : groups) {
      key_state& state = keys_.at(key);
      for (const auto& v : group) stream_.wait(v.ready_event());
      const std::size_t need = options_.contributions_per_version;
      if (need == 0) {  // asynchronous: this call's values make one update
        merge(key, state, group, false, true, status);
        continue;
      }
      std::size_t next = 0;
      while (next < group.size()) {  // synchronous: fill the current version, maybe the next ones
        std::size_t take = std::min(need - state.received, group.size() - next);
        std::vector<tensor> part(group.begin() + static_cast<std::ptrdiff_t>(next),
                                 group.begin() + static_cast<std::ptrdiff_t>(next + take));
        bool first = state.received == 0;
        state.received += take;
        bool complete = state.received == need;
        merge(key, state, part, !first, complete, status);
        if (complete) state.received = 0;
        next += take;
      }
    }
  }

  /// Sums `values` (plus the accumulator when `with_accumulator`) and, when `complete`, applies
  /// the update rule and counts a version.
  void merge(const kvstore_key& key, key_state& state, const std::vector<tensor>& values, bool with_accumulator,
             bool complete, const std::shared_ptr<work_status>& status) {
    const auto n = static_cast<std::size_t>(state.value.numel());
    tensor merged;
    if (!with_accumulator && values.size() == 1 && complete) {
      merged = values[0];  // read in place, no copy
    } else {
      if (!state.accumulator.valid())
        state.accumulator = tensor::empty(state.value.shape(), dtype::float32, device_, stream_);
      merged = state.accumulator;
    }
    tensor stored = state.value;
    update_rule rule = complete ? rule_ : update_rule{};
    std::vector<tensor> opt_state;
    std::int64_t step = 0;
    bool fresh_state = false;
    if (complete) {
      if (std::holds_alternative<kernels::sgd_options>(rule) &&
          std::get<kernels::sgd_options>(rule).momentum != 0.0 && state.optimizer_state.empty()) {
        state.optimizer_state = {tensor::empty(state.value.shape(), dtype::float32, device_, stream_)};
        fresh_state = true;
      }
      if (std::holds_alternative<kernels::adam_options>(rule) && state.optimizer_state.size() != 2) {
        state.optimizer_state = {tensor::empty(state.value.shape(), dtype::float32, device_, stream_),
                                 tensor::empty(state.value.shape(), dtype::float32, device_, stream_)};
        state.step = 0;
        fresh_state = true;
      }
      if (std::holds_alternative<kernels::adam_options>(rule)) step = ++state.step;
      opt_state = state.optimizer_state;
      ++state.version;
    }
    const double k = static_cast<double>(values.size() + (with_accumulator ? 1 : 0));
    stream_.launch({
        .name = complete ? "kvstore_update" : "kvstore_accumulate",
        .kind = work_kind::pointwise,
        .flops = (k + 4.0) * static_cast<double>(n),
        .bytes = (k + 4.0) * 4.0 * static_cast<double>(n),
        .cpu =
            [key, values, with_accumulator, complete, merged, stored, rule, opt_state, step, fresh_state, n,
             status]() mutable {
              if (!status->failure.empty()) return;  // an earlier part of this request failed
              try {
                if (merged.storage().impl() != values[0].storage().impl() || values.size() > 1 || with_accumulator) {
                  std::vector<const float*> inputs;
                  if (with_accumulator) inputs.push_back(floats(merged));
                  for (const auto& v : values) inputs.push_back(floats(v));
                  kernels::cpu::sum_arrays(inputs, n, floats(merged));
                }
                if (!complete) return;
                for (auto& t : opt_state)
                  if (fresh_state) std::memset(t.raw_data(), 0, n * sizeof(float));
                std::visit(
                    [&](const auto& r) {
                      using rule_type = std::decay_t<decltype(r)>;
                      if constexpr (std::is_same_v<rule_type, std::monostate>) {
                        std::memcpy(stored.raw_data(), merged.raw_data(), n * sizeof(float));
                      } else if constexpr (std::is_same_v<rule_type, kvstore_updater>) {
                        r(key, merged, stored);
                      } else if constexpr (std::is_same_v<rule_type, kernels::sgd_options>) {
                        kernels::cpu::sgd_step(n, floats(stored), floats(merged),
                                               opt_state.empty() ? nullptr : floats(opt_state[0]), r);
                      } else {
                        kernels::cpu::adam_step(n, floats(stored), floats(merged), floats(opt_state[0]),
                                                floats(opt_state[1]), step, r);
                      }
                    },
                    rule);
              } catch (const std::exception& e) {
                status->failure = "kvstore push: the update of key " + key.to_string() + " failed: " + e.what();
              } catch (...) {
                status->failure = "kvstore push: the update of key " + key.to_string() + " failed.";
              }
            },
    });
  }

  void enqueue_pull(const std::vector<kvstore_key>& keys, std::vector<tensor>& outs) {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      stream_.wait(outs[i].ready_event());  // whatever the caller queued on the output comes first
      stream_.copy(outs[i].storage(), keys_.at(keys[i]).value.storage(), outs[i].bytes());
    }
    event done = stream_.record();
    for (auto& out : outs) out.set_ready_event(done);
  }

  bool version_reached(const kvstore_pull& m) const {
    for (const auto& key : m.keys)
      if (keys_.at(key).version < m.min_version) return false;
    return true;
  }

  /// Answers parked pulls whose version now exists (their copies follow the updates on the stream).
  void serve_parked() {
    for (std::size_t i = 0; i < parked_.size();) {
      if (!version_reached(parked_[i].msg)) {
        ++i;
        continue;
      }
      parked_pull p = std::move(parked_[i]);
      parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(i));
      enqueue_pull(p.msg.keys, p.msg.outs);
      reply_when_done(std::move(p.promise), std::move(p.msg.outs));
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
      else if (status && !status->failure.empty()) promise.deliver(error(errc::runtime_failure, status->failure));
      else promise.deliver(unit);
    });
  }
  void reply_when_done(response_promise<std::vector<tensor>> promise, std::vector<tensor> outs,
                       std::shared_ptr<work_status> status = nullptr) {
    stream_.on_complete([promise, outs = std::move(outs), status](std::exception_ptr e) mutable {
      if (e) promise.deliver(error(errc::runtime_failure, "kvstore: device work failed: " + stream_failure(e)));
      else if (status && !status->failure.empty()) promise.deliver(error(errc::runtime_failure, status->failure));
      else promise.deliver(std::move(outs));
    });
  }

  kvstore_options options_;
  std::unique_ptr<device_manager> owned_devices_;
  device device_;
  stream stream_;
  std::map<kvstore_key, key_state> keys_;
  std::optional<bool> int_keys_;  // kind of the keys held, once the first key is stored
  update_rule rule_;
  std::vector<parked_pull> parked_;
};

// ---- the client's session actor: keeps one client's calls in order ----------------------------

class kvstore_session final : public actor {
public:
  kvstore_session(actor_ref store, std::chrono::nanoseconds timeout) : store_(std::move(store)), timeout_(timeout) {}

private:
  template <class R, class M>
  auto forward() {
    return [this](detail::kvstore_call<R, M>& c) {
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
        forward<unit_t, kvstore_init>(),
        forward<unit_t, kvstore_push>(),
        forward<std::vector<tensor>, kvstore_pull>(),
        forward<std::vector<tensor>, kvstore_pushpull>(),
        forward<unit_t, kvstore_set_updater>(),
        forward<unit_t, kvstore_set_optimizer>(),
        forward<std::uint64_t, kvstore_version>(),
        forward<unit_t, kvstore_save>(),
        forward<unit_t, kvstore_load>(),
        [this](const detail::kvstore_session_close&) {
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

actor_ref spawn_kvstore(actor_system& system, kvstore_options options) {
  if (options.kind == kvstore_kind::device) {
    if (!options.merge_device.valid())
      throw std::invalid_argument("spawn_kvstore: a device store needs kvstore_options::merge_device; none was given.");
    if (options.merge_device.kind() == device_kind::cuda)
      throw std::invalid_argument("spawn_kvstore: merge device " + options.merge_device.name() +
                                  " is a cuda device; expected a cpu or sim device (cuda merges are not implemented yet).");
  }
  auto name = options.name;
  return system.spawn_with<kvstore_actor>(spawn_options{.name = std::move(name)}, std::move(options));
}

// ---- kvstore_client ---------------------------------------------------------------------------

kvstore_client::kvstore_client(actor_system& system, actor_ref store, std::chrono::nanoseconds timeout)
    : system_(&system), store_(std::move(store)), timeout_(timeout) {
  session_ = system.spawn_with<kvstore_session>(spawn_options{.name = "kvstore-client"}, store_, timeout_);
}

kvstore_client::~kvstore_client() { (void)system_->send(session_, detail::kvstore_session_close{}); }

kvstore_client::done kvstore_client::init(kvstore_key key, tensor value) {
  return init(std::vector<kvstore_key>{std::move(key)}, std::vector<tensor>{std::move(value)});
}
kvstore_client::done kvstore_client::init(std::vector<kvstore_key> keys, std::vector<tensor> values) {
  return call<unit_t>(kvstore_init{std::move(keys), std::move(values)});
}

kvstore_client::done kvstore_client::push(kvstore_key key, tensor value) {
  return push(std::vector<kvstore_key>{std::move(key)}, std::vector<tensor>{std::move(value)});
}
kvstore_client::done kvstore_client::push(kvstore_key key, std::vector<tensor> values) {
  std::vector<kvstore_key> keys(values.size(), key);
  return push(std::move(keys), std::move(values));
}
kvstore_client::done kvstore_client::push(std::vector<kvstore_key> keys, std::vector<tensor> values) {
  return call<unit_t>(kvstore_push{std::move(keys), std::move(values)});
}

kvstore_client::tensors kvstore_client::pull(kvstore_key key, tensor out, std::uint64_t min_version) {
  return pull(std::vector<kvstore_key>{std::move(key)}, std::vector<tensor>{std::move(out)}, min_version);
}
kvstore_client::tensors kvstore_client::pull(kvstore_key key, std::vector<tensor> outs, std::uint64_t min_version) {
  std::vector<kvstore_key> keys(outs.size(), key);
  return pull(std::move(keys), std::move(outs), min_version);
}
kvstore_client::tensors kvstore_client::pull(std::vector<kvstore_key> keys, std::vector<tensor> outs,
                                             std::uint64_t min_version) {
  return call<std::vector<tensor>>(kvstore_pull{std::move(keys), std::move(outs), min_version});
}

kvstore_client::tensors kvstore_client::pushpull(kvstore_key key, std::vector<tensor> values,
                                                 std::vector<tensor> outs) {
  std::vector<kvstore_key> push_keys(values.size(), key);
  std::vector<kvstore_key> pull_keys(outs.size(), key);
  return call<std::vector<tensor>>(kvstore_pushpull{kvstore_push{std::move(push_keys), std::move(values)},
                                                    kvstore_pull{std::move(pull_keys), std::move(outs), 0}});
}
kvstore_client::tensors kvstore_client::pushpull(std::vector<kvstore_key> keys, std::vector<tensor> values,
                                                 std::vector<tensor> outs) {
  return call<std::vector<tensor>>(
      kvstore_pushpull{kvstore_push{keys, std::move(values)}, kvstore_pull{keys, std::move(outs), 0}});
}

kvstore_client::done kvstore_client::set_updater(kvstore_updater updater) {
  return call<unit_t>(kvstore_set_updater{std::move(updater)});
}
kvstore_client::done kvstore_client::set_optimizer(kernels::sgd_options options) {
  return call<unit_t>(kvstore_set_optimizer{options});
}
kvstore_client::done kvstore_client::set_optimizer(kernels::adam_options options) {
  return call<unit_t>(kvstore_set_optimizer{options});
}
std::future<expected<std::uint64_t>> kvstore_client::version(kvstore_key key) {
  return call<std::uint64_t>(kvstore_version{std::move(key)});
}
kvstore_client::done kvstore_client::save(std::string path) { return call<unit_t>(kvstore_save{std::move(path)}); }
kvstore_client::done kvstore_client::load(std::string path) { return call<unit_t>(kvstore_load{std::move(path)}); }

}  // namespace strata
