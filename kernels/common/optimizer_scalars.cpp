#include "optimizer_scalars.hpp"

#include <cmath>

namespace strata::kernels::common {

sgd_scalars sgd_step_scalars(const sgd_options& o) noexcept {
  sgd_scalars k{};
  k.wd = static_cast<float>(o.weight_decay);
  k.mom = static_cast<float>(o.momentum);
  k.neg_lr = static_cast<float>(-o.lr);
  return k;
}

adam_scalars adam_step_scalars(std::int64_t step, const adam_options& o) noexcept {
  const double stepd = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, stepd);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, stepd);
  adam_scalars k{};
  k.neg_step_size = static_cast<float>(-(o.lr / bias_correction1));
  k.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  k.one_minus_b1 = static_cast<float>(1.0 - o.beta1);
  k.b2 = static_cast<float>(o.beta2);
  k.one_minus_b2 = static_cast<float>(1.0 - o.beta2);
  k.eps = static_cast<float>(o.eps);
  k.wd = o.decoupled_weight_decay ? 0.0f : static_cast<float>(o.weight_decay);
  k.decay = o.decoupled_weight_decay ? static_cast<float>(1.0 - o.lr * o.weight_decay) : 1.0f;
  return k;
}

}  // namespace strata::kernels::common
