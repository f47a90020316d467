// lstm_forward / lstm_backward against the float64 reference, whose backward is itself checked
// by central finite differences; chunked runs against the whole sequence.
#include "strata/kernels/lstm.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "reference.hpp"

namespace sk = strata::kernels;
namespace ref = strata::kernels::test;

namespace lstm_test {

struct problem {
  ref::lstm_shape s;
  ref::lstm_params p;
  ref::vec x, h0, c0;  // inputs
  ref::vec ry, rh, rc;  // random weights of the scalar loss sum(y.*ry) + sum(hT.*rh) + sum(cT.*rc)
};

problem make_problem(std::uint64_t seed, ref::lstm_shape s) {
  ref::random_source rng(seed);
  problem pr{s, ref::random_lstm_params(rng, s), {}, {}, {}, {}, {}, {}};
  const std::size_t bh = s.batch * s.hidden;
  pr.x = rng.values(s.steps * s.batch * s.input);
  pr.h0 = rng.values(bh, -0.5, 0.5);
  pr.c0 = rng.values(bh, -0.5, 0.5);
  pr.ry = rng.values(s.steps * bh);
  pr.rh = rng.values(bh);
  pr.rc = rng.values(bh);
  return pr;
}

sk::lstm_dims dims_of(const ref::lstm_shape& s) { return {s.steps, s.batch, s.input, s.hidden}; }

// The float32 parameters of a problem, kept alive for the kernel calls.
struct float_params {
  ref::fvec w_ih, w_hh, b_ih, b_hh;
  explicit float_params(const ref::lstm_params& p)
      : w_ih(ref::to_float(p.w_ih)), w_hh(ref::to_float(p.w_hh)), b_ih(ref::to_float(p.b_ih)), b_hh(ref::to_float(p.b_hh)) {}
  [[nodiscard]] sk::lstm_weights weights() const { return {w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data()}; }
};

struct kernel_run {
  ref::fvec y, h, c, reserve;
  ref::fvec dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh;
};

kernel_run run_kernel(const problem& pr, bool with_state = true) {
  const auto d = dims_of(pr.s);
  const float_params fp(pr.p);
  const ref::fvec x = ref::to_float(pr.x), h0 = ref::to_float(pr.h0), c0 = ref::to_float(pr.c0);
  const std::size_t bh = pr.s.batch * pr.s.hidden;
  kernel_run r;
  r.y.assign(pr.s.steps * bh, 0.0f);
  r.h.assign(bh, 0.0f);
  r.c.assign(bh, 0.0f);
  r.reserve.assign(sk::lstm_reserve_size(d), 0.0f);
  sk::cpu::lstm_forward(d, fp.weights(),
                        {.x = x.data(), .h_in = with_state ? h0.data() : nullptr, .c_in = with_state ? c0.data() : nullptr,
                         .y = r.y.data(), .h_out = r.h.data(), .c_out = r.c.data(), .reserve = r.reserve.data()});
  const ref::fvec dy = ref::to_float(pr.ry), dh = ref::to_float(pr.rh), dc = ref::to_float(pr.rc);
  ref::fvec work(sk::lstm_backward_workspace_size(d));
  r.dx.assign(x.size(), 0.0f);
  r.dh0.assign(bh, 0.0f);
  r.dc0.assign(bh, 0.0f);
  r.dw_ih.assign(fp.w_ih.size(), 0.0f);
  r.dw_hh.assign(fp.w_hh.size(), 0.0f);
  r.db_ih.assign(fp.b_ih.size(), 0.0f);
  r.db_hh.assign(fp.b_hh.size(), 0.0f);
  sk::cpu::lstm_backward(d, fp.weights(),
                         {.x = x.data(), .reserve = r.reserve.data(), .dy = dy.data(), .dh_out = dh.data(), .dc_out = dc.data(),
                          .dx = r.dx.data(), .dh_in = r.dh0.data(), .dc_in = r.dc0.data(), .workspace = work.data()},
                         {r.dw_ih.data(), r.dw_hh.data(), r.db_ih.data(), r.db_hh.data()});
  return r;
}

double reference_loss(problem& pr) {
  const auto f = ref::lstm_forward(pr.s, pr.p, pr.x, pr.h0, pr.c0);
  return ref::dot(f.y, pr.ry) + ref::dot(f.h, pr.rh) + ref::dot(f.c, pr.rc);
}

ref::lstm_grads reference_grads(const problem& pr) {
  const auto f = ref::lstm_forward(pr.s, pr.p, pr.x, pr.h0, pr.c0);
  return ref::lstm_backward(pr.s, pr.p, pr.x, f, pr.ry, pr.rh, pr.rc);
}

// The same loss differentiated numerically, one input array at a time.
ref::lstm_grads finite_difference_grads(problem& pr) {
  auto loss = [&] { return reference_loss(pr); };
  ref::lstm_grads g;
  g.dw_ih = ref::finite_differences(pr.p.w_ih, loss);
  g.dw_hh = ref::finite_differences(pr.p.w_hh, loss);
  g.db_ih = ref::finite_differences(pr.p.b_ih, loss);
  g.db_hh = ref::finite_differences(pr.p.b_hh, loss);
  g.dx = ref::finite_differences(pr.x, loss);
  g.dh0 = ref::finite_differences(pr.h0, loss);
  g.dc0 = ref::finite_differences(pr.c0, loss);
  return g;
}

// Small shapes for finite differences: batch 1, T = 1, hidden 7 and 13 (not multiples of 8).
const ref::lstm_shape fd_shapes[] = {{1, 1, 3, 7}, {3, 2, 4, 13}, {4, 3, 5, 5}, {2, 1, 1, 1}};

// Shapes for the reference comparisons; the last ones exercise the parallel paths
// (row-parallel pointwise steps, split GEMMs).
std::vector<ref::lstm_shape> shapes() {
  std::vector<ref::lstm_shape> v = {{1, 1, 3, 7}, {5, 3, 4, 13}, {7, 2, 9, 8}, {2, 20, 33, 17}, {9, 20, 64, 400}};
  ref::random_source rng(7);
  for (int i = 0; i < 4; ++i) v.push_back({rng.index(1, 6), rng.index(1, 5), rng.index(1, 12), rng.index(1, 19)});
  return v;
}

#define STRATA_CHECK_CLOSE(kernel_values, reference_values, tol) \
  BOOST_TEST(ref::relative_error(kernel_values, reference_values) <= (tol), #kernel_values " vs " #reference_values)

BOOST_AUTO_TEST_SUITE(lstm)

BOOST_AUTO_TEST_CASE(lstm_reference_backward_matches_float64_finite_differences) {
  std::uint64_t seed = 200;
  for (const auto& s : fd_shapes) {
    problem pr = make_problem(++seed, s);
    const auto a = reference_grads(pr);
    const auto n = finite_difference_grads(pr);
    BOOST_TEST_INFO("T=" << s.steps << " B=" << s.batch << " I=" << s.input << " H=" << s.hidden);
    STRATA_CHECK_CLOSE(a.dw_ih, n.dw_ih, ref::k_fd64_tol);
    STRATA_CHECK_CLOSE(a.dw_hh, n.dw_hh, ref::k_fd64_tol);
    STRATA_CHECK_CLOSE(a.db_ih, n.db_ih, ref::k_fd64_tol);
    STRATA_CHECK_CLOSE(a.db_hh, n.db_hh, ref::k_fd64_tol);
    STRATA_CHECK_CLOSE(a.dx, n.dx, ref::k_fd64_tol);
    STRATA_CHECK_CLOSE(a.dh0, n.dh0, ref::k_fd64_tol);
    STRATA_CHECK_CLOSE(a.dc0, n.dc0, ref::k_fd64_tol);
  }
}

BOOST_AUTO_TEST_CASE(lstm_backward_matches_float64_finite_differences) {
  std::uint64_t seed = 300;
  for (const auto& s : fd_shapes) {
    problem pr = make_problem(++seed, s);
    const auto k = run_kernel(pr);
    const auto n = finite_difference_grads(pr);
    BOOST_TEST_INFO("T=" << s.steps << " B=" << s.batch << " I=" << s.input << " H=" << s.hidden);
    STRATA_CHECK_CLOSE(k.dw_ih, n.dw_ih, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.dw_hh, n.dw_hh, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.db_ih, n.db_ih, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.db_hh, n.db_hh, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.dx, n.dx, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.dh0, n.dh0, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.dc0, n.dc0, ref::k_fp32_tol);
  }
}

BOOST_AUTO_TEST_CASE(lstm_forward_and_backward_match_the_float64_reference) {
  std::uint64_t seed = 400;
  for (const auto& s : shapes()) {
    const problem pr = make_problem(++seed, s);
    const auto k = run_kernel(pr);
    const auto f = ref::lstm_forward(s, pr.p, pr.x, pr.h0, pr.c0);
    const auto g = ref::lstm_backward(s, pr.p, pr.x, f, pr.ry, pr.rh, pr.rc);
    BOOST_TEST_INFO("T=" << s.steps << " B=" << s.batch << " I=" << s.input << " H=" << s.hidden);
    STRATA_CHECK_CLOSE(k.y, f.y, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.h, f.h, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.c, f.c, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.dw_ih, g.dw_ih, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.dw_hh, g.dw_hh, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.db_ih, g.db_ih, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.db_hh, g.db_hh, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.dx, g.dx, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.dh0, g.dh0, ref::k_fp32_tol);
    STRATA_CHECK_CLOSE(k.dc0, g.dc0, ref::k_fp32_tol);
  }
}

BOOST_AUTO_TEST_CASE(lstm_without_initial_state_starts_from_zeros_and_backward_accumulates) {
  problem pr = make_problem(500, {4, 3, 6, 13});
  std::fill(pr.h0.begin(), pr.h0.end(), 0.0);
  std::fill(pr.c0.begin(), pr.c0.end(), 0.0);
  const auto k = run_kernel(pr, /*with_state=*/false);
  const auto f = ref::lstm_forward(pr.s, pr.p, pr.x, pr.h0, pr.c0);
  STRATA_CHECK_CLOSE(k.y, f.y, ref::k_fp32_tol);

  // Gradients are added into what the buffers hold; dy may be absent (zeros).
  const auto d = dims_of(pr.s);
  const float_params fp(pr.p);
  const ref::fvec x = ref::to_float(pr.x), dh = ref::to_float(pr.rh);
  ref::random_source rng(501);
  const ref::vec g0_ih = rng.values(fp.w_ih.size()), g0_hh = rng.values(fp.w_hh.size()), g0_b = rng.values(fp.b_ih.size());
  ref::fvec dw_ih = ref::to_float(g0_ih), dw_hh = ref::to_float(g0_hh), db_ih = ref::to_float(g0_b), db_hh = ref::to_float(g0_b);
  ref::fvec work(sk::lstm_backward_workspace_size(d));
  sk::cpu::lstm_backward(d, fp.weights(), {.x = x.data(), .reserve = k.reserve.data(), .dh_out = dh.data(), .workspace = work.data()},
                         {dw_ih.data(), dw_hh.data(), db_ih.data(), db_hh.data()});
  const ref::vec zeros_y(pr.ry.size(), 0.0), zeros_c(pr.rc.size(), 0.0);
  auto g = ref::lstm_backward(pr.s, pr.p, pr.x, f, zeros_y, pr.rh, zeros_c);
  for (std::size_t i = 0; i < g.dw_ih.size(); ++i) g.dw_ih[i] += g0_ih[i];
  for (std::size_t i = 0; i < g.dw_hh.size(); ++i) g.dw_hh[i] += g0_hh[i];
  for (std::size_t i = 0; i < g.db_ih.size(); ++i) g.db_ih[i] += g0_b[i], g.db_hh[i] += g0_b[i];
  STRATA_CHECK_CLOSE(dw_ih, g.dw_ih, ref::k_fp32_tol);
  STRATA_CHECK_CLOSE(dw_hh, g.dw_hh, ref::k_fp32_tol);
  STRATA_CHECK_CLOSE(db_ih, g.db_ih, ref::k_fp32_tol);
  STRATA_CHECK_CLOSE(db_hh, g.db_hh, ref::k_fp32_tol);
}

BOOST_AUTO_TEST_CASE(lstm_run_in_chunks_equals_the_full_sequence_forward_and_backward) {
  for (const ref::lstm_shape s : {ref::lstm_shape{11, 3, 5, 13}, ref::lstm_shape{6, 20, 40, 400}}) {
    const problem pr = make_problem(600 + s.hidden, s);
    const auto full = run_kernel(pr);
    const std::size_t bh = s.batch * s.hidden, bi = s.batch * s.input;
    const std::vector<std::size_t> cuts = s.steps == 11 ? std::vector<std::size_t>{0, 3, 4, 9, 11} : std::vector<std::size_t>{0, 1, 4, 6};
    const float_params fp(pr.p);
    const ref::fvec x = ref::to_float(pr.x), h0 = ref::to_float(pr.h0), c0 = ref::to_float(pr.c0);
    const ref::fvec dy = ref::to_float(pr.ry), dhT = ref::to_float(pr.rh), dcT = ref::to_float(pr.rc);

    // Forward chunk by chunk, each continuing from the previous (h, c), each with its reserve.
    ref::fvec y(s.steps * bh), h = h0, c = c0;
    std::vector<ref::fvec> reserves;
    for (std::size_t q = 0; q + 1 < cuts.size(); ++q) {
      const sk::lstm_dims d{cuts[q + 1] - cuts[q], s.batch, s.input, s.hidden};
      reserves.emplace_back(sk::lstm_reserve_size(d));
      ref::fvec h_next(bh), c_next(bh);
      sk::cpu::lstm_forward(d, fp.weights(), {.x = x.data() + cuts[q] * bi, .h_in = h.data(), .c_in = c.data(),
                                              .y = y.data() + cuts[q] * bh, .h_out = h_next.data(), .c_out = c_next.data(),
                                              .reserve = reserves.back().data()});
      h = h_next;
      c = c_next;
    }
    STRATA_CHECK_CLOSE(y, ref::to_double(full.y), 1e-6);
    STRATA_CHECK_CLOSE(h, ref::to_double(full.h), 1e-6);
    STRATA_CHECK_CLOSE(c, ref::to_double(full.c), 1e-6);

    // Backward by chunks in reverse, carrying dh and dc; parameter gradients accumulate.
    ref::fvec dx(x.size()), dh = dhT, dc = dcT;
    ref::fvec dw_ih(fp.w_ih.size()), dw_hh(fp.w_hh.size()), db_ih(fp.b_ih.size()), db_hh(fp.b_hh.size());
    for (std::size_t q = cuts.size() - 1; q-- > 0;) {
      const sk::lstm_dims d{cuts[q + 1] - cuts[q], s.batch, s.input, s.hidden};
      ref::fvec work(sk::lstm_backward_workspace_size(d)), dh_prev(bh), dc_prev(bh);
      sk::cpu::lstm_backward(d, fp.weights(),
                             {.x = x.data() + cuts[q] * bi, .reserve = reserves[q].data(), .dy = dy.data() + cuts[q] * bh,
                              .dh_out = dh.data(), .dc_out = dc.data(), .dx = dx.data() + cuts[q] * bi,
                              .dh_in = dh_prev.data(), .dc_in = dc_prev.data(), .workspace = work.data()},
                             {dw_ih.data(), dw_hh.data(), db_ih.data(), db_hh.data()});
      dh = dh_prev;
      dc = dc_prev;
    }
    BOOST_TEST_INFO("T=" << s.steps << " H=" << s.hidden);
    STRATA_CHECK_CLOSE(dx, ref::to_double(full.dx), 1e-6);
    STRATA_CHECK_CLOSE(dh, ref::to_double(full.dh0), 1e-6);
    STRATA_CHECK_CLOSE(dc, ref::to_double(full.dc0), 1e-6);
    STRATA_CHECK_CLOSE(dw_ih, ref::to_double(full.dw_ih), 1e-6);
    STRATA_CHECK_CLOSE(dw_hh, ref::to_double(full.dw_hh), 1e-6);
    STRATA_CHECK_CLOSE(db_ih, ref::to_double(full.db_ih), 1e-6);
    STRATA_CHECK_CLOSE(db_hh, ref::to_double(full.db_hh), 1e-6);
  }
}

BOOST_AUTO_TEST_CASE(lstm_with_zero_steps_passes_the_state_through) {
  const sk::lstm_dims d{0, 2, 3, 4};
  ref::random_source rng(700);
  const ref::fvec h = ref::to_float(rng.values(8)), c = ref::to_float(rng.values(8));
  ref::fvec h_out(8, 9.0f), c_out(8, 9.0f);
  sk::cpu::lstm_forward(d, {}, {.h_in = h.data(), .c_in = c.data(), .h_out = h_out.data(), .c_out = c_out.data()});
  BOOST_TEST(h_out == h, boost::test_tools::per_element());
  BOOST_TEST(c_out == c, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(lstm_rejects_empty_dimensions_and_missing_buffers) {
  ref::fvec buf(4096, 0.5f);
  const sk::lstm_weights w{buf.data(), buf.data(), nullptr, nullptr};
  BOOST_CHECK_THROW(sk::cpu::lstm_forward({2, 1, 3, 0}, w, {.x = buf.data(), .y = buf.data(), .reserve = buf.data()}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::lstm_forward({2, 1, 3, 4}, w, {.x = buf.data(), .y = buf.data()}), std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::lstm_forward({2, 1, 3, 4}, {}, {.x = buf.data(), .y = buf.data(), .reserve = buf.data()}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::lstm_backward({2, 1, 3, 4}, w, {.x = buf.data(), .reserve = buf.data()}, {}),
                    std::invalid_argument);
  try {
    sk::cpu::lstm_forward({2, 0, 3, 4}, w, {});
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "lstm_forward: dims.batch must be at least 1.");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lstm_test
