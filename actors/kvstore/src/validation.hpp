#pragma once
// Validation of requests, shared by a store and a sharded store's router: every request is
// checked whole before anything changes, so a failed request leaves the store as it was.
// Private to strata::kvstore.

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "strata/device/kind.hpp"
#include "strata/device/tensor.hpp"
#include "strata/error.hpp"
#include "strata/kvstore/kvstore.hpp"

namespace strata::kvstore::internal {

/// An invalid-argument error with `text` (one sentence).
inline error bad(std::string text) { return error(errc::invalid_argument, std::move(text)); }

/// Runs `f` (returning expected<void>); an exception becomes a runtime failure "kvstore <op>: ...".
template <class F>
expected<void> guarded(const char* op, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return error(errc::runtime_failure, std::string("kvstore ") + op + ": " + e.what());
  }
}

/// Where a store keeps its values, for tensor checks and their error texts.
struct store_place {
  device_kind kind = device_kind::cpu;
  std::string name;
};

/// What a store holds for a key: its shape (null when the key is not initialised) and dtype.
struct key_layout {
  const std::vector<std::int64_t>* shape = nullptr;
  strata::dtype type = dtype::float32;
};
/// The layout of a key in a store.
using shape_lookup = std::function<key_layout(const kvstore::key&)>;

/// Keys and tensors of a push, pull or pushpull (`op`; `role` "value" or "output") against
/// existing keys: one tensor per key, key kind, presence, dtype (the key's), shape, device.
expected<void> check_existing(const char* op, const char* role, const std::vector<kvstore::key>& keys,
                              const std::vector<tensor>& tensors, std::optional<bool> int_keys,
                              const shape_lookup& shape_of, const store_place& place);

/// An init: new, distinct keys of the store's kind, float32 values, or float16 / bfloat16 ones on
/// cpu stores (with `keep_first`, existing keys too, given a value of their stored shape and
/// dtype). `int_keys` becomes the kind the store holds
/// afterwards.
expected<void> check_init(const kvstore::init& m, std::optional<bool>& int_keys, const shape_lookup& shape_of,
                          const store_place& place, kvstore::init_existing existing = kvstore::init_existing::error);

/// A broadcast: its init as `check_init`, then its pull against the keys held or initialised by
/// it. `int_keys` as in `check_init`.
expected<void> check_broadcast(const kvstore::broadcast& m, std::optional<bool>& int_keys, const shape_lookup& shape_of,
                               const store_place& place, kvstore::init_existing existing);

/// `key`'s kind (integer or string) against the kind a store holds (`int_keys`; none yet: any).
expected<void> check_kind(const char* op, const kvstore::key& key, std::optional<bool> int_keys);

/// A `set_learning_rate` to `lr` on a store with (`has_optimizer`) or without an SGD or Adam
/// rule, and with (`has_scheduler`) or without an lr scheduler on it.
expected<void> check_learning_rate(double lr, bool has_optimizer, bool has_scheduler);

/// A `set_optimizer` made ready to install: its hyper-parameters checked (torch.optim's rules, and
/// finite), its scheduler's unset base_lr set to the optimizer's lr (MXNet's rule), and the
/// scheduler checked. One sentence naming the bad field otherwise.
expected<void> prepare_optimizer(kvstore::set_optimizer& m);

/// The answer to `kvstore::is_capable` of a strata store: true for "optimizer" (any case), an
/// error naming the known capabilities otherwise.
expected<bool> has_capability(const std::string& capability);

/// `m` as a pushpull whose outputs are its values.
kvstore::pushpull as_pushpull(const kvstore::pushpull_in_place& m);

}  // namespace strata::kvstore::internal
