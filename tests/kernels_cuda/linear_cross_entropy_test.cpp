// cuda::linear_cross_entropy_forward(_backward) against the CPU kernels.
#include "strata/kernels/cuda.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "cuda_test_support.hpp"
#include "strata/kernels/cpu.hpp"

namespace linear_cross_entropy_test {

namespace sk = strata::kernels;
namespace kc = strata::kernels::cuda;
using namespace kc::test;

BOOST_AUTO_TEST_SUITE(cuda_linear_cross_entropy)

STRATA_GPU_TEST_CASE(decoder_loss_and_gradients_match_the_cpu_kernel_for_block_sizes_and_reductions) {
  gpu_session gpu;
  random_source rng(501);
  for (const sk::linear_cross_entropy_dims d : {sk::linear_cross_entropy_dims{1, 7, 13}, sk::linear_cross_entropy_dims{13, 7, 29},
                                                sk::linear_cross_entropy_dims{70, 48, 1000}}) {
    // Scaled so the logits are large: the max subtraction matters.
    const auto h = rng.values(d.rows * d.hidden, -3.0f, 3.0f), w = rng.values(d.classes * d.hidden, -3.0f, 3.0f);
    const auto b = rng.values(d.classes);
    const auto targets = rng.ids(d.rows, d.classes);
    const auto dw0 = rng.values(d.classes * d.hidden), db0 = rng.values(d.classes);
    const dfloats dh_(h), dw_(w), db_(b);
    const device_array<std::int32_t> dtargets(targets);
    for (const auto reduction : {sk::loss_reduction::mean, sk::loss_reduction::sum}) {
      for (const std::size_t block_rows : {d.rows, std::size_t{3}, std::size_t{1}}) {
        for (const bool with_bias : {true, false}) {
          const sk::linear_cross_entropy_inputs cin{h.data(), w.data(), with_bias ? b.data() : nullptr, targets.data(), reduction};
          std::vector<float> cws(sk::linear_cross_entropy_workspace_size(d, block_rows));
          std::vector<float> gdh(d.rows * d.hidden), gdw = dw0, gdb = db0;
          const double want_forward = sk::cpu::linear_cross_entropy_forward(d, cin, cws.data(), cws.size());
          const double want = sk::cpu::linear_cross_entropy_forward_backward(d, cin, {gdh.data(), gdw.data(), gdb.data()},
                                                                             cws.data(), cws.size());

          const sk::linear_cross_entropy_inputs gin{dh_.get(), dw_.get(), with_bias ? db_.get() : nullptr, dtargets.get(),
                                                    reduction};
          dfloats ws(kc::linear_cross_entropy_device_workspace_size(d, block_rows));
          dfloats out_dh(d.rows * d.hidden), out_dw(dw0), out_db(db0);
          device_array<double> loss_f(1), loss_fb(1);
          kc::linear_cross_entropy_forward(gpu.ctx(), d, gin, ws.get(), ws.size(), loss_f.get());
          kc::linear_cross_entropy_forward_backward(gpu.ctx(), d, gin, {out_dh.get(), out_dw.get(), out_db.get()}, ws.get(),
                                                    ws.size(), loss_fb.get());
          BOOST_TEST_INFO("N=" << d.rows << " H=" << d.hidden << " V=" << d.classes << " block_rows=" << block_rows
                               << " sum=" << (reduction == sk::loss_reduction::sum) << " bias=" << with_bias);
          BOOST_TEST(std::abs(download_double(loss_f) - want_forward) <= k_fp32_tol * std::abs(want_forward));
          BOOST_TEST(std::abs(download_double(loss_fb) - want) <= k_fp32_tol * std::abs(want));
          BOOST_TEST(relative_error(out_dh.download(), gdh) <= k_fp32_tol);
          BOOST_TEST(relative_error(out_dw.download(), gdw) <= k_fp32_tol);
          BOOST_TEST(relative_error(out_db.download(), gdb) <= k_fp32_tol);
        }
      }
    }
  }
}

STRATA_GPU_TEST_CASE(an_out_of_range_target_makes_the_loss_nan) {
  gpu_session gpu;
  random_source rng(502);
  const sk::linear_cross_entropy_dims d{3, 5, 7};
  const dfloats h(rng.values(15)), w(rng.values(35)), ws(kc::linear_cross_entropy_device_workspace_size(d, 3)), dh(15);
  const device_array<std::int32_t> targets(std::vector<std::int32_t>{0, 7, 2});
  device_array<double> loss(1);
  kc::linear_cross_entropy_forward_backward(gpu.ctx(), d, {.h = h.get(), .w = w.get(), .targets = targets.get()},
                                            {.dh = dh.get()}, ws.get(), ws.size(), loss.get());
  BOOST_TEST(std::isnan(download_double(loss)));
  const auto g = dh.download();
  BOOST_TEST(std::isnan(g[5]));  // row 1's gradient
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace linear_cross_entropy_test
