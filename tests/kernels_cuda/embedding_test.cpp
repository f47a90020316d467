// cuda::embedding_forward / cuda::embedding_backward against the CPU kernels.
#include "strata/kernels/cuda.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "cuda_test_support.hpp"
#include "strata/kernels/cpu.hpp"

namespace embedding_test {

namespace sk = strata::kernels;
namespace kc = strata::kernels::cuda;
using namespace kc::test;

BOOST_AUTO_TEST_SUITE(cuda_embedding)

STRATA_GPU_TEST_CASE(embedding_forward_and_backward_match_the_cpu_kernels_with_repeated_ids) {
  gpu_session gpu;
  random_source rng(401);
  struct shape { std::size_t vocab, dim, count; };
  // dim 7: scalar path; dim 8 and 400: float4 path; count 1 and many repeats (vocab 3).
  for (const shape s : {shape{11, 7, 1}, shape{3, 8, 50}, shape{10000, 400, 700}, shape{13, 13, 29}}) {
    const auto table = rng.values(s.vocab * s.dim);
    const auto ids = rng.ids(s.count, s.vocab);
    const auto d_out = rng.values(s.count * s.dim);
    auto d_table = rng.values(s.vocab * s.dim);
    std::vector<float> out(s.count * s.dim);
    const dfloats dtable(table), dd_out(d_out), dd_table(d_table), dout(out.size());
    const device_array<std::int32_t> dids(ids);
    kc::embedding_forward(gpu.ctx(), s.vocab, s.dim, dtable.get(), s.count, dids.get(), dout.get());
    kc::embedding_backward(gpu.ctx(), s.vocab, s.dim, s.count, dids.get(), dd_out.get(), dd_table.get());
    sk::cpu::embedding_forward(s.vocab, s.dim, table.data(), s.count, ids.data(), out.data());
    sk::cpu::embedding_backward(s.vocab, s.dim, s.count, ids.data(), d_out.data(), d_table.data());
    BOOST_TEST_INFO("vocab=" << s.vocab << " dim=" << s.dim << " count=" << s.count);
    BOOST_TEST(dout.download() == out);  // a gather is exact
    BOOST_TEST(relative_error(dd_table.download(), d_table) <= k_fp32_tol);
  }
}

STRATA_GPU_TEST_CASE(an_out_of_range_id_gives_a_nan_row_and_is_skipped_by_the_backward) {
  gpu_session gpu;
  random_source rng(402);
  const std::size_t vocab = 5, dim = 6;
  const std::vector<std::int32_t> ids{1, 5, -1, 2};
  const auto table = rng.values(vocab * dim), d_out = rng.values(ids.size() * dim);
  const dfloats dtable(table), dd_out(d_out), out(ids.size() * dim), d_table(std::vector<float>(vocab * dim, 0.0f));
  const device_array<std::int32_t> dids(ids);
  kc::embedding_forward(gpu.ctx(), vocab, dim, dtable.get(), ids.size(), dids.get(), out.get());
  kc::embedding_backward(gpu.ctx(), vocab, dim, ids.size(), dids.get(), dd_out.get(), d_table.get());
  const auto o = out.download();
  for (std::size_t j = 0; j < dim; ++j) {
    BOOST_TEST(o[j] == table[dim + j]);
    BOOST_TEST(std::isnan(o[dim + j]));
    BOOST_TEST(std::isnan(o[2 * dim + j]));
    BOOST_TEST(o[3 * dim + j] == table[2 * dim + j]);
  }
  const auto g = d_table.download();
  for (std::size_t j = 0; j < dim; ++j) {
    BOOST_TEST(g[dim + j] == d_out[j]);
    BOOST_TEST(g[2 * dim + j] == d_out[3 * dim + j]);
    BOOST_TEST(g[j] == 0.0f);
    BOOST_TEST(g[4 * dim + j] == 0.0f);
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace embedding_test
