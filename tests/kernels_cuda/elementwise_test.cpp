// cuda::fill, scale, axpy, dropout, sum_arrays, global_norm and clip_grad_norm against the CPU kernels.
#include "strata/kernels/cuda.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "cuda_test_support.hpp"
#include "strata/kernels/cpu.hpp"

namespace elementwise_test {

namespace sk = strata::kernels;
namespace kc = strata::kernels::cuda;
using namespace kc::test;

BOOST_AUTO_TEST_SUITE(cuda_elementwise)

STRATA_GPU_TEST_CASE(fill_scale_and_axpy_match_the_cpu_kernels_on_aligned_and_unaligned_arrays) {
  gpu_session gpu;
  random_source rng(701);
  for (const std::size_t n : {std::size_t{1}, std::size_t{13}, std::size_t{1031}, std::size_t{1 << 20}}) {
    for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {  // offset 1: the scalar path
      auto x = rng.values(n + offset), y = rng.values(n + offset);
      const dfloats dx(x), dy(y);
      kc::scale(gpu.ctx(), n, 0.37f, dx.get() + offset);
      kc::axpy(gpu.ctx(), n, -1.25f, dx.get() + offset, dy.get() + offset);
      sk::cpu::scale(n, 0.37f, x.data() + offset);
      sk::cpu::axpy(n, -1.25f, x.data() + offset, y.data() + offset);
      BOOST_TEST_INFO("n=" << n << " offset=" << offset);
      BOOST_TEST(relative_error(dx.download(), x) <= k_fp32_tol);
      BOOST_TEST(relative_error(dy.download(), y) <= k_fp32_tol);
      kc::fill(gpu.ctx(), n, 2.5f, dx.get() + offset);
      const auto filled = dx.download();
      BOOST_TEST(std::count(filled.begin() + static_cast<std::ptrdiff_t>(offset), filled.end(), 2.5f) ==
                 static_cast<std::ptrdiff_t>(n));
      if (offset == 1) BOOST_TEST(filled[0] == x[0]);
    }
  }
}

STRATA_GPU_TEST_CASE(sum_arrays_equals_the_cpu_kernel_for_0_1_3_and_300_inputs_and_in_place) {
  gpu_session gpu;
  random_source rng(702);
  const std::size_t n = 4099;
  for (const std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{300}}) {
    std::vector<std::vector<float>> host;
    std::vector<std::unique_ptr<dfloats>> dev;
    std::vector<const float*> hp, dp;
    for (std::size_t j = 0; j < k; ++j) {
      host.push_back(rng.values(n));
      dev.push_back(std::make_unique<dfloats>(host.back()));
    }
    for (std::size_t j = 0; j < k; ++j) {
      hp.push_back(host[j].data());
      dp.push_back(dev[j]->get());
    }
    std::vector<float> out(n);
    const dfloats dout(rng.values(n));
    kc::sum_arrays(gpu.ctx(), dp, n, dout.get());
    sk::cpu::sum_arrays(hp, n, out.data());
    BOOST_TEST_INFO("k=" << k);
    BOOST_TEST(relative_error(dout.download(), out) <= k_fp32_tol);
    if (k >= 3) {  // out is inputs[1]
      kc::sum_arrays(gpu.ctx(), dp, n, dev[1]->get());
      BOOST_TEST(relative_error(dev[1]->download(), out) <= k_fp32_tol);
    }
  }
}

STRATA_GPU_TEST_CASE(global_norm_and_clip_grad_norm_match_the_cpu_kernels) {
  gpu_session gpu;
  random_source rng(703);
  const std::size_t sizes[] = {1, 13, 0, 100003, 7, 2000000};
  std::vector<std::vector<float>> host;
  std::vector<std::unique_ptr<dfloats>> dev;
  for (const std::size_t n : sizes) {
    host.push_back(rng.values(n));
    dev.push_back(std::make_unique<dfloats>(host.back()));
  }
  std::vector<std::span<const float>> hc, dc;
  std::vector<std::span<float>> hm, dm;
  for (std::size_t j = 0; j < host.size(); ++j) {
    hc.emplace_back(host[j]);
    hm.emplace_back(host[j]);
    dc.emplace_back(dev[j]->get(), dev[j]->size());
    dm.emplace_back(dev[j]->get(), dev[j]->size());
  }
  dfloats ws(kc::global_norm_workspace_size(host.size()));
  device_array<double> norm(1);
  kc::global_norm(gpu.ctx(), dc, ws.get(), ws.size(), norm.get());
  const double want = sk::cpu::global_norm(hc);
  BOOST_TEST(std::abs(download_double(norm) - want) <= 1e-9 * want);

  for (const double max_norm : {1e9, 3.0}) {  // no clipping, then clipping
    const double want_total = sk::cpu::clip_grad_norm(hm, max_norm);
    kc::clip_grad_norm(gpu.ctx(), dm, max_norm, ws.get(), ws.size(), norm.get());
    BOOST_TEST_INFO("max_norm=" << max_norm);
    BOOST_TEST(std::abs(download_double(norm) - want_total) <= 1e-9 * want_total);
    for (std::size_t j = 0; j < host.size(); ++j) BOOST_TEST(relative_error(dev[j]->download(), host[j]) <= k_fp32_tol);
  }
  // A NaN gradient propagates into all of them, as in PyTorch (error_if_nonfinite = false).
  std::vector<float> bad = host[1];
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  dev[1]->upload(bad);
  kc::clip_grad_norm(gpu.ctx(), dm, 3.0, ws.get(), ws.size(), nullptr);
  BOOST_TEST(std::isnan(dev[3]->download()[0]));
}

STRATA_GPU_TEST_CASE(dropout_draws_the_cpu_kernels_mask_bitwise) {
  gpu_session gpu;
  random_source rng(704);
  const std::size_t T = 5, B = 6, D = 37, n = T * B * D;  // a [5, 6, 37] block of a [*, 20, 37] activation
  auto x = rng.values(n);
  const dfloats dx(x);
  dfloats dy(n);
  const sk::dropout_block block{T, B, D, 3, 10, 20};
  const sk::dropout_mask mask{sk::dropout_key(9, 4, 2), 0.35f};
  kc::dropout(gpu.ctx(), block, mask, dx.get(), dy.get());
  std::vector<float> want(n);
  sk::cpu::dropout(block, mask, x.data(), want.data());
  BOOST_TEST(dy.download() == want);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace elementwise_test
