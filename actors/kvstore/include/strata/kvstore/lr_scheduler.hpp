#pragma once
/// \file
/// MXNet's learning-rate schedulers (mxnet/python/mxnet/lr_scheduler.py: FactorScheduler,
/// MultiFactorScheduler, CosineScheduler, with the base class's linear or constant warmup), for
/// a store's optimizer: `kvstore::set_optimizer{..., .scheduler = ...}` replaces the optimizer's
/// lr at each update by `learning_rate(scheduler, n)`, n being the key's update count.
///
/// A scheduler's `base_lr` left unset is the optimizer's lr, as MXNet's `Optimizer` sets its
/// scheduler's base_lr to its own learning_rate; one set by hand wins over the optimizer's lr.

#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include "strata/error.hpp"

namespace strata::kvstore {

/// How the lr rises during warmup (MXNet's `warmup_mode`).
enum class warmup_mode : std::uint8_t {
  linear,    ///< begin_lr + (base_lr - begin_lr) * n / steps
  constant,  ///< begin_lr
};

/// The first `steps` updates (n < steps) use the warmup lr instead of the schedule.
struct lr_warmup {
  std::int64_t steps = 0;  ///< >= 0 (MXNet's warmup_steps)
  double begin_lr = 0.0;   ///< >= 0 and <= the scheduler's base_lr (MXNet's warmup_begin_lr)
  kvstore::warmup_mode mode = kvstore::warmup_mode::linear;
};

/// base_lr times `factor` once every `step` updates, never below `stop_factor_lr`.
struct factor_scheduler {
  std::int64_t step = 1;  ///< >= 1
  double factor = 1.0;    ///< in (0, 1]
  double stop_factor_lr = 1e-8;     ///< >= 0
  std::optional<double> base_lr{};  ///< >= 0; unset: the optimizer's lr (alone: MXNet's 0.01)
  lr_warmup warmup{};
};

/// base_lr times `factor` for each of `steps` (increasing, each >= 1) that n has passed.
struct multi_factor_scheduler {
  std::vector<std::int64_t> steps{};
  double factor = 1.0;  ///< in (0, 1]
  std::optional<double> base_lr{};  ///< >= 0; unset: the optimizer's lr (alone: MXNet's 0.01)
  lr_warmup warmup{};
};

/// Half a cosine from base_lr (after warmup) down to final_lr at `max_update`, then final_lr.
struct cosine_scheduler {
  std::int64_t max_update = 1;      ///< > warmup.steps
  std::optional<double> base_lr{};  ///< > final_lr; unset: the optimizer's lr (alone: MXNet's 0.01)
  double final_lr = 0.0;            ///< >= 0 and below base_lr (MXNet: "Base lr has to be higher than final lr")
  lr_warmup warmup{};
};

/// No schedule (the optimizer's own lr), or one of MXNet's schedulers.
using lr_scheduler = std::variant<std::monostate, factor_scheduler, multi_factor_scheduler, cosine_scheduler>;

/// The scheduler's base_lr where it is set, else `optimizer_lr` (MXNet's rule).
lr_scheduler with_base_lr(lr_scheduler scheduler, double optimizer_lr);

/// Checks `scheduler` (an unset base_lr counts as MXNet's default 0.01): one sentence naming the
/// bad field and what was expected.
expected<void> check_scheduler(const lr_scheduler& scheduler);

/// The lr at update `num_update` (1 for a key's first update), computed in float64 as MXNet's
/// scheduler objects do when called with increasing update counts (an unset base_lr: 0.01).
/// Requires a checked scheduler other than monostate.
double learning_rate(const lr_scheduler& scheduler, std::int64_t num_update);

}  // namespace strata::kvstore
