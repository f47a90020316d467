#pragma once
// The optimizer a `save_optimizer_states` file carries in its header: SGD or Adam with their
// hyper-parameters, and the learning-rate scheduler. Private to strata::kvstore.
//
// Header: u8 optimizer (1 sgd, 2 adam), its fields as f64 (booleans as u8) in declaration order;
// u8 scheduler (0 none, 1 factor, 2 multi-factor, 3 cosine), its fields (i64, f64; multi-factor's
// steps as u64 count + i64 each), then the warmup (i64 steps, f64 begin_lr, u8 mode); then, in
// "STRKVOP2" files, u8 multi_precision ("STRKVOPT" files end before it: no multi_precision).

#include <string>
#include <variant>

#include "checkpoint_file.hpp"
#include "strata/error.hpp"
#include "strata/kernels/optimizers.hpp"
#include "strata/kvstore/lr_scheduler.hpp"
#include "validation.hpp"

namespace strata::kvstore::internal {

/// What `set_optimizer` installed: the rule, its scheduler and multi_precision.
struct optimizer_setting {
  std::variant<kernels::sgd_options, kernels::adam_options> options;
  kvstore::lr_scheduler scheduler;
  bool multi_precision = false;
};

std::string encode_optimizer(const optimizer_setting& setting);
inline constexpr const char* no_optimizer_to_save =
    "kvstore save_optimizer_states: the store has no optimizer (set_optimizer) whose state it could save; "
    "assign and user updaters keep none that the store can see.";

/// The header of `path` decoded (`typed`: of a "STRKVOP2" file, which ends with multi_precision),
/// or one sentence naming the file.
expected<optimizer_setting> decode_optimizer(const std::string& header, bool typed, const std::string& path);

/// The optimizer states file at `path`, read and checked whole against a store's keys: each of
/// its keys exists with the same shape (and, in a "STRKVOP2" file, dtype) and has no state yet or
/// the state `setting` keeps; master copies only with a multi_precision optimizer.
struct optimizer_states {
  optimizer_setting setting;
  std::vector<checkpoint_entry> entries;  // arrays: states only; master: the master copy, or empty
};
expected<optimizer_states> read_optimizer_states(const std::string& path, const shape_lookup& shape_of);

/// `entries` of a snapshot (value, then state) as an optimizer states file with `setting`.
expected<void> write_optimizer_states(const std::string& path, const optimizer_setting& setting,
                                      std::vector<checkpoint_entry> entries);

}  // namespace strata::kvstore::internal
