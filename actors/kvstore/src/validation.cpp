#include "validation.hpp"

#include "crossing.hpp"
#include "strata/device/shape.hpp"
#include "strata/kernels/half.hpp"

#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace strata::kvstore {

std::string key::to_string() const {
  if (is_int()) return std::to_string(std::get<0>(value_));
  return "\"" + std::get<1>(value_) + "\"";
}

namespace internal {

expected<void> check_kind(const char* op, const kvstore::key& key, std::optional<bool> int_keys) {
  if (!int_keys || *int_keys == key.is_int()) return {};
  return bad(std::string("kvstore ") + op + ": key " + key.to_string() + " is " +
             (key.is_int() ? "an integer" : "a string") + " but this store holds " +
             (*int_keys ? "integer" : "string") + " keys; one store cannot mix key kinds.");
}

namespace {

expected<void> check_tensor(const char* op, const char* role, const kvstore::key& key, const tensor& t,
                            const key_layout& stored, const store_place& place) {
  std::string where = std::string("kvstore ") + op + ": the " + role + " for key " + key.to_string();
  if (!t.valid()) return bad(where + " is an empty tensor; expected a float32 tensor.");
  if (stored.shape && t.dtype() != stored.type)
    return bad(where + " has dtype " + std::string(to_string(t.dtype())) + ", expected " +
               std::string(to_string(stored.type)) + ".");
  if (!stored.shape && t.dtype() != dtype::float32 && !kernels::is_half(t.dtype()))
    return bad(where + " has dtype " + std::string(to_string(t.dtype())) + ", expected float32, float16 or bfloat16.");
  if (!stored.shape && kernels::is_half(t.dtype()) && place.kind == device_kind::sim)
    return bad(where + " has dtype " + std::string(to_string(t.dtype())) +
               ", which only cpu and cuda stores keep (this one is on " + place.name + "); expected float32.");
  if (stored.shape && t.shape() != *stored.shape)
    return bad(where + " has shape " + shape_text(t.shape()) + ", expected " + shape_text(*stored.shape) +
               " (the stored shape).");
  if (auto why = crossing_refusal(place.kind, place.name, t.storage().kind(), t.get_device().name()))
    return bad(where + *why);
  return {};
}

expected<void> check_pairs(const char* op, const char* role, std::size_t keys, std::size_t values) {
  if (keys == values && keys > 0) return {};
  if (keys == 0) return bad(std::string("kvstore ") + op + ": no keys given; expected at least one.");
  return bad(std::string("kvstore ") + op + ": " + std::to_string(keys) + " keys and " + std::to_string(values) +
             " " + role + "s; expected one " + role + " per key.");
}

}  // namespace

expected<void> check_existing(const char* op, const char* role, const std::vector<kvstore::key>& keys,
                              const std::vector<tensor>& tensors, std::optional<bool> int_keys,
                              const shape_lookup& shape_of, const store_place& place) {
  if (auto r = check_pairs(op, role, keys.size(), tensors.size()); !r) return r;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (auto r = check_kind(op, keys[i], int_keys); !r) return r;
    const key_layout stored = shape_of(keys[i]);
    if (!stored.shape)
      return bad(std::string("kvstore ") + op + ": key " + keys[i].to_string() + " is not initialised; call init first.");
    if (auto r = check_tensor(op, role, keys[i], tensors[i], stored, place); !r) return r;
  }
  return {};
}

expected<void> check_init(const kvstore::init& m, std::optional<bool>& int_keys, const shape_lookup& shape_of,
                          const store_place& place, kvstore::init_existing existing) {
  if (auto r = check_pairs("init", "value", m.keys.size(), m.values.size()); !r) return r;
  std::optional<bool> kind = int_keys;
  std::set<kvstore::key> seen;  // not a scan of the earlier keys: that is quadratic in the key count
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    const auto& key = m.keys[i];
    if (auto r = check_kind("init", key, kind); !r) return r;
    kind = key.is_int();
    const key_layout stored = shape_of(key);
    if (stored.shape && existing == kvstore::init_existing::error)
      return bad("kvstore init: key " + key.to_string() + " already exists.");
    if (!seen.insert(key).second) return bad("kvstore init: key " + key.to_string() + " is given twice.");
    if (auto r = check_tensor("init", "value", key, m.values[i], stored, place); !r) return r;
  }
  int_keys = kind;
  return {};
}

