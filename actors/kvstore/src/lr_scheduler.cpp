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

expected<void> check_warmup(const char* type, const lr_warmup& w, double base_lr) {
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

expected<void> check_scheduler(const lr_scheduler& scheduler) {
  if (const auto* f = std::get_if<factor_scheduler>(&scheduler)) {
    if (f->step < 1) return bad("factor_scheduler::step is " + std::to_string(f->step) + "; expected at least 1.");
    if (auto r = check_factor("factor_scheduler", f->factor); !r) return r;
    return check_warmup("factor_scheduler", f->warmup, f->base_lr);
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
    return check_warmup("multi_factor_scheduler", m->warmup, m->base_lr);
  }
  if (const auto* c = std::get_if<cosine_scheduler>(&scheduler)) {
    if (auto r = check_warmup("cosine_scheduler", c->warmup, c->base_lr); !r) return r;
    if (c->max_update <= c->warmup.steps || c->max_update < 1)
      return bad("cosine_scheduler::max_update is " + std::to_string(c->max_update) +
                 "; expected at least 1 and more than warmup.steps.");
    if (c->final_lr > c->base_lr) return bad("cosine_scheduler::final_lr is above base_lr; expected it at or below.");
  }
  return {};
}

double learning_rate(const lr_scheduler& scheduler, std::int64_t n) {
  if (const auto* f = std::get_if<factor_scheduler>(&scheduler)) {
    if (n < f->warmup.steps) return warmup_lr(f->warmup, f->base_lr, n);
    double lr = f->base_lr;
    for (std::int64_t count = 0; n > count + f->step; count += f->step) {
      lr *= f->factor;
      if (lr < f->stop_factor_lr) lr = f->stop_factor_lr;
    }
    return lr;
  }
  if (const auto* m = std::get_if<multi_factor_scheduler>(&scheduler)) {
    if (n < m->warmup.steps) return warmup_lr(m->warmup, m->base_lr, n);
    double lr = m->base_lr;
    for (auto s : m->steps) {
      if (n <= s) break;
      lr *= m->factor;
    }
    return lr;
  }
  const auto& c = std::get<cosine_scheduler>(scheduler);
  if (n < c.warmup.steps) return warmup_lr(c.warmup, c.base_lr, n);
  const std::int64_t at = n <= c.max_update ? n : c.max_update;  // MXNet keeps the lr of max_update
  return c.final_lr + (c.base_lr - c.final_lr) *
                          (1.0 + std::cos(std::numbers::pi * static_cast<double>(at - c.warmup.steps) /
                                          static_cast<double>(c.max_update - c.warmup.steps))) /
                          2.0;
}

}  // namespace strata::kvstore
