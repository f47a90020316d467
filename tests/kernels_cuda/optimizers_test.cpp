// cuda::sgd_step and cuda::adam_step against the CPU kernels over several steps.
#include "strata/kernels/cuda.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "cuda_test_support.hpp"
#include "strata/kernels/cpu.hpp"

namespace optimizers_test {

namespace sk = strata::kernels;
namespace kc = strata::kernels::cuda;
using namespace kc::test;

BOOST_AUTO_TEST_SUITE(cuda_optimizers)

STRATA_GPU_TEST_CASE(sgd_matches_the_cpu_kernel_with_and_without_momentum_nesterov_and_weight_decay) {
  gpu_session gpu;
  random_source rng(601);
  const sk::sgd_options variants[] = {{.lr = 0.1}, {.lr = 0.05, .momentum = 0.9}, {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2},
                                      {.lr = 0.02, .momentum = 0.8, .weight_decay = 1e-3, .nesterov = true}};
  for (const std::size_t n : {std::size_t{1}, std::size_t{13}, std::size_t{100003}}) {
    for (const auto& o : variants) {
      auto param = rng.values(n);
      std::vector<float> buf(n, 0.0f);
      const dfloats dparam(param), dbuf(buf);
      for (int step = 0; step < 3; ++step) {
        const auto grad = rng.values(n);
        const dfloats dgrad(grad);
        kc::sgd_step(gpu.ctx(), n, dparam.get(), dgrad.get(), o.momentum != 0.0 ? dbuf.get() : nullptr, o);
        sk::cpu::sgd_step(n, param.data(), grad.data(), o.momentum != 0.0 ? buf.data() : nullptr, o);
        gpu.sync();
      }
      BOOST_TEST_INFO("n=" << n << " momentum=" << o.momentum << " nesterov=" << o.nesterov);
      BOOST_TEST(relative_error(dparam.download(), param) <= k_fp32_tol);
      BOOST_TEST(relative_error(dbuf.download(), buf) <= k_fp32_tol);
    }
  }
}

STRATA_GPU_TEST_CASE(adam_and_adamw_match_the_cpu_kernel) {
  gpu_session gpu;
  random_source rng(602);
  const sk::adam_options variants[] = {{}, {.lr = 1e-2, .weight_decay = 1e-2},
                                       {.lr = 1e-2, .beta1 = 0.8, .beta2 = 0.99, .weight_decay = 0.1, .decoupled_weight_decay = true}};
  for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{65537}}) {
    for (const auto& o : variants) {
      auto param = rng.values(n);
      std::vector<float> m(n, 0.0f), v(n, 0.0f);
      const dfloats dparam(param), dm(m), dv(v);
      for (std::int64_t step = 1; step <= 4; ++step) {
        const auto grad = rng.values(n);
        const dfloats dgrad(grad);
        kc::adam_step(gpu.ctx(), n, dparam.get(), dgrad.get(), dm.get(), dv.get(), step, o);
        sk::cpu::adam_step(n, param.data(), grad.data(), m.data(), v.data(), step, o);
        gpu.sync();
      }
      BOOST_TEST_INFO("n=" << n << " lr=" << o.lr << " adamw=" << o.decoupled_weight_decay);
      BOOST_TEST(relative_error(dparam.download(), param) <= k_fp32_tol);
      BOOST_TEST(relative_error(dm.download(), m) <= k_fp32_tol);
      BOOST_TEST(relative_error(dv.download(), v) <= k_fp32_tol);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace optimizers_test