expected<void> check_broadcast(const kvstore::broadcast& m, std::optional<bool>& int_keys, const shape_lookup& shape_of,
                               const store_place& place, kvstore::init_existing existing) {
  std::optional<bool> kind = int_keys;
  if (auto r = check_init(m.init, kind, shape_of, place, existing); !r) return r;
  std::map<kvstore::key, key_layout> initialised;
  for (std::size_t i = 0; i < m.init.keys.size(); ++i)
    initialised.emplace(m.init.keys[i], key_layout{&m.init.values[i].shape(), m.init.values[i].dtype()});
  shape_lookup after = [&](const kvstore::key& key) -> key_layout {
    if (auto s = shape_of(key); s.shape) return s;
    auto it = initialised.find(key);
    return it == initialised.end() ? key_layout{} : it->second;
  };
  if (auto r = check_existing("broadcast", "output", m.pull.keys, m.pull.outs, kind, after, place); !r) return r;
  int_keys = kind;
  return {};
}

expected<void> check_learning_rate(double lr, bool has_optimizer, bool has_scheduler) {
  if (!std::isfinite(lr) || lr < 0)
    return bad("kvstore set_learning_rate: " + std::to_string(lr) + " is not a learning rate (a finite number >= 0).");
  if (!has_optimizer)
    return bad("kvstore set_learning_rate: the store has no optimizer (set_optimizer) whose rate it could change.");
  if (has_scheduler)
    return bad("kvstore set_learning_rate: the optimizer's lr scheduler sets the rate; set_optimizer without one "
               "to set it by hand.");
  return {};
}

namespace {

std::string number_text(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

/// `value` of hyper-parameter `field`: finite and in [low, high).
expected<void> check_hyper(const char* field, double value, double low, double high, const char* expected_text) {
  const bool inside = std::isfinite(value) && value >= low && value < high;
  if (inside) return {};
  return bad(std::string("kvstore set_optimizer: ") + field + " is " + number_text(value) + "; expected " +
             expected_text + ".");
}

}  // namespace

expected<void> prepare_optimizer(kvstore::set_optimizer& m) {
  constexpr double any = std::numeric_limits<double>::infinity();
  if (const auto* sgd = std::get_if<kernels::sgd_options>(&m.options)) {
    for (auto r : {check_hyper("sgd_options::lr", sgd->lr, 0, any, "a learning rate (a finite number >= 0)"),
                   check_hyper("sgd_options::momentum", sgd->momentum, 0, any, "a finite number >= 0"),
                   check_hyper("sgd_options::weight_decay", sgd->weight_decay, 0, any, "a finite number >= 0")})
      if (!r) return r;
    if (sgd->nesterov && sgd->momentum == 0)
      return bad("kvstore set_optimizer: sgd_options::nesterov is set with momentum 0; expected a momentum above 0 "
                 "(Nesterov momentum needs one).");
  } else {
    const auto& adam = std::get<kernels::adam_options>(m.options);
    for (auto r : {check_hyper("adam_options::lr", adam.lr, 0, any, "a learning rate (a finite number >= 0)"),
                   check_hyper("adam_options::beta1", adam.beta1, 0, 1, "a number in [0, 1)"),
                   check_hyper("adam_options::beta2", adam.beta2, 0, 1, "a number in [0, 1)"),
                   check_hyper("adam_options::eps", adam.eps, 0, any, "a finite number >= 0"),
                   check_hyper("adam_options::weight_decay", adam.weight_decay, 0, any, "a finite number >= 0")})
      if (!r) return r;
  }
  const double lr = std::visit([](const auto& o) { return o.lr; }, m.options);
  m.scheduler = with_base_lr(std::move(m.scheduler), lr);
  return check_scheduler(m.scheduler);
}

expected<bool> has_capability(const std::string& capability) {
  std::string lower = capability;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "optimizer") return true;
  return expected<bool>(bad("kvstore is_capable: unknown capability \"" + capability +
                            "\"; the known capabilities are: \"optimizer\"."));
}

kvstore::pushpull as_pushpull(const kvstore::pushpull_in_place& m) {
  return kvstore::pushpull{kvstore::push{m.keys, m.values}, kvstore::pull{m.keys, m.values, 0}, m.priority};
}

}  // namespace internal
}  // namespace strata::kvstore
