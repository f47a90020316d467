#include "optimizer_states.hpp"

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "strata/device/shape.hpp"
#include "validation.hpp"

namespace strata::kvstore::internal {

namespace {

class writer {
public:
  template <class T>
  void put(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_flag(bool b) { put<std::uint8_t>(b ? 1 : 0); }
  void put_warmup(const lr_warmup& w) {
    put<std::int64_t>(w.steps);
    put<double>(w.begin_lr);
    put<std::uint8_t>(static_cast<std::uint8_t>(w.mode));
  }
  std::string out;
};

class reader {
public:
  explicit reader(const std::string& bytes) : bytes_(bytes) {}
  template <class T>
  T get() {
    T v;
    if (sizeof v > bytes_.size() - pos_) throw std::runtime_error("its optimizer header ends early");
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  bool get_flag() {
    const auto b = get<std::uint8_t>();
    if (b > 1) throw std::runtime_error("a flag of its optimizer header is neither 0 nor 1");
    return b == 1;
  }
  lr_warmup get_warmup() {
    lr_warmup w;
    w.steps = get<std::int64_t>();
    w.begin_lr = get<double>();
    const auto mode = get<std::uint8_t>();
    if (mode > 1) throw std::runtime_error("its warmup mode is unknown");
    w.mode = static_cast<warmup_mode>(mode);
    return w;
  }
  bool done() const noexcept { return pos_ == bytes_.size(); }

private:
  const std::string& bytes_;
  std::size_t pos_ = 0;
};

}  // namespace

std::string encode_optimizer(const optimizer_setting& setting) {
  writer w;
  if (const auto* sgd = std::get_if<kernels::sgd_options>(&setting.options)) {
    w.put<std::uint8_t>(1);
    w.put(sgd->lr), w.put(sgd->momentum), w.put(sgd->weight_decay), w.put_flag(sgd->nesterov);
  } else {
    const auto& adam = std::get<kernels::adam_options>(setting.options);
    w.put<std::uint8_t>(2);
    w.put(adam.lr), w.put(adam.beta1), w.put(adam.beta2), w.put(adam.eps), w.put(adam.weight_decay);
    w.put_flag(adam.decoupled_weight_decay);
  }
  w.put<std::uint8_t>(static_cast<std::uint8_t>(setting.scheduler.index()));
  // set_optimizer gave an unset base_lr the optimizer's lr already; the file holds the number.
  const double lr = std::visit([](const auto& o) { return o.lr; }, setting.options);
  std::visit(
      [&w, lr](const auto& s) {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, factor_scheduler>) {
          w.put(s.step), w.put(s.factor), w.put(s.stop_factor_lr), w.put(s.base_lr.value_or(lr)), w.put_warmup(s.warmup);
        } else if constexpr (std::is_same_v<S, multi_factor_scheduler>) {
          w.put<std::uint64_t>(s.steps.size());
          for (auto step : s.steps) w.put(step);
          w.put(s.factor), w.put(s.base_lr.value_or(lr)), w.put_warmup(s.warmup);
        } else if constexpr (std::is_same_v<S, cosine_scheduler>) {
          w.put(s.max_update), w.put(s.base_lr.value_or(lr)), w.put(s.final_lr), w.put_warmup(s.warmup);
        }
      },
      setting.scheduler);
  w.put_flag(setting.multi_precision);
  return std::move(w.out);
}

expected<optimizer_setting> decode_optimizer(const std::string& header, bool typed, const std::string& path) {
  optimizer_setting setting;
  try {
    reader r(header);
    const auto kind = r.get<std::uint8_t>();
    if (kind == 1) {
      kernels::sgd_options o;
      o.lr = r.get<double>(), o.momentum = r.get<double>(), o.weight_decay = r.get<double>(), o.nesterov = r.get_flag();
      setting.options = o;
    } else if (kind == 2) {
      kernels::adam_options o;
      o.lr = r.get<double>(), o.beta1 = r.get<double>(), o.beta2 = r.get<double>(), o.eps = r.get<double>();
      o.weight_decay = r.get<double>(), o.decoupled_weight_decay = r.get_flag();
      setting.options = o;
    } else {
      throw std::runtime_error("its optimizer is neither SGD nor Adam");
    }
    switch (r.get<std::uint8_t>()) {
      case 0: break;
      case 1: {
        factor_scheduler s;
        s.step = r.get<std::int64_t>(), s.factor = r.get<double>(), s.stop_factor_lr = r.get<double>();
        s.base_lr = r.get<double>(), s.warmup = r.get_warmup();
        setting.scheduler = s;
        break;
      }
      case 2: {
        multi_factor_scheduler s;
        const auto n = r.get<std::uint64_t>();
        if (n > header.size()) throw std::runtime_error("its scheduler's step count is out of range");
        for (std::uint64_t i = 0; i < n; ++i) s.steps.push_back(r.get<std::int64_t>());
        s.factor = r.get<double>(), s.base_lr = r.get<double>(), s.warmup = r.get_warmup();
        setting.scheduler = s;
        break;
      }
      case 3: {
        cosine_scheduler s;
        s.max_update = r.get<std::int64_t>(), s.base_lr = r.get<double>(), s.final_lr = r.get<double>();
        s.warmup = r.get_warmup();
        setting.scheduler = s;
        break;
      }
      default: throw std::runtime_error("its learning-rate scheduler is unknown");
    }
    if (typed) setting.multi_precision = r.get_flag();
    if (!r.done()) throw std::runtime_error("its optimizer header has bytes after its end");
  } catch (const std::exception& e) {
    return bad("kvstore load_optimizer_states: optimizer states file \"" + path + "\" is truncated or corrupt: " +
               e.what() + ".");
  }
  if (auto checked = check_scheduler(setting.scheduler); !checked)
    return bad("kvstore load_optimizer_states: optimizer states file \"" + path + "\" holds a bad scheduler: " +
               checked.error().message());
  return setting;
}

expected<optimizer_states> read_optimizer_states(const std::string& path, const shape_lookup& shape_of) {
  std::string header;
  bool typed = false;
  auto file = read_optimizer_states_file(path, header, typed);
  if (!file) return file.error();
  auto setting = decode_optimizer(header, typed, path);
  if (!setting) return setting.error();
  const auto* sgd = std::get_if<kernels::sgd_options>(&setting->options);
  const std::size_t kept = sgd ? (sgd->momentum != 0.0 ? 1 : 0) : 2;
  const std::string what = "kvstore load_optimizer_states: optimizer states file \"" + path + "\"";
  for (const auto& e : file->entries) {
    if (!e.master.empty() && !setting->multi_precision)
      return bad(what + " is truncated or corrupt: it has a master copy for key " + e.key.to_string() +
                 " but its optimizer is not multi_precision.");
    const auto [shape, type] = shape_of(e.key);
    if (shape == nullptr) return bad(what + " has key " + e.key.to_string() + ", which the store does not hold.");
    if (*shape != e.shape)
      return bad(what + " has key " + e.key.to_string() + " of shape " + shape_text(e.shape) +
                 "; the store holds it with shape " + shape_text(*shape) + ".");
    if (typed && type != e.type)  // "STRKVOPT" files name no dtype: their float32 states fit any key
      return bad(what + " has key " + e.key.to_string() + " of dtype " + std::string(to_string(e.type)) +
                 (e.master.empty() ? "" : " with a float32 master copy") + "; the store holds it as " +
                 std::string(to_string(type)) + ".");
    if (!e.arrays.empty() && e.arrays.size() != kept)
      return bad(what + " has " + std::to_string(e.arrays.size()) + " state arrays for key " + e.key.to_string() +
                 "; its optimizer keeps " + std::to_string(kept) + ".");
  }
  return optimizer_states{std::move(*setting), std::move(file->entries)};
}

expected<void> write_optimizer_states(const std::string& path, const optimizer_setting& setting,
                                      std::vector<checkpoint_entry> entries) {
  for (auto& e : entries) e.arrays.erase(e.arrays.begin());  // the value stays out
  return write_optimizer_states_file(path, encode_optimizer(setting), entries);
}

}  // namespace strata::kvstore::internal
