#include "strata/kvstore/lr_scheduler.hpp"

#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

// The formulas of mxnet/python/mxnet/lr_scheduler.py (MXNet 1.x). MXNet's schedulers are objects
// that lower base_lr in place as they are called with growing update counts; these functions
// replay those steps from the start, so a store restarted from a checkpoint gets the same lr.
namespace strata::kvstore {

namespace {

std::string number(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

error bad(const std::string& text) { return error(errc::invalid_argument, "kvstore set_optimizer: " + text); }

/// MXNet's scheduler default, for a scheduler used without an optimizer.
constexpr double mxnet_base_lr = 0.01;

double base_of(const std::optional<double>& base_lr) { return base_lr.value_or(mxnet_base_lr); }

expected<void> check_rate(const std::string& field, double lr) {
  if (!std::isfinite(lr) || lr < 0)
    return bad(field + " is " + number(lr) + "; expected a learning rate (a finite number >= 0).");
  return {};
}

expected<void> check_warmup(const char* type, const lr_warmup& w, double base_lr) {
  if (auto r = check_rate(std::string(type) + "::base_lr", base_lr); !r) return r;
  if (auto r = check_rate(std::string(type) + "::warmup.begin_lr", w.begin_lr); !r) return r;
  if (w.steps < 0)
    return bad(std::string(type) + "::warmup.steps is " + std::to_string(w.steps) + "; expected 0 or more.");
  if (w.steps > 0 && w.begin_lr > base_lr)
    return bad(std::string(type) + "::warmup.begin_lr is above base_lr; expected the warmup to start at or below it.");
  return {};
}

expected<void> check_factor(const char* type, double factor) {
  if (!(factor > 0.0 && factor <= 1.0))
    return bad(std::string(type) + "::factor is " + number(factor) +
               "; expected a factor in (0, 1] that lowers the lr.");
  return {};
}

double warmup_lr(const lr_warmup& w, double base_lr, std::int64_t n) {
  if (w.mode == warmup_mode::constant) return w.begin_lr;
  return w.begin_lr + (base_lr - w.begin_lr) * static_cast<double>(n) / static_cast<double>(w.steps);
}

}  // namespace

lr_scheduler with_base_lr(lr_scheduler scheduler, double optimizer_lr) {
  std::visit(
      [optimizer_lr](auto& s) {
        if constexpr (requires { s.base_lr; })
          if (!s.base_lr) s.base_lr = optimizer_lr;
      },
      scheduler);
  return scheduler;
}

expected<void> check_scheduler(const lr_scheduler& scheduler) {
  if (const auto* f = std::get_if<factor_scheduler>(&scheduler)) {
    if (f->step < 1) return bad("factor_scheduler::step is " + std::to_string(f->step) + "; expected at least 1.");
    if (auto r = check_factor("factor_scheduler", f->factor); !r) return r;
    if (auto r = check_rate("factor_scheduler::stop_factor_lr", f->stop_factor_lr); !r) return r;
    return check_warmup("factor_scheduler", f->warmup, base_of(f->base_lr));
  }
  if (const auto* m = std::get_if<multi_factor_scheduler>(&scheduler)) {
    if (m->steps.empty()) return bad("multi_factor_scheduler::steps is empty; expected at least one step.");
    for (std::size_t i = 0; i < m->steps.size(); ++i) {
      if (m->steps[i] < 1)
        return bad("multi_factor_scheduler::steps[" + std::to_string(i) + "] is " + std::to_string(m->steps[i]) +
                   "; expected at least 1.");
      if (i > 0 && m->steps[i] <= m->steps[i - 1])
        return bad("multi_factor_scheduler::steps is not increasing at index " + std::to_string(i) +
                   "; expected increasing steps.");
    }
    if (auto r = check_factor("multi_factor_scheduler", m->factor); !r) return r;
    return check_warmup("multi_factor_scheduler", m->warmup, base_of(m->base_lr));
  }
  if (const auto* c = std::get_if<cosine_scheduler>(&scheduler)) {
    if (auto r = check_warmup("cosine_scheduler", c->warmup, base_of(c->base_lr)); !r) return r;
    if (auto r = check_rate("cosine_scheduler::final_lr", c->final_lr); !r) return r;
    if (c->max_update <= c->warmup.steps || c->max_update < 1)
      return bad("cosine_scheduler::max_update is " + std::to_string(c->max_update) +
                 "; expected at least 1 and more than warmup.steps.");
    if (!(c->final_lr < base_of(c->base_lr)))
      return bad("cosine_scheduler::final_lr is " + number(c->final_lr) + ", not below base_lr " +
                 number(base_of(c->base_lr)) + "; expected the cosine to fall from base_lr to final_lr.");
  }
  return {};
}

double learning_rate(const lr_scheduler& scheduler, std::int64_t n) {
  if (const auto* f = std::get_if<factor_scheduler>(&scheduler)) {
    if (n < f->warmup.steps) return warmup_lr(f->warmup, base_of(f->base_lr), n);
    double lr = base_of(f->base_lr);
    for (std::int64_t count = 0; n > count + f->step; count += f->step) {
      lr *= f->factor;
      if (lr < f->stop_factor_lr) lr = f->stop_factor_lr;
    }
    return lr;
  }
  if (const auto* m = std::get_if<multi_factor_scheduler>(&scheduler)) {
    if (n < m->warmup.steps) return warmup_lr(m->warmup, base_of(m->base_lr), n);
    double lr = base_of(m->base_lr);
    for (auto s : m->steps) {
      if (n <= s) break;
      lr *= m->factor;
    }
    return lr;
  }
  const auto& c = std::get<cosine_scheduler>(scheduler);
  const double base = base_of(c.base_lr);
  if (n < c.warmup.steps) return warmup_lr(c.warmup, base, n);
  const std::int64_t at = n <= c.max_update ? n : c.max_update;  // MXNet keeps the lr of max_update
  return c.final_lr + (base - c.final_lr) *
                          (1.0 + std::cos(std::numbers::pi * static_cast<double>(at - c.warmup.steps) /
                                          static_cast<double>(c.max_update - c.warmup.steps))) /
                          2.0;
}

}  // namespace strata::kvstore
