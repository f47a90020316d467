// The fused linear + softmax cross-entropy against the float64 reference and finite differences.
#include "strata/kernels/linear_cross_entropy.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include <boost/test/unit_test.hpp>

#include "reference.hpp"

namespace sk = strata::kernels;
namespace ref = strata::kernels::test;

namespace linear_cross_entropy_test {

struct xent_problem {
  std::size_t n, h, v;
  ref::vec hv, w, b;
  std::vector<std::int32_t> targets;
};

xent_problem make(std::uint64_t seed, std::size_t n, std::size_t h, std::size_t v, double scale = 1.0) {
  ref::random_source rng(seed);
  return {n, h, v, rng.values(n * h, -scale, scale), rng.values(v * h), rng.values(v), rng.ids(n, v)};
}

struct xent_kernel_result {
  double loss;
  ref::fvec dh, dw, db;
};

xent_kernel_result run(const xent_problem& p, sk::loss_reduction red, std::size_t block_rows) {
  const ref::fvec h = ref::to_float(p.hv), w = ref::to_float(p.w), b = ref::to_float(p.b);
  const sk::linear_cross_entropy_dims d{p.n, p.h, p.v};
  ref::fvec ws(sk::linear_cross_entropy_workspace_size(d, block_rows));
  xent_kernel_result r{0.0, ref::fvec(p.n * p.h, 0.0f), ref::fvec(p.v * p.h, 0.0f), ref::fvec(p.v, 0.0f)};
  const sk::linear_cross_entropy_inputs in{h.data(), w.data(), b.data(), p.targets.data(), red};
  r.loss = sk::cpu::linear_cross_entropy_forward_backward(d, in, {r.dh.data(), r.dw.data(), r.db.data()}, ws.data(), ws.size());
  const double forward_only = sk::cpu::linear_cross_entropy_forward(d, in, ws.data(), ws.size());
  BOOST_TEST(forward_only == r.loss);
  return r;
}

BOOST_AUTO_TEST_SUITE(linear_cross_entropy)

BOOST_AUTO_TEST_CASE(linear_cross_entropy_matches_the_float64_reference_for_mean_and_sum) {
  struct shape { std::size_t n, h, v; };
  std::uint64_t seed = 900;
  for (const shape s : {shape{1, 1, 2}, shape{7, 13, 11}, shape{35, 20, 1000}, shape{300, 40, 3001}}) {
    for (const bool mean : {true, false}) {
      const auto p = make(++seed, s.n, s.h, s.v);
      const auto k = run(p, mean ? sk::loss_reduction::mean : sk::loss_reduction::sum, s.n);
      const auto r = ref::linear_cross_entropy(s.n, s.h, s.v, p.hv, p.w, p.b, p.targets, mean);
      BOOST_TEST_INFO("n=" << s.n << " h=" << s.h << " v=" << s.v << " mean=" << mean);
      BOOST_TEST(std::abs(k.loss - r.loss) <= ref::k_fp32_tol * std::abs(r.loss));
      BOOST_TEST(ref::relative_error(k.dh, r.dh) <= ref::k_fp32_tol);
      BOOST_TEST(ref::relative_error(k.dw, r.dw) <= ref::k_fp32_tol);
      BOOST_TEST(ref::relative_error(k.db, r.db) <= ref::k_fp32_tol);
    }
  }
}

BOOST_AUTO_TEST_CASE(linear_cross_entropy_backward_matches_float64_finite_differences) {
  auto p = make(950, 5, 7, 13);
  auto loss = [&] { return ref::linear_cross_entropy(p.n, p.h, p.v, p.hv, p.w, p.b, p.targets, true).loss; };
  const ref::vec fd_h = ref::finite_differences(p.hv, loss);
  const ref::vec fd_w = ref::finite_differences(p.w, loss);
  const ref::vec fd_b = ref::finite_differences(p.b, loss);
  const auto r = ref::linear_cross_entropy(p.n, p.h, p.v, p.hv, p.w, p.b, p.targets, true);
  BOOST_TEST(ref::relative_error(r.dh, fd_h) <= ref::k_fd64_tol);
  BOOST_TEST(ref::relative_error(r.dw, fd_w) <= ref::k_fd64_tol);
  BOOST_TEST(ref::relative_error(r.db, fd_b) <= ref::k_fd64_tol);
  const auto k = run(p, sk::loss_reduction::mean, 2);
  BOOST_TEST(ref::relative_error(k.dh, fd_h) <= ref::k_fp32_tol);
  BOOST_TEST(ref::relative_error(k.dw, fd_w) <= ref::k_fp32_tol);
  BOOST_TEST(ref::relative_error(k.db, fd_b) <= ref::k_fp32_tol);
}

BOOST_AUTO_TEST_CASE(linear_cross_entropy_gives_the_same_result_for_any_row_block_size) {
  const auto p = make(960, 37, 9, 101);
  const auto whole = run(p, sk::loss_reduction::mean, 37);
  for (const std::size_t rows : {1, 5, 36}) {
    const auto k = run(p, sk::loss_reduction::mean, rows);
    BOOST_TEST(std::abs(k.loss - whole.loss) <= 1e-6 * std::abs(whole.loss));
    BOOST_TEST(ref::relative_error(k.dh, ref::to_double(whole.dh)) <= 1e-6);
    BOOST_TEST(ref::relative_error(k.dw, ref::to_double(whole.dw)) <= 1e-6);
    BOOST_TEST(ref::relative_error(k.db, ref::to_double(whole.db)) <= 1e-6);
  }
}

BOOST_AUTO_TEST_CASE(linear_cross_entropy_stays_finite_and_accurate_for_large_logits) {
  // Logits around +-1000 overflow a naive exp; log-sum-exp with max subtraction does not.
  const auto p = make(970, 6, 8, 17, 300.0);
  const auto k = run(p, sk::loss_reduction::sum, 6);
  const auto r = ref::linear_cross_entropy(p.n, p.h, p.v, p.hv, p.w, p.b, p.targets, false);
  BOOST_TEST(std::isfinite(k.loss));
  BOOST_TEST(std::abs(k.loss - r.loss) <= ref::k_fp32_tol * std::abs(r.loss));
  BOOST_TEST(ref::relative_error(k.dh, r.dh) <= ref::k_fp32_tol);
  BOOST_TEST(ref::relative_error(k.dw, r.dw) <= ref::k_fp32_tol);
}

BOOST_AUTO_TEST_CASE(linear_cross_entropy_rejects_a_small_workspace_and_bad_targets) {
  const ref::fvec h(6, 0.1f), w(12, 0.2f);
  ref::fvec ws(8);
  const std::int32_t good[] = {0, 3}, bad[] = {0, 4};
  const sk::linear_cross_entropy_dims d{2, 3, 4};
  BOOST_CHECK_THROW((void)sk::cpu::linear_cross_entropy_forward(d, {h.data(), w.data(), nullptr, good}, ws.data(), 3),
                    std::invalid_argument);
  BOOST_CHECK_THROW((void)sk::cpu::linear_cross_entropy_forward(d, {h.data(), w.data(), nullptr, bad}, ws.data(), 8),
                    std::invalid_argument);
  BOOST_TEST(std::isfinite(sk::cpu::linear_cross_entropy_forward(d, {h.data(), w.data(), nullptr, good}, ws.data(), 4)));
}

BOOST_AUTO_TEST_CASE(linear_cross_entropy_names_the_workspace_rule_and_the_first_bad_target) {
  const ref::fvec h(6, 0.1f), w(12, 0.2f);
  ref::fvec ws(8);
  const std::int32_t bad[] = {7, -1};
  const sk::linear_cross_entropy_dims d{2, 3, 4};
  try {
    (void)sk::cpu::linear_cross_entropy_forward(d, {h.data(), w.data(), nullptr, bad}, ws.data(), 3);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) ==
               "linear_cross_entropy_forward: the workspace must hold at least dims.classes floats (one row of "
               "logits).");
  }
  try {
    (void)sk::cpu::linear_cross_entropy_forward_backward(d, {h.data(), w.data(), nullptr, bad}, {}, ws.data(), 8);
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "linear_cross_entropy_forward_backward: targets[0] = 7 lies outside [0, 4).");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace linear_cross_entropy_test
