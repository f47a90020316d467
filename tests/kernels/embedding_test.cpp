// embedding_forward / embedding_backward against plain float64 loops and finite differences.
#include "strata/kernels/embedding.hpp"

#include <stdexcept>
#include <string>

#include <boost/test/unit_test.hpp>

#include "reference.hpp"

namespace embedding_test {

namespace sk = strata::kernels;
namespace ref = strata::kernels::test;

BOOST_AUTO_TEST_SUITE(embedding)

BOOST_AUTO_TEST_CASE(embedding_forward_gathers_the_rows_of_the_ids) {
  ref::random_source rng(800);
  struct shape { std::size_t vocab, dim, count; };
  for (const shape s : {shape{1, 1, 1}, shape{13, 7, 9}, shape{10000, 200, 700}, shape{50, 3, 1000}}) {
    const ref::vec table = rng.values(s.vocab * s.dim);
    const auto ids = rng.ids(s.count, s.vocab);
    const ref::fvec ft = ref::to_float(table);
    ref::fvec out(s.count * s.dim, -7.0f);
    sk::cpu::embedding_forward(s.vocab, s.dim, ft.data(), s.count, ids.data(), out.data());
    ref::vec expect(s.count * s.dim);
    for (std::size_t n = 0; n < s.count; ++n)
      for (std::size_t j = 0; j < s.dim; ++j) expect[n * s.dim + j] = table[static_cast<std::size_t>(ids[n]) * s.dim + j];
    BOOST_TEST(ref::relative_error(out, expect) == 0.0);
  }
}

BOOST_AUTO_TEST_CASE(embedding_backward_adds_every_row_including_repeated_ids) {
  ref::random_source rng(801);
  struct shape { std::size_t vocab, dim, count; };
  // Few ids for many rows: most ids repeat, also across the parallel column blocks.
  for (const shape s : {shape{1, 1, 3}, shape{5, 13, 40}, shape{7, 200, 700}, shape{10000, 200, 700}}) {
    const auto ids = rng.ids(s.count, s.vocab);
    const ref::vec d_out = rng.values(s.count * s.dim);
    ref::vec expect = rng.values(s.vocab * s.dim);  // gradients already present are kept
    ref::fvec d_table = ref::to_float(expect);
    const ref::fvec fd = ref::to_float(d_out);
    sk::cpu::embedding_backward(s.vocab, s.dim, s.count, ids.data(), fd.data(), d_table.data());
    for (std::size_t n = 0; n < s.count; ++n)
      for (std::size_t j = 0; j < s.dim; ++j) expect[static_cast<std::size_t>(ids[n]) * s.dim + j] += d_out[n * s.dim + j];
    BOOST_TEST_INFO("vocab=" << s.vocab << " dim=" << s.dim << " count=" << s.count);
    BOOST_TEST(ref::relative_error(d_table, expect) <= ref::k_fp32_tol);
  }
}

BOOST_AUTO_TEST_CASE(embedding_backward_matches_float64_finite_differences) {
  ref::random_source rng(802);
  const std::size_t vocab = 6, dim = 7, count = 11;
  const auto ids = rng.ids(count, vocab);
  ref::vec table = rng.values(vocab * dim);
  const ref::vec r = rng.values(count * dim);  // loss = sum(out .* r)
  auto loss = [&] {
    double s = 0.0;
    for (std::size_t n = 0; n < count; ++n)
      for (std::size_t j = 0; j < dim; ++j) s += table[static_cast<std::size_t>(ids[n]) * dim + j] * r[n * dim + j];
    return s;
  };
  const ref::vec fd = ref::finite_differences(table, loss);
  ref::fvec d_table(vocab * dim, 0.0f);
  const ref::fvec fr = ref::to_float(r);
  sk::cpu::embedding_backward(vocab, dim, count, ids.data(), fr.data(), d_table.data());
  BOOST_TEST(ref::relative_error(d_table, fd) <= ref::k_fp32_tol);
}

BOOST_AUTO_TEST_CASE(embedding_rejects_ids_outside_the_vocabulary_before_writing) {
  const ref::fvec table(12, 1.0f);
  ref::fvec out(8, 5.0f);
  const std::int32_t ids[] = {0, 3, 4, 1};
  BOOST_CHECK_THROW(sk::cpu::embedding_forward(4, 3, table.data(), 4, ids, out.data()), std::invalid_argument);
  for (const float v : out) BOOST_TEST(v == 5.0f);
  const std::int32_t negative[] = {-1};
  ref::fvec d_table(12, 0.0f);
  BOOST_CHECK_THROW(sk::cpu::embedding_backward(4, 3, 1, negative, out.data(), d_table.data()), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(embedding_names_the_first_id_outside_the_vocabulary) {
  const ref::fvec table(12, 1.0f);
  ref::fvec out(12, 0.0f);
  const std::int32_t ids[] = {0, 3, 4, -2};
  try {
    sk::cpu::embedding_forward(4, 3, table.data(), 4, ids, out.data());
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "embedding_forward: ids[2] = 4 lies outside [0, 4).");
  }
  try {
    sk::cpu::embedding_backward(4, 3, 4, ids + 3, out.data(), out.data());
    BOOST_FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "embedding_backward: ids[0] = -2 lies outside [0, 4).");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace embedding_test
