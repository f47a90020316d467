#include "strata/kernels/linear_cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include "common/checks.hpp"
#include "kernel_support.hpp"

namespace strata::kernels::cpu {
namespace {

constexpr std::size_t lanes = 16;

// max over x[0, n): 16 independent lanes so GCC vectorises it without reassociation flags.
float row_max(const float* x, std::size_t n) noexcept {
  float m[lanes];
  std::fill(m, m + lanes, x[0]);
  std::size_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    for (std::size_t l = 0; l < lanes; ++l) m[l] = std::max(m[l], x[j + l]);
  }
  float r = x[0];
  for (; j < n; ++j) r = std::max(r, x[j]);
  for (std::size_t l = 0; l < lanes; ++l) r = std::max(r, m[l]);
  return r;
}

// x[j] = exp(x[j] - shift) in place; returns the sum (16 float lanes, combined in double).
double exp_shift_sum(float* x, std::size_t n, float shift) noexcept {
  float s[lanes] = {};
  std::size_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    for (std::size_t l = 0; l < lanes; ++l) {
      const float e = detail::exp_approx(x[j + l] - shift);
      x[j + l] = e;
      s[l] += e;
    }
  }
  double r = 0.0;
  for (; j < n; ++j) {
    const float e = detail::exp_approx(x[j] - shift);
    x[j] = e;
    r += static_cast<double>(e);
  }
  for (std::size_t l = 0; l < lanes; ++l) r += static_cast<double>(s[l]);
  return r;
}

// One row of logits: adds the bias (if any), returns the loss -log softmax(row)[target] by
// log-sum-exp with max subtraction and, when `backward`, turns the row into
// dlogits = (softmax - onehot) * grad_scale in place. Run through detail::isa_call.
double row_loss(float* __restrict row, std::size_t v, const float* __restrict bias,
                std::size_t target, float grad_scale, bool backward) noexcept {
  if (bias != nullptr) {
    for (std::size_t j = 0; j < v; ++j) row[j] += bias[j];
  }
  const float target_logit = row[target];
  const float m = row_max(row, v);
  const double sum = exp_shift_sum(row, v, m);
  const double loss = static_cast<double>(m) + std::log(sum) - static_cast<double>(target_logit);
  if (backward) {
    const auto scale = static_cast<float>(static_cast<double>(grad_scale) / sum);
    for (std::size_t j = 0; j < v; ++j) row[j] *= scale;
    row[target] -= grad_scale;
  }
  return loss;
}

void check(const char* who, const linear_cross_entropy_dims& d, const linear_cross_entropy_inputs& in,
           const float* workspace, std::size_t workspace_size) {
  common::check_linear_cross_entropy(who, d, in);
  common::require(workspace != nullptr && workspace_size >= d.classes, who,
                  "the workspace must hold at least dims.classes floats (one row of logits)");
  common::check_ids(who, "targets", in.targets, d.rows, d.classes);
}

double run(const char* where, const linear_cross_entropy_dims& d,
           const linear_cross_entropy_inputs& in, const linear_cross_entropy_gradients* g,
           float* workspace, std::size_t workspace_size) {
  check(where, d, in, workspace, workspace_size);
  const cpu_isa isa = active_isa();
  const std::size_t v = d.classes;
  const std::size_t hs = d.hidden;
  const std::size_t block_rows = std::min(d.rows, workspace_size / v);
  const bool backward = g != nullptr;
  const float grad_scale =
      in.reduction == loss_reduction::mean ? static_cast<float>(1.0 / static_cast<double>(d.rows)) : 1.0f;
  double total = 0.0;
  for (std::size_t r0 = 0; r0 < d.rows; r0 += block_rows) {
    const std::size_t nb = std::min(block_rows, d.rows - r0);
    const float* h_blk = in.h + r0 * hs;
    float* logits = workspace;  // [nb, V]
    detail::sgemm(transpose::no, transpose::yes, nb, v, hs, 1.0f, h_blk, hs, in.w, hs, 0.0f,
                  logits, v);
    const std::size_t row_grain = std::max<std::size_t>(1, 16384 / v);
    total += detail::deterministic_reduce(
        nb, row_grain, 0.0,
        [&](const tbb::blocked_range<std::size_t>& rr, double acc) {
          for (std::size_t i = rr.begin(); i < rr.end(); ++i) {
            const auto target = static_cast<std::size_t>(in.targets[r0 + i]);
            acc += detail::isa_call<&row_loss>(isa, logits + i * v, v, in.b, target, grad_scale,
                                               backward);
          }
          return acc;
        },
        [](double x, double y) { return x + y; });
    if (!backward) continue;
    if (g->dh != nullptr) {
      detail::sgemm(transpose::no, transpose::no, nb, hs, v, 1.0f, logits, v, in.w, hs, 0.0f,
                    g->dh + r0 * hs, hs);
    }
    if (g->dw != nullptr) {
      detail::sgemm(transpose::yes, transpose::no, v, hs, nb, 1.0f, logits, v, h_blk, hs, 1.0f,
                    g->dw, hs);
    }
    if (g->db != nullptr) detail::add_column_sums(isa, nb, v, logits, g->db, nullptr);
  }
  return in.reduction == loss_reduction::mean ? total / static_cast<double>(d.rows) : total;
}

}  // namespace

double linear_cross_entropy_forward(const linear_cross_entropy_dims& d,
                                    const linear_cross_entropy_inputs& in, float* workspace,
                                    std::size_t workspace_size) {
  return run("linear_cross_entropy_forward", d, in, nullptr, workspace, workspace_size);
}

double linear_cross_entropy_forward_backward(const linear_cross_entropy_dims& d,
                                             const linear_cross_entropy_inputs& in,
                                             const linear_cross_entropy_gradients& g,
                                             float* workspace, std::size_t workspace_size) {
  return run("linear_cross_entropy_forward_backward", d, in, &g, workspace, workspace_size);
}

}  // namespace strata::kernels::cpu
