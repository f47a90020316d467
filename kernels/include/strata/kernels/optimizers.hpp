#pragma once

/// \file
/// Parameter updates with PyTorch's semantics (torch.optim.SGD, torch.optim.Adam/AdamW).

#include <cstddef>
#include <cstdint>

namespace strata::kernels {

/// torch.optim.SGD hyper-parameters (dampening is not supported, i.e. always 0). Doubles, like
/// PyTorch's Python floats; derived scalars are computed in double and rounded to float once.
struct sgd_options {
  double lr = 0.1;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

/// torch.optim.Adam hyper-parameters (amsgrad is not supported). With
/// decoupled_weight_decay it is torch.optim.AdamW.
struct adam_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;
};

}  // namespace strata::kernels

namespace strata::kernels::cpu {

/// One SGD step on n parameters, in place:
///   d_p = grad + weight_decay * param;
///   if momentum != 0: buf = momentum * buf + d_p; d_p = nesterov ? d_p + momentum * buf : buf
///   param -= lr * d_p.
///
/// `momentum_buffer` (n floats) must be zero before the first step — that reproduces PyTorch's
/// "buf = d_p" first step exactly; it may be null when momentum == 0.
/// \throws std::invalid_argument if param or grad is null while n > 0, or momentum != 0 and
///         momentum_buffer is null.
void sgd_step(std::size_t n, float* param, const float* grad, float* momentum_buffer,
              const sgd_options& o);

/// One Adam (or AdamW) step on n parameters, in place; `step` counts from 1 (PyTorch's state
/// "step" after its increment) and drives bias correction:
///   g = grad + weight_decay * param   (AdamW instead: param *= 1 - lr * weight_decay)
///   m = m + (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
///   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps).
/// exp_avg (m) and exp_avg_sq (v) hold n floats each, zero before step 1.
/// \throws std::invalid_argument if a pointer is null while n > 0 or step < 1.
void adam_step(std::size_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
               std::int64_t step, const adam_options& o);

}  // namespace strata::kernels::cpu
