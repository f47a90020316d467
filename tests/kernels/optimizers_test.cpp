// sgd_step / adam_step against float64 transcriptions of torch.optim's update rules.
#include "strata/kernels/optimizers.hpp"

#include <cmath>
#include <stdexcept>

#include <boost/test/unit_test.hpp>

#include "reference.hpp"

namespace optimizers_test {

namespace sk = strata::kernels;
namespace ref = strata::kernels::test;

BOOST_AUTO_TEST_SUITE(optimizers)

BOOST_AUTO_TEST_CASE(sgd_step_follows_pytorch_sgd_over_several_steps) {
  struct config { double lr, momentum, wd; bool nesterov; };
  std::uint64_t seed = 1000;
  for (const config c : {config{0.1, 0.0, 0.0, false}, config{0.05, 0.9, 1e-2, false}, config{0.2, 0.5, 0.0, true},
                         config{0.01, 0.9, 5e-4, true}}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{13}, std::size_t{100003}}) {
      ref::random_source rng(++seed);
      ref::vec p = rng.values(n), buf(n, 0.0);
      ref::fvec fp = ref::to_float(p), fbuf(n, 0.0f);
      for (int step = 0; step < 4; ++step) {
        const ref::vec g = rng.values(n);
        const ref::fvec fg = ref::to_float(g);
        sk::cpu::sgd_step(n, fp.data(), fg.data(), c.momentum != 0.0 ? fbuf.data() : nullptr,
                          {.lr = c.lr, .momentum = c.momentum, .weight_decay = c.wd, .nesterov = c.nesterov});
        for (std::size_t i = 0; i < n; ++i) {
          double d = g[i] + c.wd * p[i];
          if (c.momentum != 0.0) {
            buf[i] = step == 0 ? d : c.momentum * buf[i] + d;  // PyTorch: buf = clone(d_p) at first
            d = c.nesterov ? d + c.momentum * buf[i] : buf[i];
          }
          p[i] -= c.lr * d;
        }
      }
      BOOST_TEST_INFO("lr=" << c.lr << " momentum=" << c.momentum << " wd=" << c.wd << " nesterov=" << c.nesterov << " n=" << n);
      BOOST_TEST(ref::relative_error(fp, p) <= ref::k_fp32_tol);
      if (c.momentum != 0.0) BOOST_TEST(ref::relative_error(fbuf, buf) <= ref::k_fp32_tol);
    }
  }
}

BOOST_AUTO_TEST_CASE(adam_step_follows_pytorch_adam_and_adamw_with_bias_correction) {
  struct config { double lr, beta1, beta2, eps, wd; bool decoupled; };
  std::uint64_t seed = 1100;
  for (const config c : {config{1e-3, 0.9, 0.999, 1e-8, 0.0, false}, config{1e-2, 0.8, 0.99, 1e-6, 0.1, false},
                         config{3e-3, 0.9, 0.999, 1e-8, 0.05, true}}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{70001}}) {
      ref::random_source rng(++seed);
      ref::vec p = rng.values(n), m(n, 0.0), v(n, 0.0);
      ref::fvec fp = ref::to_float(p), fm(n, 0.0f), fv(n, 0.0f);
      for (std::int64_t step = 1; step <= 5; ++step) {
        const ref::vec g0 = rng.values(n);
        const ref::fvec fg = ref::to_float(g0);
        sk::cpu::adam_step(n, fp.data(), fg.data(), fm.data(), fv.data(), step,
                           {.lr = c.lr, .beta1 = c.beta1, .beta2 = c.beta2, .eps = c.eps, .weight_decay = c.wd,
                            .decoupled_weight_decay = c.decoupled});
        const double bc1 = 1.0 - std::pow(c.beta1, static_cast<double>(step));
        const double bc2 = 1.0 - std::pow(c.beta2, static_cast<double>(step));
        for (std::size_t i = 0; i < n; ++i) {
          double g = g0[i];
          if (c.decoupled) {
            p[i] *= 1.0 - c.lr * c.wd;
          } else {
            g += c.wd * p[i];
          }
          m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * g;
          v[i] = c.beta2 * v[i] + (1.0 - c.beta2) * g * g;
          p[i] -= c.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + c.eps);
        }
      }
      BOOST_TEST_INFO("lr=" << c.lr << " wd=" << c.wd << " decoupled=" << c.decoupled << " n=" << n);
      BOOST_TEST(ref::relative_error(fp, p) <= ref::k_fp32_tol);
      BOOST_TEST(ref::relative_error(fm, m) <= ref::k_fp32_tol);
      BOOST_TEST(ref::relative_error(fv, v) <= ref::k_fp32_tol);
    }
  }
}

BOOST_AUTO_TEST_CASE(optimizers_reject_missing_state) {
  ref::fvec p(4, 1.0f), g(4, 1.0f);
  BOOST_CHECK_THROW(sk::cpu::sgd_step(4, p.data(), g.data(), nullptr, {.lr = 0.1, .momentum = 0.9}), std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::adam_step(4, p.data(), g.data(), nullptr, nullptr, 1, {}), std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::adam_step(4, p.data(), g.data(), p.data(), g.data(), 0, {}), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace optimizers_test
