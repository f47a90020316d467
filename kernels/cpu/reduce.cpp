#include "strata/kernels/reduce.hpp"

#include <cmath>
#include <cstddef>
#include <span>

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include "common/checks.hpp"
#include "kernel_support.hpp"

namespace strata::kernels::cpu {
namespace {

// Sum of squares of x[0, n): 16 double lanes, so the loop vectorises without reassociation
// flags, then combined in double. Run through detail::isa_call.
double sum_squares(const float* x, std::size_t n) noexcept {
  constexpr std::size_t lanes = 16;
  double s[lanes] = {};
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    for (std::size_t l = 0; l < lanes; ++l) {
      const auto v = static_cast<double>(x[i + l]);
      s[l] += v * v;
    }
  }
  double r = 0.0;
  for (; i < n; ++i) r += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  for (std::size_t l = 0; l < lanes; ++l) r += s[l];
  return r;
}

double tensor_sum_squares(cpu_isa isa, std::span<const float> t) {
  if (t.size() <= detail::memory_grain) return detail::isa_call<&sum_squares>(isa, t.data(), t.size());
  // Deterministic split, so the same data gives the same norm on every run.
  return detail::deterministic_reduce(
      t.size(), detail::memory_grain, 0.0,
      [&](const tbb::blocked_range<std::size_t>& r, double acc) {
        return acc + detail::isa_call<&sum_squares>(isa, t.data() + r.begin(), r.size());
      },
      [](double a, double b) { return a + b; });
}

}  // namespace

double global_norm(std::span<const std::span<const float>> tensors) {
  const cpu_isa isa = active_isa();
  double total = 0.0;
  for (const auto& t : tensors) total += tensor_sum_squares(isa, t);
  return std::sqrt(total);
}

double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm) {
  common::check_clip_grad_norm("clip_grad_norm", max_norm);
  const cpu_isa isa = active_isa();
  double total_sq = 0.0;
  for (const auto& g : grads) total_sq += tensor_sum_squares(isa, g);
  const double total = std::sqrt(total_sq);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0 || !std::isfinite(total)) {
    const auto f = static_cast<float>(coef);
    for (const auto& g : grads) {
      float* p = g.data();
      detail::parallel_blocks(g.size(), detail::memory_grain, [&](std::size_t lo, std::size_t hi) {
        detail::isa_call<&detail::scale_block>(isa, hi - lo, f, p + lo);
      });
    }
  }
  return total;
}

}  // namespace strata::kernels::cpu
