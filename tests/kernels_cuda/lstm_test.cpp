// cuda::lstm_forward / cuda::lstm_backward against the CPU kernels on the same data, with
// every optional input present and with all of them absent, and chunked against whole.
#include "strata/kernels/cuda.hpp"

#include <cstddef>
#include <memory>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "cuda_test_support.hpp"
#include "strata/kernels/cpu.hpp"

namespace sk = strata::kernels;
namespace kc = strata::kernels::cuda;
using namespace kc::test;

namespace lstm_test {

using floats = std::vector<float>;

// Host data of one LSTM problem: parameters, inputs, upstream gradients and the initial
// (non-zero, to check accumulation) parameter gradients.
struct problem {
  sk::lstm_dims d;
  floats w_ih, w_hh, b_ih, b_hh, x, h0, c0, dy, dh_out, dc_out, gw_ih, gw_hh, gb_ih, gb_hh;
};

problem make_problem(std::uint64_t seed, sk::lstm_dims d) {
  random_source rng(seed);
  const std::size_t g4 = 4 * d.hidden, bh = d.batch * d.hidden;
  problem p{d, rng.values(g4 * d.input, -0.5f, 0.5f), rng.values(g4 * d.hidden, -0.5f, 0.5f), rng.values(g4, -0.5f, 0.5f),
            rng.values(g4, -0.5f, 0.5f), rng.values(d.steps * d.batch * d.input), rng.values(bh, -0.5f, 0.5f),
            rng.values(bh, -0.5f, 0.5f), rng.values(d.steps * bh), rng.values(bh), rng.values(bh),
            rng.values(g4 * d.input), rng.values(g4 * d.hidden), rng.values(g4), rng.values(g4)};
  return p;
}

struct outputs {
  floats y, h, c, dx, dh0, dc0, gw_ih, gw_hh, gb_ih, gb_hh;
};

outputs run_cpu(const problem& p, bool optional_inputs) {
  const auto& d = p.d;
  const std::size_t bh = d.batch * d.hidden;
  outputs o{floats(d.steps * bh), floats(bh), floats(bh), floats(d.steps * d.batch * d.input), floats(bh), floats(bh),
            p.gw_ih, p.gw_hh, p.gb_ih, p.gb_hh};
  floats reserve(sk::lstm_reserve_size(d)), work(sk::lstm_backward_workspace_size(d));
  const sk::lstm_weights w{p.w_ih.data(), p.w_hh.data(), optional_inputs ? p.b_ih.data() : nullptr,
                           optional_inputs ? p.b_hh.data() : nullptr};
  sk::cpu::lstm_forward(d, w, {.x = p.x.data(), .h_in = optional_inputs ? p.h0.data() : nullptr,
                               .c_in = optional_inputs ? p.c0.data() : nullptr, .y = o.y.data(), .h_out = o.h.data(),
                               .c_out = o.c.data(), .reserve = reserve.data()});
  sk::cpu::lstm_backward(d, w,
                         {.x = p.x.data(), .reserve = reserve.data(), .dy = optional_inputs ? p.dy.data() : nullptr,
                          .dh_out = optional_inputs ? p.dh_out.data() : nullptr,
                          .dc_out = optional_inputs ? p.dc_out.data() : nullptr, .dx = o.dx.data(),
                          .dh_in = o.dh0.data(), .dc_in = o.dc0.data(), .workspace = work.data()},
                         {o.gw_ih.data(), o.gw_hh.data(), o.gb_ih.data(), o.gb_hh.data()});
  return o;
}

// The problem's arrays on the device.
struct device_problem {
  dfloats w_ih, w_hh, b_ih, b_hh, x, h0, c0, dy, dh_out, dc_out;
  explicit device_problem(const problem& p)
      : w_ih(p.w_ih), w_hh(p.w_hh), b_ih(p.b_ih), b_hh(p.b_hh), x(p.x), h0(p.h0), c0(p.c0), dy(p.dy),
        dh_out(p.dh_out), dc_out(p.dc_out) {}
};

// Forward and backward on the GPU, the sequence cut into chunks of `chunk` steps (0: whole).
outputs run_gpu(const gpu_session& gpu, const problem& p, bool optional_inputs, std::size_t chunk = 0) {
  const auto& d = p.d;
  const std::size_t bh = d.batch * d.hidden, bi = d.batch * d.input;
  const device_problem dp(p);
  dfloats y(d.steps * bh), h(bh), c(bh), dx(d.steps * bi), dh0(bh), dc0(bh);
  dfloats gw_ih(p.gw_ih), gw_hh(p.gw_hh), gb_ih(p.gb_ih), gb_hh(p.gb_hh);
  const sk::lstm_weights w{dp.w_ih.get(), dp.w_hh.get(), optional_inputs ? dp.b_ih.get() : nullptr,
                           optional_inputs ? dp.b_hh.get() : nullptr};
  if (chunk == 0) chunk = d.steps;
  // Chunk boundaries; each chunk keeps its own reserve and carries (h, c) forward.
  std::vector<std::size_t> t0s;
  for (std::size_t t = 0; t < d.steps; t += chunk) t0s.push_back(t);
  std::vector<std::unique_ptr<dfloats>> reserves;
  dfloats h_mid(bh), c_mid(bh), dh_mid(bh), dc_mid(bh);
  dfloats h_tmp(bh), c_tmp(bh);
  for (std::size_t ci = 0; ci < t0s.size(); ++ci) {
    const std::size_t t0 = t0s[ci], steps = std::min(chunk, d.steps - t0);
    const sk::lstm_dims cd{steps, d.batch, d.input, d.hidden};
    reserves.push_back(std::make_unique<dfloats>(kc::lstm_reserve_size(cd)));
    const bool first = ci == 0, last = ci + 1 == t0s.size();
    const float* h_in = first ? (optional_inputs ? dp.h0.get() : nullptr) : h_mid.get();
    const float* c_in = first ? (optional_inputs ? dp.c0.get() : nullptr) : c_mid.get();
    kc::lstm_forward(gpu.ctx(), cd, w, {.x = dp.x.get() + t0 * bi, .h_in = h_in, .c_in = c_in, .y = y.get() + t0 * bh,
                                        .h_out = last ? h.get() : h_tmp.get(), .c_out = last ? c.get() : c_tmp.get(),
                                        .reserve = reserves.back()->get()});
    if (!last) {
      kc::sum_arrays(gpu.ctx(), std::vector<const float*>{h_tmp.get()}, bh, h_mid.get());
      kc::sum_arrays(gpu.ctx(), std::vector<const float*>{c_tmp.get()}, bh, c_mid.get());
    }
  }
  for (std::size_t ci = t0s.size(); ci-- > 0;) {
    const std::size_t t0 = t0s[ci], steps = std::min(chunk, d.steps - t0);
    const sk::lstm_dims cd{steps, d.batch, d.input, d.hidden};
    dfloats work(kc::lstm_backward_workspace_size(cd));
    const bool first = ci == 0, last = ci + 1 == t0s.size();
    const float* dh_out = last ? (optional_inputs ? dp.dh_out.get() : nullptr) : dh_mid.get();
    const float* dc_out = last ? (optional_inputs ? dp.dc_out.get() : nullptr) : dc_mid.get();
    dfloats dh_in(bh), dc_in(bh);
    kc::lstm_backward(gpu.ctx(), cd, w,
                      {.x = dp.x.get() + t0 * bi, .reserve = reserves[ci]->get(),
                       .dy = optional_inputs ? dp.dy.get() + t0 * bh : nullptr, .dh_out = dh_out, .dc_out = dc_out,
                       .dx = dx.get() + t0 * bi, .dh_in = first ? dh0.get() : dh_in.get(),
                       .dc_in = first ? dc0.get() : dc_in.get(), .workspace = work.get()},
                      {gw_ih.get(), gw_hh.get(), gb_ih.get(), gb_hh.get()});
    if (!first) {
      kc::sum_arrays(gpu.ctx(), std::vector<const float*>{dh_in.get()}, bh, dh_mid.get());
      kc::sum_arrays(gpu.ctx(), std::vector<const float*>{dc_in.get()}, bh, dc_mid.get());
    }
    gpu.sync();  // work, dh_in and dc_in are freed at the end of this iteration
  }
  return {y.download(), h.download(), c.download(), dx.download(), dh0.download(), dc0.download(),
          gw_ih.download(), gw_hh.download(), gb_ih.download(), gb_hh.download()};
}

void expect_close(const outputs& got, const outputs& want) {
  BOOST_TEST(relative_error(got.y, want.y) <= k_fp32_tol);
  BOOST_TEST(relative_error(got.h, want.h) <= k_fp32_tol);
  BOOST_TEST(relative_error(got.c, want.c) <= k_fp32_tol);
  BOOST_TEST(relative_error(got.dx, want.dx) <= k_fp32_tol);
  BOOST_TEST(relative_error(got.dh0, want.dh0) <= k_fp32_tol);
  BOOST_TEST(relative_error(got.dc0, want.dc0) <= k_fp32_tol);
  BOOST_TEST(relative_error(got.gw_ih, want.gw_ih) <= k_fp32_tol);
  BOOST_TEST(relative_error(got.gw_hh, want.gw_hh) <= k_fp32_tol);
  BOOST_TEST(relative_error(got.gb_ih, want.gb_ih) <= k_fp32_tol);
  BOOST_TEST(relative_error(got.gb_hh, want.gb_hh) <= k_fp32_tol);
}

BOOST_AUTO_TEST_SUITE(cuda_lstm)

STRATA_GPU_TEST_CASE(lstm_forward_and_backward_match_the_cpu_kernels_on_odd_shapes) {
  gpu_session gpu;
  const sk::lstm_dims shapes[] = {{1, 1, 1, 1}, {5, 1, 3, 7}, {7, 3, 13, 13}, {4, 2, 9, 7}, {35, 20, 64, 48}};
  std::uint64_t seed = 301;
  for (const auto& d : shapes) {
    const problem p = make_problem(seed++, d);
    for (const bool optional_inputs : {true, false}) {
      BOOST_TEST_INFO("T=" << d.steps << " B=" << d.batch << " I=" << d.input << " H=" << d.hidden
                           << " optional inputs=" << optional_inputs);
      expect_close(run_gpu(gpu, p, optional_inputs), run_cpu(p, optional_inputs));
    }
  }
}

STRATA_GPU_TEST_CASE(lstm_chunks_match_the_whole_sequence_on_the_gpu) {
  gpu_session gpu;
  const problem p = make_problem(311, {11, 3, 5, 13});
  const outputs whole = run_gpu(gpu, p, true);
  for (const std::size_t chunk : {std::size_t{1}, std::size_t{4}}) {
    BOOST_TEST_INFO("chunk=" << chunk);
    expect_close(run_gpu(gpu, p, true, chunk), whole);
  }
}

STRATA_GPU_TEST_CASE(lstm_with_zero_steps_copies_the_states_through) {
  gpu_session gpu;
  random_source rng(321);
  const sk::lstm_dims d{0, 2, 3, 7};
  const auto h0 = rng.values(14), dc = rng.values(14);
  const dfloats dh0(h0), ddc(dc), h_out(14), c_out(14), dh_in(14), dc_in(14);
  kc::lstm_forward(gpu.ctx(), d, {}, {.h_in = dh0.get(), .h_out = h_out.get(), .c_out = c_out.get()});
  kc::lstm_backward(gpu.ctx(), d, {}, {.dc_out = ddc.get(), .dh_in = dh_in.get(), .dc_in = dc_in.get()}, {});
  BOOST_TEST(h_out.download() == h0);
  BOOST_TEST(c_out.download() == floats(14, 0.0f));
  BOOST_TEST(dh_in.download() == floats(14, 0.0f));
  BOOST_TEST(dc_in.download() == dc);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lstm_test
